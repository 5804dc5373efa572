"""``gpuledger summary``: spend, utilization, idle and waste dollars of a view (docs/metrics.md)."""

from __future__ import annotations

import argparse
from typing import Any

from analytics.filters import Filters
from analytics.money import usd
from analytics.shared import sharing
from analytics.summary import summary
from gpuledger.cli.commands._common import (
    add_db_options,
    add_filter_options,
    print_json,
    require_known,
    say_range,
)
from gpuledger.ledger.db import reader, sync_reference
from gpuledger.ledger.settings import load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "summary",
        help="spend, GPU-hours, utilization and waste in dollars for a date range / team / cluster",
        description="Headline figures of the ledger (or a view of it). Waste parts sum to spend; "
        "docs/metrics.md defines every number.",
    )
    add_filter_options(p)
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    add_db_options(p)
    p.set_defaults(func=run)


def filters_from(args: argparse.Namespace) -> Filters:
    return Filters(
        since=args.since,
        until=args.until,
        teams=tuple(args.team or ()),
        clusters=tuple(args.cluster or ()),
        users=tuple(getattr(args, "user", None) or ()),
    )


def _money(v: float | None) -> str:
    return usd(v)


def _num(v: float | None, fmt: str = "{:,.1f}", unit: str = "") -> str:
    return "n/a" if v is None else fmt.format(v) + unit


def render(s: dict[str, Any]) -> str:
    """The summary as a readable two-column table."""
    w = s["waste"]
    spend = s["spend_usd"] or 0.0

    def share(v: float) -> str:
        return f" ({100 * v / spend:.1f} %)" if spend else ""

    rows = [
        ("spend", _money(s["spend_usd"])),
        ("GPU-hours", _num(s["gpu_hours"])),
        ("unpriced GPU-hours", _num(s["unpriced_gpu_hours"])),
        ("jobs", f"{s['jobs']:,}"),
        ("mean utilization", _num(s["mean_util_pct"], unit=" %")),
        ("idle GPU-hours", _num(s["idle_gpu_hours"])),
        ("waste teams control", _money(s["team_waste_usd"]) + share(s["team_waste_usd"])),
        ("  idle while allocated", _money(w["idle_allocated_usd"]) + share(w["idle_allocated_usd"])),
        ("  under-used", _money(w["underused_usd"]) + share(w["underused_usd"])),
        ("  failed runs (badput)", _money(w["failed_usd"]) + share(w["failed_usd"])),
        ("capacity no job held", _money(s["unheld_capacity_usd"]) + share(s["unheld_capacity_usd"])),
        ("unmeasured (no telemetry)", _money(s["unmeasured_usd"]) + share(s["unmeasured_usd"])),
        ("productive", _money(w["productive_usd"]) + share(w["productive_usd"])),
        ("energy", _num(s["energy_kwh"], unit=" kWh")),
        ("CO2e", _num(s["co2e_kg"], unit=" kg")),
        ("training $ per 1M tokens", _money(s["training_usd_per_mtok"])),
        ("inference $ per 1M generated tokens", _money(s["inference_usd_per_mtok_generated"])),
        ("data up to", s["as_of"] or "n/a (empty ledger)"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    sync_reference(args.db, settings)
    filters = filters_from(args)
    with reader(args.db) as con, sharing(con):
        require_known(con, filters)
        result = summary(con, filters=filters, settings=settings)
        say_range(con, filters, empty=not (result["jobs"] or abs(result["spend_usd"]) >= 0.005))
    if args.json:
        print_json(result)
    else:
        print(render(result))
    return 0
