"""How long ``gpuledger demo`` takes, where the time goes, and its peak memory, against the budget of
40 s and 1 GiB peak RSS on 2 cores (issue 11, item 3).

    .venv/bin/python bench/demo.py              # 28 days into a fresh ledger file in /tmp
    .venv/bin/python bench/demo.py --days 7

One process builds the demo into a fresh file through the same calls as ``gpuledger demo`` and times the
phases by wrapping them: the plan and telemetry (gpuledger/demo*.py) and the shared ingest path
(collectors/landing.py ``_land_samples``, ``attribute_samples``; gpuledger/ledger/rollup.py, with its three steps per
batch of GPUs indented under ``refresh_rollup``). It prints wall and CPU
seconds, the process's peak RSS, the machine's load average (the budget is for a quiet 2-core machine) and
exits 1 over budget.

The baseline, measured in the same run in a child process (so its memory is its own): plain DuckDB
generating the same number of 30 s samples in SQL (``range``, 14 typed columns, a 40-character GPU id) and
inserting them into a fresh file under the writer's memory limit, plus a GROUP BY per GPU-minute into a
second table, in one transaction. The ratios say how far the demo build is from writing that much
telemetry at all.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import collectors.landing as landing  # noqa: E402
import gpuledger.demo.build as demo  # noqa: E402
import gpuledger.ledger.rollup as rollup  # noqa: E402
from gpuledger.ledger.db import WRITER_MEMORY_LIMIT, writer  # noqa: E402

BUDGET_S = 40.0
BUDGET_RSS_MIB = 1024.0
PHASES = (
    (demo, "make_plan"),
    (demo, "_stage_telemetry"),
    (landing, "_land_samples"),
    (landing, "attribute_samples"),
    (rollup, "refresh_rollup"),
    (rollup, "_sequence"),  # inside refresh_rollup: one sort of the batch's samples by (gpu_id, ts)
    (rollup, "_refresh_runs"),
    (rollup, "_refresh_minutes"),
)


_ROLLUP_STEPS = ("_sequence", "_refresh_runs", "_refresh_minutes")


def _hwm_mib() -> float:
    """This process's peak RSS so far (VmHWM), MiB."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmHWM"))


PEAK: dict[str, float] = {}


def _timed(module: Any, name: str, spent: dict[str, float]) -> None:
    inner: Callable[..., Any] = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - started
            PEAK[name] = _hwm_mib()

    setattr(module, name, wrapper)


# The baseline: the demo's sample count generated and inserted by DuckDB alone, plus a per-GPU-minute GROUP BY.
_BASELINE = """
import resource, sys, time
import duckdb
n, db, limit = int(sys.argv[1]), sys.argv[2], sys.argv[3]
con = duckdb.connect(db)
con.execute(f"SET memory_limit = '{limit}'")
con.execute("SET enable_progress_bar = false")
cpu0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.perf_counter()
con.execute("BEGIN")
con.execute(
    '''CREATE TABLE s AS SELECT
         TIMESTAMP '2026-10-26' + to_seconds((i // 112) * 30) AS ts,
         printf('GPU-%08x-0000-0000-0000-%012x', i % 112, i % 112) AS gpu_id,
         round(random() * 100)::FLOAT AS util_pct, round(random() * 45)::FLOAT AS mem_util_pct,
         round(random() * 80000)::FLOAT AS mem_used_mib, 81559::FLOAT AS mem_total_mib,
         round(random() * 700, 1)::FLOAT AS power_w, 1e9 + i * 30.0 AS energy_j,
         round(30 + random() * 50)::FLOAT AS temp_c, round(random() * 100, 1)::FLOAT AS sm_active_pct,
         round(random() * 50, 1)::FLOAT AS tensor_active_pct, 1980::FLOAT AS sm_clock_mhz,
         (i % 2)::UBIGINT AS throttle_reasons, 30::FLOAT AS interval_s
       FROM range(?) r(i)''',
    [n],
)
con.execute(
    '''CREATE TABLE m AS SELECT date_trunc('minute', ts) AS minute, gpu_id, count(*) AS n,
         sum(util_pct / 100.0 * interval_s) AS util_s, max(mem_used_mib) AS mem_max,
         sum(power_w * interval_s) AS power_j, sum(CASE WHEN util_pct <= 5 THEN interval_s END) AS idle_s
       FROM s GROUP BY ALL'''
)
con.execute("COMMIT")
con.close()
wall = time.perf_counter() - t0
cpu1 = resource.getrusage(resource.RUSAGE_SELF)
# VmHWM, not ru_maxrss: a child's ru_maxrss starts from the parent's peak
with open("/proc/self/status") as fh:
    hwm = next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmHWM"))
print(wall, cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime, hwm)
"""


def baseline(samples: int, tmp: str) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MiB) of the baseline for ``samples`` rows, run in a child process."""
    limit = os.environ.get("GPULEDGER_MEMORY_LIMIT") or WRITER_MEMORY_LIMIT
    db = os.path.join(tmp, "baseline.duckdb")
    out = subprocess.run(
        [sys.executable, "-c", _BASELINE, str(samples), db, limit], check=True, capture_output=True, text=True
    ).stdout.split()
    wall, cpu, rss = (float(x) for x in out)
    return wall, cpu, rss


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--days", type=int, default=demo.DEFAULT_DAYS)
    args = parser.parse_args()
    spent: dict[str, float] = {}
    for module, name in PHASES:
        _timed(module, name, spent)
    with tempfile.TemporaryDirectory(prefix="gpuledger-bench-") as tmp:
        db = os.path.join(tmp, "demo.duckdb")
        load = os.getloadavg()[0]
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        with writer(db) as con:
            rows = demo.build_demo(con, days=args.days)
        wall = time.perf_counter() - started
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        size_mb = os.path.getsize(db) / 1e6
        os.remove(db)
        base_load = os.getloadavg()[0]
        b_wall, b_cpu, b_rss = baseline(rows.get("samples", 0), tmp)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    print(
        f"demo, {args.days} days: {rows.get('samples', 0):,} samples, {rows.get('jobs', 0):,} jobs, {size_mb:.0f} MB"
    )
    for _, name in PHASES:
        label = f"  {name}" if name.startswith("_") and name in _ROLLUP_STEPS else name
        print(
            f"  {label:<20} {spent.get(name, 0.0):7.1f} s   peak RSS after it {PEAK.get(name, 0.0):6,.0f} MiB"
        )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  {'total':<20} {wall:7.1f} s wall, {cpu:.1f} s CPU, load average {load:.1f} at start")
    budget = BUDGET_S * args.days / demo.DEFAULT_DAYS
    ok = wall <= budget and rss <= BUDGET_RSS_MIB
    print(f"  peak RSS {rss:,.0f} MiB (budget {BUDGET_RSS_MIB:,.0f} MiB)")
    print(
        f"baseline (DuckDB alone generates and inserts the same {rows.get('samples', 0):,} samples, GROUP BY per"
        f" GPU-minute; load average {base_load:.1f}): {b_wall:.1f} s wall, {b_cpu:.1f} s CPU, peak RSS {b_rss:,.0f} MiB"
    )
    print(
        f"  demo / baseline: {wall / b_wall:.2f}x wall, {cpu / b_cpu:.2f}x CPU, {rss / b_rss:.2f}x peak RSS"
    )
    print(
        f"  budget {budget:.0f} s (40 s for 28 days on a quiet 2-core machine; CPU s is the steadier figure on a"
        f" busy one): {'ok' if ok else 'OVER'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
