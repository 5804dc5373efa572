"""analytics/whatif.py, worked by hand on a three-job view."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

from analytics.savings import with_counted
from analytics.whatif import (
    after_model_change,
    capacity_utilization_pct,
    recommendations_change,
    reprice_model,
    reprice_team_on_spot,
    what_if,
)
from gpuledger.ledger.prices import BookRow, PriceBook

D = dt.date(2025, 1, 1)


def row(model: str, tier: str, usd: float, since: dt.date = D, cluster: str | None = None) -> BookRow:
    return BookRow(model, tier, cluster, since, usd, "test", D, "sheet")


PRICES = PriceBook(
    (
        row("H100-SXM-80GB", "on_demand", 3.00),
        row("H100-SXM-80GB", "spot", 1.80),
        row("H100-SXM-80GB", "spot", 1.50, dt.date(2025, 6, 1)),
        row("L4", "on_demand", 0.70),
        row("A100-80GB", "on_demand", 2.00),
        row("A100-80GB", "on_demand", 9.99, cluster="x"),
    )
)
JOBS = pl.DataFrame(
    {
        "job_id": ["a", "b", "c"],
        "team": ["nlp", "nlp", "vision"],
        "gpu_model": ["H100-SXM-80GB", "L4", "H100-SXM-80GB"],
        "gpu_hours": [10.0, 4.0, 20.0],
        "cost_usd": [30.0, 2.8, 60.0],
    }
)
SUMMARY = {
    "spend_usd": 100.0,
    "waste_usd": 40.0,
    "gpu_hours": 34.0,
    "mean_util_pct": 50.0,
    "waste": {
        "productive_usd": 50.0,
        "idle_allocated_usd": 20.0,
        "underused_usd": 10.0,
        "failed_usd": 5.0,
        "unallocated_usd": 5.0,
        "unmeasured_usd": 10.0,
    },
}


def test_capacity_utilization() -> None:
    # 60 % over 30 held GPU-h, 10 unheld: 60 × 30 / 40 = 45 %
    assert capacity_utilization_pct(60.0, 30.0, 10.0) == pytest.approx(45.0)
    assert capacity_utilization_pct(None, 30.0, 10.0) is None
    assert capacity_utilization_pct(60.0, 0.0, 0.0) is None


def test_the_price_book_takes_the_row_in_force_and_the_clusters_own() -> None:
    assert PRICES.offered("H100-SXM-80GB", "spot") == 1.50  # the latest row
    assert PRICES.offered("H100-SXM-80GB", "spot", on=dt.date(2025, 3, 1)) == 1.80
    assert PRICES.offered("H100-SXM-80GB", "spot", on=dt.date(2024, 3, 1)) == 1.80  # the first covers before
    assert PRICES.offered("A100-80GB", "on_demand") == 2.00  # the cluster row is not the fleet's
    assert PRICES.offered("A100-80GB", "on_demand", "x") == 9.99  # but cluster x's own
    assert PRICES.offered("A100-80GB", "on_demand", "y") == 2.00  # another cluster: the generic rows
    assert PRICES.offered("L4", "spot") is None  # no spot price: nothing offered
    assert PRICES.rate("L4", "spot") == 0.70  # billed at on_demand


def test_team_on_spot() -> None:
    c = reprice_team_on_spot(JOBS, "nlp", PRICES)
    # job a: 10 GPU-h × $1.50 = $15 instead of $30 → $15 saved; job b (L4) has no spot price: unchanged
    assert c.saving_usd == pytest.approx(15.0)
    assert c.jobs == 1
    assert "no spot price for L4" in c.assumption


def test_model_instead_of_model() -> None:
    c = reprice_model(JOBS, "H100-SXM-80GB", "A100-80GB", PRICES, "on_demand")
    # jobs a + c: $90 for 30 GPU-h; at $2.00: $60 → $30 saved
    assert c.saving_usd == pytest.approx(30.0)
    assert c.jobs == 2
    worse = reprice_model(JOBS, "L4", "A100-80GB", PRICES, "on_demand")
    assert worse.saving_usd == pytest.approx(2.8 - 4 * 2.0)  # costs $5.20 more: a negative saving


def test_model_change_then_spot_counts_each_job_once() -> None:
    moved = after_model_change(JOBS, "L4", "H100-SXM-80GB", PRICES, "on_demand")
    # job b: 4 GPU-h on H100 at $3.00 = $12.00 (was $2.80 on L4)
    assert moved.filter(pl.col("job_id") == "b")["cost_usd"].item() == pytest.approx(12.0)
    spot = reprice_team_on_spot(moved, "nlp", PRICES)
    # job a: $30 → 10 × $1.50 = $15; job b: $12 → 4 × $1.50 = $6: $21 in all, both jobs
    assert spot.saving_usd == pytest.approx(21.0)
    assert spot.jobs == 2


def test_before_and_after() -> None:
    recs = pl.DataFrame(
        {
            "kind": ["reclaim_idle"],
            "target": ["a"],
            "saving_usd": [8.0],
            "usd_per_week": [8.0],
            "lever": ["time"],
            "job_ids": [["a"]],
            "job_saving_usd": [[8.0]],
            "job_cost_usd": [[30.0]],
        }
    )
    taken = recommendations_change(with_counted(recs))
    spot = reprice_team_on_spot(JOBS, "nlp", PRICES)  # $15
    out = what_if(SUMMARY, [spot, taken])
    # repricing: spend 100 → 85, every part × 0.85: waste parts 17 + 8.5 + 4.25 + 4.25 = 34
    # recommendations: $8 out of the $34 waste, each part × (1 − 8/34): waste 26, spend 85 − 8 = 77
    assert out.before["spend_usd"] == 100.0
    assert out.after["spend_usd"] == pytest.approx(77.0)
    assert out.after["waste_usd"] == pytest.approx(26.0)
    assert out.after["idle_allocated_usd"] == pytest.approx(17.0 * (1 - 8 / 34))
    assert out.after["productive_usd"] == pytest.approx(42.5)
    # money never disappears: the parts after still sum to the spend after
    parts = (
        "productive_usd",
        "unmeasured_usd",
        "idle_allocated_usd",
        "underused_usd",
        "failed_usd",
        "unallocated_usd",
    )
    assert sum(out.after[k] for k in parts) == pytest.approx(out.after["spend_usd"])


def test_recommendations_capped_at_the_waste() -> None:
    big = recommendations_change(pl.DataFrame({"counted_saving_usd": [50.0], "saving_usd": [50.0]}))
    out = what_if(SUMMARY, [big])
    assert out.after["waste_usd"] == pytest.approx(0.0)
    assert out.after["spend_usd"] == pytest.approx(60.0)
    assert out.notes
