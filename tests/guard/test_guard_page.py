"""The Guard page (pages/guard.py) in-process (streamlit AppTest), on the five hand-worked jobs of
tests/guard/ledgers.py and two guard_actions rows written through the live loop's own ``record``: the replay's
figures are those of tests/guard/test_replay.py, the actions' line that of analytics/guard_actions.py; the
weekly report carries the same line."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest

from analytics.filters import Filters
from gpuledger.guard.edge import Answer
from gpuledger.guard.live import Plan, record
from gpuledger.guard.replay import Job
from gpuledger.guard.steps import Step
from gpuledger.ledger.db import reader, writer
from gpuledger.ledger.guard_policy import Policy
from gpuledger.ledger.settings import load_settings
from gpuledger.reports.weekly import build_report
from tests.analytics.build import T0
from tests.conftest import app_page, filled_ledger
from tests.guard.ledgers import fill_five
from tests.guard.test_replay import SETTINGS_TOML


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The five jobs; the guard warned a/idle2 at 02:00 and cancelled it at 03:00 (answer accepted, planned end
    06:00): saved 1 GPU × (06:00 − 03:00) = 3 GPU-h × $4 = $12."""
    tmp = tmp_path_factory.mktemp("guardpage")
    with filled_ledger(tmp, fill_five, SETTINGS_TOML) as db:
        yield record_guarded(db, load_settings(tmp / "s.toml").guard.policies[0])


def record_guarded(db: str, policy: Policy) -> str:
    """a/idle2's warning and cancel, as the live guard records them."""
    job = Job("a/idle2", "test", "c1", "alice", "nlp", "a/idle2", "training", None, "H100-SXM-80GB", 1.0,
              "on_demand", T0, T0 + dt.timedelta(hours=3))  # fmt: skip
    run = T0 + dt.timedelta(hours=1)
    with writer(db) as con:
        con.execute("BEGIN TRANSACTION")
        record(con, Plan(job, policy, Step("warn", run + dt.timedelta(hours=1), run, True), 1.0, 4.0),
               run + dt.timedelta(hours=1), "<m1@x>", None)  # fmt: skip
        record(con, Plan(job, policy, Step("cancel", run + dt.timedelta(hours=2), run, False), 2.0, 8.0),
               run + dt.timedelta(hours=2), None, Answer(True, "scancel 7: exit 0", T0 + dt.timedelta(hours=6)))  # fmt: skip
        con.execute("COMMIT")
    return db


def test_the_page_shows_the_replay_and_the_actions(guarded: str) -> None:
    at = app_page("pages/guard.py")
    assert at.title[0].value == "Guard"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {
        "Jobs warned": "3",
        "Jobs cancelled": "2",
        "GPU-hours saved": "5.5",
        "$ saved": "$22.00",
        "False alarms": "1",
    }
    line = next(m.value for m in at.markdown if " cancelled, " in m.value)
    assert line.startswith("**1 job cancelled, 3.0 GPU-hours, $12.00 saved (to each job's planned end)")
    assert len(at.dataframe) == 2  # the replay's jobs and the actions


def test_the_weekly_report_has_the_guard_line(guarded: str) -> None:
    settings = load_settings()
    with reader(guarded) as con:
        text = build_report(con, filters=Filters(since=dt.date(2025, 3, 3), until=dt.date(2025, 3, 9)),
                            settings=settings, fmt="txt")  # fmt: skip
        other = build_report(con, filters=Filters(since=dt.date(2025, 3, 10), until=dt.date(2025, 3, 16)),
                             settings=settings, fmt="txt")  # fmt: skip
    assert "1 job cancelled, 3.0 GPU-hours, $12.00 saved (to each job's planned end); 1 job warned." in text
    assert "guard" not in other.lower()  # a week without guard steps has no such section
