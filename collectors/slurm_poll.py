"""``gpuledger collect slurm``: poll Slurm accounting (``sacct``) for jobs changed since the last poll.

Each poll runs ``sacct --parsable2 --allusers`` with a fixed field list (:data:`FIELDS`) and
``-S <cursor - overlap>``. Without ``--state``, sacct's ``-S`` selects every job that was pending, running or
ended at or after that time: new jobs, jobs still running (their elapsed time grows) and jobs that finished
since the last poll; jobs that ended before it are not read again. The output goes through the sacct parser
(collectors/sacct.py) and :func:`collectors.landing.land`, which upserts jobs by id, so a job recorded as RUNNING
is replaced by its finished record. The cursor (the UTC time the poll began) is stored in ``collector_state``
under ``slurm:<cluster>`` in the same transaction as the jobs, so a failed poll leaves both untouched and the
next one reads the same window again. The overlap (default 60 s) covers clock skew between this machine and
slurmdbd and records committed late.

sacct runs with ``TZ=UTC`` so its times need no guess about zones, and always under ``timeout``: Slurm
clients hang while slurmdbd is down.

GPU indices: sacct names a job's nodes, not its GPUs; slurmctld knows which GPUs a *running* job holds
(``scontrol show job -d``: ``Nodes=g2 CPU_IDs=0 Mem=100 GRES=gpu:h100:2(IDX:0-1)``) and forgets them once
it ends. So each poll asks ``scontrol show job -d -o`` about the jobs sacct reports RUNNING and stores their
indices (``allocations.gpu_index``, one row per GPU), and a later record of the same job without them (its
final sacct line) keeps the indices seen before. Host-level attribution (collectors/attribute.py) then ties
those jobs to exactly those cards. Without scontrol (or when it fails) the jobs keep host-only rows and
the report says so.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from collectors.base import (
    IngestOptions,
    next_ingest_id,
    run_in_transaction,
)
from collectors.landing import land_and_record
from collectors.validate import MAX_JOB_DAYS, screen_live
from gpuledger.ledger.db import writer
from gpuledger.ledger.errors import CollectorError
from gpuledger.ledger.job_states import HELD_STATES

FIELDS = (
    "JobIDRaw",
    "JobID",
    "JobName",
    "User",
    "Account",
    "Partition",
    "State",
    "Submit",
    "Start",
    "End",
    "Elapsed",
    "AllocTRES",
    "ReqTRES",
    "NodeList",
    "NNodes",
    "ExitCode",
    "Cluster",
    # the steps' GPU accounting (gres/gpuutil, gres/gpumem where slurm.conf tracks them): the job's mean and
    # peaks (collectors/sacct.py); steps are listed for this, and fold into their job
    "TRESUsageInMax",
    "TRESUsageInAve",
)
FIRST_POLL_LOOKBACK = dt.timedelta(days=1)
# scontrol -d detail groups: "Nodes=g[1-2] CPU_IDs=0 Mem=100 GRES=gpu:h100:1(IDX:0)"
# (starts only where a word starts, and never gives back what it took: linear in the line)
_DETAIL = re.compile(r"(?<!\S)Nodes=(\S++)\s++(?:CPU_IDs=\S++\s++)?(?:Mem=\S++\s++)?GRES=(\S*+)")
SACCT_TIME = "%Y-%m-%dT%H:%M:%S"


@dataclass
class PollReport:
    collector: str
    since: dt.datetime  # -S given to sacct (UTC)
    polled_at: dt.datetime  # the new cursor (UTC)
    jobs_read: int = 0  # job records sacct returned
    ingest_id: int | None = None  # None: nothing new (no jobs, or the same records as an earlier poll)
    rows: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    sacct_s: float = 0.0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["since"] = self.since.isoformat()
        out["polled_at"] = self.polled_at.isoformat()
        return out


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def collector_key(cluster: str | None) -> str:
    return f"slurm:{cluster or socket.gethostname().split('.')[0]}"


def sacct_command(
    since: dt.datetime, *, cluster: str | None, timeout_s: float, sacct: str = "sacct"
) -> list[str]:
    cmd = [
        "timeout",
        "--kill-after=5",
        f"{timeout_s:g}",
        sacct,
        "--parsable2",
        "--allusers",
        f"--format={','.join(FIELDS)}",
        "-S",
        since.strftime(SACCT_TIME),
        "-E",
        "now",
    ]
    if cluster:
        cmd += ["--clusters", cluster]
    return cmd


def run_sacct(cmd: list[str], timeout_s: float) -> str:
    """sacct's stdout; CollectorError with sacct's own words when it fails or hangs."""
    if shutil.which(cmd[3]) is None and not Path(cmd[3]).exists():
        raise CollectorError(f"{cmd[3]} not found: install the Slurm client tools or run on a login node")
    env = {**os.environ, "TZ": "UTC"}
    env.pop("SLURM_TIME_FORMAT", None)  # ISO times; the parser reads them in UTC (TZ above)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s + 10)
    except subprocess.TimeoutExpired:
        proc = None
    if proc is None or proc.returncode in (124, 137):
        raise CollectorError(f"sacct did not answer within {timeout_s:g} s (is slurmdbd running?)")
    if proc.returncode != 0:
        said = (proc.stderr.strip().splitlines() or ["(no message)"])[0]
        raise CollectorError(f"sacct failed (exit {proc.returncode}): {said}")
    return proc.stdout


def running_ids(text: str) -> list[str]:
    """JobIDRaw of the allocation lines sacct reports in a running state (FIELDS order)."""
    state_at = FIELDS.index("State")
    out = []
    for line in text.splitlines()[1:]:
        f = line.split("|")
        if len(f) > state_at and f[0].isdigit() and f[state_at].split(" ")[0] in HELD_STATES:
            out.append(f[0])
    return out


def parse_scontrol_detail(text: str) -> dict[str, dict[str, list[int]]]:
    """``scontrol show job -d -o`` → {raw job id: {host: GPU indices}}; jobs or nodes without IDX are left out."""
    from collectors.sacct import expand_nodelist, gres_indices

    out: dict[str, dict[str, list[int]]] = {}
    for line in text.splitlines():
        m = re.match(r"^JobId=(\d+)\s", line)
        if not m:
            continue
        for nodes, gres in _DETAIL.findall(line):
            idx = gres_indices(gres)
            if not idx:
                continue
            try:
                hosts = expand_nodelist(nodes)
            except ValueError:
                continue
            for host in hosts:
                out.setdefault(m.group(1), {})[host] = idx
    return out


def running_gpu_indices(
    ids: list[str], *, timeout_s: float, scontrol: str = "scontrol"
) -> dict[str, dict[str, list[int]]] | None:
    """GPU indices per node of these running jobs from slurmctld; None when scontrol is missing or fails."""
    if not ids:
        return {}
    if shutil.which(scontrol) is None and not Path(scontrol).exists():
        return None
    # every job slurmctld still holds, one line each (a list of ids is not accepted by every version)
    cmd = ["timeout", "--kill-after=5", f"{timeout_s:g}", scontrol, "show", "job", "-d", "-o"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s + 10)
    except (subprocess.TimeoutExpired, OSError):
        return None
    if proc.returncode != 0:
        return None
    wanted = set(ids)
    return {j: hosts for j, hosts in parse_scontrol_detail(proc.stdout).items() if j in wanted}


def apply_gpu_indices(con: duckdb.DuckDBPyConnection, found: dict[str, dict[str, list[int]]]) -> int:
    """Split staged host rows into one row per GPU index: from ``found`` (raw id → host → indices), else
    from the indices an earlier poll stored for the same job and host. Returns the jobs given indices."""
    rows = [(raw, host, i) for raw, hosts in found.items() for host, idx in hosts.items() for i in idx]
    con.execute("CREATE OR REPLACE TEMP TABLE poll_idx (raw VARCHAR, host VARCHAR, gpu_index INTEGER)")
    if rows:
        con.executemany("INSERT INTO poll_idx VALUES (?, ?, ?)", rows)
    con.execute(
        """CREATE OR REPLACE TEMP TABLE stage_idx AS
           WITH now AS (
               SELECT s.job_id, s.host, p.gpu_index FROM stage_allocations s
               JOIN poll_idx p ON p.raw = split_part(s.job_id, '/', -1) AND p.host = s.host
           ), before AS (
               SELECT a.job_id, a.host, a.gpu_index FROM allocations a
               WHERE a.gpu_index IS NOT NULL AND a.gpu_id IS NULL
                 AND a.job_id IN (SELECT job_id FROM stage_allocations WHERE gpu_index IS NULL)
                 AND NOT EXISTS (SELECT 1 FROM now n WHERE n.job_id = a.job_id AND n.host = a.host)
           )
           SELECT DISTINCT * FROM (SELECT * FROM now UNION ALL SELECT * FROM before)"""
    )
    con.execute(
        """CREATE OR REPLACE TEMP TABLE stage_allocations AS
           SELECT s.* REPLACE (CASE WHEN i.gpu_index IS NULL THEN s.gpu_count ELSE 1 END AS gpu_count,
                               coalesce(s.gpu_index, i.gpu_index) AS gpu_index)
           FROM stage_allocations s
           LEFT JOIN stage_idx i ON i.job_id = s.job_id AND i.host = s.host AND s.gpu_index IS NULL"""
    )
    n = int(con.execute("SELECT count(DISTINCT job_id) FROM stage_idx").fetchall()[0][0])
    con.execute("DROP TABLE temp.poll_idx")
    con.execute("DROP TABLE temp.stage_idx")
    return n


def read_cursor(db: str | None, key: str) -> dt.datetime | None:
    with writer(db) as con:
        found = con.execute("SELECT cursor_ts FROM collector_state WHERE collector = ?", [key]).fetchall()
    return found[0][0] if found else None


def poll(
    db: str | None,
    *,
    cluster: str | None = None,
    since: dt.datetime | None = None,
    overlap: dt.timedelta = dt.timedelta(seconds=60),
    timeout_s: float = 60.0,
    opts: IngestOptions | None = None,
    sacct: str = "sacct",
    scontrol: str = "scontrol",
) -> PollReport:
    """Read jobs changed since the stored cursor (or ``since``), land them, advance the cursor atomically.

    Running jobs' GPU indices come from ``scontrol`` (see the module docstring)."""
    from collectors.sacct import SacctParsable

    started = time.perf_counter()
    key = collector_key(cluster)
    cursor = read_cursor(db, key)
    polled_at = utc_now()
    if since is None:
        since = cursor - overlap if cursor is not None else polled_at - FIRST_POLL_LOOKBACK
    report = PollReport(key, since, polled_at)
    t0 = time.perf_counter()
    text = run_sacct(sacct_command(since, cluster=cluster, timeout_s=timeout_s, sacct=sacct), timeout_s)
    report.sacct_s = time.perf_counter() - t0
    lines = [ln for ln in text.splitlines() if ln.strip()]
    report.jobs_read = sum("." not in ln.split("|", 1)[0] for ln in lines[1:])  # job lines, not their steps
    running = running_ids(text)
    indices = running_gpu_indices(running, timeout_s=timeout_s, scontrol=scontrol)
    opts = opts or IngestOptions(cluster=cluster)
    # screen_live leaves implausible rows out instead of stopping the poll: the parser, told so, leaves out the
    # job of an implausible allocation too (one sacct line, rejected whole), by screen_live's own limits
    opts = dataclasses.replace(
        opts, tz="UTC", cluster=cluster or opts.cluster, skip_bad_rows=True, max_job_days=MAX_JOB_DAYS
    )
    digest = hashlib.sha256(text.encode()).hexdigest()
    source = f"slurm://{cluster or key.split(':', 1)[1]}"
    detail = json.dumps({"since": since.isoformat(), "jobs_read": report.jobs_read})

    with tempfile.TemporaryDirectory(prefix="gpuledger-sacct-") as tmp:
        path = Path(tmp) / "sacct.txt"
        path.write_text(text, encoding="utf-8")
        with writer(db) as con:

            def work() -> PollReport:
                seen = con.execute("SELECT 1 FROM ingests WHERE content_sha256 = ?", [digest]).fetchall()
                if report.jobs_read and not seen:
                    ingest_id = next_ingest_id(con)
                    report.skipped = SacctParsable().stage(con, path, opts)
                    if "stage_allocations" in {
                        r[0]
                        for r in con.execute(
                            "SELECT table_name FROM duckdb_tables() WHERE temporary"
                        ).fetchall()
                    }:
                        apply_gpu_indices(con, indices or {})
                    if indices is None:
                        report.skipped["running jobs whose GPU indices scontrol did not give"] = len(running)
                    report.skipped.update(screen_live(con, ingest_id, source))
                    # its notes: e.g. older records of jobs that have finished since
                    report.rows = land_and_record(
                        con,
                        ingest_id,
                        opts,
                        source=source,
                        source_key=source,
                        sha256=digest,
                        fmt="sacct",
                        skipped=report.skipped,
                    )
                    report.ingest_id = ingest_id
                con.execute(
                    "INSERT OR REPLACE INTO collector_state VALUES (?, ?, ?, ?)",
                    [key, polled_at, utc_now(), detail],
                )
                return report  # type: ignore[return-value]

            run_in_transaction(con, work)  # type: ignore[arg-type]
    report.seconds = time.perf_counter() - started
    return report
