"""waste_by_week: the spend per key per ISO week in one query, equal to waste_by run once per week.

The ledger crosses the week boundary 2025-W10 | 2025-W11 (Sunday 9 → Monday 10 March 2025) with a price change
exactly there, an idle stretch across it, unallocated capacity on both sides and a telemetry-only GPU seen in
both weeks with a gap between, so every rule that cuts at the boundary is exercised.
"""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from analytics.filters import Filters
from analytics.shared import sharing
from analytics.telemetry_source import ROLLUPS, TelemetrySource
from analytics.waste import (
    PARTS,
    spend_by_week,
    unallocated,
    unallocated_weeks,
    view_weeks,
    waste_by,
    waste_by_week,
)
from gpuledger.ledger.reference import load_reference
from gpuledger.ledger.settings import Capacity, ClusterSettings, Settings
from tests.analytics.build import H100, alloc, gpu, ingest, job, series, set_test_prices
from tests.analytics.oracle import ORACLE

SUN_20H = (6 * 24 + 20) * 60  # minutes from T0 (Monday 2025-03-03 00:00) to Sunday 9 March 20:00
SETTINGS = Settings(clusters={"c1": ClusterSettings(capacity=(Capacity(H100, 2),))})


@pytest.fixture
def con(ledger):
    load_reference(ledger, SETTINGS)
    set_test_prices(ledger)
    # From Monday 10 March the H100 costs $6.00/GPU-h instead of $4.00.
    ledger.execute(
        "INSERT INTO prices VALUES (?, 'on_demand', NULL, DATE '2025-03-10', 6.0, 'test price', "
        "DATE '2025-03-10', 'sheet', NULL)",
        [H100],
    )
    ingest(
        ledger,
        # 1 × H100, Sunday 20:00 → Monday 04:00: busy 2 h, idle 4 h across midnight, busy 2 h.
        jobs=[job("long", SUN_20H, SUN_20H + 8 * 60)],
        allocations=[alloc("long", "h1:0", SUN_20H, SUN_20H + 8 * 60)],
        samples=series("h1:0", SUN_20H, [90.0] * 120 + [0.0] * 240 + [90.0] * 120)
        # a T4 no job claims: 30 min on Sunday from 20:00, 30 min on Monday from 03:00
        + series("ws:0", SUN_20H, [50.0] * 30)
        + series("ws:0", SUN_20H + 7 * 60, [50.0] * 30),
        gpus=[gpu("h1:0"), gpu("ws:0", model="T4", cluster="lab")],
    )
    return ledger


def per_week_loop(con, filters: Filters, source: TelemetrySource) -> pl.DataFrame:
    """The independent reference: waste_by once per week of the view, stacked."""
    frames = [
        waste_by(con, by="team", filters=f, settings=SETTINGS, source=source).with_columns(
            pl.lit(week).alias("week")
        )
        for week, f in view_weeks(con, filters)
    ]
    cols = ["week", "key", "spend_usd", *PARTS, "team_waste_usd"]
    return pl.concat(frames).select(cols).sort("week", "key")


def test_each_week_is_priced_and_split_on_its_own_side_of_the_boundary(con):
    out = waste_by_week(con, by="team", settings=SETTINGS)
    rows = {(r["week"], r["key"]): r for r in out.iter_rows(named=True)}
    assert set(rows) == {
        (w, k) for w in ("2025-W10", "2025-W11") for k in ("nlp", "unallocated", "unattributed")
    }
    # W10, Sunday 20:00–24:00 at $4: busy 2 h = $8 productive, idle 22:00–24:00 = 2 h × $4 = $8.
    w10 = rows[("2025-W10", "nlp")]
    assert w10["spend_usd"] == pytest.approx(4 * 4.0)
    assert w10["idle_allocated_usd"] == pytest.approx(2 * 4.0)
    assert w10["productive_usd"] == pytest.approx(2 * 4.0)
    # W11, Monday 00:00–04:00 at $6: idle 00:00–02:00 = $12, busy 2 h = $12.
    w11 = rows[("2025-W11", "nlp")]
    assert w11["spend_usd"] == pytest.approx(4 * 6.0)
    assert w11["idle_allocated_usd"] == pytest.approx(2 * 6.0)
    assert w11["productive_usd"] == pytest.approx(2 * 6.0)
    # Capacity 2 H100 × 4 h per side, 1 × 4 h held: 4 GPU-h unallocated at $4, then at $6.
    assert rows[("2025-W10", "unallocated")]["unallocated_usd"] == pytest.approx(4 * 4.0)
    assert rows[("2025-W11", "unallocated")]["unallocated_usd"] == pytest.approx(4 * 6.0)
    # The T4's pseudo-job runs from its first sample in the ledger (Sunday 20:00) to the end of its last
    # (Monday 03:30), its silence included, and each week takes its part: 4 h × $0.50 and 3.5 h × $0.50, which
    # add up to the whole view's 7.5 h ($3.75; before, the weeks gave 0.5 h each and $3.25 of it vanished).
    assert rows[("2025-W10", "unattributed")]["spend_usd"] == pytest.approx(4.0 * 0.5)
    assert rows[("2025-W11", "unattributed")]["spend_usd"] == pytest.approx(3.5 * 0.5)
    whole = waste_by(con, by="team", settings=SETTINGS).filter(pl.col("key") == "unattributed")
    assert whole["spend_usd"][0] == pytest.approx(7.5 * 0.5)
    # Parts sum to spend in every row.
    for r in out.iter_rows(named=True):
        assert sum(r[p] for p in PARTS) == pytest.approx(r["spend_usd"], abs=1e-9)


def test_jobs_and_capacity_sum_to_the_whole_view_spend(con):
    out = waste_by_week(con, by="team", settings=SETTINGS)
    whole = waste_by(con, by="team", settings=SETTINGS)
    for team in ("nlp", "unallocated"):
        weekly = out.filter(pl.col("key") == team)["spend_usd"].sum()
        assert weekly == pytest.approx(whole.filter(pl.col("key") == team)["spend_usd"].item())
    # by hand: job 4 h × $4 + 4 h × $6 = $40; unallocated the same 4 + 4 GPU-h = $40
    assert out.filter(pl.col("key") != "unattributed")["spend_usd"].sum() == pytest.approx(80.0)


@pytest.mark.parametrize("source", [ROLLUPS, ORACLE], ids=["rollups", "oracle"])
@pytest.mark.parametrize(
    "filters",
    [
        Filters(),
        Filters(teams=("nlp",)),
        Filters(since=dt.date(2025, 3, 9), until=dt.date(2025, 3, 10)),
        Filters(since=dt.date(2025, 3, 10), clusters=("c1",)),
        Filters(teams=("unallocated", "unattributed")),
    ],
    ids=["all", "team", "two-days", "from-monday-one-cluster", "pseudo-teams"],
)
def test_equals_waste_by_run_once_per_week(con, filters, source):
    expected = per_week_loop(con, filters, source)
    got = waste_by_week(con, by="team", filters=filters, settings=SETTINGS, source=source).sort("week", "key")
    assert got.height == expected.height > 0
    assert_frame_equal(got, expected, check_exact=False, rel_tol=1e-9, abs_tol=1e-9)


@pytest.mark.parametrize("by", ["team", "cluster", "gpu_model"])
@pytest.mark.parametrize(
    "filters",
    [Filters(), Filters(teams=("nlp",)), Filters(since=dt.date(2025, 3, 10), clusters=("c1",))],
    ids=["all", "team", "from-monday-one-cluster"],
)
def test_spend_alone_equals_the_spend_of_the_parts(con, filters, by):
    """spend_by_week (the Overview's bars, and waste_by_week's spend column; no telemetry) equals the sum of
    waste_by_week's parts, row for row: money never disappears."""
    got = spend_by_week(con, by=by, filters=filters, settings=SETTINGS)
    expected = waste_by_week(con, by=by, filters=filters, settings=SETTINGS).select(
        "week", "key", pl.sum_horizontal(*PARTS).alias("spend_usd")
    )
    assert got.height == expected.height > 0
    assert_frame_equal(got, expected, check_exact=False, rel_tol=1e-9, abs_tol=1e-9)


def test_spend_alone_by_hand(con):
    rows = {
        (r["week"], r["key"]): r["spend_usd"]
        for r in spend_by_week(con, settings=SETTINGS).iter_rows(named=True)
    }
    # the job: 4 h × $4 in W10, 4 h × $6 in W11; the capacity nobody held: the same GPU-hours; the T4's
    # pseudo-job (Sunday 20:00 to Monday 03:30): 4 h and 3.5 h × $0.50
    assert rows == pytest.approx(
        {
            ("2025-W10", "nlp"): 16.0,
            ("2025-W11", "nlp"): 24.0,
            ("2025-W10", "unallocated"): 16.0,
            ("2025-W11", "unallocated"): 24.0,
            ("2025-W10", "unattributed"): 2.0,
            ("2025-W11", "unattributed"): 1.75,
        }
    )
    with pytest.raises(ValueError, match="unknown grouping 'week'"):
        spend_by_week(con, by="week")
    assert spend_by_week(con, filters=Filters(since=dt.date(2030, 1, 1))).is_empty()


@pytest.mark.parametrize(
    "filters",
    [
        Filters(),
        Filters(since=dt.date(2025, 3, 10)),
        Filters(until=dt.date(2025, 3, 9)),
        Filters(clusters=("c1",)),
        Filters(teams=("unallocated",)),
    ],
    ids=["all", "from-monday", "to-sunday", "one-cluster", "the-unallocated-team"],
)
def test_the_view_capacity_read_from_the_weeks_statement_equals_it_alone(con, filters):
    """The Overview asks for its weeks' capacity first; the view's own then comes from that statement."""
    alone = unallocated(con, filters=filters, settings=SETTINGS)  # outside a sharing block: computed alone
    with sharing(con):
        view, weeks = unallocated_weeks(con, filters=filters, settings=SETTINGS)
        read = unallocated(con, filters=filters, settings=SETTINGS)
    assert view is not None and alone.height > 0
    assert_frame_equal(read, alone, check_exact=False, rel_tol=1e-12, abs_tol=1e-9)
    # and the weeks' rows sum to it (capacity nobody held is additive over the weeks here)
    assert weeks["unallocated_usd"].sum() == pytest.approx(alone["unallocated_usd"].sum())


def test_an_open_view_whose_data_runs_past_its_last_midnight_computes_its_capacity_alone(ledger):
    """A sample at 23:59:30 for 60 s ends after the midnight that ends the last day: the view's window runs to
    that end, the weeks' stop at midnight, so the view's capacity is not read from the weeks' statement."""
    load_reference(ledger, SETTINGS)
    set_test_prices(ledger)
    ingest(
        ledger,
        jobs=[job("j", 0, 60)],
        allocations=[alloc("j", "h1:0", 0, 60)],
        samples=series("h1:0", 0, [90.0] * 60) + series("h1:0", 24 * 60 - 0.5, [10.0]),
        gpus=[gpu("h1:0")],
    )
    alone = unallocated(ledger, settings=SETTINGS)
    with sharing(ledger):
        view, _ = unallocated_weeks(ledger, settings=SETTINGS)
        read = unallocated(ledger, settings=SETTINGS)
    assert view is None
    assert_frame_equal(read, alone)
    # capacity 2 H100 declared from the first job to the end of the last sample (00:00:30 on day 2): 24 h 30 s
    assert read["capacity_gpu_hours"].sum() == pytest.approx(2 * (24 + 30 / 3600))


def test_view_weeks_cover_the_data_and_an_unknown_key_is_refused(con):
    assert [(w, f.since, f.until) for w, f in view_weeks(con, Filters())] == [
        ("2025-W10", dt.date(2025, 3, 9), dt.date(2025, 3, 9)),
        ("2025-W11", dt.date(2025, 3, 10), dt.date(2025, 3, 10)),
    ]
    with pytest.raises(ValueError, match="unknown grouping 'week'"):
        waste_by_week(con, by="week")


def test_an_empty_ledger_has_no_rows(ledger):
    assert waste_by_week(ledger).is_empty()


def test_prefetched_weeks_capacity_equals_each_week_alone(con, monkeypatch):
    """The items scan prefetches every week's unallocated capacity in one statement
    (analytics.capacity.prefetch_unallocated); each week's unallocated() then reads it, and equals the week
    computed alone, on both sides of the price change. A view outside the data, or views of other teams,
    are not prefetched: they compute alone; outside a block nothing is kept."""
    import analytics.capacity as capacity

    weeks = [
        Filters(since=dt.date(2025, 3, 3), until=dt.date(2025, 3, 9)),
        Filters(since=dt.date(2025, 3, 10), until=dt.date(2025, 3, 16)),
    ]
    outside = Filters(since=dt.date(2030, 1, 7), until=dt.date(2030, 1, 13))
    nlp = Filters(since=weeks[1].since, until=weeks[1].until, teams=("unallocated", "nlp"))
    alone = [unallocated(con, filters=f, settings=SETTINGS) for f in weeks]  # outside a block: alone
    assert all(a["unallocated_usd"].sum() > 0 for a in alone)  # capacity nobody held on both sides
    calls: list[int] = []
    real = capacity._unallocated_sql
    monkeypatch.setattr(capacity, "_unallocated_sql", lambda *a, **k: calls.append(1) or real(*a, **k))
    with sharing(con):
        capacity.prefetch_unallocated(con, [*weeks, outside], settings=SETTINGS)
        read = [unallocated(con, filters=f, settings=SETTINGS) for f in weeks]
        assert calls == []  # read from the one statement
        for got, expected in zip(read, alone, strict=True):
            assert got.equals(expected), (got, expected)  # to the bit (the 28-day demo's four weeks too)
        assert unallocated(con, filters=outside, settings=SETTINGS).is_empty()
        assert len(calls) == 1  # the view outside the data: alone
        capacity.prefetch_unallocated(con, [weeks[0], nlp], settings=SETTINGS)  # other teams: not prefetched
        unallocated(con, filters=nlp, settings=SETTINGS)
        assert len(calls) == 2
    capacity.prefetch_unallocated(con, weeks, settings=SETTINGS)  # outside a block: nothing kept
    assert unallocated(con, filters=weeks[0], settings=SETTINGS).equals(alone[0])
    assert len(calls) == 3
