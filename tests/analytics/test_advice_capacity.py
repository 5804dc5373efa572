"""Capacity advice on a hand-built ledger: the p95 demand, the GPUs to release, the off-peak hours.

Prices: H100 $3.00 per GPU-hour on demand (tests/analytics/recommend_ledgers.py). Cluster c1 declares 8 ×
H100; the ledger's data runs from T0 (the first job start) to 20:00 (the last job end): a 20 h window.
"""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

from analytics.advice_capacity import hourly_held, nearest_rank, offpeak_gpu_hours
from analytics.filters import Filters, horizon
from analytics.recommend import recommendations, view_coverage
from gpuledger.ledger.db import memory_ledger
from gpuledger.ledger.reference import load_reference
from gpuledger.ledger.settings import Capacity, ClusterSettings, Settings
from tests.analytics.build import H100, T0, ingest, job
from tests.analytics.recommend_ledgers import set_prices

SETTINGS = Settings(clusters={"c1": ClusterSettings(capacity=(Capacity(H100, 8),))})


@pytest.fixture(scope="module")
def con():
    con = memory_ledger()
    load_reference(con, SETTINGS)
    set_prices(con)
    ingest(
        con,
        jobs=[
            job("spike", 0, 60, gpu_count=6.0, name="sweep-1"),  # hour 0 only
            job("base", 0, 1200, name="serve-1", kind="inference"),  # hours 0–19
            job("half", 0, 600, name="train-1"),  # hours 0–9
        ],
    )
    yield con
    con.close()


def test_nearest_rank_percentile():
    # 20 values: the 95th percentile is the ⌈0.95 × 20⌉ = 19th smallest
    values = [1.0] * 10 + [2.0] * 9 + [8.0]
    assert nearest_rank(values, 0.95) == 2.0
    assert nearest_rank(values, 0.5) == 1.0  # the 10th smallest
    assert nearest_rank([], 0.95) == 0.0


def test_hourly_held_gpus(con):
    hi = horizon(con)
    held = hourly_held(con, "c1", H100, T0, hi)
    # hour 0: 6 + 1 + 1 = 8; hours 1–9: base + half = 2; hours 10–19: base = 1
    assert held == [8.0] + [2.0] * 9 + [1.0] * 10


# The rule as plain SQL: every hour of the window against every job that overlaps it (what hourly_held_many
# computed before it summed each job's own hours).
HOURS_BY_RANGE_JOIN = """
    WITH hours AS (SELECT unnest(generate_series(?::TIMESTAMP, ?::TIMESTAMP - INTERVAL 1 HOUR, INTERVAL 1 HOUR)) AS h),
    j AS (SELECT gpu_count, start_ts, coalesce(end_ts, ?::TIMESTAMP) AS end_ts FROM jobs
          WHERE cluster = ? AND gpu_model = ? AND start_ts IS NOT NULL)
    SELECT coalesce(sum(j.gpu_count * greatest(0, epoch(least(j.end_ts, h + INTERVAL 1 HOUR) - greatest(j.start_ts, h))))
                    / 3600.0, 0)
    FROM hours LEFT JOIN j ON j.start_ts < h + INTERVAL 1 HOUR AND j.end_ts > h GROUP BY h ORDER BY h
"""


@pytest.mark.parametrize(
    ("start_min", "length_min"),
    [(0, 1200), (-90, 300), (30, 61), (45, 150), (595, 600), (1190, 240), (-600, 100), (17, 1)],
)
def test_hourly_held_equals_every_hour_against_every_job(con, start_min, length_min):
    """Windows starting off the hour, ending mid-hour (the partial hour is no hour of the window), before
    the data, past it, and shorter than an hour (no hours)."""
    lo = T0 + dt.timedelta(minutes=start_min)
    hi = lo + dt.timedelta(minutes=length_min)
    expected = [r[0] for r in con.execute(HOURS_BY_RANGE_JOIN, [lo, hi, hi, "c1", H100]).fetchall()]
    assert len(expected) == length_min // 60
    assert hourly_held(con, "c1", H100, lo, hi) == pytest.approx(expected, abs=1e-9)


def test_offpeak_hours_count_stretches_of_two_hours_or_more():
    # kept 2: free = 0 in hours 0–9, 1 in hours 10–19; pairs (h−1, h) with both free: hours 11–19 → 9
    assert offpeak_gpu_hours([8.0] + [2.0] * 9 + [1.0] * 10, 2) == 9.0
    assert offpeak_gpu_hours([0.0, 4.0, 0.0], 4) == 0.0  # free 4, 0, 4: never two hours in a row


def test_release_to_the_p95_demand_and_the_off_peak_rest(con):
    recs = recommendations(con, filters=Filters(), settings=SETTINGS, min_usd_per_week=0.0, problems=False)
    rel = recs.filter(pl.col("kind") == "release_capacity").to_dicts()
    off = recs.filter(pl.col("kind") == "offpeak_capacity").to_dicts()
    assert len(rel) == 1 and len(off) == 1
    rel, off = rel[0], off[0]
    # p95 of the hours above = 2: keep 2, release 6 of 8. The 6 released GPUs' unheld hours:
    # hour 0: min(6, 8 − 8) = 0; hours 1–9: min(6, 6) = 6 each; hours 10–19: min(6, 7) = 6 each → 114 GPU-h
    assert rel["action"].startswith(f"Release 6 of the 8 {H100} on c1 (keep 2, the p95 demand)")
    assert rel["saving_usd"] == pytest.approx(114 * 3.00)  # $342
    # unallocated: 8 × 20 = 160 GPU-h declared, 6 + 20 + 10 = 36 held → 124 GPU-h × $3 = $372
    assert "124 GPU-hours ($372.00) went unheld" in rel["evidence"]
    # the 2 kept GPUs: 9 GPU-hours free two hours in a row (hours 11–19), at most 372 − 342 = $30 left
    assert off["saving_usd"] == pytest.approx(9 * 3.00)
    assert off["confidence"] == "low"
    # a cluster's capacity recurs: $/week = saving × 7 / 1 (a 20 h view floors at one day)
    assert rel["recurring"] and rel["usd_per_week"] == pytest.approx(342 * 7)
    assert rel["kind_label"] == "Release unused capacity"


def test_coverage_counts_the_unallocated_dollars_once(con):
    recs = recommendations(con, filters=Filters(), settings=SETTINGS, min_usd_per_week=0.0, problems=False)
    cov = view_coverage(con, recs, settings=SETTINGS)
    # two items (release, off-peak) concern c1's capacity: its $372 counts once
    assert cov["by_part"]["unallocated_usd"] == {"usd": 372.0, "addressed_usd": 372.0}
    assert cov["addressable_usd"] == pytest.approx(sum(p["usd"] for p in cov["by_part"].values()))
    without = view_coverage(con, recs.filter(pl.col("kind") != "release_capacity").head(0), settings=SETTINGS)
    assert without["addressed_usd"] == 0.0 and without["addressed_pct"] == 0.0
