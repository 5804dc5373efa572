"""Which steps ``guard run`` takes at a given moment (gpuledger/guard/live.py ``due``), on a hand-made running job:
the clock is an argument, so each case is worked by hand.

Job r/1: 1 GPU, running (no end), busy 90 % from 00:00 to 01:00, then 0 % every 5 minutes; the ledger holds
telemetry up to the moment asked (:func:`feed`, as the live collectors would have landed it). Policy: warn 60,
cancel 120 → run from 01:00, warn due 02:00, cancel 03:00.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from gpuledger.guard.live import due, record
from gpuledger.ledger.settings import from_dict
from tests.analytics.build import T0, alloc, gpu, ingest, job, set_test_prices
from tests.guard.ledgers import five_min


def settings(**policy: Any) -> Any:
    return from_dict(
        {"guard": {"policy": [{"name": "p", "warn_minutes": 60, "cancel_minutes": 120, **policy}]}},
        Path("s.toml"),
    )


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


@pytest.fixture
def running(ledger):
    ingest(
        ledger,
        jobs=[job("r/1", 0, None, state="RUNNING")],
        gpus=[gpu("r1:0")],
        allocations=[alloc("r/1", "r1:0", 0, None)],
        samples=five_min("r1:0", 0, [90.0] * 12),
    )
    set_test_prices(ledger)
    return ledger


def feed(con, minutes: float) -> None:
    """0 % samples every 5 minutes from where the ledger's telemetry ends up to ``minutes`` (the last sample
    stands 5 minutes: it ends at ``minutes`` when that is a multiple of 5)."""
    last = con.execute("SELECT max(ts) FROM samples").fetchall()[0][0]
    start = (last - T0).total_seconds() / 60 + 5
    n = int((minutes - start) // 5)
    if n > 0:
        ingest(con, samples=five_min("r1:0", start, [0.0] * n))


def plans(con, s, minutes: float, **kw: Any) -> list[tuple[str, dt.datetime, str | None]]:
    feed(con, minutes)
    return [(p.step.step, p.step.at, p.blocked) for p in due(con, s, at(minutes), **kw)]


def take(con, s, minutes: float) -> None:
    """Record every unblocked plan as taken at that minute (what --enforce does after acting)."""
    feed(con, minutes)
    con.execute("BEGIN TRANSACTION")
    for p in due(con, s, at(minutes)):
        if not p.blocked:
            record(con, p, at(minutes), None, None)
    con.execute("COMMIT")


def test_the_warning_then_the_cancel_each_once(running):
    s = settings()
    assert plans(running, s, 119) == []  # idle 59 min at 01:59: nothing due
    # at 03:00 (a guard started late): the warning, and the cancel waits for its own warning
    assert plans(running, s, 180) == [
        ("warn", at(120), None),
        ("cancel", at(180), "no warning of this idle run was sent yet"),
    ]
    take(running, s, 125)  # the warning went out at 02:05
    assert plans(running, s, 126) == []  # taken: not again; the cancel not due yet
    blocked = plans(running, s, 180)  # due at 03:00 but the owner has until 02:05 + 60 min = 03:05
    assert blocked == [("cancel", at(180), "its warning went out at 02:05; the owner has until 03:05")]
    assert plans(running, s, 185) == [("cancel", at(180), None)]
    p = due(running, s, at(185))[0]
    assert p.idle_gpu_hours == pytest.approx(2.0) and p.idle_usd == pytest.approx(8.0)  # 01:00-03:00 at $4


def test_stale_telemetry_and_exemptions_leave_the_job_alone(running):
    assert plans(running, settings(exemptions={"users": ["alice"]}), 185) == []
    feed(running, 185)  # telemetry up to 03:05, then silence
    stale = [(p.step.step, p.blocked) for p in due(running, settings(), at(185 + 16))]
    assert stale == []  # its last telemetry ended 16 minutes ago: stale (15), left alone
    assert due(running, settings(), at(185 + 16), fresh_minutes=30) != []


def test_after_a_checkpoint_signal_the_cancel_waits_its_grace(running):
    """cancel_minutes 100: the signal due at 02:40, the cancel 10 minutes (the grace) later, 02:50."""
    s = settings(cancel_minutes=100, checkpoint_signal="USR1", grace_minutes=10)
    take(running, s, 121)  # the warning at 02:01
    assert plans(running, s, 161) == [("signal", at(160), None)]  # the cancel (02:50) not due yet
    take(running, s, 162)  # the signal sent at 02:42
    assert plans(running, s, 171) == [("cancel", at(170), "its checkpoint grace runs until 02:52:00")]
    assert plans(running, s, 172) == [("cancel", at(170), None)]
