"""``gpuledger whatif``: the view's summary now and with changes (a team on spot, another GPU model,
recommendations taken), each change out of the part it touches (analytics/whatif.py, docs/metrics.md)."""

from __future__ import annotations

import argparse
from typing import Any

from analytics.filters import Filters
from analytics.money import signed_usd, usd
from analytics.shared import sharing
from analytics.whatif import per_week, what_if_view
from gpuledger.cli.commands._common import add_db_options, add_filter_options, print_json, require_known
from gpuledger.cli.commands.summary import filters_from
from gpuledger.ledger.db import reader, sync_reference
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.reference import normalize_model
from gpuledger.ledger.settings import load_settings


def _model_pair(text: str) -> tuple[str, str, float | None]:
    """FROM=TO[:SPEEDUP], each side named as a file may name it ("H100", "a100"): read to its catalog model by
    the rule the ingest applies (gpuledger.ledger.reference.normalize_model), else kept as written. SPEEDUP
    (a number above 0) divides the moved jobs' GPU-hours; without it, the catalog's peaks at the jobs'
    precision give it (analytics.whatif.default_speedup)."""
    old, sep, rest = text.partition("=")
    new, colon, factor = rest.partition(":")
    if not sep or not old.strip() or not new.strip():
        raise argparse.ArgumentTypeError(f"expected FROM=TO[:SPEEDUP] (two GPU models), got {text!r}")
    speedup = None
    if colon:
        try:
            speedup = float(factor)
        except ValueError:
            speedup = float("nan")
        if not speedup > 0 or speedup == float("inf"):
            raise argparse.ArgumentTypeError(f"SPEEDUP must be a number above 0, got {factor!r}")
    return normalize_model(old.strip()) or old.strip(), normalize_model(new.strip()) or new.strip(), speedup


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "whatif",
        help="the view's summary now and with changes: a team on spot, another GPU model, recommendations taken",
        description="Each change removes only the time and the part it touches: spot reprices a team's jobs on "
        "capacity bought by the hour (never unallocated capacity), a recommendation's saving comes out of the "
        "part its kind names. docs/metrics.md, 'What-if'.",
    )
    p.add_argument(
        "--spot", action="append", default=[], metavar="TEAM", help="run this team on spot (repeatable)"
    )
    p.add_argument(
        "--model",
        action="append",
        default=[],
        type=_model_pair,
        metavar="FROM=TO[:SPEEDUP]",
        help="GPU model TO instead of FROM; the moved jobs' GPU-hours are divided by SPEEDUP (default: TO's "
        "catalog peak ÷ FROM's at the jobs' precision, bf16 where none is logged; :1 for the same GPU-hours)",
    )
    p.add_argument(
        "--take",
        action="append",
        default=[],
        metavar="ID",
        help="take this recommendation (its id in recommend --json)",
    )
    add_filter_options(p)
    p.add_argument(
        "--json", action="store_true", help="print {now, with_changes, changes} as one JSON object"
    )
    add_db_options(p)
    p.set_defaults(func=run)


def _render(out: dict[str, Any]) -> str:
    now, after, days = out["now"], out["with_changes"], out["days"]
    lines = [
        f"Totals over the view's {days:,.1f} days; $/week = total ÷ days × 7."
        if days
        else "No job in this view.",
        f"{'figure':<24}{'now':>16}{'with the changes':>20}{'change':>16}{'change/week':>16}",
    ]
    keys = [
        ("spend", "spend_usd"),
        ("waste teams control", "team_waste_usd"),
        ("capacity no job held", "unheld_capacity_usd"),
    ] + [(k.removesuffix("_usd").replace("_", " "), k) for k in now["waste"] if k != "unallocated_usd"]
    for label, k in keys:
        a = now[k] if k in now else now["waste"][k]
        b = after[k] if k in after else after["waste"][k]
        d = None if a is None or b is None else b - a
        lines.append(
            f"{label:<24}{usd(a):>16}{usd(b):>20}{signed_usd(d):>16}{signed_usd(per_week(d, days)):>16}"
        )
    for c in out["changes"]:
        lines.append(
            f"- {c['what']}: {usd(c['saving_usd'])} out of the spend "
            f"({usd(c['saving_usd_per_week'])}/week). {c['assumption']}."
        )
    if not out["changes"]:
        lines.append("No change chosen: the figures are the view's as they are.")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    sync_reference(args.db, settings)
    filters = filters_from(args)
    with reader(args.db) as con, sharing(con):
        require_known(con, filters)
        require_known(con, Filters(teams=tuple(args.spot)))  # --spot TEAM names a team too
        try:
            out = what_if_view(
                con,
                filters=filters,
                settings=settings,
                spot=tuple(args.spot),
                models=tuple(args.model),
                take=tuple(args.take),
            )
        except ValueError as exc:
            raise LedgerError(str(exc)) from None
    if args.json:
        print_json(out)
    else:
        print(_render(out))
    return 0
