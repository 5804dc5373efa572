"""In one process, a reader waits for a writer on the same file to close, and a writer for a reader.

DuckDB refuses a read-only and a read-write connection to one file in one process at once ("different
configuration"); the dashboard hits that when one session saves settings while another session reads.
"""

from __future__ import annotations

import threading
import time

import pytest

from gpuledger.ledger.db import reader, writer
from gpuledger.ledger.errors import DatabaseBusyError


def _hold(ctx, seconds: float, opened: threading.Event) -> None:
    with ctx as con:
        con.execute("SELECT 1").fetchall()
        opened.set()
        time.sleep(seconds)


def test_a_reader_waits_for_a_writer_in_the_same_process(db_path):
    with writer(db_path):
        pass  # the file exists, with its schema
    opened = threading.Event()
    holder = threading.Thread(target=_hold, args=(writer(db_path), 0.5, opened))
    holder.start()
    assert opened.wait(30)
    with reader(db_path, timeout_s=30) as con:  # without the wait: ConnectionException at once
        assert con.execute("SELECT count(*) FROM jobs").fetchall() == [(0,)]
    holder.join()


def test_a_writer_waits_for_a_reader_in_the_same_process(db_path):
    with writer(db_path):
        pass
    opened = threading.Event()
    holder = threading.Thread(target=_hold, args=(reader(db_path), 0.5, opened))
    holder.start()
    assert opened.wait(30)
    with writer(db_path, timeout_s=30) as con:
        con.execute("SELECT count(*) FROM jobs").fetchall()
    holder.join()


def test_a_wait_that_runs_out_says_which_connection_held_the_file(db_path):
    with writer(db_path):
        pass
    opened = threading.Event()
    holder = threading.Thread(target=_hold, args=(writer(db_path), 1.5, opened))
    holder.start()
    assert opened.wait(30)
    busy = "this process has held the database open read-write for over 0 s"
    with pytest.raises(DatabaseBusyError, match=busy), reader(db_path, timeout_s=0.2):
        pass
    holder.join()
