"""How a live collector runs until stopped: SIGTERM and SIGINT set a stop event (:func:`stop_on_signals`), and a
poller polls once, or at a period until that event is set (:func:`poll_until_stopped`).

One copy for every ``gpuledger collect`` command: the Slurm and Kubernetes pollers each wrote the loop, the retry
after a failed poll and the handler restore themselves; the NVML sampler takes the stop event for its own
sampling loop.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

from gpuledger.ledger.errors import CollectorError, DatabaseBusyError, LedgerError

Report = TypeVar("Report")


@contextlib.contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event that SIGTERM and SIGINT set, instead of ending the process, while the block runs (the caller
    finishes its poll or flush and returns: exit 0); the previous handlers are back afterwards."""
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def period(*, once: bool, every: dt.timedelta | None) -> dt.timedelta | None:
    """A poller's ``--every``, checked before anything runs: ``--once`` with it is a LedgerError."""
    if once and every:
        raise LedgerError("--once and --every exclude each other")
    return every


def poll_until_stopped(
    poll_once: Callable[[], Report], show: Callable[[Report], None], *, every: dt.timedelta | None
) -> None:
    """``poll_once`` and ``show`` its report; with ``every`` (:func:`period`), again each period until
    SIGTERM or SIGINT.

    Without ``every`` a failed poll's CollectorError or DatabaseBusyError propagates (one ``error:`` line,
    exit 1); with it, the poller warns on stderr and tries again next period, so it outlives a slurmdbd or
    API server restart (a failed poll moved no cursor). A signal during a poll lets it finish, then ends the
    loop; during the wait, it ends the wait."""
    with stop_on_signals() as stop:
        while True:
            try:
                report = poll_once()
            except (CollectorError, DatabaseBusyError) as exc:
                if not every:
                    raise
                print(f"warning: {exc}; retrying in {every}", file=sys.stderr, flush=True)
            else:
                show(report)
            if not every or stop.wait(every.total_seconds()):
                break
