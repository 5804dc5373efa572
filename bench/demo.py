"""How long ``gpuledger demo`` takes, where the time goes, and its peak memory, against the budget of
40 s and 1 GiB peak RSS on 2 cores (issue 11, item 3).

    .venv/bin/python bench/demo.py              # 28 days into a fresh ledger file in /tmp
    .venv/bin/python bench/demo.py --days 7

One process builds the demo into a fresh file through the same calls as ``gpuledger demo`` and times the
phases by wrapping them: the plan and telemetry (gpuledger/demo*.py) and the shared ingest path
(collectors/base.py ``_land_samples``, ``attribute_samples``; gpuledger/ledger/rollup.py, with its three steps per
batch of GPUs indented under ``refresh_rollup``). It prints wall and CPU
seconds, the process's peak RSS, the machine's load average (the budget is for a quiet 2-core machine) and
exits 1 over budget.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import collectors.base as base  # noqa: E402
import gpuledger.demo.build as demo  # noqa: E402
import gpuledger.ledger.rollup as rollup  # noqa: E402
from gpuledger.ledger.db import writer  # noqa: E402

BUDGET_S = 40.0
BUDGET_RSS_MIB = 1024.0
PHASES = (
    (demo, "make_plan"),
    (demo, "_stage_telemetry"),
    (base, "_land_samples"),
    (base, "attribute_samples"),
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
        f"  budget {budget:.0f} s (40 s for 28 days on a quiet 2-core machine; CPU s is the steadier figure on a"
        f" busy one): {'ok' if ok else 'OVER'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
