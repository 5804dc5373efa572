"""A prototype of the one ingest design the stage-by-stage profile left room for, timed against DuckDB's
VARCHAR load of the same file in the same run (docs/scale.md, 2026-12-05 22:05).

    .venv/bin/python bench/ingest_streaming.py                 # the 2 M-row file bench/ingest.py generates
    .venv/bin/python bench/ingest_streaming.py --rows 10000000

The design: no TEMP stage. DuckDB's reader writes the typed rows straight into ``samples`` (a placeholder
interval); a narrow window over the landed rows checks the polls and gives each GPU its cadence; one
``UPDATE`` sets the intervals (the same rule as collectors/landing.py); range checks read the landed rows;
the GPU table comes from a second narrow read of the file; then gpuledger's own rollup (the poll path), all
in one transaction under the writer's 300 MB limit. It lacks what the real ingest also does (name codes,
line-numbered messages, attribution, the hash), so its time is a lower bound for that design. Measured:
0.52-0.57x the VARCHAR load at 2 M rows (gpuledger 0.53-0.55x); at 10 M rows 19.62 s in process against
gpuledger's 19.94 s: not worth building.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import duckdb  # noqa: E402
from ingest import cached_file  # noqa: E402

from collectors.landing import _CADENCE  # noqa: E402
from gpuledger.ledger.db import ensure_schema  # noqa: E402
from gpuledger.ledger.rollup import refresh_rollup  # noqa: E402
from gpuledger.ledger.sample_time import GAP_FACTOR, MAX_DERIVED_INTERVAL_S  # noqa: E402


def num(col: str, unit: str) -> str:
    return f"TRY_CAST(replace({col}, ' {unit}', '') AS FLOAT)" if unit else f"TRY_CAST({col} AS FLOAT)"


def prototype(csv: Path, db: Path) -> list[tuple[str, float]]:
    """Land ``csv`` into a fresh ledger at ``db`` the streaming way; (step, seconds) in order."""
    spent: list[tuple[str, float]] = []
    t = time.perf_counter()

    def step(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        spent.append((name, now - t))
        t = now

    con = duckdb.connect(str(db))
    con.execute("SET memory_limit = '300MB'")
    ensure_schema(con)
    types = ["TIMESTAMP", "INTEGER"] + ["VARCHAR"] * 9
    cols = ", ".join(f"'c{i}': '{ty}'" for i, ty in enumerate(types))
    src = (
        f"read_csv('{csv}', delim=', ', header=true, auto_detect=false, columns={{{cols}}}, quote='', "
        "escape='', timestampformat='%Y/%m/%d %H:%M:%S.%g')"
    )
    con.execute("BEGIN")
    step("schema")
    con.execute(
        f"""INSERT INTO samples (ts, gpu_id, interval_s, util_pct, mem_util_pct, mem_used_mib, mem_total_mib,
                power_w, temp_c, sm_clock_mhz, ingest_id)
            SELECT c0, c2, 0.0, {num("c4", "%")}, {num("c5", "%")}, {num("c6", "MiB")}, {num("c7", "MiB")},
                   {num("c8", "W")}, {num("c9", "")}, {num("c10", "MHz")}, 1 FROM {src}"""
    )
    step("reader into samples")
    n = con.execute("SELECT count(DISTINCT gpu_id) FROM samples WHERE ingest_id = 1").fetchall()[0][0]
    con.execute(
        f"""CREATE TEMP TABLE gaps AS SELECT rowid AS rid, rowid % {n} AS pos, gpu_id,
                   epoch(lead(ts, {n}) OVER () - ts) AS gap_s
            FROM samples WHERE ingest_id = 1"""
    )
    con.execute(
        f"""CREATE TEMP TABLE stage_cadence AS
            SELECT pos, min(gpu_id) AS gpu_id, {_CADENCE} AS cad_s,
                   count(*) FILTER (gap_s <= 0) + (min(gpu_id) IS DISTINCT FROM max(gpu_id))::INTEGER AS off
            FROM gaps GROUP BY pos"""
    )
    if con.execute("SELECT sum(off) FROM stage_cadence").fetchall()[0][0]:
        raise SystemExit("the file is not whole polls in order: the prototype has no other path")
    step("polls check, cadence")
    con.execute(
        f"""UPDATE samples SET interval_s =
                CASE WHEN g.gap_s IS NULL OR g.gap_s > least({GAP_FACTOR} * c.cad_s, {MAX_DERIVED_INTERVAL_S})
                     THEN c.cad_s ELSE g.gap_s END
            FROM gaps g JOIN stage_cadence c ON c.pos = g.pos WHERE samples.rowid = g.rid"""
    )
    con.execute("DROP TABLE gaps")
    step("intervals (UPDATE)")
    bad = con.execute(
        """SELECT count(*) FILTER (util_pct < 0 OR util_pct > 100 OR mem_used_mib < 0 OR power_w < 0
                                   OR power_w > 5000 OR temp_c < -50 OR temp_c > 150
                                   OR ts > TIMESTAMP '2100-01-01')
           FROM samples WHERE ingest_id = 1"""
    ).fetchall()[0][0]
    if bad:
        raise SystemExit(f"{bad} rows out of range")
    step("range checks")
    con.execute(
        f"""INSERT INTO gpus (gpu_id, uuid, gpu_index, model_raw, first_seen, last_seen)
            SELECT c2, c2, arg_max(c1, c0), mode(c3), min(c0), max(c0) FROM {src} GROUP BY c2"""
    )
    step("GPU table (2nd read)")
    con.execute(
        "CREATE TEMP TABLE stage_landed_polls AS SELECT 1::BIGINT AS ingest_id, gpu_id FROM stage_cadence"
    )
    refresh_rollup(con, 1, idle_util_pct=5.0, idle_min_minutes=30.0, target_util_pct=60.0)
    step("rollup")
    con.execute("COMMIT")
    step("COMMIT")
    con.close()
    return spent


def varchar_load(csv: Path, db: Path) -> float:
    t = time.perf_counter()
    con = duckdb.connect(str(db))
    con.execute(
        f"CREATE TABLE raw AS SELECT * FROM read_csv('{csv}', all_varchar=true, delim=', ', header=true)"
    )
    con.close()
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    args = ap.parse_args()
    csv = cached_file(args.rows)
    with tempfile.TemporaryDirectory(prefix="gpuledger-bench-") as tmp:
        spent = prototype(csv, Path(tmp) / "p.duckdb")
        load = varchar_load(csv, Path(tmp) / "v.duckdb")
    total = sum(s for _, s in spent)
    print(f"{csv} ({args.rows:,} rows), load average {os.getloadavg()[0]:.1f}")
    for name, s in spent:
        print(f"  {name:<22} {s:6.2f} s")
    print(f"  streaming prototype    {total:6.2f} s   VARCHAR load {load:.2f} s   ratio {load / total:.2f}x")
    print("  (gpuledger ingest's own time on the same file: bench/ingest.py, 'in process (all)')")
    return 0


if __name__ == "__main__":
    sys.exit(main())
