"""``gpuledger ingest PATH...``: read files into the ledger, each atomically, re-ingest a no-op."""

from __future__ import annotations

import argparse
import sys

from collectors.base import IngestOptions, IngestReport, ingest_file
from collectors.registry import PARSERS
from gpuledger.cli.commands._common import add_db_options, print_json
from gpuledger.ledger.db import writer
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.reference import sync_reference
from gpuledger.ledger.settings import load_settings


def register(sub: argparse._SubParsersAction) -> None:
    formats = "\n".join(f"  {name:<18} {p.description}" for name, p in sorted(PARSERS.items()))
    p = sub.add_parser(
        "ingest",
        help="read telemetry, job and training-log files into the ledger",
        description="Read files into the ledger. Each file lands in one transaction or not at all; "
        "ingesting the same content twice is a no-op.\n\nformats:\n" + formats,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--format", default="auto", choices=["auto", *sorted(PARSERS)], help="skip auto-detection")
    p.add_argument("--cluster", help="cluster name for sources that carry none")
    p.add_argument(
        "--tz",
        help="IANA zone of naive local timestamps (default: this machine's zone for nvidia-smi, UTC otherwise)",
    )
    p.add_argument("--job", dest="job_id", help="tie a training log to this job id")
    p.add_argument(
        "--host",
        help="host name for GPUs of files that carry none (nvidia-smi CSV without uuid: HOST:INDEX, "
        "default localhost)",
    )
    p.add_argument(
        "--columns", help="comma-separated field names of a header-less file (nvidia-smi noheader)"
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="first remove what an earlier version of this source brought in",
    )
    p.add_argument("--json", action="store_true", help="print one JSON report per file")
    p.add_argument(
        "--quiet", action="store_true", help="no progress bar (shown on a terminal for files over 4 MiB)"
    )
    add_db_options(p)
    p.set_defaults(func=run)


def options(args: argparse.Namespace) -> IngestOptions:
    settings = load_settings(args.settings)
    return IngestOptions.from_settings(
        settings,
        cluster=args.cluster,
        tz=args.tz,
        job_id=args.job_id,
        host=args.host,
        columns=tuple(c.strip() for c in args.columns.split(",")) if args.columns else None,
        replace=args.replace,
        quiet=args.quiet,
    )


def describe(report: IngestReport) -> str:
    if report.already:
        return f"{report.path}: already ingested (ingest #{report.ingest_id}); nothing written"
    rows = ", ".join(f"{n:,} {table}" for table, n in report.rows.items() if n) or "no rows"
    text = f"{report.path}: {report.format}: {rows} (ingest #{report.ingest_id}, {report.seconds:.2f} s)"
    if report.replaced:
        text += f"; replaced ingest(s) {', '.join(f'#{i}' for i in report.replaced)}"
    for reason, n in report.skipped.items():
        text += f"\n  skipped {n:,}: {reason}"
    return text


def run(args: argparse.Namespace) -> int:
    opts = options(args)
    settings = load_settings(args.settings)
    sync_reference(args.db, settings)
    reports = []
    with writer(args.db) as con:
        for path in args.paths:
            try:
                report = ingest_file(con, path, fmt=args.format, opts=opts)
            except LedgerError:
                if reports and not args.json:
                    print(f"(the {len(reports)} file(s) before it landed)", file=sys.stderr)
                raise
            reports.append(report)
            if not args.json:
                print(describe(report))
    if args.json:
        print_json([r.as_dict() for r in reports])
    return 0
