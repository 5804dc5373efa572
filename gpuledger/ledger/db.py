"""Where the ledger lives and how processes share it.

DuckDB lets one process hold a database file read-write, or many hold it read-only, never both. gpuledger
therefore never keeps a connection open between units of work:

- a **writer** (ingest, demo, a collector's flush) opens the file read-write, does its work in one
  transaction, and closes it; if another process holds the file it retries until ``timeout_s``;
- a **reader** (a dashboard page, ``summary``) opens the file read-only for one query batch and closes it,
  retrying the same way while a writer holds the lock.

A page load that meets an ingest therefore waits for the commit (seconds at most) and then sees the new
data; nobody gets a lock error, and no reader holds data stale forever because the dashboard caches are
keyed on :func:`data_version`, which changes with every commit. docs/concurrency.md has the details.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from gpuledger.ledger.errors import DatabaseBusyError, LedgerError
from gpuledger.ledger.paths import choose_db
from gpuledger.ledger.reference import (
    load_reference,
    reference_is_current,
    rollup_thresholds,
    sync_reference_in,
)
from gpuledger.ledger.rollup import rollup_matches
from gpuledger.ledger.schema import SCHEMA_VERSION, current_version, migrate

if TYPE_CHECKING:
    from gpuledger.ledger.settings import Settings

MEMORY = ":memory:"


def resolve_db(path: str | os.PathLike[str] | None = None) -> str:
    """``--db`` wins, then ``$GPULEDGER_DB``, then ``data/gpuledger.duckdb`` in a checkout, else the user's data
    dir (gpuledger/ledger/paths.py); the folder is created when missing."""
    chosen = choose_db(path).path
    assert chosen is not None
    if str(chosen) == MEMORY:
        return MEMORY
    resolved = Path(chosen).expanduser().resolve()
    resolved.parent.mkdir(parents=True, exist_ok=True)
    return str(resolved)


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc)
    return "Could not set lock" in text or "Conflicting lock" in text


# A ledger open never reaches the network: DuckDB would otherwise download an extension to read a file it
# recognises as another engine's (an SQLite file named as the ledger fetched sqlite_scanner), or one a query
# names. What gpuledger uses (core, icu, json, parquet) is built into the duckdb wheel.
OFFLINE: dict[str, object] = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
DUCKDB_MAGIC = b"DUCK"  # bytes 8-11 of every DuckDB database file
_OTHER_FILES = (
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"PAR1", "a Parquet file"),
    (b"PK\x03\x04", "a zip file"),
)


def check_ledger_file(path: str) -> None:
    """Refuse a ``--db`` that is no DuckDB file before DuckDB opens it: a regular file whose bytes 8-11 are
    DuckDB's magic, or a missing one (a new ledger). A FIFO is looked at without waiting on it."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise LedgerError(
            f"{path}: the ledger cannot be read: {(exc.strerror or str(exc)).lower()}"
        ) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "a pipe" if stat.S_ISFIFO(mode) else "a device"
            raise LedgerError(f"{path}: is {kind}, not a ledger file (a gpuledger .duckdb file)")
        head = os.read(fd, 16)
    finally:
        os.close(fd)
    if not head:
        raise LedgerError(
            f"{path}: is an empty file, not a DuckDB ledger; remove it to start a new ledger there"
        )
    if head[8:12] != DUCKDB_MAGIC:
        kind = next(
            (name for magic, name in _OTHER_FILES if head.startswith(magic)), "a file of another kind"
        )
        raise LedgerError(
            f"{path}: is not a DuckDB ledger ({kind}); point --db at a gpuledger .duckdb file, or at a new "
            "path to start one"
        )


def _connect(path: str, *, read_only: bool, timeout_s: float) -> duckdb.DuckDBPyConnection:
    if path != MEMORY:
        check_ledger_file(path)
    deadline = time.monotonic() + timeout_s
    delay = 0.02
    while True:
        try:
            return duckdb.connect(path, read_only=read_only, config=OFFLINE)
        except (duckdb.IOException, duckdb.ConnectionException) as exc:
            # Another process holds the file (a lock error), or this process has it open the other way: DuckDB
            # refuses a read-only and a read-write connection to one file in one process at once (the dashboard
            # saving settings while another session reads). Both end when the other connection closes: wait.
            if not (_is_lock_error(exc) or "different configuration" in str(exc)):
                raise
            if time.monotonic() >= deadline:
                held = (
                    "another gpuledger process has held the database"
                    if _is_lock_error(exc)
                    else f"this process has held the database open {'read-write' if read_only else 'read-only'}"
                )
                raise DatabaseBusyError(f"{path}: {held} for over {timeout_s:.0f} s") from exc
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.5)


# A writer's buffer pool is bounded so an ingest's memory does not grow with the file. With DuckDB's
# default (80 % of RAM) a 10 M-row nvidia-smi CSV peaked at 5.3 GiB, as DuckDB keeps all it can in memory.
# Past this limit the staging tables (TEMP ones included), sorts, windows and joins spill to
# ``<ledger>.tmp`` beside the ledger (DuckDB removes it on close). The process's peak RSS is about the limit
# plus ~160 MiB (Python, the libraries, DuckDB's own structures): a 2 M-row nvidia-smi CSV (bench/ingest.py,
# 2026-12-01) peaked at 890 MiB under 1 GB and 460 MiB under 300 MB, at ~15 % more CPU for the spilling
# (the rollup's sequence and minute steps). A 10 M-row CSV still peaked at 1.6 GiB, already in the parser's
# stage step (not yet explained: a plain TEMP ``CREATE TABLE AS`` inside a transaction does spill — 2 M
# all-VARCHAR rows under 100 MB peaked at 200 MiB). $GPULEDGER_MEMORY_LIMIT (a DuckDB size, "2GB") trades
# memory back for speed.
WRITER_MEMORY_LIMIT = "300MB"
# What a user is told when the writer runs out of memory, wherever it happens (a file's landing, a command)
RAISE_MEMORY_LIMIT = "set GPULEDGER_MEMORY_LIMIT higher (e.g. GPULEDGER_MEMORY_LIMIT=2GB)"


def _configure(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET enable_progress_bar = false")


def _limit_memory(con: duckdb.DuckDBPyConnection) -> None:
    limit = os.environ.get("GPULEDGER_MEMORY_LIMIT") or WRITER_MEMORY_LIMIT
    con.execute(f"SET memory_limit = '{limit.replace(chr(39), '')}'")


@dataclass
class _Batch:
    """A :func:`one_reader` block: its ledger and, once a reader asked, the connection it hands out."""

    db: str
    con: duckdb.DuckDBPyConnection | None = None

    def release(self) -> None:
        if self.con is not None:
            con, self.con = self.con, None
            con.close()


_batches = threading.local()  # .open: this thread's innermost _Batch, or None


def _batch_for(db: str) -> _Batch | None:
    batch: _Batch | None = getattr(_batches, "open", None)
    return batch if batch is not None and batch.db == db else None


@contextmanager
def one_reader(path: str | None = None) -> Iterator[None]:
    """Inside the block, :func:`reader` on this thread hands out one read-only connection to ``path``, opened
    at the first call and closed when the block ends.

    For a dashboard page run: its data functions each ask for a reader, and opening one costs ~30 ms (DuckDB
    reads the file's header and catalog) plus ~15 ms for the schema check, nine times for a cold Overview
    (measured on the 2-day demo). A writer in another process then waits for the page run instead of one
    query batch: seconds, within its retry. A :func:`writer` on this thread (a Settings save, a rollup
    rebuilt for new thresholds) closes the batch's connection first, and the next reader opens a fresh one,
    which sees what the writer committed.
    """
    outer = getattr(_batches, "open", None)
    batch = _batches.open = _Batch(resolve_db(path))
    try:
        yield
    finally:
        _batches.open = outer
        batch.release()


@contextmanager
def writer(path: str | None = None, *, timeout_s: float = 120.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write connection with the schema migrated; closed (releasing the file) on exit.

    The caller opens its own transaction(s); the migration runs in one of its own first.
    """
    db = resolve_db(path)
    batch = _batch_for(db)
    if batch is not None:
        batch.release()  # DuckDB refuses a read-write and a read-only connection to one file in one process
    if db != MEMORY:
        Path(db).parent.mkdir(parents=True, exist_ok=True)
    con = _connect(db, read_only=False, timeout_s=timeout_s)
    try:
        _configure(con)
        if db != MEMORY:  # an in-memory ledger is small (tests, the upload page) and has no spill folder
            _limit_memory(con)
        ensure_schema(con)
        yield con
    finally:
        con.close()


@contextmanager
def reader(path: str | None = None, *, timeout_s: float = 120.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection for one batch of queries.

    A database file that does not exist yet is created (empty, current schema) first, so a fresh install
    can open the dashboard before any data arrives.
    """
    db = resolve_db(path)
    if db == MEMORY:
        raise ValueError("an in-memory ledger has no separate readers; pass the writer connection")
    batch = _batch_for(db)
    if batch is not None:
        if batch.con is None:
            batch.con = _open_reader(db, timeout_s)
        yield batch.con
        return
    con = _open_reader(db, timeout_s)
    try:
        yield con
    finally:
        con.close()


def _open_reader(db: str, timeout_s: float) -> duckdb.DuckDBPyConnection:
    if not Path(db).exists():
        with writer(db, timeout_s=timeout_s):
            pass
    con = _connect(db, read_only=True, timeout_s=timeout_s)
    _configure(con)
    if current_version(con) != SCHEMA_VERSION:
        con.close()
        with writer(db, timeout_s=timeout_s):
            pass
        con = _connect(db, read_only=True, timeout_s=timeout_s)
        _configure(con)
    return con


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Migrate to the current schema and load the shipped catalog and price sheet, atomically."""
    if current_version(con) == SCHEMA_VERSION:
        return
    con.execute("BEGIN TRANSACTION")
    try:
        migrate(con)
        load_reference(con)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def memory_ledger() -> duckdb.DuckDBPyConnection:
    """An in-memory ledger with the current schema: for tests and the upload page."""
    con = duckdb.connect(MEMORY, config=OFFLINE)
    _configure(con)
    ensure_schema(con)
    return con


def data_version(path: str | None = None) -> tuple[int, int]:
    """Changes whenever a writer commits: (mtime_ns, size) of the file and its WAL. Cache key for pages."""
    db = resolve_db(path)
    parts = [0, 0]
    for suffix in ("", ".wal"):
        try:
            st = os.stat(db + suffix)
        except FileNotFoundError:
            continue
        parts[0] = max(parts[0], st.st_mtime_ns)
        parts[1] += st.st_size
    return parts[0], parts[1]


def sync_reference(path: str | None, settings: Settings) -> bool:
    """Make the ledger's catalog and prices reflect ``settings``; returns True when it had to write.

    Here rather than in gpuledger.ledger.reference (which loads the rows into a connection it is given) because
    it opens the ledger: reference.py importing this module while this one loads the shipped sheet through it
    made the two import each other."""
    with reader(path) as con:
        if reference_is_current(con, settings) and rollup_matches(con, rollup_thresholds(settings)):
            return False
    with writer(path) as con:
        return sync_reference_in(con, settings)
