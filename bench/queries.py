"""Summary over rollups vs the same summary over raw samples, from one run, on a generated ledger.

    .venv/bin/python bench/queries.py                      # 250 GPUs × 28 days at 30 s: ~20 M samples
    .venv/bin/python bench/queries.py --gpus 64 --days 7   # ~1.3 M samples, a quick look

The ledger (a DuckDB file under /tmp, rebuilt each run) holds one GPU fleet of H100s, each GPU running 6-hour
jobs back to back; a job is busy (40-95 %), idle (0-3 %, like a forgotten notebook) or bursty, chosen by a
hash, so idle stretches, under-used time and swings all occur. Samples are written with their job already
stamped (as ``attribute_samples`` would), then the rollups are built once (``rebuild_rollup``, timed: the
cost a threshold change pays). Printed: samples, rollup rows, build time, then each query's median wall time
over ``--repeat`` runs: ``summary`` via rollups and via raw samples (the test oracle, tests/analytics/oracle.py; their ratio; the two results are
checked equal), ``jobs_table`` and ``recommendations`` via the fast path.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

from analytics.jobs import jobs_table
from analytics.recommend import recommendations
from analytics.summary import summary
from gpuledger.ledger.db import ensure_schema
from gpuledger.ledger.reference import load_reference
from gpuledger.ledger.rollup import ROLLUP_TABLES, rebuild_rollup
from gpuledger.ledger.settings import Settings
from tests.analytics.oracle import ORACLE

START = dt.datetime(2026, 1, 5)
CADENCE_S = 30
JOB_HOURS = 6


def build(path: Path, gpus: int, days: int) -> tuple[int, float]:
    """Write the ledger; return (samples, rollup build seconds)."""
    con = duckdb.connect(str(path))
    ensure_schema(con)
    load_reference(con, Settings())
    n_jobs = days * 24 // JOB_HOURS
    con.execute(
        f"""
        INSERT INTO gpus SELECT 'n' || (g // 8) || ':' || (g % 8), NULL, 'n' || (g // 8), g % 8, 'H100-SXM-80GB',
               'NVIDIA H100 80GB HBM3', 81559, 'bench', NULL, NULL, NULL, NULL
        FROM range({gpus}) t(g)
        """
    )
    con.execute(
        f"""
        INSERT INTO jobs (job_id, source, cluster, user_name, team, name, kind, gpu_model, gpu_count, pricing_tier,
                          start_ts, end_ts, state, ingest_id)
        SELECT 'bench/' || g || '-' || k, 'bench', 'bench', 'u' || (g % 17), 'team' || (g % 5),
               'job-' || g || '-' || k, CASE WHEN hash(g, k) % 3 = 1 THEN 'interactive' ELSE 'training' END,
               'H100-SXM-80GB', 1, 'on_demand',
               ?::TIMESTAMP + to_hours(k * {JOB_HOURS}), ?::TIMESTAMP + to_hours((k + 1) * {JOB_HOURS}),
               'COMPLETED', 1
        FROM range({gpus}) a(g), range({n_jobs}) b(k)
        """,
        [START, START],
    )
    con.execute(
        """INSERT INTO allocations (job_id, host, gpu_id, gpu_count, start_ts, end_ts, ingest_id)
           SELECT j.job_id, g.host, g.gpu_id, 1, j.start_ts, j.end_ts, 1
           FROM jobs j JOIN gpus g ON j.job_id LIKE 'bench/' || (g.gpu_index + 8 * CAST(substr(g.host, 2) AS INT)) || '-%'"""
    )
    per_gpu = days * 86400 // CADENCE_S
    con.execute(
        f"""
        INSERT INTO samples
        SELECT ts, gpu_id, {CADENCE_S}, util, util / 2, 12000 + util * 500, 81559, 80 + util * 6, NULL,
               40 + util / 4, NULL, NULL, 1980, NULL, job_id, 1
        FROM (
            SELECT ?::TIMESTAMP + to_seconds(i * {CADENCE_S}) AS ts,
                   'n' || (g // 8) || ':' || (g % 8) AS gpu_id,
                   'bench/' || g || '-' || (i * {CADENCE_S} // ({JOB_HOURS} * 3600)) AS job_id,
                   CASE hash(g, i * {CADENCE_S} // ({JOB_HOURS} * 3600)) % 3
                        WHEN 0 THEN 40 + hash(g, i) % 56
                        WHEN 1 THEN hash(g, i) % 4
                        ELSE CASE WHEN i % 4 < 2 THEN 90 ELSE 2 END END::FLOAT AS util
            FROM range({gpus}) a(g), range({per_gpu}) b(i)
        ) ORDER BY ts, gpu_id
        """,
        [START],
    )
    samples = con.execute("SELECT count(*) FROM samples").fetchall()[0][0]
    started = time.perf_counter()
    con.execute("BEGIN TRANSACTION")
    rebuild_rollup(con, idle_util_pct=5.0, idle_min_minutes=30.0, target_util_pct=60.0)
    con.execute("COMMIT")
    seconds = time.perf_counter() - started
    con.execute("CHECKPOINT")
    con.close()
    return samples, seconds


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=250)
    ap.add_argument("--days", type=int, default=28)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuledger-bench-") as tmp:
        path = Path(tmp) / "bench.duckdb"
        started = time.perf_counter()
        samples, rollup_s = build(path, args.gpus, args.days)
        print(
            f"ledger: {samples:,} samples ({args.gpus} GPUs × {args.days} days at {CADENCE_S} s), "
            f"written in {time.perf_counter() - started:.1f} s; rollup build {rollup_s:.1f} s; "
            f"{path.stat().st_size / 2**20:,.0f} MiB"
        )
        con = duckdb.connect(str(path), read_only=True)
        rows = {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in ROLLUP_TABLES}
        print("rollup rows: " + ", ".join(f"{t} {n:,}" for t, n in rows.items()))
        fast_s, fast = timed(lambda: summary(con), args.repeat)
        raw_s, raw = timed(lambda: summary(con, source=ORACLE), max(1, args.repeat - 2))
        for key, value in raw.items():  # type: ignore[union-attr]
            other = fast[key]  # type: ignore[index]
            same = (
                math.isclose(value, other, rel_tol=1e-9, abs_tol=1e-6) if isinstance(value, float) else True
            )
            if not same:
                raise SystemExit(f"summary differs on {key}: raw {value} vs rollup {other}")
        print(f"summary via rollups     {fast_s:8.3f} s")
        print(f"summary via raw samples {raw_s:8.3f} s   (ratio {raw_s / fast_s:,.0f}×; results equal)")
        print(f"jobs_table (fast path)  {timed(lambda: jobs_table(con), args.repeat)[0]:8.3f} s")
        print(f"recommendations (fast)  {timed(lambda: recommendations(con), args.repeat)[0]:8.3f} s")
        con.close()


if __name__ == "__main__":
    main()
