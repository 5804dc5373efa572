"""``gpuledger export --parquet DIR``: the whole ledger as Parquet, time series partitioned by UTC day.

Why: other engines (Spark, Trino, polars, pandas, a data lake) read Parquet with Hive partitions directly,
and a day partition lets them skip what they do not need. Layout under DIR:

- ``samples/day=YYYY-MM-DD/*.parquet``, ``samples_minute/day=…``, ``processes/day=…``, ``gpu_events/day=…``:
  every column of the table plus ``day`` (the UTC date of ``ts``/``minute``) as the partition key;
- ``<table>.parquet`` for every other table (jobs, allocations, gpus, prices, …): one file each.

Each export replaces what an earlier one wrote under DIR for the same table. It reads through a read-only
connection, so it runs while the dashboard or a collector uses the ledger (a writer's commit in flight is
waited for, then the export sees it). Parquet is written by DuckDB's ``COPY … (FORMAT parquet,
PARTITION_BY (day))`` with zstd compression.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import duckdb

from analytics.shared import sharing
from gpuledger.cli.commands._common import add_db_options, print_json
from gpuledger.ledger.db import reader
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.schema import TABLES

# table → the timestamp column its day partition comes from
DAY_PARTITIONED: dict[str, str] = {
    "samples": "ts",
    "samples_minute": "minute",
    "processes": "ts",
    "gpu_events": "ts",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write the ledger as Parquet (time series partitioned by UTC day) for other engines",
        description="Write every ledger table as Parquet under DIR: samples, samples_minute, processes and "
        "gpu_events as DIR/<table>/day=YYYY-MM-DD/*.parquet, the rest as DIR/<table>.parquet.",
    )
    p.add_argument("--parquet", required=True, metavar="DIR", help="output folder (created when missing)")
    p.add_argument("--json", action="store_true", help="print rows and files per table as JSON")
    add_db_options(p)
    p.set_defaults(func=run)


def export_parquet(con: duckdb.DuckDBPyConnection, out: Path) -> list[dict[str, object]]:
    """Write each table under ``out``; return ``[{table, rows, days, path}]`` (days None when unpartitioned)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for table in TABLES:
        rows = int(con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0])
        column = DAY_PARTITIONED.get(table)
        if column:
            target = out / table
            if target.exists():
                shutil.rmtree(target)
            days = int(
                con.execute(f"SELECT count(DISTINCT CAST({column} AS DATE)) FROM {table}").fetchall()[0][0]
            )
            if rows:
                con.execute(
                    f"""COPY (SELECT *, CAST({column} AS DATE) AS day FROM {table} ORDER BY {column})
                        TO '{_sql_path(target)}'
                        (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (day), FILENAME_PATTERN '{table}_{{i}}')"""
                )
            written.append({"table": table, "rows": rows, "days": days, "path": str(target)})
        else:
            target = out / f"{table}.parquet"
            con.execute(f"COPY {table} TO '{_sql_path(target)}' (FORMAT parquet, COMPRESSION zstd)")
            written.append({"table": table, "rows": rows, "days": None, "path": str(target)})
    return written


def _sql_path(path: Path) -> str:
    return str(path.resolve()).replace("'", "''")


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    out = Path(args.parquet)
    if out.exists() and not out.is_dir():
        raise LedgerError(f"{out}: exists and is not a folder")
    with reader(args.db) as con, sharing(con):
        written = export_parquet(con, out)
    if args.json:
        print_json({"path": str(out.resolve()), "tables": written})
    else:
        for w in written:
            days = f" in {w['days']} day partition(s)" if w["days"] is not None else ""
            print(f"{w['table']}: {w['rows']:,} rows{days} → {w['path']}")
        print(f"exported in {time.perf_counter() - started:.2f} s")
    return 0
