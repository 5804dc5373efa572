"""The repeat loop every ``gpuledger collect`` poller runs (gpuledger/cli/live/repeat.py): one poll without
``--every``; with it, a poll each period until SIGTERM/SIGINT, a failed poll warned about and retried."""

from __future__ import annotations

import datetime as dt
import os
import signal

import pytest

from gpuledger.cli.live.repeat import period, poll_until_stopped, stop_on_signals
from gpuledger.ledger.errors import CollectorError, DatabaseBusyError, LedgerError

TICK = dt.timedelta(milliseconds=10)


def test_without_every_one_poll_and_its_failure_propagates() -> None:
    shown: list[int] = []
    poll_until_stopped(lambda: 7, shown.append, every=None)
    assert shown == [7]

    def fail() -> int:
        raise CollectorError("sacct: slurmdbd unreachable")

    with pytest.raises(CollectorError, match="slurmdbd unreachable"):
        poll_until_stopped(fail, shown.append, every=None)
    assert shown == [7]


def test_with_every_a_failed_poll_is_retried_and_a_signal_ends_the_loop(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Polls 1 and 3 fail (slurmdbd down, the ledger busy), 2 and 4 succeed; poll 4 receives SIGTERM, which
    lets it finish and be shown, then ends the loop: 4 polls, 2 reports, 2 warnings, no exception."""
    before = signal.getsignal(signal.SIGTERM)
    calls: list[int] = []
    shown: list[int] = []

    def poll_once() -> int:
        calls.append(len(calls) + 1)
        n = calls[-1]
        if n == 1:
            raise CollectorError("sacct: slurmdbd unreachable")
        if n == 3:
            raise DatabaseBusyError("the ledger is locked by another writer")
        if n == 4:
            os.kill(os.getpid(), signal.SIGTERM)
        return n

    poll_until_stopped(poll_once, shown.append, every=TICK)
    assert calls == [1, 2, 3, 4]
    assert shown == [2, 4]
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"warning: sacct: slurmdbd unreachable; retrying in {TICK}",
        f"warning: the ledger is locked by another writer; retrying in {TICK}",
    ]
    assert signal.getsignal(signal.SIGTERM) == before  # the previous handler is back


def test_stop_on_signals_sets_the_event_and_restores_the_handlers() -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with stop_on_signals() as stop:
        assert not stop.is_set()
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt: the event is set instead
        assert stop.wait(5)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_once_and_every_exclude_each_other() -> None:
    with pytest.raises(LedgerError, match="--once and --every exclude each other"):
        period(once=True, every=TICK)
    assert period(once=False, every=TICK) == TICK
    assert period(once=True, every=None) is None
