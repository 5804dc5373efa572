"""``gpuledger budgets``: each ``[[budget]]``'s spend so far and forecast to its period's end, or a forecast
for any team, cluster or the fleet (docs/metrics.md, "Budgets and forecasts")."""

from __future__ import annotations

import argparse
from typing import Any

from analytics.money import usd
from analytics.shared import sharing
from gpuledger.budgets.status import budget_rows, forecast_row
from gpuledger.cli.commands._common import add_db_options, print_json
from gpuledger.cli.times import day
from gpuledger.ledger.budget_settings import PERIODS
from gpuledger.ledger.db import reader, sync_reference
from gpuledger.ledger.settings import load_settings
from gpuledger.ledger.text import neutral


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "budgets",
        help="each budget's spend so far and forecast to the end of its period (--forecast: any scope)",
        description="Per [[budget]] in the settings: the period, its budget, spent so far, the forecast to the "
        "period's end with its 75 %% interval, and the status (ok, at_risk: the forecast reaches the budget, "
        "over: the spend did). --as-of answers as the ledger stood at the end of that day.",
    )
    p.add_argument("--as-of", type=day, help="judge the ledger as it stood at the end of this UTC day")
    p.add_argument(
        "--forecast",
        metavar="SCOPE",
        help="a forecast for team:NAME, cluster:NAME or fleet instead of the budgets",
    )
    p.add_argument(
        "--period", choices=PERIODS, default="month", help="with --forecast: the period (default month)"
    )
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    add_db_options(p)
    p.set_defaults(func=run)


def render(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no budgets: add [[budget]] tables to the settings (docs/settings.md)"
    lines = []
    for r in rows:
        head = f"{neutral(r['name'])}  {r['period_label']} ({r['period_start']}..{r['period_end']}, as of {r['as_of']})"
        spent = f"spent {usd(r['spent_usd'])}"
        if "budget_usd" in r:
            spent += f" of {usd(r['budget_usd'])} ({r['spent_pct']:.1f} %)"
        fc = f"forecast {usd(r['forecast_usd'])} ({usd(r['forecast_low_usd'])}..{usd(r['forecast_high_usd'])}, 75 %)"
        status = f"  [{r['status']}]" if "status" in r else ""
        lines.append(f"{head}\n  {spent}; {fc}{status}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    sync_reference(args.db, settings)
    with reader(args.db) as con, sharing(con):
        if args.forecast:
            rows = [forecast_row(con, args.forecast, args.period, settings, args.as_of)]
        else:
            rows = budget_rows(con, settings, args.as_of)
    if args.json:
        print_json(rows)
    else:
        print(render(rows))
    return 0
