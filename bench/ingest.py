"""Ingest speed of an nvidia-smi CSV: gpuledger vs the DuckDB VARCHAR floor vs pandas, from one run.

    .venv/bin/python bench/ingest.py            # 10 M rows: 64 GPUs at 1 s, with units (~1.5 GB in /tmp)
    .venv/bin/python bench/ingest.py --rows 1000000

The file is generated once by DuckDB (reused when present) in ``nvidia-smi --query-gpu=timestamp,index,uuid,
name,utilization.gpu,utilization.memory,memory.used,memory.total,power.draw,temperature.gpu,clocks.sm
--format=csv`` form. Each contender runs as its own process, so wall time includes start-up and peak RSS is
that process's alone (``os.wait4``):

- gpuledger: ``gpuledger ingest --tz UTC --quiet`` into a fresh ledger file (parse, validate, land, rollup);
- floor: DuckDB ``read_csv(all_varchar=true)`` into a table in a fresh database file, no cleanup — the
  least any parser of this file into DuckDB can do;
- pandas: ``read_csv`` + unit stripping + typed columns + into DuckDB.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPUS = 64
HEADER = (
    "timestamp, index, uuid, name, utilization.gpu [%], utilization.memory [%], memory.used [MiB], "
    "memory.total [MiB], power.draw [W], temperature.gpu, clocks.sm [MHz]"
)

FLOOR = """
import duckdb, sys
con = duckdb.connect(sys.argv[2])
con.execute(f"CREATE TABLE raw AS SELECT * FROM read_csv('{sys.argv[1]}', all_varchar=true, delim=', ', header=true)")
print(con.execute("SELECT count(*) FROM raw").fetchall()[0][0])
"""

PANDAS = """
import duckdb, pandas as pd, sys
df = pd.read_csv(sys.argv[1], sep=",", skipinitialspace=True)
df.columns = [c.split(" [")[0] for c in df.columns]
df["timestamp"] = pd.to_datetime(df["timestamp"], format="%Y/%m/%d %H:%M:%S.%f")
for col, unit in [("utilization.gpu", " %"), ("utilization.memory", " %"), ("memory.used", " MiB"),
                  ("memory.total", " MiB"), ("power.draw", " W"), ("clocks.sm", " MHz")]:
    df[col] = pd.to_numeric(df[col].str.replace(unit, "", regex=False), errors="coerce")
df["temperature.gpu"] = pd.to_numeric(df["temperature.gpu"], errors="coerce")
con = duckdb.connect(sys.argv[2])
con.execute("CREATE TABLE samples AS SELECT * FROM df")
print(len(df))
"""


def generate(path: Path, rows: int) -> None:
    """Write ``rows`` lines (64 GPUs, one poll a second) with DuckDB; no Python loop per row."""
    import duckdb

    seconds = -(-rows // GPUS)
    tmp = path.with_suffix(".part")
    con = duckdb.connect()
    con.execute(
        f"""
        COPY (
            SELECT line FROM (
                SELECT 0 AS k, '{HEADER}' AS line
                UNION ALL
                SELECT 1 + s * {GPUS} + g AS k,
                    strftime(TIMESTAMP '2025-03-01 00:00:00' + INTERVAL (s) SECOND
                             + INTERVAL ((g * 7) % 1000) MILLISECOND, '%Y/%m/%d %H:%M:%S.%g')
                    || ', ' || g
                    || ', GPU-' || lpad(g::VARCHAR, 8, '0') || '-1111-2222-3333-444455556666'
                    || ', NVIDIA H100 80GB HBM3'
                    || ', ' || ((s * 7 + g * 13) % 101) || ' %'
                    || ', ' || ((s * 3 + g) % 60) || ' %'
                    || ', ' || (1000 + (s * 37 + g * 101) % 80000) || ' MiB'
                    || ', 81559 MiB'
                    || ', ' || round(70 + ((s * 11 + g * 17) % 63000) / 100.0, 2) || ' W'
                    || ', ' || (30 + (s + g) % 50)
                    || ', ' || (1000 + (s * 5 + g) % 980) || ' MHz' AS line
                FROM range({seconds}) t(s), range({GPUS}) u(g)
                WHERE s * {GPUS} + g < {rows}
            ) ORDER BY k
        ) TO '{tmp}' (FORMAT csv, HEADER false, QUOTE '', ESCAPE '', DELIMITER '\x01')
        """
    )
    tmp.rename(path)


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB, stdout) of one child process."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    out = proc.stdout.read() if proc.stdout else ""
    err = proc.stderr.read() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed ({proc.returncode}): {err.strip()[-2000:]}")
    return wall, usage.ru_maxrss / 1024, out.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--skip-pandas", action="store_true", help="pandas needs ~5 GB at 10 M rows")
    args = ap.parse_args()
    csv_path = Path(tempfile.gettempdir()) / f"gpuledger-bench-smi-{args.rows}.csv"
    if not csv_path.exists():
        t = time.perf_counter()
        generate(csv_path, args.rows)
        print(f"generated {csv_path} in {time.perf_counter() - t:.1f} s")
    size_mb = csv_path.stat().st_size / 2**20
    print(f"file: {csv_path} ({args.rows:,} rows, {size_mb:,.0f} MiB)")
    py = sys.executable
    results: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="gpuledger-bench-") as scratch:
        db = Path(scratch) / "ledger.duckdb"
        wall, rss, out = timed(
            [
                py,
                "-m",
                "gpuledger",
                "ingest",
                "--db",
                str(db),
                "--tz",
                "UTC",
                "--quiet",
                "--json",
                str(csv_path),
            ]
        )
        results["gpuledger ingest"] = (wall, rss)
        if f'"samples": {args.rows}' not in out.replace("\n", " ").replace("  ", " "):
            print(f"warning: gpuledger reported: {out[:400]}")
        wall, rss, _ = timed([py, "-c", FLOOR, str(csv_path), str(Path(scratch) / "floor.duckdb")])
        results["duckdb VARCHAR load (floor)"] = (wall, rss)
        if not args.skip_pandas:
            wall, rss, _ = timed([py, "-c", PANDAS, str(csv_path), str(Path(scratch) / "pandas.duckdb")])
            results["pandas read_csv + cleanup"] = (wall, rss)
    print(f"{'path':<30} {'wall s':>8} {'rows/s':>12} {'peak RSS MiB':>13}")
    for name, (wall, rss) in results.items():
        print(f"{name:<30} {wall:>8.2f} {args.rows / wall:>12,.0f} {rss:>13,.0f}")
    ratio = results["duckdb VARCHAR load (floor)"][0] / results["gpuledger ingest"][0]
    print(f"gpuledger / floor (rows/s ratio): {ratio:.2f}x  (target >= 0.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
