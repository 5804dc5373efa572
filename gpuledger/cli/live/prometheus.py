"""``gpuledger collect prometheus``: the command line of the Prometheus pull (collectors/prometheus_pull.py)."""

from __future__ import annotations

import argparse
import sys

from collectors.prometheus_jobs import pull_jobs
from collectors.prometheus_pull import TOKEN_ENV, PullOptions, pull, read_token
from gpuledger.cli import times
from gpuledger.cli.commands._common import add_db_options, print_json
from gpuledger.ledger.errors import CollectorError
from gpuledger.ledger.settings import load_settings


def add_collect_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prometheus",
        help="pull DCGM GPU telemetry from Prometheus/Thanos/Mimir as per-step rollups",
        description="Pull dcgm-exporter metrics through the Prometheus HTTP API with the aggregation done "
        "by the server (one value per GPU per step). Incremental: without --since it resumes where the "
        "last run stopped (first run: the last 24 h).",
    )
    p.add_argument("--url", required=True, help="Prometheus base URL, e.g. http://prometheus:9090")
    p.add_argument("--since", type=times.moment, help="start (ISO time in UTC, epoch s, or an age like 7d)")
    p.add_argument("--until", type=times.moment, help="end (default: now minus one step)")
    p.add_argument("--step", type=times.duration_s, default=60, help="rollup step (default 60s)")
    p.add_argument("--match", default="", help="extra label matchers, e.g. 'cluster=\"a\"'")
    p.add_argument(
        "--chunk",
        type=times.duration_s,
        default=86_400,
        help="longest time per transaction (default 1d; a large fleet gets shorter chunks)",
    )
    p.add_argument("--hosts-per-query", type=int, default=64, help="bound series per request (default 64)")
    p.add_argument("--retries", type=int, default=5, help="retries per request, exponential backoff")
    p.add_argument("--header", action="append", default=[], help="HTTP header 'Name: value' (repeatable)")
    p.add_argument(
        "--token-file",
        help=f"file holding a bearer token (default: ${TOKEN_ENV}); never pass a token on the command line",
    )
    p.add_argument("--ca-file", help="PEM CA bundle that signed the server's TLS certificate")
    p.add_argument("--insecure", action="store_true", help="do not verify the server's TLS certificate")
    p.add_argument(
        "--job-prefix", help="prefix for job ids from hpc_job/pod labels (default: CLUSTER/ with --cluster)"
    )
    p.add_argument("--cluster", help="cluster of these GPUs; job ids become CLUSTER/<hpc_job> like sacct's")
    p.add_argument(
        "--jobs",
        action="store_true",
        help="per-job summaries computed by Prometheus (mean/max/quantiles, idle stretches) into job_summaries, "
        "instead of per-step samples (docs/scale.md)",
    )
    p.add_argument(
        "--no-fleet",
        action="store_true",
        help="with --jobs: skip the hourly fleet rollup (utilization per GPU-hour, for the heatmap)",
    )
    p.add_argument(
        "--scrape",
        type=times.duration_s,
        help="with --jobs: the exporter's scrape interval (default: measured from the data)",
    )
    p.add_argument("--json", action="store_true", help="print a JSON report")
    add_db_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    headers = []
    for h in args.header:
        name, sep, value = h.partition(":")
        if not sep or not name.strip():
            raise CollectorError(f"--header {h!r}: expected 'Name: value'")
        headers.append((name.strip(), value.strip()))
    opts = PullOptions(
        url=args.url,
        step_s=args.step,
        since=args.since,
        until=args.until,
        match=args.match,
        chunk_s=args.chunk,
        hosts_per_query=max(1, args.hosts_per_query),
        retries=max(0, args.retries),
        headers=tuple(headers),
        token=read_token(args.token_file),
        ca_file=args.ca_file,
        insecure=args.insecure,
        job_prefix=args.job_prefix,
        cluster=args.cluster,
    )
    if args.insecure:
        print("warning: --insecure: the server's TLS certificate is not checked", file=sys.stderr)
    settings = load_settings(args.settings)
    if args.jobs:
        jobs = pull_jobs(
            args.db,
            opts,
            settings=settings,
            scrape_s=args.scrape,
            fleet=not args.no_fleet,
            progress=not args.json,
        )
        if args.json:
            print_json(jobs.as_dict())
        else:
            print(
                f"{jobs.collector}: {jobs.rows:,} job-GPU summaries of {jobs.jobs:,} jobs; cursor {jobs.end}"
            )
        return 0
    report = pull(args.db, opts, settings=settings, progress=not args.json)
    if args.json:
        print_json(report.as_dict())
    elif not report.chunks:
        print(f"{report.collector}: up to date (cursor {report.cursor})")
    else:
        total = sum(c.rows.get("samples", 0) for c in report.chunks)
        print(
            f"{report.collector}: {total:,} samples in {len(report.chunks)} chunk(s); cursor {report.cursor}"
        )
    return 0
