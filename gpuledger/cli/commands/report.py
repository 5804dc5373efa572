"""``gpuledger report``: write the weekly cost report (self-contained HTML or Markdown) for a lead to mail on."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analytics.filters import Filters, horizon
from gpuledger.cli.commands._common import add_db_options, add_filter_options
from gpuledger.ledger.db import reader
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.reference import sync_reference
from gpuledger.ledger.settings import load_settings
from gpuledger.reports.weekly import FORMATS, build_report, last_full_week, week_range


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write the weekly cost report (one self-contained HTML or Markdown file)",
        description="Write a cost report a lead can mail on: KPIs, spend by team, waste by part, the top 10 "
        "recommendations with $/week and the most wasteful jobs. Without --week/--since/--until it covers "
        "the last full ISO week of the data. The numbers equal `gpuledger summary --json` for the same filters.",
    )
    p.add_argument("--week", help="ISO week, e.g. 2026-W47 (Monday to Sunday, UTC)")
    add_filter_options(p)
    p.add_argument("--out", help="write here (default: stdout)")
    p.add_argument("--format", choices=FORMATS, help="html or md (default: from --out's suffix, else html)")
    add_db_options(p)
    p.set_defaults(func=run)


def report_format(args: argparse.Namespace) -> str:
    if args.format:
        return str(args.format)
    if args.out and Path(args.out).suffix.lower() in (".md", ".markdown"):
        return "md"
    return "html"


def run(args: argparse.Namespace) -> int:
    if args.week and (args.since or args.until):
        print("error: give either --week or --since/--until, not both", file=sys.stderr)
        return 2
    settings = load_settings(args.settings)
    sync_reference(args.db, settings)
    with reader(args.db) as con:
        since, until = args.since, args.until
        if args.week or not (since or until):
            since, until = week_range(args.week or last_full_week(horizon(con)))
        filters = Filters(since=since, until=until, teams=tuple(args.team), clusters=tuple(args.cluster))
        text = build_report(con, filters=filters, settings=settings, fmt=report_format(args))
    if args.out:
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise LedgerError(f"{args.out}: cannot write the report: {exc.strerror}") from None
        print(f"wrote {args.out} ({since} – {until})")
    else:
        sys.stdout.write(text)
    return 0
