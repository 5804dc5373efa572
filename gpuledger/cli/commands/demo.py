"""``gpuledger demo``: fill the ledger with the deterministic demo fleet (docs/demo.md)."""

from __future__ import annotations

import argparse
import time

from gpuledger.cli.commands._common import _date, add_db_options, print_json
from gpuledger.demo.build import DEFAULT_DAYS, DEFAULT_END, DEFAULT_SEED, MIN_DAYS, build_demo
from gpuledger.items.scan import scan
from gpuledger.ledger.db import reader, resolve_db, sync_reference, writer
from gpuledger.ledger.settings import load_settings


def _days(text: str) -> int:
    try:
        days = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of days: {text!r}") from None
    if not MIN_DAYS <= days <= 366:
        raise argparse.ArgumentTypeError(f"must be between {MIN_DAYS} and 366 days, got {days}")
    return days


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="fill the ledger with a realistic demo fleet (3 clusters, 112 GPUs, thousands of jobs)",
        description="Fill the ledger with the demo fleet: 3 clusters, 5 teams, 25 users, thousands of jobs, "
        "30 s telemetry per GPU, and the planted waste scenarios of docs/demo.md. Deterministic: the same "
        "--seed, --days and --end give the same ledger; running it again is a no-op, and a demo with other "
        "options replaces the earlier demo.",
    )
    p.add_argument(
        "--days", type=_days, default=DEFAULT_DAYS, help=f"length in days (default {DEFAULT_DAYS})"
    )
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"random seed (default {DEFAULT_SEED})")
    p.add_argument(
        "--end",
        type=_date,
        default=DEFAULT_END,
        help=f"UTC day the demo ends at midnight of (default {DEFAULT_END})",
    )
    p.add_argument("--json", action="store_true", help="print rows per table and seconds as JSON")
    add_db_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    settings = load_settings(args.settings)
    sync_reference(args.db, settings)
    with writer(args.db) as con:
        rows = build_demo(con, days=args.days, seed=args.seed, end=args.end, settings=settings)
    with reader(args.db) as con:
        scan(con, settings=settings)  # the items' weeks, kept beside the ledger for every cold page to read
    seconds = time.perf_counter() - started
    if args.json:
        print_json(
            {
                "db": resolve_db(args.db),
                "days": args.days,
                "seed": args.seed,
                "end": args.end.isoformat(),
                "already": not rows,
                "rows": rows,
                "seconds": round(seconds, 2),
            }
        )
    elif not rows:
        print(
            f"{resolve_db(args.db)}: this demo (--days {args.days} --seed {args.seed} --end {args.end}) is already in the ledger; nothing written"
        )
    else:
        print(f"{resolve_db(args.db)}: demo fleet, {args.days} days to {args.end}, seed {args.seed}")
        for table, n in rows.items():
            print(f"  {table:<14} {n:>12,}")
        print(f"  {seconds:.1f} s")
    return 0
