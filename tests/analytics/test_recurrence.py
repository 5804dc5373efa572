"""Recurring or one-off by the job's history (analytics/recurrence.py): the one-offs of the weeks inside a range
add up to the range's, on a hand-built ledger.

Prices: H100 $3.00 per GPU-hour on demand (tests/analytics/recommend_ledgers.py); no telemetry, so the only
advice is on failed runs. Each run ran out of memory with no checkpoint: its failed $ is its whole cost, and
``oom_smaller_batch`` would have saved all of it (the largest item of its problem).

- erin's ``oom-erin`` (W10, 1 GPU × 60 min = $3.00) and fay's ``probe-fay`` (W11, 2 GPUs × 90 min =
  $9.00) are the only runs of their families and their users' only jobs: one-offs at every range;
- gus's ``sweep-gus-1`` (W10, 1 GPU × 120 min = $6.00) and ``sweep-gus-2`` (W11, 60 min = $3.00) are two
  runs of one family: recurring at every range. Under the old rule (≥ 2 runs inside the view) each was a
  one-off in its own week and recurring in the fortnight: W10 $9.00 + W11 $12.00 = $21.00 of one-offs
  against the fortnight's $12.00.
"""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

from analytics.filters import Filters, horizon
from analytics.recommend import recommendations
from analytics.recurrence import history
from analytics.savings import savings_total
from gpuledger.ledger.db import memory_ledger
from tests.analytics.build import T0, ingest, job
from tests.analytics.recommend_ledgers import set_prices

WEEK = 7 * 24 * 60  # minutes
W10 = Filters(since=T0.date(), until=T0.date() + dt.timedelta(days=6))
W11 = Filters(since=T0.date() + dt.timedelta(days=7), until=T0.date() + dt.timedelta(days=13))
BOTH = Filters(since=W10.since, until=W11.until)


@pytest.fixture(scope="module")
def con():  # type: ignore[no-untyped-def]
    c = memory_ledger()
    set_prices(c)
    ingest(
        c,
        jobs=[
            job("e1", 60, 120, user_name="erin", team="vision", name="oom-erin", state="OOM"),
            job("f1", WEEK + 60, WEEK + 150, gpu_count=2.0, user_name="fay", name="probe-fay", state="OOM"),
            job("g1", 60, 180, user_name="gus", name="sweep-gus-1", state="OOM"),
            job("g2", WEEK + 60, WEEK + 120, user_name="gus", name="sweep-gus-2", state="OOM"),
        ],
    )
    yield c
    c.close()


def _one_offs(con, filters: Filters) -> tuple[dict[str, float], float]:  # type: ignore[no-untyped-def]
    recs = recommendations(
        con, filters=filters
    )  # the default $1 floor: a one-off's $ is held against it as is
    once = recs.filter(pl.col("recurring").not_())
    by_target = dict(zip(once["target"].to_list(), once["saving_usd"].to_list(), strict=True))
    return by_target, float(savings_total(recs, whole=True)["one_off_saved_usd"])


def test_the_one_offs_of_the_weeks_add_up_to_the_fortnights(con) -> None:  # type: ignore[no-untyped-def]
    w10, w10_usd = _one_offs(con, W10)
    w11, w11_usd = _one_offs(con, W11)
    both, both_usd = _one_offs(con, BOTH)
    assert w10 == pytest.approx({"erin/oom-erin": 3.00})  # 1 GPU × 1 h × $3
    assert w11 == pytest.approx({"fay/probe-fay": 9.00})  # 2 GPUs × 1.5 h × $3
    assert both == pytest.approx({"erin/oom-erin": 3.00, "fay/probe-fay": 9.00})
    assert (w10_usd, w11_usd, both_usd) == (3.00, 9.00, 12.00)
    assert w10_usd + w11_usd == both_usd


def test_a_family_with_two_runs_in_the_ledger_recurs_in_a_week_that_holds_one(con) -> None:  # type: ignore[no-untyped-def]
    for filters, saving in ((W10, 6.00), (W11, 3.00)):  # sweep-gus-1: 2 h × $3; sweep-gus-2: 1 h × $3
        recs = recommendations(con, filters=filters)
        (gus,) = recs.filter(pl.col("target") == "gus/sweep-gus").to_dicts()
        assert gus["recurring"] is True
        assert gus["saving_usd"] == pytest.approx(saving)
        assert gus["usd_per_week"] is not None


def test_history_reads_the_ledger_up_to_the_horizon_not_the_view(con) -> None:  # type: ignore[no-untyped-def]
    ids = ["e1", "f1", "g1", "g2"]
    jobs, users = history(con, ids, horizon(con))
    assert jobs == {"g1", "g2"}
    assert users == {"gus"}  # erin and fay have one job each: no habit
    # up to a horizon before sweep-gus-2 started, the family had run once: then a one-off
    jobs, users = history(con, ids, T0 + dt.timedelta(days=1))
    assert jobs == set() and users == set()
