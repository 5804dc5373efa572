"""In one process, a reader waits for a writer on the same file to close, and a writer for a reader.

DuckDB refuses a read-only and a read-write connection to one file in one process at once ("different
configuration"); the dashboard hits that when one session saves settings while another session reads.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import duckdb
import pytest

from gpuledger.ledger.db import one_reader, reader, writer
from gpuledger.ledger.errors import DatabaseBusyError


@contextlib.contextmanager
def _held(db_path: str, open_ledger, seconds: float) -> Iterator[None]:
    """The ledger (created first, with its schema) held by ``open_ledger(db_path)`` in another thread of
    this process for ``seconds``; the block runs while it is held."""
    with writer(db_path):
        pass
    opened = threading.Event()

    def hold() -> None:
        with open_ledger(db_path) as con:
            con.execute("SELECT 1").fetchall()
            opened.set()
            time.sleep(seconds)

    holder = threading.Thread(target=hold)
    holder.start()
    assert opened.wait(30)
    try:
        yield
    finally:
        holder.join()


def test_a_reader_waits_for_a_writer_in_the_same_process(db_path):
    with _held(db_path, writer, 0.5), reader(db_path, timeout_s=30) as con:
        # without the wait: ConnectionException at once
        assert con.execute("SELECT count(*) FROM jobs").fetchall() == [(0,)]


def test_a_writer_waits_for_a_reader_in_the_same_process(db_path):
    with _held(db_path, reader, 0.5), writer(db_path, timeout_s=30) as con:
        con.execute("SELECT count(*) FROM jobs").fetchall()


def test_a_wait_that_runs_out_says_which_connection_held_the_file(db_path):
    busy = "this process has held the database open read-write for over 0 s"
    with (
        _held(db_path, writer, 1.5),
        pytest.raises(DatabaseBusyError, match=busy),
        reader(db_path, timeout_s=0.2),
    ):
        pass


def test_one_reader_hands_out_one_connection_and_gives_way_to_a_writer(db_path):
    with writer(db_path):
        pass
    with one_reader(db_path):
        with reader(db_path) as first:
            pass
        with reader(db_path) as second:
            assert second is first  # opened once for the block
            assert first.execute("SELECT count(*) FROM jobs").fetchall() == [(0,)]
        # a writer on this thread inside the block: the block's read-only connection is closed first (else
        # DuckDB's "different configuration" makes the writer wait for itself until its timeout)
        with writer(db_path, timeout_s=2) as con:
            con.execute("CREATE TABLE marker AS SELECT 1 AS x")
        with pytest.raises(duckdb.ConnectionException):
            first.execute("SELECT 1")
        with reader(db_path) as third:  # a fresh one, which sees the commit
            assert third is not first
            assert third.execute("SELECT x FROM marker").fetchall() == [(1,)]
    with pytest.raises(duckdb.ConnectionException):
        third.execute("SELECT 1")  # closed with the block
    with reader(db_path) as a, reader(db_path) as b:  # outside a block: a connection per reader
        assert a is not b


def test_one_reader_of_another_ledger_leaves_this_one_alone(db_path, tmp_path):
    other = str(tmp_path / "other.duckdb")
    with writer(db_path), writer(other):
        pass
    with one_reader(other), reader(db_path) as a, reader(db_path) as b:
        assert a is not b
