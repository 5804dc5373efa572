"""The ingest driver: one file, parsed by its parser and landed atomically, or nothing lands.

Its own module, above collectors/registry.py (which lists every parser), the parser contract every parser
imports (collectors/contract.py), the landing (collectors/landing.py) and provenance (collectors/provenance.py):
in base.py it had to import the registry inside the function, a circle base → registry → each parser → base
that tests/test_layering.py now refuses.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TextIO

import duckdb

from collectors.checkpoints import record_placements
from collectors.contract import IngestOptions, IngestReport, Parser, choose_parser
from collectors.gpu_facts import price_staged_jobs
from collectors.job_option import tie_to_job
from collectors.landing import land, run_in_transaction, split_sample_notes
from collectors.provenance import (
    next_ingest_id,
    record_ingest,
    record_source,
    sha256_file,
    withdraw_source,
)
from collectors.reader_errors import Restage, reading
from collectors.registry import PARSERS
from collectors.row_checks import reader_rejections
from collectors.source_file import check_path, scan_source, unpadded_copy
from collectors.validate import Violation, record_rejections, validate_merge, validate_stage
from gpuledger.ledger.errors import FormatError

# Files this big get a progress bar on a terminal; smaller ones land before one would be drawn.
PROGRESS_MIN_BYTES = 4 * 2**20


# The jobs of one ingest that name no GPU model or count, and what will price them: ``hosts`` when the job
# held hosts (allocations): the GPU samples those hosts' telemetry lands are tied to it and carry the model
# (collectors/attribute.py); ``held_no_gpu`` when a scheduler's record (sacct, Kubernetes: they say what was
# asked for and when it ran) has no host and either no start (a pending job, or one cancelled before it
# started) or no GPU asked for (a CPU job): nothing is owed; else ``gpu_option``
# (a training log: ``--gpu-model MODEL --gpu-count N``, collectors/gpu_facts.py).
UNPRICED_SQL = """
    SELECT j.job_id,
           CASE WHEN EXISTS (SELECT 1 FROM allocations a WHERE a.job_id = j.job_id AND a.host IS NOT NULL)
                THEN 'hosts'
                WHEN (j.start_ts IS NULL OR coalesce(j.gpu_count, 0) = 0)
                     AND (j.source = 'sacct' OR j.source LIKE 'kubernetes%')
                     AND NOT EXISTS (SELECT 1 FROM training_runs t WHERE t.job_id = j.job_id)
                THEN 'held_no_gpu'
                ELSE 'gpu_option' END AS priced_by
    FROM jobs j WHERE j.ingest_id = ? AND (j.gpu_model IS NULL OR coalesce(j.gpu_count, 0) = 0)
    ORDER BY 1"""


def ingest_file(
    con: duckdb.DuckDBPyConnection,
    path: str | os.PathLike[str],
    *,
    fmt: str = "auto",
    opts: IngestOptions | None = None,
    parsers: dict[str, Parser] | None = None,
) -> IngestReport:
    """Parse one file and land it atomically in the ledger behind ``con`` (a writer connection)."""
    opts = opts or IngestOptions()
    parsers = parsers or PARSERS
    p = Path(path)
    with reading(p):  # a directory, an unreadable file: one sentence, not a traceback
        check_path(p)  # a regular file of UTF-8 text (collectors/source_file.py)
        parser = choose_parser(p, fmt, parsers)
        if not p.exists():
            raise FormatError(p, None, "no such file")
        if not p.is_file():
            raise FormatError(p, None, "not a file")
        if p.stat().st_size == 0:
            raise FormatError(p, None, "the file is empty")
        started = time.perf_counter()
    key = opts.source_key or str(p.resolve())
    hashing: Hashing | None = None
    if opts.replace or p.stat().st_size < OVERLAP_HASH_BYTES or _seen_source(con, key):
        # --replace removes by hash first; a source seen before is most likely the same bytes again (a
        # cron re-ingesting a folder), answered at once
        with reading(p):
            digest = sha256_file(p)
        seen = _seen_hash(con, digest)
        if seen is not None and not opts.replace:
            record_source(con, seen, str(p.resolve()), key)
            return IngestReport(str(p), parser.name, seen, already=True, bytes_read=p.stat().st_size)
    else:
        hashing = Hashing(p)  # hashed while DuckDB stages it (a new source is rarely a copy of an old one)
        digest = ""

    with reading(p):  # every byte read: no line too long, no NUL, no gzip bomb (collectors/source_file.py)
        scan = scan_source(p, parser.name, max_gzip_ratio=opts.max_gzip_ratio)
    padded = tempfile.TemporaryDirectory(prefix="gpuledger-") if scan.padding else None
    # a .gz with zero padding is staged from a copy without it (DuckDB refuses the padding gzip skips)
    staged = unpadded_copy(p, scan.padding, Path(padded.name)) if padded else p
    ids: list[int] = []  # the ingest's id, kept for a second run (Restage): a sequence is not rolled back

    def work() -> IngestReport:
        nonlocal digest
        earlier = withdraw_source(con, key, opts) if opts.replace else []
        if not ids:
            ids.append(next_ingest_id(con))
        ingest_id = ids[0]
        with reading(p), as_source(staged, p):
            reader_rejections(con)  # none left from an earlier file on this connection
            skipped = parser.stage(con, staged, opts)
            priced = price_staged_jobs(con, opts.gpu) if opts.gpu else None
            bad = [  # the reader's own checks, under --skip-bad-rows (collectors/row_checks.py)
                Violation("jobs", line, "", value or "", reason)
                for line, value, reason in reader_rejections(con)
            ]
            bad += validate_stage(con, p, skip_bad_rows=opts.skip_bad_rows, max_job_days=opts.max_job_days)
            bad += validate_merge(con, p, skip_bad_rows=opts.skip_bad_rows)
            tie_to_job(con, p, parser.name, opts.job_id)  # --job on telemetry: its samples, or refused
            if hashing is not None:
                digest = hashing.result()
        if hashing is not None and (seen := _seen_hash(con, digest)) is not None:
            raise _AlreadyIngested(seen)  # the same bytes under another name: nothing lands (rolled back)
        with reading(p, landing=True):
            rows, notes = split_sample_notes(land(con, ingest_id, opts))
        record_placements(con, ingest_id)  # checkpoints a training log placed (collectors/checkpoints.py)
        unpriced = con.execute(UNPRICED_SQL, [ingest_id]).fetchall()
        skipped = {**skipped, **notes}
        if bad:
            record_rejections(con, ingest_id, str(p.resolve()), bad)
            skipped[f"rows outside their physical range (rejected_rows of ingest #{ingest_id})"] = len(bad)
        record_ingest(
            con,
            ingest_id,
            path=str(p.resolve()),
            source_key=key,
            sha256=digest,
            fmt=parser.name,
            rows=rows,
            skipped=skipped,
        )
        return IngestReport(
            str(p),
            parser.name,
            ingest_id,
            rows,
            skipped,
            replaced=earlier,
            seconds=time.perf_counter() - started,
            bytes_read=scan.bytes_read,
            rejected=[
                {"line": v.line, "table": v.table, "column": v.column, "value": v.value, "reason": v.reason}
                for v in bad
            ],
            priced=priced,
            unpriced=[r[0] for r in unpriced],
            unpriced_hosts=[r[0] for r in unpriced if r[1] == "hosts"],
            held_no_gpu=[r[0] for r in unpriced if r[1] == "held_no_gpu"],
        )

    progress = wants_progress(opts, p.stat().st_size)
    if progress:
        con.execute("SET enable_progress_bar = true")
        con.execute("SET enable_progress_bar_print = true")
    try:
        try:
            return run_in_transaction(con, work)
        except Restage as again:
            opts = replace(opts, **again.changes)  # work() reads opts when it runs
            return run_in_transaction(con, work)
    except _AlreadyIngested as done:
        record_source(con, done.ingest_id, str(p.resolve()), key)
        return IngestReport(str(p), parser.name, done.ingest_id, already=True, bytes_read=scan.bytes_read)
    finally:
        if hashing is not None:
            hashing.result(raise_errors=False)  # never leave the thread reading the file
        if padded is not None:
            padded.cleanup()
        if progress:
            con.execute("SET enable_progress_bar = false")


@contextmanager
def as_source(staged: Path, source: Path) -> Iterator[None]:
    """A FormatError about the copy a parser staged from names the user's file instead."""
    try:
        yield
    except FormatError as exc:
        if staged == source or exc.path != str(staged):
            raise
        raise FormatError(source, exc.line, exc.reason) from exc


# Files this big are hashed on a second thread while DuckDB stages them, unless their source was ingested
# before (then the hash decides first whether there is anything to do). The stage keeps both cores only
# part of the time: a 2 M-row CSV's stage with its hash alongside took 1.10 s against 1.29 s one after the
# other (the hash alone 0.2 s); a 10 M-row one's hash is 0.9 s.
OVERLAP_HASH_BYTES = 64 * 2**20


class Hashing:
    """sha256 of a file on a thread of its own (hashlib releases the GIL on large blocks, DuckDB while it
    runs a statement)."""

    def __init__(self, path: Path) -> None:
        self._digest: str | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(path,), name="gpuledger-sha256", daemon=True)
        self._thread.start()

    def _run(self, path: Path) -> None:
        try:
            self._digest = sha256_file(path)
        except BaseException as exc:  # re-raised in the caller's thread by result()
            self._error = exc

    def result(self, *, raise_errors: bool = True) -> str:
        self._thread.join()
        if self._error is not None and raise_errors:
            raise self._error
        return self._digest or ""


class _AlreadyIngested(Exception):
    """Raised inside the ingest's transaction when its bytes turn out to be in the ledger already."""

    def __init__(self, ingest_id: int) -> None:
        super().__init__(ingest_id)
        self.ingest_id = ingest_id


def _seen_hash(con: duckdb.DuckDBPyConnection, digest: str) -> int | None:
    rows = con.execute(
        "SELECT ingest_id FROM ingests WHERE content_sha256 = ? ORDER BY ingest_id LIMIT 1", [digest]
    ).fetchall()
    return int(rows[0][0]) if rows else None


def _seen_source(con: duckdb.DuckDBPyConnection, key: str) -> bool:
    return bool(
        con.execute(
            """SELECT EXISTS (SELECT 1 FROM ingests WHERE source_key = $key)
                      OR EXISTS (SELECT 1 FROM ingest_sources WHERE source_key = $key)""",
            {"key": key},
        ).fetchall()[0][0]
    )


def wants_progress(opts: IngestOptions, size_bytes: int, streams: tuple[TextIO, ...] | None = None) -> bool:
    """Show DuckDB's progress bar while this file stages and lands?

    Only for files of PROGRESS_MIN_BYTES or more (DuckDB draws it for statements running over 2 s), not
    with ``quiet``, and only when stdout and stderr are both a terminal: DuckDB draws on stdout, so a
    piped or redirected run (``--json > report.json``) stays clean.
    """
    if opts.quiet or size_bytes < PROGRESS_MIN_BYTES:
        return False
    return all(_is_terminal(s) for s in (streams or (sys.stdout, sys.stderr)))


def _is_terminal(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (ValueError, OSError):  # a closed or detached stream
        return False
