"""``gpuledger recommend``: ranked actions with their evidence and dollars per week (docs/recommendations.md)."""

from __future__ import annotations

import argparse

from analytics.filters import Filters
from analytics.recommend import as_json, recommendations
from gpuledger.commands._common import add_db_options, add_filter_options, print_json
from gpuledger.db import reader
from gpuledger.reference import sync_reference
from gpuledger.settings import load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "recommend",
        help="ranked recommendations (idle, right-size, fewer GPUs, batch size, spot, MIG) with $ per week",
        description="What to change, ranked by estimated dollars saved per week. Each item says what was "
        "measured, what to do, and how sure we are; docs/recommendations.md gives every rule and formula. "
        "Items of different kinds can concern the same dollars: rank them, do not sum them.",
    )
    add_filter_options(p)
    p.add_argument("--limit", type=int, default=20, help="show the top N (default 20; 0 = all)")
    p.add_argument(
        "--min-usd-per-week", type=float, default=1.0, help="leave out items saving less (default $1/week)"
    )
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    add_db_options(p)
    p.set_defaults(func=run)


def render(items: list[dict[str, object]]) -> str:
    """The list as numbered paragraphs: kind, target, $/week, confidence; evidence; action."""
    if not items:
        return "No recommendations for this view: nothing measured wastes more than the minimum."
    lines = []
    for i, it in enumerate(items, 1):
        lines.append(
            f"{i}. {it['kind']} · {it['target_type']} {it['target']} · ${it['usd_per_week']:,.2f}/week "
            f"· confidence {it['confidence']}"
        )
        lines.append(f"   {it['evidence']}")
        lines.append(f"   → {it['action']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    sync_reference(args.db, settings)
    filters = Filters(
        since=args.since, until=args.until, teams=tuple(args.team or ()), clusters=tuple(args.cluster or ())
    )
    with reader(args.db) as con:
        recs = recommendations(
            con, filters=filters, settings=settings, min_usd_per_week=args.min_usd_per_week
        )
    if args.limit and args.limit > 0:
        recs = recs.head(args.limit)
    items = as_json(recs)
    if args.json:
        print_json(items)
    else:
        print(render(items))
    return 0
