"""Host-level attribution end to end on a REAL Slurm: three slurmd nodes (g1..g3, 4 fake GPUs each).

tests/services/slurm_up.sh with SLURM_TEST_NODES=3 (root and the packages from .ci/system-deps.sh needed, else
the test skips saying why). Real ``sbatch --gres=gpu:N`` jobs — one holding all of g1, two sharing g2, one
spanning g1 and g3 — are polled by the Slurm collector; then telemetry for those nodes is replayed from a real
nvidia-smi log (../shared/datasets/nvidia-smi-csv), time-shifted into the jobs' spans as sacct reports them,
and ingested per node with ``--host``. Every expected figure is plain SQL over the samples, sacct's output or
the GPUs the jobs themselves printed (``SLURM_JOB_GPUS``). The sharing jobs are checked twice: polled while
running (scontrol names their GPUs: exact) and only after the end without scontrol (by share). The nodes
also report for 5 minutes before and after their jobs: observed − held = unallocated, to the cent.
"""

from __future__ import annotations

import csv
import datetime as dt
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from analytics.jobs import jobs_table
from analytics.waste import unallocated, waste_totals
from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from collectors.slurm_poll import poll
from gpuledger.ledger.db import reader, writer
from tests.conftest import ROOT, dataset
from tests.live.test_slurm_collector import sbatch, wait_until

SERVICES = ROOT / "tests" / "services"
REAL_LOG = "nvidia-smi-csv/eobo0530_vlm_optimization_gpu_log.csv"  # 2,619 rows at 1 s, one RTX 4090
FINISHED = {"COMPLETED"}
# each node's telemetry starts this long before its first job and ends this long after its last
PAD = dt.timedelta(minutes=5)


@pytest.fixture(scope="module")
def slurm3() -> Iterator[Path]:
    """A running 3-node Slurm for this module; SLURM_CONF points at it. Always stopped by pid afterwards."""
    work = Path(tempfile.mkdtemp(prefix="gpuledger-slurm3-"))
    previous = os.environ.get("SLURM_CONF")
    try:
        up = subprocess.run(
            ["bash", str(SERVICES / "slurm_up.sh"), str(work)],
            capture_output=True,
            text=True,
            timeout=150,
            env={**os.environ, "SLURM_TEST_NODES": "3"},
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


def spans(ids: dict[str, str]) -> dict[str, tuple[dt.datetime, dt.datetime, str]]:
    """sacct's own Start, End and NodeList per job (UTC)."""
    out = subprocess.run(
        ["timeout", "20", "sacct", "-P", "-n", "-X", "-a", "-j", ",".join(ids.values()),
         "--format=JobIDRaw,Start,End,NodeList"],
        capture_output=True, text=True, check=True, env={**os.environ, "TZ": "UTC"},
    ).stdout  # fmt: skip
    by_id = {}
    for line in out.splitlines():
        job, start, end, nodes = line.split("|")
        by_id[job] = (dt.datetime.fromisoformat(start), dt.datetime.fromisoformat(end), nodes)
    return {name: by_id[job] for name, job in ids.items()}


def replay(real: Path, out: Path, lo: dt.datetime, hi: dt.datetime, *, same_reading: bool) -> Path:
    """The real log's rows as a 4-GPU node's nvidia-smi CSV, one sample per GPU per second over [lo, hi).

    GPU i reads the real row (k + 400·i) at second k — four different real series — or, with
    ``same_reading``, row k on all four (so a figure over any two of them does not depend on which two).
    """
    with real.open(encoding="utf-8") as fh:
        rows = list(csv.reader(fh, skipinitialspace=True))
    header, data = rows[0], rows[1:]
    with out.open("w", encoding="utf-8", newline="") as fh:
        fh.write(", ".join([header[0], "index", *header[1:]]) + "\n")
        for k in range(int((hi - lo).total_seconds())):
            ts = (lo + dt.timedelta(seconds=k)).strftime("%Y/%m/%d %H:%M:%S.000")
            for i in range(4):
                row = data[(k + (0 if same_reading else 400 * i)) % len(data)]
                fh.write(", ".join([ts, str(i), *row[1:]]) + "\n")
    return out


def plain(con: duckdb.DuckDBPyConnection, sql: str, params: list[object]) -> float:
    return float(con.execute(sql, params).fetchall()[0][0])


MEAN_ON = """SELECT avg(s.util_pct) FROM samples s JOIN gpus g USING (gpu_id)
             WHERE g.host IN (SELECT unnest(?::VARCHAR[])) AND s.ts >= ? AND s.ts < ?"""


def job_gpus(work: Path, raw: str) -> list[int]:
    """The GPU indices Slurm gave the job, as the job itself printed them (SLURM_JOB_GPUS)."""
    line = next(ln for ln in (work / f"{raw}.out").read_text().splitlines() if ln.startswith("GPUS="))
    return sorted(int(x) for x in line[5:].split(","))


def common_checks(con: duckdb.DuckDBPyConnection, job: dict[str, str], span: dict) -> dict[str, dict]:
    """What holds whether the shared node is tied exactly or by share (capacity too); returns the jobs table
    by name."""
    table = {r["job_id"]: r for r in jobs_table(con).to_dicts()}
    by_name = {n: table[j] for n, j in job.items()}
    assert (by_name["whole"]["attribution"], by_name["two_nodes"]["attribution"]) == ("exact", "exact")
    # a whole-node job's utilization is the plain mean of its node's samples in its span
    for name, hosts in (("whole", ["g1"]), ("two_nodes", ["g1", "g3"])):
        lo, hi, _ = span[name]
        assert by_name[name]["mean_util_pct"] == pytest.approx(plain(con, MEAN_ON, [hosts, lo, hi])), name
    # GPU-hours: sacct's spans × GPUs held, every one of them measured
    for name, gpus in (("whole", 4), ("share_a", 2), ("share_b", 2), ("two_nodes", 8)):
        lo, hi, _ = span[name]
        r = by_name[name]
        assert r["gpu_hours"] == pytest.approx(gpus * (hi - lo).total_seconds() / 3600), name
        assert r["unmeasured_usd"] == pytest.approx(0, abs=1e-9 + 1e-6 * r["cost_usd"]), name
    # no sample is tied outside its job's span or to a job that did not hold its node
    stray = con.execute(
        """SELECT count(*) FROM samples s JOIN gpus g USING (gpu_id)
           WHERE s.job_id IS NOT NULL AND NOT EXISTS (
               SELECT 1 FROM allocations a WHERE a.job_id = s.job_id AND a.host = g.host
                 AND s.ts >= a.start_ts AND s.ts < a.end_ts)"""
    ).fetchall()[0][0]
    assert stray == 0
    capacity_checks(con)
    return by_name


def capacity_checks(con: duckdb.DuckDBPyConnection) -> None:
    """Observed − held = unallocated, to the cent, with observed and held in plain SQL: each GPU reports from its
    first sample to its last sample's end (ts + interval_s; the replayed logs have no gaps), the jobs hold their
    allocations (sacct's spans × GPUs per node), all priced at the one price in force for the nodes' card
    (on_demand, no cluster override: the test declares none). And no job's cost goes unmeasured."""
    (model,) = con.execute("SELECT DISTINCT model FROM gpus").fetchall()[0]  # one card model on every node
    price = plain(
        con,
        """SELECT usd_per_gpu_hour FROM prices WHERE gpu_model = ? AND tier = 'on_demand' AND cluster IS NULL
             AND effective_from <= current_date ORDER BY effective_from DESC LIMIT 1""",
        [model],
    )
    observed_h = plain(
        con,
        """SELECT sum(epoch(last_end - first_ts)) / 3600.0 FROM (
               SELECT gpu_id, min(ts) AS first_ts,
                      max(ts + to_microseconds(CAST(round(interval_s * 1e6) AS BIGINT))) AS last_end
               FROM samples GROUP BY gpu_id)""",
        [],
    )
    held_h = plain(con, "SELECT sum(gpu_count * epoch(end_ts - start_ts)) / 3600.0 FROM allocations", [])
    # the nodes also reported for PAD before and after their jobs: 12 GPUs × 10 min of it at least
    assert observed_h - held_h >= 12 * 2 * PAD.total_seconds() / 3600
    un = unallocated(con)
    assert un["unallocated_gpu_hours"].sum() == pytest.approx(observed_h - held_h, rel=1e-9)
    got = un["unallocated_usd"].sum()
    assert abs(got - (observed_h - held_h) * price) < 0.005, (got, observed_h, held_h, price)
    assert waste_totals(con)["unmeasured_usd"] == pytest.approx(0, abs=0.005)


@pytest.mark.service
def test_whole_node_shared_node_and_two_node_jobs_get_their_nodes_telemetry(slurm3, tmp_path):
    real = dataset(REAL_LOG)
    out = ["-o", f"{slurm3}/%j.out"]
    wrap = "--wrap=echo GPUS=$SLURM_JOB_GPUS; sleep {}"
    ids = {
        "whole": sbatch(*out, "-w", "g1", "--gres=gpu:4", "-J", "whole", wrap.format(4)),
        "share_a": sbatch(*out, "-w", "g2", "--gres=gpu:2", "-J", "share_a", wrap.format(6)),
        "share_b": sbatch(*out, "-w", "g2", "--gres=gpu:2", "-J", "share_b", wrap.format(7)),
        # two whole nodes; g1 is busy with "whole", so this one starts when that one ends
        "two_nodes": sbatch(
            *out, "-N", "2", "-w", "g1,g3", "--gres=gpu:4", "-J", "two_nodes", wrap.format(4)
        ),
    }
    any_state = {"PENDING", "RUNNING", "COMPLETED"}
    wait_until(
        list(ids.values()), {j: {"RUNNING"} if n.startswith("share") else any_state for n, j in ids.items()}
    )
    # ledger "live" is polled while the sharing jobs run (scontrol tells their GPUs) and after they end;
    # ledger "late" only after the end, without scontrol: sacct alone names g2, not which of its GPUs
    live, late = str(tmp_path / "live.duckdb"), str(tmp_path / "late.duckdb")
    poll(live, overlap=dt.timedelta(0))
    wait_until(list(ids.values()), dict.fromkeys(ids.values(), FINISHED), timeout_s=90)
    time.sleep(1.1)
    assert poll(live, overlap=dt.timedelta(0)).jobs_read == 4
    assert poll(late, overlap=dt.timedelta(0), scontrol="/nonexistent/scontrol").jobs_read == 4
    span = spans(ids)
    assert [span[n][2] for n in ids] == ["g1", "g2", "g2", "g[1,3]"]  # what the test asked Slurm for
    job = {n: f"ci/{j}" for n, j in ids.items()}
    printed = {n: job_gpus(slurm3, ids[n]) for n in ("share_a", "share_b")}
    assert sorted(printed["share_a"] + printed["share_b"]) == [0, 1, 2, 3]  # Slurm split g2 between them

    # telemetry: each node sampled every second from PAD before its first job's start to PAD after its last
    # job's end (a node reports while idle too: that is unallocated capacity); in "late", g2's four GPUs read
    # the same each second, so a figure over any two of them is the same
    windows = {
        "g1": (span["whole"][0] - PAD, span["two_nodes"][1] + PAD),
        "g2": (
            min(span["share_a"][0], span["share_b"][0]) - PAD,
            max(span["share_a"][1], span["share_b"][1]) + PAD,
        ),
        "g3": (span["two_nodes"][0] - PAD, span["two_nodes"][1] + PAD),
    }
    for db, same in ((live, False), (late, True)):
        with writer(db) as con:
            for host, (lo, hi) in windows.items():
                csv_path = replay(
                    real, tmp_path / f"{host}-{same}.csv", lo, hi, same_reading=same and host == "g2"
                )
                ingest_file(con, csv_path, opts=IngestOptions(tz="UTC", host=host))

    with reader(live) as con:
        by_name = common_checks(con, job, span)
        for name in ("share_a", "share_b"):
            ties = con.execute(
                """SELECT list(g.gpu_index ORDER BY g.gpu_index), list(DISTINCT h.evidence)
                   FROM host_attribution h JOIN gpus g USING (gpu_id) WHERE h.job_id = ?""",
                [job[name]],
            ).fetchall()[0]
            assert ties == (printed[name], ["gres_idx"]), name  # the cards the job itself printed
            assert by_name[name]["attribution"] == "exact"
            # its utilization: the plain mean of g2's samples on those cards in its span
            lo, hi, _ = span[name]
            mean = plain(
                con,
                """SELECT avg(s.util_pct) FROM samples s JOIN gpus g USING (gpu_id)
                   WHERE g.host = 'g2' AND list_contains(?::INTEGER[], g.gpu_index) AND s.ts >= ? AND s.ts < ?""",
                [printed[name], lo, hi],
            )
            assert by_name[name]["mean_util_pct"] == pytest.approx(mean), name

    with reader(late) as con:
        by_name = common_checks(con, job, span)
        assert (by_name["share_a"]["attribution"], by_name["share_b"]["attribution"]) == (
            "by_share",
            "by_share",
        )
        # each sharing job's mean is g2's plain mean in its span (all four cards read the same)
        for name in ("share_a", "share_b"):
            lo, hi, _ = span[name]
            assert by_name[name]["mean_util_pct"] == pytest.approx(plain(con, MEAN_ON, [["g2"], lo, hi])), (
                name
            )
        # and the two add up to the node: Σ util × time over g2's samples, each weighted by the share of g2's
        # 4 GPUs held at that second (2 per running job, from sacct's spans)
        node = plain(
            con,
            """SELECT sum(s.util_pct / 100.0 * s.interval_s / 3600.0
                          * ((CASE WHEN s.ts >= ? AND s.ts < ? THEN 2 ELSE 0 END)
                             + (CASE WHEN s.ts >= ? AND s.ts < ? THEN 2 ELSE 0 END)) / 4.0)
               FROM samples s JOIN gpus g USING (gpu_id) WHERE g.host = 'g2'""",
            [span["share_a"][0], span["share_a"][1], span["share_b"][0], span["share_b"][1]],
        )
        shared = [by_name[n] for n in ("share_a", "share_b")]
        assert sum(r["mean_util_pct"] / 100 * r["gpu_hours"] for r in shared) == pytest.approx(node)
