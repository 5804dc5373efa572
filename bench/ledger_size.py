"""Ledger size on disk per 1,000 GPU-months of per-step rollups, every telemetry column filled.

    .venv/bin/python bench/ledger_size.py                       # 1,000 GPUs x 2 days at 60 s
    .venv/bin/python bench/ledger_size.py --gpus 200 --days 7 --step 300

Generates what ``collect prometheus`` lands (one sample per GPU per step: util, memory used/total, power,
energy counter, temperature, SM clock, SM/tensor activity, a job id changing every 4 h), lands it day by day
through ``collectors.landing.land`` (so the per-GPU-minute rollup and attribution are maintained as in
production) into a fresh ledger file, checkpoints, and prints the file size scaled to 1,000 GPU-months
(30-day months), plus the size of ``gpuledger export --parquet`` of the same ledger.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collectors.base import IngestOptions, land, next_ingest_id, record_ingest, split_sample_notes  # noqa: E402
from gpuledger.cli.commands.export import export_parquet  # noqa: E402
from gpuledger.ledger.db import writer  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--days", type=int, default=2)
    ap.add_argument("--step", type=int, default=60)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpuledger-bench-size-"))
    db = str(work / "ledger.duckdb")
    steps = 86_400 // args.step
    began = time.perf_counter()
    try:
        for day in range(args.days):
            with writer(db) as con:
                con.execute("BEGIN TRANSACTION")
                con.execute(
                    f"""CREATE TEMP TABLE stage_samples AS
                    SELECT TIMESTAMP '2025-03-01' + INTERVAL ({day * 86_400} + k * {args.step}) SECOND AS ts,
                           'GPU-' || lpad(g::VARCHAR, 8, '0') || '-0000-4000-8000-000000000000' AS gpu_id,
                           {args.step}::FLOAT AS interval_s,
                           ((g * 13 + k // 240 * 7 + k % 11) % 101)::FLOAT AS util_pct,
                           ((g * 7 + k) % 60)::FLOAT AS mem_util_pct,
                           (1000 + (g * 97 + k // 240 * 1009) % 80000)::FLOAT AS mem_used_mib,
                           81559::FLOAT AS mem_total_mib,
                           round(70 + ((g * 13 + k // 240 * 7) % 101) * 6.3 + k % 7, 3)::FLOAT AS power_w,
                           1e9 + g * 1e6 + (k + {day * steps}) * 400.0 * {args.step} AS energy_j,
                           (35 + (g + k) % 40)::FLOAT AS temp_c,
                           ((g * 11 + k // 240 * 5) % 100)::FLOAT AS sm_active_pct,
                           ((g * 3 + k // 240 * 2) % 60)::FLOAT AS tensor_active_pct,
                           (1200 + (g + k) % 780)::FLOAT AS sm_clock_mhz,
                           'c1/' || (100000 + g * 1000 + ({day * steps} + k) * {args.step} // 14400) AS job_id
                    FROM range({args.gpus}) a(g), range({steps}) b(k) ORDER BY ts, gpu_id"""
                )
                ingest_id = next_ingest_id(con)
                rows, _ = split_sample_notes(land(con, ingest_id, IngestOptions()))
                record_ingest(
                    con,
                    ingest_id,
                    path=f"bench://day{day}",
                    source_key="bench",
                    sha256=f"day{day}",
                    fmt="bench",
                    rows=rows,
                    skipped={},
                )
                con.execute("COMMIT")
                con.execute("DROP TABLE temp.stage_samples")
        with writer(db) as con:
            con.execute("CHECKPOINT")
            samples = con.execute("SELECT count(*) FROM samples").fetchall()[0][0]
            minutes = con.execute("SELECT count(*) FROM samples_minute").fetchall()[0][0]
            export_parquet(con, work / "parquet")
        size = os.path.getsize(db)
        parquet = sum(f.stat().st_size for f in (work / "parquet").rglob("*.parquet"))
        elapsed = time.perf_counter() - began
    finally:
        shutil.rmtree(work, ignore_errors=True)
    gpu_months = args.gpus * args.days / 30
    print(
        f"{args.gpus:,} GPUs x {args.days} days at {args.step} s: {samples:,} samples, {minutes:,} rollup rows, "
        f"landed in {elapsed:.1f} s"
    )
    print(
        f"ledger {size / 1e6:.1f} MB = {size / gpu_months * 1000 / 1e9:.2f} GB per 1,000 GPU-months "
        f"({size / samples:.1f} bytes per sample incl. its rollup row)"
    )
    print(
        f"export --parquet {parquet / 1e6:.1f} MB = {parquet / gpu_months * 1000 / 1e9:.2f} GB per 1,000 GPU-months"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
