"""``gpuledger chargeback``: a month's bill per team whose lines add up to the fleet's spend to the cent, with
capacity no team used shared by a stated rule (gpuledger/chargeback/bill.py; docs/metrics.md "Chargeback")."""

from __future__ import annotations

import argparse
import csv
import html
import io
import json
from pathlib import Path
from typing import Any

from analytics.shared import sharing
from gpuledger.chargeback.bill import RULES, chargeback
from gpuledger.cli.commands._common import add_db_options, json_safe
from gpuledger.ledger.db import reader, sync_reference
from gpuledger.ledger.settings import load_settings
from gpuledger.ledger.text import neutral
from gpuledger.reports.fmt import csv_cell, usd

COLUMNS = ("team", "used_usd", "shared_usd", "total_usd", "gpu_units")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "chargeback",
        help="a month's bill per team: used $, its share of capacity no team used, total (sums to the fleet's spend)",
        description="Per team: the $ its jobs used in the month, its share of what no team used (capacity no job held, "
        "telemetry no job claimed) by --share-idle, and the total. The lines add up to the fleet's spend to the cent "
        "under every rule; --team keeps a team's line as it is in the whole bill.",
    )
    p.add_argument("--month", required=True, help="the month, e.g. 2026-11 (UTC days)")
    p.add_argument(
        "--share-idle",
        choices=RULES,
        default="proportional",
        help="how the pool is shared (default proportional)",
    )
    p.add_argument("--team", action="append", default=[], help="only this team's line (repeatable)")
    p.add_argument("--format", choices=("text", "csv", "html", "json"), default="text")
    p.add_argument("--out", metavar="FILE", help="write to FILE instead of printing")
    add_db_options(p)
    p.set_defaults(func=run)


def _units(row: dict[str, Any]) -> str:
    return "" if row["gpu_units"] is None else f"{row['gpu_units']:,.1f}"


def render(bill: dict[str, Any], fmt: str) -> str:
    rows = bill["rows"]
    if fmt == "json":
        return json.dumps(json_safe(bill), indent=2, allow_nan=False) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow([csv_cell(r[c]) if r[c] is not None else "" for c in COLUMNS])
        return buf.getvalue()
    title = f"GPU chargeback {bill['month']} ({bill['period_start']}..{bill['period_end']}), idle shared: {bill['share_idle']}"
    if fmt == "html":
        body = "".join(
            "<tr>"
            + f"<td>{html.escape(neutral(r['team']))}</td>"
            + "".join(f'<td class="num">{usd(r[c])}</td>' for c in ("used_usd", "shared_usd", "total_usd"))
            + f'<td class="num">{_units(r)}</td></tr>'
            for r in rows
        )
        return (
            f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<style>body{font-family:system-ui,sans-serif}td,th{padding:4px 10px}.num{text-align:right}</style></head>"
            f"<body><h1>{html.escape(title)}</h1><table><thead><tr><th>team</th><th>used</th><th>shared idle</th>"
            f"<th>total</th><th>GPU units ({html.escape(bill['rgu_reference'])})</th></tr></thead><tbody>{body}</tbody>"
            f"<tfoot><tr><th>fleet</th><td></td><td></td><td class='num'>{usd(bill['fleet_spend_usd'])}</td><td></td></tr>"
            "</tfoot></table>"
            + (f"<p>{html.escape(bill['note'])}</p>" if bill.get("note") else "")
            + "</body></html>\n"
        )
    width = max([len(neutral(r["team"])) for r in rows] + [5])
    lines = [title, f"{'team':<{width}}  {'used':>14}  {'shared idle':>14}  {'total':>14}  {'GPU units':>10}"]
    for r in rows:
        units = _units(r)
        lines.append(
            f"{neutral(r['team']):<{width}}  {usd(r['used_usd']):>14}  {usd(r['shared_usd']):>14}  {usd(r['total_usd']):>14}  {units:>10}"
        )
    lines.append(f"{'fleet':<{width}}  {'':>14}  {'':>14}  {usd(bill['fleet_spend_usd']):>14}")
    if bill.get("note"):
        lines.append(f"note: {bill['note']}")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    sync_reference(args.db, settings)
    with reader(args.db) as con, sharing(con):
        bill = chargeback(
            con, args.month, share_idle=args.share_idle, settings=settings, teams=tuple(args.team)
        )
    text = render(bill, args.format)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    return 0
