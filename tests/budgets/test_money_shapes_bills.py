"""Chargeback and daily spend over the generated cluster shapes of the money properties
(tests/analytics/money_shapes.py: MIG instances, time-slicing, host-level ties, silent hosts, requeues, a price
change at midnight, unclaimed cards): the month's bill adds up to the month's spend to the cent under every rule,
each team's used $ is its summary spend to the cent, a team's line is the same with or without --team, and the
days add up to the view per team."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings

from analytics.daily import spend_by_day
from analytics.filters import Filters
from analytics.shared import sharing
from analytics.summary import summary
from gpuledger.chargeback.bill import POOL, RULES, chargeback, month_bounds
from gpuledger.ledger.settings import Settings
from tests.analytics.build import T0
from tests.analytics.money_shapes import Shape, shapes
from tests.analytics.test_money_properties import land

EXAMPLES = int(os.environ.get("MONEY_EXAMPLES_BILLS", "6"))
MONTH = T0.strftime("%Y-%m")


@settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("MONEY_RANDOM"),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(shapes())
def test_bills_and_days_add_up(shape: Shape) -> None:
    con = land(shape)
    try:
        with sharing(con):
            first, last = month_bounds(MONTH)
            month = summary(con, filters=Filters(first, last))
            spend = round(month["spend_usd"], 2)
            for rule in RULES:
                bill = chargeback(con, MONTH, share_idle=rule, settings=Settings())
                cents = sum(round(r["total_usd"] * 100) for r in bill["rows"])
                assert cents == round(spend * 100), (rule, bill)
                for r in bill["rows"]:
                    assert r["used_usd"] >= 0 and r["shared_usd"] >= 0
                    if r["team"] not in POOL:
                        own = summary(con, filters=Filters(first, last, teams=(r["team"],)))["spend_usd"]
                        assert abs(r["used_usd"] - own) <= 0.01 + 1e-9, (rule, r, own)
                        only = chargeback(
                            con, MONTH, share_idle=rule, settings=Settings(), teams=(r["team"],)
                        )
                        assert only["rows"] == [r]
            days = spend_by_day(con, by="team")
            for team in days["key"].unique().to_list():
                got = days.filter(days["key"] == team)["spend_usd"].sum()
                want = summary(con, filters=Filters(teams=(team,)))["spend_usd"]
                assert got == pytest.approx(want, abs=1e-6), team
    finally:
        con.close()
