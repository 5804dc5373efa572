"""``gpuledger collect slurm``: the command line of the Slurm poller (collectors/slurm_poll.py)."""

from __future__ import annotations

import argparse
import datetime as dt

from collectors.base import IngestOptions
from collectors.slurm_poll import PollReport, poll
from gpuledger.cli import times
from gpuledger.cli.commands._common import add_db_options, print_json
from gpuledger.cli.live.repeat import period, poll_until_stopped

parse_duration = times.duration  # the one grammar (gpuledger/cli/times.py)
parse_since = times.moment


def add_collect_parser(sub: argparse._SubParsersAction) -> None:

    p = sub.add_parser(
        "slurm",
        help="poll Slurm accounting (sacct) for jobs changed since the last poll",
        description="Run sacct for the jobs that changed since the last poll (the cursor is kept in the "
        "ledger), land them through the sacct parser (running jobs are updated when they finish), and "
        "remember where it stopped. Needs sacct on PATH and a reachable slurmdbd.",
    )
    p.add_argument(
        "--since",
        type=parse_since,
        help="read from this time (ISO, epoch s, or an age like 2d) instead of the stored cursor (first poll: 1 day back)",
    )
    p.add_argument("--cluster", help="poll this cluster (sacct --clusters) and prefix its job ids")
    p.add_argument(
        "--every", type=parse_duration, help="poll repeatedly at this period (e.g. 5m) until stopped"
    )
    p.add_argument("--once", action="store_true", help="poll once and exit (the default without --every)")
    p.add_argument(
        "--overlap",
        type=times.span,
        default=dt.timedelta(seconds=60),
        help="re-read this much before the cursor (default 60s)",
    )
    p.add_argument("--sacct-timeout", type=float, default=60.0, help="seconds sacct may take (default 60)")
    p.add_argument("--json", action="store_true", help="print one JSON report per poll")
    add_db_options(p)
    p.set_defaults(func=run)


def describe(r: PollReport) -> str:
    where = f"{r.collector} since {r.since:%Y-%m-%d %H:%M:%S}"
    if r.ingest_id is None:
        return f"{where}: {r.jobs_read} job record(s), nothing new"
    rows = ", ".join(f"{n:,} {t}" for t, n in r.rows.items() if n) or "no rows"
    return f"{where}: {r.jobs_read} job record(s) → {rows} (ingest #{r.ingest_id}, {r.seconds:.2f} s)"


def run(args: argparse.Namespace) -> int:
    from gpuledger.ledger.settings import load_settings

    every = period(once=args.once, every=args.every)
    settings = load_settings(args.settings)
    opts = IngestOptions.from_settings(settings, cluster=args.cluster, tz="UTC")
    since = args.since

    def poll_once() -> PollReport:
        nonlocal since
        report = poll(
            args.db,
            cluster=args.cluster,
            since=since,
            overlap=args.overlap,
            timeout_s=args.sacct_timeout,
            opts=opts,
        )
        since = None  # --since applies to the first successful poll only
        return report

    def show(report: PollReport) -> None:
        if args.json:
            print_json(report.as_dict())
        else:
            print(describe(report), flush=True)

    poll_until_stopped(poll_once, show, every=every)
    return 0
