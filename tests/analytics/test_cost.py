"""Job cost rollups and the pseudo-jobs of telemetry-only GPUs."""

from __future__ import annotations

import pytest

from analytics.cost import cost_by, job_costs
from tests.analytics.build import alloc, gpu, ingest, job, series, set_test_prices


def test_cost_by_team_and_week_sum_to_the_job_costs(ledger):
    set_test_prices(ledger)
    ingest(
        ledger,
        jobs=[
            job("a", 0, 120, team="nlp", gpu_count=2.0),  # 2 × 2 h × $4 = $16
            job("b", 0, 60, team="cv", pricing_tier="spot"),  # 1 h × $1 spot = $1
            job("c", 7 * 24 * 60, 7 * 24 * 60 + 60, team="cv", gpu_model="T4"),  # next week, $0.50
            job("d", 0, 60, team="cv", gpu_model="A100-SXM4-80GB"),  # no price in the test sheet
        ],
    )
    teams = {r["key"]: r for r in cost_by(ledger, by="team").iter_rows(named=True)}
    assert teams["nlp"]["cost_usd"] == pytest.approx(16.0)
    assert teams["cv"]["cost_usd"] == pytest.approx(1.5)
    assert teams["cv"]["unpriced_gpu_hours"] == pytest.approx(1.0)
    weeks = {r["key"]: r["cost_usd"] for r in cost_by(ledger, by="week").iter_rows(named=True)}
    assert weeks == pytest.approx({"2025-W10": 17.0, "2025-W11": 0.5})
    with pytest.raises(ValueError, match="unknown grouping"):
        cost_by(ledger, by="planet")


def test_pseudo_job_spans_first_to_end_of_last_sample_and_not_for_allocated_gpus(ledger):
    set_test_prices(ledger)
    ingest(
        ledger,
        jobs=[job("j1", 0, 30)],
        allocations=[alloc("j1", "h1:0", 0, 30)],
        # h1:0 is named by an allocation: its samples after the job are unallocated time, not a pseudo-job.
        samples=series("h1:0", 0, [50.0] * 90) + series("ws:0", 10, [20.0] * 30, step_s=120),
        gpus=[gpu("h1:0"), gpu("ws:0", model="T4")],
    )
    rows = {r["job_id"]: r for r in job_costs(ledger).iter_rows(named=True)}
    assert set(rows) == {"j1", "unattributed:ws:0"}
    pseudo = rows["unattributed:ws:0"]
    # 30 samples 2 min apart from minute 10: the last at minute 68 stands for 2 more minutes → 60 min held.
    assert pseudo["gpu_hours"] == pytest.approx(1.0)
    assert pseudo["cost_usd"] == pytest.approx(0.5)
    assert (pseudo["team"], pseudo["user_name"], pseudo["price_tier"]) == ("unattributed",) * 2 + (
        "on_demand",
    )
    assert set(job_costs(ledger, unattributed=False)["job_id"]) == {"j1"}
