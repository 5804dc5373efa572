"""The Overview's figures (analytics/overview.py) on a hand-built ledger, each worked out by hand or by plain
SQL over the raw tables, never by another output of the same code.

The ledger (H100 at the test sheet's $4.00/GPU-h, cluster c1 declaring 2 H100s):

- week 2025-W09 (Mon 2025-02-24): j0 (nlp) 1 GPU 00:00–02:00 at 90 %;
- week 2025-W10 (Mon 2025-03-03, T0): j1 (nlp) 1 GPU 00:00–02:00, 60 min at 90 % then 60 min at 0 % (one
  idle stretch); j2 (vision) 1 GPU 00:00–01:00 at 50 %, FAILED with no checkpoint (its hour is badput).
"""

from __future__ import annotations

import datetime as dt

import pytest

from analytics.filters import Filters
from analytics.overview import demo_ledger, headline, overview, team_rows
from gpuledger.ledger.reference import load_reference
from gpuledger.ledger.settings import Capacity, ClusterSettings, Settings
from tests.analytics.build import H100, alloc, gpu, ingest, job, series, set_test_prices

RATE = 4.0
WEEK = 7 * 24 * 60  # minutes
W09 = Filters(dt.date(2025, 2, 24), dt.date(2025, 3, 2))
W10 = Filters(dt.date(2025, 3, 3), dt.date(2025, 3, 9))
SETTINGS = Settings(clusters={"c1": ClusterSettings(capacity=(Capacity(H100, 2),))})


@pytest.fixture
def con(ledger):
    load_reference(ledger, SETTINGS)
    set_test_prices(ledger)
    ingest(
        ledger,
        jobs=[
            job("j0", -WEEK, -WEEK + 120),
            job("j1", 0, 120),
            job("j2", 0, 60, team="vision", user_name="carol", state="FAILED"),
        ],
        allocations=[
            alloc("j0", "n1:0", -WEEK, -WEEK + 120),
            alloc("j1", "n1:0", 0, 120),
            alloc("j2", "n1:1", 0, 60),
        ],
        samples=series("n1:0", -WEEK, [90.0] * 120)
        + series("n1:0", 0, [90.0] * 60 + [0.0] * 60)
        + series("n1:1", 0, [50.0] * 60),
        gpus=[gpu("n1:0"), gpu("n1:1")],
    )
    return ledger


def plain_util(
    con, since: dt.datetime, until: dt.datetime, gpus: tuple[str, ...] = ("n1:0", "n1:1")
) -> float:
    """Time-weighted utilization straight from the samples table."""
    marks = ", ".join("?" for _ in gpus)
    return con.execute(
        f"""SELECT sum(util_pct * interval_s) / sum(interval_s) FROM samples
            WHERE ts >= ? AND ts < ? AND gpu_id IN ({marks})""",
        [since, until, *gpus],
    ).fetchone()[0]


def plain_held_hours(con, since: dt.datetime, until: dt.datetime) -> float:
    return con.execute(
        """SELECT sum(gpu_count * date_diff('second', greatest(start_ts, ?), least(end_ts, ?)) / 3600.0)
           FROM jobs WHERE start_ts < ? AND end_ts > ?""",
        [since, until, until, since],
    ).fetchone()[0]


def test_the_headline_splits_team_waste_from_the_capacity_no_job_held(con):
    h = headline(con, filters=W10, settings=SETTINGS)
    lo, hi = W10.lo, dt.datetime(2025, 3, 3, 2)  # the data ends at j1's end: the horizon
    held = plain_held_hours(con, lo, hi)
    assert held == pytest.approx(3.0)  # j1 2 h + j2 1 h
    # capacity 2 GPUs × 2 h (week start to the horizon) − 3 held = 1 GPU-h nobody held
    assert h["unallocated_gpu_hours"] == pytest.approx(2 * 2 - held)
    assert h["unheld_capacity_usd"] == pytest.approx(1 * RATE)
    assert h["spend_usd"] == pytest.approx(held * RATE + 1 * RATE)  # $16
    # the teams' waste: j1's idle hour ($4) + j2's failed hour, no checkpoint: all badput ($4)
    assert h["waste"]["idle_allocated_usd"] == pytest.approx(1 * RATE)
    assert h["badput_usd"] == pytest.approx(1 * RATE)
    assert h["waste"]["underused_usd"] == pytest.approx(0.0)  # 90 % is above the 60 % target
    assert h["team_waste_usd"] == pytest.approx(2 * RATE)
    assert h["team_waste_pct"] == pytest.approx(100.0 * 8 / 12)  # of the jobs' $12, not of the $16 spend
    # held-GPU utilization: (90 × 60 + 0 × 60 + 50 × 60) / 180 minutes
    util = plain_util(con, lo, hi)
    assert util == pytest.approx((90 * 60 + 50 * 60) / 180)
    assert h["held_util_pct"] == pytest.approx(util)
    # capacity utilization: the held busy GPU-hours over all 4 paid-for GPU-hours
    assert h["capacity_util_pct"] == pytest.approx(util * held / 4.0)


def test_the_team_rows_and_the_capacity_row_add_up_to_the_spend(con):
    rows = {r["team"]: r for r in team_rows(con, filters=W10, settings=SETTINGS).iter_rows(named=True)}
    assert list(rows) == ["nlp", "vision", "unallocated"]  # largest spend first, capacity last
    assert rows["nlp"]["spend_usd"] == pytest.approx(2 * RATE)
    assert rows["nlp"]["team_waste_usd"] == pytest.approx(1 * RATE)  # its idle hour
    assert rows["nlp"]["waste_pct"] == pytest.approx(50.0)
    assert rows["nlp"]["util_pct"] == pytest.approx(plain_util(con, W10.lo, W10.hi, ("n1:0",)))  # 45 %
    assert rows["vision"]["waste_pct"] == pytest.approx(100.0)  # the failed hour, all badput
    assert rows["vision"]["util_pct"] == pytest.approx(50.0)
    cap = rows["unallocated"]
    assert cap["spend_usd"] == pytest.approx(1 * RATE)
    assert cap["team_waste_usd"] is None and cap["util_pct"] is None  # not a team's
    total = sum(r["spend_usd"] for r in rows.values())
    assert total == pytest.approx(headline(con, filters=W10, settings=SETTINGS)["spend_usd"])


def test_changes_are_against_the_week_before(con):
    o = overview(con, filters=W10, previous=W09, settings=SETTINGS)
    assert o.before is not None
    # W09: j0's 2 h at $4, and the week's 2 × 168 declared GPU-hours less those 2 held, unallocated
    assert o.before["spend_usd"] == pytest.approx(2 * RATE + (2 * 168 - 2) * RATE)
    rows = {r["team"]: r for r in o.teams.iter_rows(named=True)}
    assert rows["nlp"]["spend_before_usd"] == pytest.approx(2 * RATE)
    assert rows["nlp"]["spend_change_usd"] == pytest.approx(0.0)
    assert rows["nlp"]["waste_pct_change_pts"] == pytest.approx(50.0 - 0.0)  # no waste in W09
    assert rows["nlp"]["util_change_pts"] == pytest.approx(45.0 - 90.0)
    # vision did not run in W09: it spent nothing then, and has no earlier waste % or utilization
    assert rows["vision"]["spend_before_usd"] == 0.0
    assert rows["vision"]["waste_pct_change_pts"] is None
    assert rows["unallocated"]["spend_change_usd"] == pytest.approx(1 * RATE - (2 * 168 - 2) * RATE)


def test_a_period_before_with_no_data_gives_no_changes(con):
    empty = Filters(dt.date(2025, 2, 10), dt.date(2025, 2, 16))  # before the ledger's first sample
    o = overview(con, filters=W09, previous=empty, settings=SETTINGS)
    assert o.before is None
    assert o.teams["spend_change_usd"].null_count() == o.teams.height


def test_a_team_view_has_no_capacity_and_equals_its_team_row(con):
    f = Filters(W10.since, W10.until, teams=("nlp",))
    h = headline(con, filters=f, settings=SETTINGS)
    assert h["unheld_capacity_usd"] == 0.0 and h["capacity_util_pct"] is None
    assert h["spend_usd"] == pytest.approx(2 * RATE)
    assert h["team_waste_pct"] == pytest.approx(50.0)
    assert [r["team"] for r in team_rows(con, filters=f, settings=SETTINGS).iter_rows(named=True)] == ["nlp"]


def test_the_demo_is_recognised_by_its_ingest_record(ledger):
    assert demo_ledger(ledger) is None
    ledger.execute(
        "INSERT INTO ingests VALUES (1, 'demo://fleet?days=28&seed=7&end=2026-11-23', 'demo', 'x', 'demo', "
        "'{}', '{}', now()::TIMESTAMP)"
    )
    d = demo_ledger(ledger)
    assert d is not None
    # 28 whole days ending before midnight of 2026-11-23: 2026-10-26 (a Monday) to 2026-11-22
    assert (d.first_day, d.last_day, d.days, d.seed) == (dt.date(2026, 10, 26), dt.date(2026, 11, 22), 28, 7)
