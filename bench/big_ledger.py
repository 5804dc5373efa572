"""A fleet-scale ledger for bench/pages.py: the 28-day demo fleet copied side by side, ``--copies`` times.

    .venv/bin/gpuledger demo --db /tmp/h11/demo.duckdb
    .venv/bin/python bench/big_ledger.py --from /tmp/h11/demo.duckdb --to /tmp/h11/big.duckdb --copies 11
    .venv/bin/python bench/pages.py --db /tmp/h11/big.duckdb --repeat 1

Issue 11 asks for each page's script in <= 2 s on a 50 M-sample ledger. The demo cannot be built that long
(310 days of its 112 GPUs would be 50 M samples, but it stages every sample in one transaction). A site with
that many samples is a bigger fleet over a month, so this copies the demo's 112 GPUs 11 times (1,232 GPUs,
49.6 M samples, 39 k jobs over the same 28 days): copy k gets ``-rk`` after every GPU id, UUID, host and job
id, in every table that names one, the rollups included (each copy's GPUs and jobs are their own, so its
rollup rows are the demo's with the new ids: nothing is recomputed). Cluster capacity grows with the copies.
Teams, users, models and prices stay the demo's, so every page has the same shape, 11 times the rows.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import duckdb

from gpuledger.ledger.rollup import ROLLUP_TABLES

# columns that name a GPU, a host or a job: suffixed in each copy
IDS = ("gpu_id", "uuid", "host", "job_id", "parent_gpu_id")
# tables copied row by row (everything that names a GPU or a job); the rest (prices, catalog, ingests,
# settings) is the demo's once
TABLES = (
    "gpus",
    "jobs",
    "allocations",
    "training_runs",
    "train_log",
    "processes",
    "process_shares",
    "gpu_events",
    "samples",
    *ROLLUP_TABLES,
    "observed_runs",
)


def copy_fleet(con: duckdb.DuckDBPyConnection, copies: int) -> None:
    for table in TABLES:
        cols = list(con.table(f"base.{table}").columns)
        for k in range(1, copies):
            exprs = ", ".join(f"{c} || '-r{k}'" if c in IDS else c for c in cols)
            con.execute(f"INSERT INTO {table} SELECT {exprs} FROM base.{table}")
    con.execute(f"UPDATE capacity SET gpu_count = gpu_count * {copies}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="src", type=Path, required=True, help="the 28-day demo ledger")
    ap.add_argument("--to", dest="dst", type=Path, required=True, help="the ledger to write (replaced)")
    ap.add_argument("--copies", type=int, default=11, help="copies of the fleet, the demo's own included")
    args = ap.parse_args()
    started = time.perf_counter()
    for p in (args.dst, args.dst.with_name(args.dst.name + ".wal")):
        p.unlink(missing_ok=True)
    shutil.copy(args.src, args.dst)
    con = duckdb.connect(str(args.dst))
    con.execute("SET memory_limit = '2GB'")
    con.execute(f"ATTACH '{args.src}' AS base (READ_ONLY)")
    con.execute("BEGIN")
    copy_fleet(con, args.copies)
    con.execute("COMMIT")
    con.execute("DETACH base")
    con.execute("CHECKPOINT")
    n, g, j = (con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in ("samples", "gpus", "jobs"))
    con.close()
    print(f"{args.dst}: {n:,} samples, {g:,} GPUs, {j:,} jobs in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
