"""Spend per day (analytics/daily.py) on a hand-built ledger: every figure worked out in tests/budgets/ledgers.py."""

from __future__ import annotations

import polars as pl
import pytest

from analytics.daily import spend_by_day
from analytics.filters import Filters
from analytics.summary import summary
from tests.budgets.ledgers import day, two_days


@pytest.fixture
def con(ledger):
    two_days(ledger)
    return ledger


def _rows(frame: pl.DataFrame) -> dict[tuple[str, str], float]:
    return {(d.isoformat(), k): round(v, 6) for d, k, v in frame.iter_rows()}


def test_each_team_pays_for_its_days_and_capacity_nobody_held_is_its_own_line(con):
    got = _rows(spend_by_day(con, by="team"))
    assert got == {
        (day(0).isoformat(), "nlp"): 16.0,
        (day(0).isoformat(), "unallocated"): 16.0,
        (day(1).isoformat(), "nlp"): 16.0,
        (day(1).isoformat(), "cv"): 5.0,
        (day(1).isoformat(), "unallocated"): 64.0,
    }


def test_cluster_and_fleet_days_carry_the_capacity(con):
    assert _rows(spend_by_day(con, by="cluster")) == {
        (day(0).isoformat(), "c1"): 32.0,
        (day(1).isoformat(), "c1"): 85.0,
    }
    assert _rows(spend_by_day(con, by=None)) == {
        (day(0).isoformat(), "fleet"): 32.0,
        (day(1).isoformat(), "fleet"): 85.0,
    }


def test_days_add_up_to_the_summary_at_every_filter(con):
    for f in (
        Filters(),
        Filters(teams=("nlp",)),
        Filters(teams=("cv",)),
        Filters(since=day(1), until=day(1)),
    ):
        daily = spend_by_day(con, by="team", filters=f)["spend_usd"].sum()
        assert daily == pytest.approx(summary(con, filters=f)["spend_usd"], abs=1e-9)
    assert summary(con)["spend_usd"] == pytest.approx(117.0)


def test_an_empty_ledger_has_no_days(ledger):
    assert spend_by_day(ledger).height == 0
