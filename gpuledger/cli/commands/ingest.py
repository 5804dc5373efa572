"""``gpuledger ingest PATH...``: read files into the ledger, each atomically, re-ingest a no-op."""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import shutil
import sys
from pathlib import Path

import duckdb

from collectors.base import IngestOptions, IngestReport
from collectors.gpu_facts import GpuFacts, gpu_facts
from collectors.ingest import ingest_file
from collectors.registry import PARSERS
from gpuledger.cli.commands._common import add_db_options, print_json
from gpuledger.ledger.db import MEMORY, resolve_db, writer
from gpuledger.ledger.errors import FormatError, LedgerError, out_of_space
from gpuledger.ledger.reference import sync_reference_in
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
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="files; a PATH that exists is read as itself, else a glob pattern ('logs/*.csv') is expanded",
    )
    p.add_argument("--format", default="auto", choices=["auto", *sorted(PARSERS)], help="skip auto-detection")
    p.add_argument("--cluster", help="cluster name for sources that carry none")
    p.add_argument(
        "--tz",
        help="IANA zone of naive local timestamps (default: this machine's zone for nvidia-smi, UTC otherwise)",
    )
    p.add_argument(
        "--job",
        dest="job_id",
        help="tie a training log or a telemetry file to this job id (its samples inside the job's span become the job's; an unknown job is refused)",
    )
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
    p.add_argument(
        "--skip-bad-rows",
        action="store_true",
        help="land a file's plausible rows and record each row outside its physical range (line, column, "
        "value, reason) in rejected_rows, instead of rejecting the whole file",
    )
    p.add_argument(
        "--gpu-model",
        metavar="MODEL",
        help="price the file's jobs that name no GPU (a training log) as run on this catalog model; "
        "with --gpu-count",
    )
    p.add_argument(
        "--gpu-count",
        metavar="N",
        type=float,
        help="with --gpu-model: how many GPUs ran them (a job with no start or end runs for its logged "
        "runtime, ending at the ingest)",
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
        skip_bad_rows=getattr(args, "skip_bad_rows", False),
        gpu=gpu_option(args),
    )


def gpu_option(args: argparse.Namespace) -> GpuFacts | None:
    """``--gpu-model`` and ``--gpu-count``, both or neither, checked against the GPU catalog."""
    model, count = getattr(args, "gpu_model", None), getattr(args, "gpu_count", None)
    if model is None and count is None:
        return None
    if model is None or count is None:
        raise LedgerError(
            "--gpu-model and --gpu-count go together: name the GPU model and how many ran the job"
        )
    if args.job_id:
        raise LedgerError(
            "--gpu-model prices the jobs a file brings; with --job the job's own record says what ran it"
        )
    return gpu_facts(model, count)


GLOB_CHARS = frozenset("*?[")


def expand_paths(args: list[str]) -> list[str]:
    """Each argument as itself when a file of that name exists, else its glob matches (sorted).

    A shell usually expands patterns first; a quoted pattern, or a file literally named ``jobs*.csv``, is
    decided here: the existing file wins, so ``jobs*.csv`` never also reads ``jobsA.csv``.
    """
    out: list[str] = []
    for arg in args:
        if Path(arg).exists() or not GLOB_CHARS & set(arg):
            out.append(arg)
            continue
        matches = sorted(m for m in glob.glob(arg, recursive=True) if Path(m).is_file())
        if not matches:
            raise FormatError(arg, None, "no such file, and no file matches it as a pattern")
        out.extend(matches)
    return out


def spill_dir(db: str) -> Path | None:
    """This run's own spill folder, ``<ledger>.tmp/ingest-<pid>``: past the writer's memory limit DuckDB
    spills there, and the run removes it when it ends, success or failure (a fixed shared folder would be
    another writer's once this one closed)."""
    return None if db == MEMORY else Path(db + ".tmp") / f"ingest-{os.getpid()}"


def remove_spill(folder: Path | None) -> None:
    """Remove this run's spill folder, and those of earlier runs whose process is gone (killed)."""
    if folder is None:
        return
    shutil.rmtree(folder, ignore_errors=True)
    for other in folder.parent.glob("ingest-*"):
        pid = other.name.removeprefix("ingest-")
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(other, ignore_errors=True)
    with contextlib.suppress(OSError):
        folder.parent.rmdir()  # only when empty


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def describe(report: IngestReport) -> str:
    if report.already:
        return f"{report.path}: already ingested (ingest #{report.ingest_id}); nothing written"
    rows = ", ".join(f"{n:,} {table}" for table, n in report.rows.items() if n) or "no rows"
    text = (
        f"{report.path}: {report.format}: {rows} "
        f"(ingest #{report.ingest_id}, {report.seconds:.2f} s, {report.bytes_read:,} bytes read)"
    )
    if report.replaced:
        text += f"; replaced ingest(s) {', '.join(f'#{i}' for i in report.replaced)}"
    for reason, n in report.skipped.items():
        text += f"\n  skipped {n:,}: {reason}"
    if report.priced:
        text += f"\n  priced as {report.priced}"
    elif report.unpriced:
        text += unpriced_lines(report)
    for r in report.rejected[:MAX_REJECTED_SHOWN]:
        where = f"{report.path}:{r['line']}" if r["line"] is not None else report.path
        text += f"\n  rejected {where}: {r['reason']}"
    if len(report.rejected) > MAX_REJECTED_SHOWN:
        text += f"\n  ... and {len(report.rejected) - MAX_REJECTED_SHOWN:,} more (gpuledger check lists none: they never landed; see rejected_rows)"
    return text


MAX_REJECTED_SHOWN = 20


def unpriced_lines(report: IngestReport) -> str:
    """The jobs that name no GPU model or count, grouped by what will price them (collectors/ingest.py
    ``UNPRICED_SQL``): their hosts' telemetry, nothing (never started, or no GPU asked for), or ``--gpu-model``."""
    by_hosts, never = set(report.unpriced_hosts), set(report.held_no_gpu)
    rest = [j for j in report.unpriced if j not in by_hosts and j not in never]
    hosts = [j for j in report.unpriced if j in by_hosts]
    idle = [j for j in report.unpriced if j in never]

    def some(ids: list[str]) -> str:
        return ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else "")

    text = ""
    if hosts:
        text += (
            f"\n  {len(hosts):,} job(s) name no GPU model ({some(hosts)}): they cost nothing until telemetry "
            "from their hosts lands (nvidia-smi, dcgm-exporter, rocm-smi: it names the GPU model), or ingest "
            "again with --replace --gpu-model MODEL"
        )
    if idle:
        text += (
            f"\n  {len(idle):,} job(s) held no GPU ({some(idle)}): they never started or asked for none, "
            "so nothing is owed"
        )
    if rest:
        text += (
            f"\n  {len(rest):,} job(s) name no GPU model or count and cost nothing "
            f"({some(rest)}): ingest again with --replace --gpu-model MODEL --gpu-count N"
        )
    return text


def run(args: argparse.Namespace) -> int:
    opts = options(args)
    settings = load_settings(args.settings)
    reports = []
    paths = expand_paths(args.paths)
    spill = None
    try:
        spill = spill_dir(resolve_db(args.db))
        with writer(args.db) as con:
            if spill is not None:
                spill.mkdir(parents=True, exist_ok=True)  # DuckDB creates the folder, not its parent
                con.execute(f"SET temp_directory = '{str(spill).replace(chr(39), chr(39) * 2)}'")
            sync_reference_in(con, settings)  # in this writer: a reader and a second writer cost 0.05-0.1 s
            for path in paths:
                try:
                    report = ingest_file(con, path, fmt=args.format, opts=opts)
                except LedgerError:
                    if reports and not args.json:
                        print(f"(the {len(reports)} file(s) before it landed)", file=sys.stderr)
                    raise
                reports.append(report)
                if not args.json:
                    print(describe(report))
    except (OSError, duckdb.Error) as exc:  # the ledger itself (a parser's errors are FormatErrors already)
        if isinstance(exc, LedgerError):
            raise
        why = out_of_space(exc) or (
            exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0]
        )
        where = getattr(exc, "filename", None) or args.db or "the ledger"
        raise LedgerError(f"{where}: the ledger cannot be opened or written: {why}") from exc
    finally:
        remove_spill(spill)
    if args.json:
        print_json([r.as_dict() for r in reports])
    return 0
