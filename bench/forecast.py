"""Rolling-origin back-test of the budget forecast (gpuledger/budgets/forecast.py): which method predicts a
period's total spend best, and how often its interval holds the truth.

    .venv/bin/python bench/forecast.py [--db LEDGER] [--period week|month]

Two series, each cut into calendar periods (ISO weeks by default):
- the demo teams' spend per UTC day (analytics/daily.py spend_by_day, one series per team: budgets are kept
  per team, and the fleet's own series is almost flat, its always-on capacity costing the same each day):
  ``--db`` names a ledger holding it (the checkout's data/gpuledger.duckdb when it has one), else a 28-day demo is built in a
  temporary folder (about a minute);
- Microsoft Philly's GPU-hours per day (../shared/datasets/philly: active GPUs per minute, 2017-10-03 to
  2017-12-15, read in place), the public cluster trace.

Each origin is a day inside a period (not its last) whose previous period is in the series: every method
forecasts the period's total knowing the series up to the origin. Printed per series and method: origins,
MAPE (mean |forecast − actual| / actual), and the interval's coverage (share of origins whose actual total
lies in [low, high]; the target is 75 %), then how far the chosen method is ahead of each baseline.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpuledger.budgets.forecast import CHOSEN, METHODS, forecast  # noqa: E402
from gpuledger.budgets.periods import period_bounds, previous_period  # noqa: E402

DATASETS = Path(os.environ.get("GPULEDGER_DATASETS", ROOT.parent / "shared" / "datasets"))
BASELINES = ("last_period", "linear")  # what the chosen method must beat on both series
PHILLY = DATASETS / "philly" / "philly_node_sequence_from_HeliosArtifact.csv"


def philly_series() -> dict[dt.date, float]:
    """GPU-hours per UTC day: the sum of active GPUs per minute ÷ 60 (the trace's whole days only)."""
    per_day: dict[dt.date, float] = defaultdict(float)
    minutes: dict[dt.date, int] = defaultdict(int)
    with PHILLY.open(newline="") as f:
        for row in csv.DictReader(f):
            day = dt.date.fromisoformat(row["time"][:10])
            per_day[day] += float(row["active"]) / 60.0
            minutes[day] += 1
    return {d: v for d, v in per_day.items() if minutes[d] >= 1440 * 0.95}


def demo_series(db: str | None) -> list[dict[dt.date, float]]:
    import duckdb

    from analytics.daily import spend_by_day
    from gpuledger.ledger.db import reader, sync_reference
    from gpuledger.ledger.settings import Settings

    if db is None:
        folder = Path(tempfile.mkdtemp(prefix="gpuledger-forecast-"))
        db = str(folder / "demo.duckdb")
        from gpuledger.demo.build import build_demo
        from gpuledger.ledger.db import writer

        print(f"building a 28-day demo in {db} …", file=sys.stderr)
        with writer(db) as con:
            build_demo(con, days=28)
    sync_reference(db, Settings())
    with reader(db) as con:
        assert isinstance(con, duckdb.DuckDBPyConnection)
        frame = spend_by_day(con, by="team")
    teams: dict[str, dict[dt.date, float]] = defaultdict(dict)
    for d, team, usd in frame.iter_rows():
        if team not in ("unallocated", "unattributed"):  # what no team used is no team's budget
            teams[team][d] = usd
    # the first and last day are partial (the data starts and ends inside them): whole days only
    out = []
    for days in teams.values():
        ordered = sorted(days)
        out.append({d: days[d] for d in ordered[1:-1]})
    return out


def backtest(many: list[dict[dt.date, float]], period: str) -> dict[str, tuple[int, float, float]]:
    """method -> (origins, MAPE %, coverage %) over every origin of every series."""
    out = {}
    for method in METHODS:
        errors: list[float] = []
        inside = 0
        for series in many:
            e, i = _origins(series, period, method)
            errors += e
            inside += i
        n = max(len(errors), 1)
        out[method] = (len(errors), 100 * sum(errors) / n, 100 * inside / n)
    return out


def _origins(series: dict[dt.date, float], period: str, method: str) -> tuple[list[float], int]:
    """Relative errors of ``method`` at every origin of one series, and how many intervals held the truth."""
    start, end = min(series), max(series)
    errors, inside = [], 0
    day = start
    while day <= end:
        first, last = period_bounds(day, period)
        p_first, _ = previous_period(first, period)
        if p_first >= start and last <= end and day < last:
            actual = sum(
                series.get(first + dt.timedelta(days=i), 0.0) for i in range((last - first).days + 1)
            )
            known = {d: v for d, v in series.items() if d <= day}
            f = forecast(known, first, last, day, method=method, start=start)
            errors.append(abs(f.total - actual) / actual)
            inside += f.low <= actual <= f.high
        day += dt.timedelta(days=1)
    return errors, inside


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", help="a ledger holding the demo (default: data/gpuledger.duckdb, else build one)")
    ap.add_argument("--period", choices=("week", "month"), default="week")
    args = ap.parse_args()
    db = args.db or (
        str(ROOT / "data" / "gpuledger.duckdb") if (ROOT / "data" / "gpuledger.duckdb").exists() else None
    )
    worst_lead = None
    for name, many in (("demo teams' $/day", demo_series(db)), ("Philly GPU-h/day", [philly_series()])):
        result = backtest(many, args.period)
        print(
            f"\n{name}: {len(many)} series, {sum(len(s) for s in many)} whole days, {args.period}ly periods"
        )
        print(f"  {'method':<12} {'origins':>7} {'MAPE %':>8} {'coverage %':>11}")
        for method, (n, mape, cover) in result.items():
            mark = "  <- chosen" if method == CHOSEN else ""
            print(f"  {method:<12} {n:>7} {mape:>8.2f} {cover:>11.1f}{mark}")
        ours = result[CHOSEN][1]
        for base in METHODS:
            if base != CHOSEN:
                baseline = base in BASELINES
                lead = result[base][1] / ours if ours else float("inf")
                print(
                    f"  {CHOSEN} vs {base}: MAPE {ours:.2f} % against {result[base][1]:.2f} % ({lead:.2f}x lower)"
                )
                if baseline:
                    worst_lead = lead if worst_lead is None else min(worst_lead, lead)
    print(f"\nthe chosen method's smallest lead over a baseline ({', '.join(BASELINES)}): {worst_lead:.2f}x")
    return 0 if worst_lead and worst_lead > 1 else 1


if __name__ == "__main__":
    sys.exit(main())
