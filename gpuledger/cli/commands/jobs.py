"""``gpuledger jobs``: one line per job with its cost, utilization and waste (docs/metrics.md)."""

from __future__ import annotations

import argparse

import polars as pl

from analytics.jobs import jobs_table
from analytics.money import usd
from analytics.shared import sharing
from gpuledger.cli.commands._common import (
    add_db_options,
    add_filter_options,
    print_json,
    require_known,
    say_range,
)
from gpuledger.cli.commands.summary import filters_from
from gpuledger.ledger.db import reader, sync_reference
from gpuledger.ledger.settings import load_settings
from gpuledger.ledger.text import neutral


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "jobs",
        help="jobs with their cost, utilization, waste, energy and $ per 1M tokens",
        description="One row per job of the view; the most expensive (or most wasteful) first.",
    )
    add_filter_options(p)
    p.add_argument("--sort", choices=["cost", "waste"], default="cost", help="order (default: cost)")
    p.add_argument("--limit", type=int, default=None, help="at most N jobs")
    p.add_argument("--json", action="store_true", help="print a JSON list of objects")
    add_db_options(p)
    p.set_defaults(func=run)


def _fmt(v: object, fmt: str) -> str:
    return "n/a" if v is None else fmt.format(v)


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    sync_reference(args.db, settings)
    filters = filters_from(args)
    with reader(args.db) as con, sharing(con):
        require_known(con, filters)
        table = jobs_table(con, filters=filters, settings=settings, sort=args.sort, limit=args.limit)
        say_range(con, filters, empty=table.height == 0)
    if args.json:
        print_json(table.with_columns(pl.col(pl.Datetime).dt.strftime("%Y-%m-%dT%H:%M:%S")).to_dicts())
        return 0
    if table.height == 0:
        print("no jobs in this view (ingest job records or telemetry first: gpuledger ingest FILE)")
        return 0
    head = f"{'job':<28} {'team':<12} {'kind':<11} {'state':<10} {'GPU-h':>9} {'cost':>11} {'util':>6} {'waste':>11}"
    print(head)
    for r in table.iter_rows(named=True):
        print(  # one line a row: no name's control character, line end or bidi override reaches the terminal
            neutral(
                f"{str(r['job_id'])[:28]:<28} {str(r['team'] or '')[:12]:<12} {r['kind'][:11]:<11} "
                f"{r['state'][:10]:<10} {r['gpu_hours']:>9,.1f} {usd(r['cost_usd']):>11} "
                f"{_fmt(r['mean_util_pct'], '{:.0f} %'):>6} {usd(r['waste_usd']):>11}"
            )
        )
    return 0
