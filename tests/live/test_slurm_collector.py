"""The Slurm collector against a REAL Slurm: slurmctld + slurmd + slurmdbd + MariaDB + munge with 4 fake GPUs.

tests/services/slurm_up.sh starts the stack in a temp dir on free loopback ports (root and the Debian
packages from .ci/system-deps.sh needed, else the tests skip saying why); slurm_down.sh stops it by pid.
Jobs are real ``sbatch --gres=gpu:N`` submissions; expected values come from ``sacct``'s own output.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from collectors.slurm_poll import collector_key, poll
from gpuledger.cli.live.slurm import parse_duration
from gpuledger.ledger.errors import CollectorError
from tests.conftest import ROOT

SERVICES = ROOT / "tests" / "services"
NO_OVERLAP = dt.timedelta(0)


@pytest.fixture(scope="session")
def slurm() -> Iterator[Path]:
    """A running Slurm for the session; SLURM_CONF points at it. Always stopped by pid afterwards.

    Not under pytest's tmp_path: that sits in a mode-700 directory the ``slurm`` user cannot enter.
    """
    work = Path(tempfile.mkdtemp(prefix="gpuledger-slurm-"))
    previous = os.environ.get("SLURM_CONF")
    try:
        up = subprocess.run(
            ["bash", str(SERVICES / "slurm_up.sh"), str(work)], capture_output=True, text=True, timeout=120
        )
        if up.returncode == 3:
            pytest.skip(f"real Slurm not available: {up.stderr.strip()}")
        if up.returncode != 0:
            pytest.fail(f"slurm_up.sh failed (exit {up.returncode}):\n{up.stderr[-3000:]}")
        os.environ["SLURM_CONF"] = str(work / "slurm.conf")
        yield work
    finally:
        subprocess.run(["bash", str(SERVICES / "slurm_down.sh"), str(work)], timeout=120, check=False)
        shutil.rmtree(work, ignore_errors=True)
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous


def sbatch(*args: str) -> str:
    out = subprocess.run(
        ["timeout", "20", "sbatch", "--parsable", *args], capture_output=True, text=True, check=True
    ).stdout
    return out.strip().split(";")[0]


def sacct_truth(ids: list[str]) -> dict[str, dict[str, object]]:
    """sacct's own view of these jobs: state, GPUs from AllocTRES, elapsed seconds."""
    out = subprocess.run(
        [
            "timeout", "20", "sacct", "-P", "-n", "-X", "-a", "-j", ",".join(ids),
            "--format=JobIDRaw,State,ElapsedRaw,AllocTRES,ReqTRES,Start,End",
        ],
        capture_output=True, text=True, check=True, env={**os.environ, "TZ": "UTC"},
    ).stdout  # fmt: skip
    truth = {}
    for line in out.splitlines():
        job, state, elapsed, alloc, req, start, end = line.split("|")
        tres = alloc or req  # a pending job has no AllocTRES yet
        m = re.search(r"gres/gpu=(\d+)", tres)
        truth[job] = {
            "state": state.split()[0],
            "gpus": int(m.group(1)) if m else 0,
            "elapsed_s": int(elapsed),
            "start": None if start in ("Unknown", "None") else dt.datetime.fromisoformat(start),
            "end": None if end in ("Unknown", "None") else dt.datetime.fromisoformat(end),
        }
    return truth


def wait_until(
    ids: list[str], done: dict[str, set[str]], timeout_s: float = 40.0
) -> dict[str, dict[str, object]]:
    """Poll sacct until each job is in one of its wanted states."""
    deadline = time.monotonic() + timeout_s
    while True:
        truth = sacct_truth(ids)
        if all(j in truth and truth[j]["state"] in done[j] for j in ids):
            return truth
        if time.monotonic() > deadline:
            pytest.fail(f"jobs did not reach {done} within {timeout_s} s: {truth}")
        time.sleep(0.3)


def ledger(db: str, sql: str) -> list[tuple]:
    con = duckdb.connect(db, read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def jobs_in_ledger(db: str) -> dict[str, tuple]:
    rows = ledger(
        db,
        """SELECT job_id, state, gpu_count, start_ts, end_ts,
                  gpu_count * epoch(end_ts - start_ts) / 3600.0 AS gpu_hours, ingest_id
           FROM jobs""",
    )
    return {r[0]: r[1:] for r in rows}


FINISHED = {"COMPLETED", "FAILED"}


@pytest.mark.service
def test_polls_jobs_states_gpus_and_gpu_hours_then_only_what_changed(slurm: Path, db_path: str) -> None:
    # ---- poll 1: four GPU jobs, one of them failing -------------------------------------------------------
    first = [
        sbatch("--gres=gpu:4", "-J", "g4", "--wrap=sleep 2"),
        sbatch("--gres=gpu:2", "-J", "g2", "--wrap=sleep 2"),
        sbatch("--gres=gpu:1", "-J", "g1", "--wrap=sleep 2"),
        sbatch("--gres=gpu:1", "-J", "failing", "--wrap=exit 3"),
    ]
    truth = wait_until(first, dict.fromkeys(first, FINISHED))
    time.sleep(1.1)  # every job ended at least a second before the cursor, so poll 2 can leave them out
    report1 = poll(db_path, overlap=NO_OVERLAP)
    assert report1.jobs_read == 4 and report1.ingest_id is not None
    got = jobs_in_ledger(db_path)
    assert sorted(got) == sorted(f"ci/{j}" for j in first)  # the sacct Cluster column prefixes ids
    for j in first:
        t = truth[j]
        state, gpus, start, end, gpu_hours, _ = got[f"ci/{j}"]
        assert (state, gpus, start, end) == (t["state"], t["gpus"], t["start"], t["end"]), j
        assert gpu_hours == pytest.approx(t["gpus"] * t["elapsed_s"] / 3600.0), j
    assert [truth[j]["gpus"] for j in first] == [4, 2, 1, 1]
    assert truth[first[3]]["state"] == "FAILED" and got[f"ci/{first[3]}"][0] == "FAILED"
    # 4 GPUs x 2 s + 2 x 2 s + 1 x 2 s + 1 x 0 s = 14 GPU-seconds, as sacct's own ElapsedRaw says
    assert sum(g[4] for g in got.values()) * 3600 == pytest.approx(
        sum(t["gpus"] * t["elapsed_s"] for t in truth.values())  # type: ignore[operator]
    )
    assert ledger(db_path, "SELECT job_id, gpu_count FROM allocations ORDER BY job_id") == sorted(
        (f"ci/{j}", float(truth[j]["gpus"]))
        for j in first  # type: ignore[arg-type]
    )
    cursor = ledger(
        db_path, f"SELECT cursor_ts FROM collector_state WHERE collector = '{collector_key(None)}'"
    )
    assert cursor == [(report1.polled_at,)]

    # ---- poll 2: one short job that finished, one still running: only these two arrive --------------------
    short = sbatch("--gres=gpu:2", "-J", "short", "--wrap=sleep 1")
    long = sbatch("--gres=gpu:1", "-J", "long", "--wrap=sleep 6")
    wait_until([short, long], {short: FINISHED, long: {"RUNNING"}})
    time.sleep(1.1)
    report2 = poll(db_path, overlap=NO_OVERLAP)
    assert report2.jobs_read == 2 and report2.rows["jobs"] == 2
    got2 = jobs_in_ledger(db_path)
    assert got2[f"ci/{long}"][0] == "RUNNING" and got2[f"ci/{long}"][3] is None  # end unknown while running
    assert got2[f"ci/{short}"][0] == "COMPLETED"
    assert {got2[f"ci/{j}"][5] for j in first} == {report1.ingest_id}  # earlier jobs untouched

    # ---- poll 3 through the CLI: the running job finished and is updated, nothing else is read ------------
    truth3 = wait_until([long], {long: FINISHED})
    time.sleep(1.1)
    proc = subprocess.run(
        [sys.executable, "-m", "gpuledger", "collect", "slurm", "--once", "--overlap", "0s", "--json",
         "--db", db_path],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report3 = json.loads(proc.stdout)
    assert report3["jobs_read"] == 1 and report3["rows"]["jobs"] == 1
    state, gpus, start, end, gpu_hours, ingest = jobs_in_ledger(db_path)[f"ci/{long}"]
    t = truth3[long]
    assert (state, gpus, start, end, ingest) == ("COMPLETED", 1.0, t["start"], t["end"], report3["ingest_id"])
    assert gpu_hours == pytest.approx(1 * t["elapsed_s"] / 3600.0)
    assert ledger(db_path, "SELECT count(*) FROM jobs") == [(6,)]

    # ---- poll 4: nothing changed, nothing written, the cursor still moves ---------------------------------
    time.sleep(1.1)
    report4 = poll(db_path, overlap=NO_OVERLAP)
    assert report4.jobs_read == 0 and report4.ingest_id is None
    assert ledger(db_path, "SELECT count(*) FROM ingests") == [(3,)]


def test_missing_sacct_is_one_sentence_and_leaves_the_cursor(db_path: str) -> None:
    with pytest.raises(CollectorError, match=r"^/nonexistent/sacct not found: install the Slurm client"):
        poll(db_path, sacct="/nonexistent/sacct")
    assert ledger(db_path, "SELECT count(*) FROM collector_state") == [(0,)]


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("30s", 30), ("5m", 300), ("2h", 7200), ("1d", 86400)]
)
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text).total_seconds() == seconds
