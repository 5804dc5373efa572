"""``gpuledger recommend``: ranked actions with their evidence and dollars per week (docs/recommendations.md)."""

from __future__ import annotations

import argparse

from analytics.filters import Filters
from analytics.money import usd
from analytics.recommend import KIND_LABELS, as_json, recommendations, savings_total, view_coverage
from analytics.shared import sharing
from gpuledger.cli.commands._common import (
    add_db_options,
    add_filter_options,
    print_json,
    require_known,
    say_range,
)
from gpuledger.ledger.db import reader, sync_reference
from gpuledger.ledger.settings import load_settings
from gpuledger.ledger.text import neutral


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "recommend",
        help="ranked recommendations (idle, right-size, fewer GPUs, batch size, spot, MIG, failed runs, capacity, "
        "input pipeline, inference) with $ per week",
        description="What to change, ranked by estimated dollars saved per week. Each item says what was "
        "measured, what to do, and how sure we are; docs/recommendations.md gives every rule and formula. "
        "Items can concern the same dollars (an idle notebook under two kinds, two alternatives for one job): "
        "the total counts each dollar once, and each item's counted_usd_per_week is what it adds beyond the "
        "items above it. Recurring items (a run family, a habit, a service, capacity) state $ per week; a "
        "one-off states what it would have saved, and the weekly total leaves it out.",
    )
    add_filter_options(p)
    p.add_argument("--limit", type=int, default=20, help="show the top N (default 20; 0 = all)")
    p.add_argument(
        "--min-usd-per-week", type=float, default=1.0, help="leave out items saving less (default $1/week)"
    )
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.add_argument(
        "--total",
        action="store_true",
        help="print only the possible savings per week, each dollar counted once, over all items of the view, "
        "and the share of the view's waste they address (with --json: an object with total_usd_per_week, "
        "listed_usd_per_week, overlap_usd_per_week, items, recurring_items, one_off_items, one_off_saved_usd, "
        "by_kind, coverage)",
    )
    add_db_options(p)
    p.set_defaults(func=run)


def render_total(total: dict[str, object]) -> str:
    """The deduplicated weekly total (recurring items), what one-offs would have saved, and coverage."""
    line = (
        f"Possible savings: {usd(total['total_usd_per_week'])}/week from {total.get('recurring_items', 0):,} "
        "recurring recommendation(s), each dollar counted once"
    )
    if total["overlap_usd_per_week"]:
        line += (
            f" (the items add up to {usd(total['listed_usd_per_week'])}; {usd(total['overlap_usd_per_week'])} "
            "of that is the same dollars under two items)"
        )
    line += "."
    if total.get("one_off_items"):
        line += (
            f" {total['one_off_items']:,} one-off item(s) would have saved {usd(total['one_off_saved_usd'])} "
            "in this view (not a weekly figure)."
        )
    cov = total.get("coverage")
    if cov and cov.get("addressed_pct") is not None:
        line += (
            f" These actions address {cov['addressed_pct']:.0f} % of this view's waste teams control and "
            f"capacity no job held ({usd(cov['addressed_usd'])} of {usd(cov['addressable_usd'])})."
        )
    return line


def render(items: list[dict[str, object]]) -> str:
    """The list as numbered paragraphs: kind, target, $/week, confidence; evidence; action."""
    if not items:
        return "No recommendations for this view: nothing measured wastes more than the minimum."
    lines = []
    for i, it in enumerate(items, 1):
        label = KIND_LABELS.get(str(it["kind"]), str(it["kind"]))
        if it["usd_per_week"] is not None:
            counted = it["counted_usd_per_week"] or 0.0
            shared = counted < it["usd_per_week"] - 0.005  # part of its dollars is in items above it
            money = f"{usd(it['usd_per_week'])}/week" + (
                f" (adds {usd(counted)} beyond the items above)" if shared else ""
            )
        else:
            money = f"one-off: would have saved {usd(it['saving_usd'])}"
        lines.append(
            f"{i}. {label} · {it['target_type']} {it['target']} · {money} · confidence {it['confidence']}"
        )
        lines.append(f"   {it['evidence']}")
        lines.append(f"   → {it['action']}")
    return "\n".join(neutral(line) for line in lines)  # a target's control characters never reach a terminal


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    sync_reference(args.db, settings)
    filters = Filters(
        since=args.since, until=args.until, teams=tuple(args.team or ()), clusters=tuple(args.cluster or ())
    )
    with reader(args.db) as con, sharing(con):
        require_known(con, filters)
        recs = recommendations(
            con, filters=filters, settings=settings, min_usd_per_week=args.min_usd_per_week
        )
        total = savings_total(recs, whole=True)  # over every item of the view, whatever --limit shows
        total["coverage"] = view_coverage(con, recs, filters=filters, settings=settings)
        say_range(con, filters, empty=False)
    if args.total:
        if args.json:
            print_json(total)
        else:
            print(render_total(total))
        return 0
    if args.limit and args.limit > 0:
        recs = recs.head(args.limit)
    items = as_json(recs)
    if args.json:
        print_json(items)
    else:
        print(render(items))
        if items:
            print()
            print(render_total(total))
    return 0
