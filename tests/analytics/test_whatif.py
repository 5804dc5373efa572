"""analytics/whatif.py, worked by hand on a three-job view."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

from analytics.whatif import (
    after_model_change,
    apply,
    capacity_utilization_pct,
    default_speedup,
    per_week,
    reprice_model,
    reprice_team_on_spot,
    what_if,
)
from gpuledger.ledger.prices import BookRow, PriceBook
from gpuledger.ledger.settings import ClusterSettings, Settings

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
# three jobs with their parts (each job's parts sum to its cost); the view's unallocated capacity is $5
JOBS = pl.DataFrame(
    {
        "job_id": ["a", "b", "c"],
        "team": ["nlp", "nlp", "vision"],
        "cluster": ["cloud", "cloud", "cloud"],
        "gpu_model": ["H100-SXM-80GB", "L4", "H100-SXM-80GB"],
        "gpu_hours": [10.0, 4.0, 20.0],
        "cost_usd": [30.0, 2.8, 60.0],
        "productive_usd": [18.0, 2.8, 29.2],
        "idle_allocated_usd": [6.0, 0.0, 14.0],
        "underused_usd": [3.0, 0.0, 7.0],
        "failed_usd": [3.0, 0.0, 2.0],
        "unmeasured_usd": [0.0, 0.0, 7.8],
        # one GPU each, from 2025-07-01 (after the $1.50 spot row took effect) for its GPU-hours
        "span_start": [dt.datetime(2025, 7, 1)] * 3,
        "span_end": [dt.datetime(2025, 7, 1) + dt.timedelta(hours=h) for h in (10.0, 4.0, 20.0)],
        "pricing_tier": ["on_demand"] * 3,
    }
)
SUMMARY = {
    "spend_usd": 97.8,
    "team_waste_usd": 35.0,  # idle 20 + under-used 10 + failed 5 (the $5 unallocated is not a team's)
    "unheld_capacity_usd": 5.0,
    "unmeasured_usd": 7.8,
    "idle_usd": 20.0,
    "gpu_hours": 34.0,
    "mean_util_pct": 50.0,
    "waste": {
        "productive_usd": 50.0,
        "idle_allocated_usd": 20.0,
        "underused_usd": 10.0,
        "failed_usd": 5.0,
        "unallocated_usd": 5.0,
        "unmeasured_usd": 7.8,
    },
}
CLOUD = Settings()  # default tier on_demand: capacity bought by the hour
NO_RECS = pl.DataFrame()


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


def test_team_on_spot_takes_only_its_jobs_parts_never_unallocated() -> None:
    c = reprice_team_on_spot(JOBS, "nlp", PRICES, CLOUD)
    # job a: 10 GPU-h × $1.50 = $15 instead of $30 → factor ½: each of its parts halves: productive 18 → 9,
    # idle 6 → 3, under-used 3 → 1.5, failed 3 → 1.5; job b (L4) has no spot price: unchanged
    assert c.saving_usd == pytest.approx(15.0)
    assert c.parts == pytest.approx(
        {
            "productive_usd": 9.0,
            "idle_allocated_usd": 3.0,
            "underused_usd": 1.5,
            "failed_usd": 1.5,
            "unmeasured_usd": 0.0,
        }
    )
    assert c.jobs == 1
    assert "no spot price for L4" in c.assumption
    after = apply(SUMMARY, [c])
    assert after["waste"]["unallocated_usd"] == 5.0  # capacity never moves
    assert after["team_waste_usd"] == pytest.approx(35.0 - 6.0)  # at most nlp's own waste (12) leaves
    assert after["unheld_capacity_usd"] == 5.0
    assert after["spend_usd"] == pytest.approx(97.8 - 15.0)


def test_spot_moves_each_price_piece_that_it_makes_cheaper_so_days_add_up() -> None:
    """Job c on cluster k, 1 GPU, Nov 30 12:00 to Dec 1 24:00, all productive: on Nov 30 the generic H100 row
    ($4) is in force, on Dec 1 cluster k's own ($0.50, dearer spot $2 all along). Spot saves 12 h x ($4 - $2)
    = $24 on Nov 30 and nothing on Dec 1, and so $24 over both days (the sum of the two days), where one
    choice per job over the view kept the job ($60 as booked, $72 on spot: $0) but moved it in Nov 30's view."""
    prices = PriceBook(
        (
            row("H100-SXM-80GB", "on_demand", 4.00),
            row("H100-SXM-80GB", "on_demand", 0.50, dt.date(2026, 12, 1), cluster="k"),
            row("H100-SXM-80GB", "spot", 2.00),
        )
    )
    nov30, dec1, dec2 = (dt.datetime(2026, 11, 30, 12), dt.datetime(2026, 12, 1), dt.datetime(2026, 12, 2))

    def piece(a: dt.datetime, b: dt.datetime) -> dict[str, object]:
        h = (b - a).total_seconds() / 3600
        return {"span_start": a, "span_end": b, "gpu_hours": h, "productive_gpu_hours": h,
                "idle_gpu_hours": 0.0, "underused_gpu_hours": 0.0, "failed_gpu_hours": 0.0}  # fmt: skip

    def job(pieces: list[dict[str, object]], cost: float) -> pl.DataFrame:
        return pl.DataFrame(
            [
                {
                    "job_id": "c",
                    "team": "ml",
                    "cluster": "k",
                    "gpu_model": "H100-SXM-80GB",
                    "gpu_hours": sum(p["gpu_hours"] for p in pieces),
                    "cost_usd": cost,
                    "productive_usd": cost,
                    "idle_allocated_usd": 0.0,
                    "underused_usd": 0.0,
                    "failed_usd": 0.0,
                    "unmeasured_usd": 0.0,
                    "span_start": pieces[0]["span_start"],
                    "span_end": pieces[-1]["span_end"],
                    "pricing_tier": "on_demand",
                    "pieces": pieces,
                }
            ]
        )

    whole = reprice_team_on_spot(
        job([piece(nov30, dec1), piece(dec1, dec2)], 12 * 4.0 + 24 * 0.5), "ml", prices
    )
    first = reprice_team_on_spot(job([piece(nov30, dec1)], 12 * 4.0), "ml", prices)
    second = reprice_team_on_spot(job([piece(dec1, dec2)], 24 * 0.5), "ml", prices)
    assert first.saving_usd == pytest.approx(24.0)
    assert second.saving_usd == pytest.approx(0.0) and second.jobs == 0
    assert whole.saving_usd == pytest.approx(24.0) and whole.jobs == 1
    assert whole.parts["productive_usd"] == pytest.approx(24.0)


def test_spot_on_owned_capacity_saves_nothing_and_says_so() -> None:
    owned = Settings(clusters={"cloud": ClusterSettings(tier="on_prem")})
    c = reprice_team_on_spot(JOBS, "nlp", PRICES, owned)
    assert c.saving_usd == 0.0 and c.jobs == 0
    assert "cloud (on_prem): $15.00 at spot prices" in c.assumption
    assert "nothing saved unless that capacity is released" in c.assumption


def test_model_instead_of_model() -> None:
    c = reprice_model(JOBS, "H100-SXM-80GB", "A100-80GB", PRICES)
    # jobs a + c: $90 for 30 GPU-h; at $2.00: $60 → $30 saved, each job's parts × (1 − 2/3)
    assert c.saving_usd == pytest.approx(30.0)
    assert c.parts["idle_allocated_usd"] == pytest.approx((6.0 + 14.0) / 3)
    assert c.jobs == 2
    worse = reprice_model(JOBS, "L4", "A100-80GB", PRICES)
    assert worse.saving_usd == pytest.approx(2.8 - 4 * 2.0)  # costs $5.20 more: a negative saving


def test_model_swap_with_a_speed_up_divides_the_gpu_hours_before_pricing() -> None:
    # half the speed (0.5×): job a's 10 H100 GPU-h become 20 A100 GPU-h at $2.00 = $40 (was $30), job c's 20
    # become 40 = $80 (was $60): the swap costs $30 more, and 30 GPU-h more
    slow = reprice_model(JOBS, "H100-SXM-80GB", "A100-80GB", PRICES, speedup=0.5)
    assert slow.saving_usd == pytest.approx(-30.0)
    assert slow.gpu_hours_saved == pytest.approx(-30.0)
    # each job's parts scale with its cost: idle 6 × 40/30 + 14 × 80/60 = 26.667, so idle "loses" −6.667
    assert slow.parts["idle_allocated_usd"] == pytest.approx(20.0 - (8.0 + 56.0 / 3))
    assert "a speed-up of 0.50× assumed: 60.0 GPU-hours instead" in slow.assumption
    # twice the speed: 5 h × $2 = $10 (was $30) and 10 h × $2 = $20 (was $60): $60 saved, 15 GPU-h fewer
    fast = reprice_model(JOBS, "H100-SXM-80GB", "A100-80GB", PRICES, speedup=2.0)
    assert fast.saving_usd == pytest.approx(60.0)
    out = what_if(SUMMARY, JOBS, NO_RECS, PRICES, CLOUD, models=(("H100-SXM-80GB", "A100-80GB", 0.5),))
    assert out.after["spend_usd"] == pytest.approx(97.8 + 30.0)
    assert out.after["gpu_hours"] == pytest.approx(34.0 + 30.0)
    assert out.before["gpu_hours"] == 34.0  # "now" stays the summary
    with pytest.raises(ValueError, match="above 0"):
        reprice_model(JOBS, "H100-SXM-80GB", "A100-80GB", PRICES, speedup=0.0)


def test_default_speed_up_is_the_catalog_peaks_ratio_at_the_jobs_precision() -> None:
    # data/gpu_catalog.toml: dense bf16 H100-SXM-80GB 989.4, A100-80GB 312 TFLOP/s; no precision logged: bf16
    f, why = default_speedup(JOBS, "H100-SXM-80GB", "A100-80GB")
    assert f == pytest.approx(312 / 989.4) and "bf16 (assumed" in why
    # fp32 logged on the H100 jobs: fp32 peaks 19.5 (A100) ÷ 66.9 (H100)
    fp32 = JOBS.with_columns(pl.lit("fp32").alias("precision"))
    assert default_speedup(fp32, "H100-SXM-80GB", "A100-80GB")[0] == pytest.approx(19.5 / 66.9)
    # fp8 on a card with no fp8 path: no speed-up assumed, and it says why
    fp8 = JOBS.with_columns(pl.lit("fp8").alias("precision"))
    f, why = default_speedup(fp8, "H100-SXM-80GB", "A100-80GB")
    assert f == 1.0 and "no catalog peak at fp8 for A100-80GB" in why


def test_per_week_is_the_period_total_over_its_days_times_seven() -> None:
    assert per_week(60.0, 28.0) == pytest.approx(15.0)
    assert per_week(-30.0, 3.5) == pytest.approx(-60.0)
    assert per_week(10.0, None) is None


def test_model_change_then_spot_counts_each_job_once() -> None:
    moved = after_model_change(JOBS, "L4", "H100-SXM-80GB", PRICES)
    # job b: 4 GPU-h on H100 at $3.00 = $12.00 (was $2.80 on L4), its productive part with it
    assert moved.filter(pl.col("job_id") == "b")["cost_usd"].item() == pytest.approx(12.0)
    assert moved.filter(pl.col("job_id") == "b")["productive_usd"].item() == pytest.approx(12.0)
    spot = reprice_team_on_spot(moved, "nlp", PRICES, CLOUD)
    # job a: $30 → 10 × $1.50 = $15; job b: $12 → 4 × $1.50 = $6: $21 in all, both jobs
    assert spot.saving_usd == pytest.approx(21.0)
    assert spot.jobs == 2


RECS = pl.DataFrame(
    {
        "id": ["reclaim_idle:a", "offpeak_capacity:cloud"],
        "kind": ["reclaim_idle", "offpeak_capacity"],
        "target": ["a", "cloud"],
        "saving_usd": [8.0, 4.0],
        "usd_per_week": [8.0, 4.0],
        "lever": ["time", "time"],
        "job_ids": [["a"], ["capacity:cloud:H100-SXM-80GB"]],  # a capacity item's "job": the free capacity
        "job_saving_usd": [[8.0], [4.0]],
        "job_cost_usd": [[30.0], [5.0]],
        "addresses": [["idle_allocated_usd"], ["unallocated_usd"]],
    },
    schema_overrides={
        "job_ids": pl.List(pl.Utf8),
        "job_saving_usd": pl.List(pl.Float64),
        "job_cost_usd": pl.List(pl.Float64),
    },
)


def test_a_recommendation_comes_out_of_the_part_its_kind_names() -> None:
    out = what_if(SUMMARY, JOBS, RECS, PRICES, CLOUD, take=("offpeak_capacity:cloud",))
    # the capacity action's $4 leaves unallocated (5 → 1) and nothing else: failed and idle stay
    assert out.after["waste"]["unallocated_usd"] == pytest.approx(1.0)
    assert out.after["waste"]["idle_allocated_usd"] == 20.0 and out.after["waste"]["failed_usd"] == 5.0
    assert out.after["spend_usd"] == pytest.approx(97.8 - 4.0)


def test_before_and_after_spot_then_a_recommendation() -> None:
    out = what_if(SUMMARY, JOBS, RECS, PRICES, CLOUD, spot=("nlp",), take=("reclaim_idle:a",))
    # spot: $15 out of job a's parts (idle 20 → 17); the idle action: $8 out of the idle left (17 → 9)
    assert out.before["spend_usd"] == 97.8
    assert out.after["waste"]["idle_allocated_usd"] == pytest.approx(9.0)
    assert out.after["idle_usd"] == pytest.approx(9.0)
    assert out.after["spend_usd"] == pytest.approx(97.8 - 15.0 - 8.0)
    assert out.after["team_waste_usd"] == pytest.approx(35.0 - 6.0 - 8.0)
    # money never disappears: the parts after still sum to the spend after
    assert sum(out.after["waste"].values()) == pytest.approx(out.after["spend_usd"])
    assert set(out.after) == set(SUMMARY)  # the keys of summary --json


def test_recommendations_capped_at_the_part_they_address() -> None:
    big = RECS.with_columns(
        pl.lit(50.0).alias("saving_usd"),
        pl.lit(50.0).alias("usd_per_week"),
        pl.lit([50.0]).alias("job_saving_usd"),
        pl.lit([60.0]).alias("job_cost_usd"),
    )
    out = what_if(SUMMARY, JOBS, big, PRICES, CLOUD, take=("offpeak_capacity:cloud",))
    assert out.after["waste"]["unallocated_usd"] == pytest.approx(0.0)  # $5 there, not $50
    assert out.after["spend_usd"] == pytest.approx(97.8 - 5.0)
    assert "$45.00 more than the parts they address hold" in out.changes[0].assumption


def test_nothing_chosen_changes_nothing_and_an_unknown_id_is_refused() -> None:
    out = what_if(SUMMARY, JOBS, NO_RECS, PRICES, CLOUD)
    assert out.changes == [] and out.after == SUMMARY
    with pytest.raises(ValueError, match="no recommendation with id nope"):
        what_if(SUMMARY, JOBS, RECS, PRICES, CLOUD, take=("nope",))


def test_whatif_cli_on_the_demo_spot_for_one_team_touches_only_that_team(demo_db) -> None:
    """`gpuledger whatif --spot TEAM --json` on the 2-day demo, for every team: unallocated capacity never
    moves, and the waste saved is at most the team's own waste (the team's summary, computed alone)."""
    import json

    from tests.conftest import gpuledger

    teams = json.loads(gpuledger("jobs", "--json", "--db", demo_db).stdout)
    for team in sorted({j["team"] for j in teams if j["team"] not in (None, "unattributed")}):
        done = gpuledger("whatif", "--spot", team, "--json", "--db", demo_db)
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        assert set(out) == {"now", "with_changes", "changes", "days"}
        assert set(out["now"]) == set(out["with_changes"])
        now, after = out["now"], out["with_changes"]
        assert after["waste"]["unallocated_usd"] == now["waste"]["unallocated_usd"]
        own = json.loads(gpuledger("summary", "--json", "--team", team, "--db", demo_db).stdout)
        assert now["team_waste_usd"] - after["team_waste_usd"] <= own["team_waste_usd"] + 1e-6, team
        assert now["spend_usd"] - after["spend_usd"] == pytest.approx(out["changes"][0]["saving_usd"])
    nothing = json.loads(gpuledger("whatif", "--json", "--db", demo_db).stdout)
    assert nothing["changes"] == [] and nothing["with_changes"] == nothing["now"]
    bad = gpuledger("whatif", "--take", "no-such-item", "--db", demo_db)
    assert bad.returncode == 1 and bad.stderr.startswith("error:") and "no-such-item" in bad.stderr
