"""The waste taxonomy on hand-built ledgers: each part worked out by hand, parts summing to spend."""

from __future__ import annotations

import pytest

from analytics.filters import Filters
from analytics.waste import PARTS, job_waste, unallocated, waste_by, waste_totals
from gpuledger.ledger.errors import RollupMismatch
from gpuledger.ledger.reference import load_reference
from gpuledger.ledger.settings import Capacity, ClusterSettings, Settings
from tests.analytics.build import alloc, at, gpu, ingest, job, series, set_test_prices, sync_thresholds

RATE = 4.0  # $/GPU-hour for H100 on_demand in the test price sheet


@pytest.fixture
def con(ledger):
    set_test_prices(ledger)
    return ledger


def one_job(con, utils, *, start=0, end=120, offsets=None, **fields):
    """Job j1 on GPU h1:0 with one sample a minute; ``offsets`` (minutes) place runs of samples."""
    samples = []
    if offsets is None:
        samples = series("h1:0", start, utils)
    else:
        for off, run in zip(offsets, utils, strict=True):
            samples += series("h1:0", off, run)
    ingest(
        con,
        jobs=[job("j1", start, end, **fields)],
        allocations=[alloc("j1", "h1:0", start, end)],
        samples=samples,
        gpus=[gpu("h1:0")],
    )
    return job_waste(con).row(0, named=True)


def test_idle_stretch_at_the_threshold_for_exactly_the_minimum_counts_as_idle(con):
    # 30 samples at exactly 5 % (≤ idle_util_pct) = 30 min (≥ idle_min_minutes), then 90 min at 90 %.
    row = one_job(con, [5.0] * 30 + [90.0] * 90)
    assert row["cost_usd"] == pytest.approx(2 * RATE)  # 1 GPU × 2 h × $4
    assert row["idle_allocated_usd"] == pytest.approx(30 / 60 * RATE)  # $2.00
    assert row["underused_usd"] == pytest.approx(0.0)  # 90 % ≥ 60 % target
    assert row["productive_usd"] == pytest.approx(90 / 60 * RATE)  # $6.00
    assert row["unmeasured_usd"] == pytest.approx(0.0, abs=1e-9)
    assert row["idle_gpu_hours"] == pytest.approx(0.5)


def test_short_idle_run_is_underused_not_idle(con):
    # 20 min at 2 % is shorter than 30 min: under target, weighted (60 − 2) / 60.
    row = one_job(con, [2.0] * 20 + [90.0] * 100)
    under_s = 20 * 60 * (60 - 2) / 60  # 1,160 s
    assert row["idle_allocated_usd"] == pytest.approx(0.0)
    assert row["underused_usd"] == pytest.approx(under_s / 3600 * RATE)  # $1.2889
    assert row["productive_usd"] == pytest.approx(2 * RATE - under_s / 3600 * RATE)
    assert row["unmeasured_usd"] == pytest.approx(0.0, abs=1e-9)


def test_a_sample_gap_splits_an_idle_run_and_counts_as_unmeasured(con):
    # 0-19 min at 0 %, nothing 20-29, 30-49 at 0 %, nothing 50-59, 60-119 at 90 %.
    # Neither idle run reaches 30 min; the two 10-min gaps are held but unmeasured.
    row = one_job(con, [[0.0] * 20, [0.0] * 20, [90.0] * 60], offsets=[0, 30, 60])
    assert row["idle_allocated_usd"] == pytest.approx(0.0)
    assert row["underused_usd"] == pytest.approx(40 / 60 * RATE)  # 40 min × (60 − 0)/60
    assert row["productive_usd"] == pytest.approx(60 / 60 * RATE)
    assert row["unmeasured_usd"] == pytest.approx(20 / 60 * RATE)  # 2 gaps × 10 min


def test_unknown_utilization_breaks_a_run_and_is_unmeasured(con):
    # 25 min idle, one sample without a reading, 25 min idle: two 25-min runs, no idle stretch.
    row = one_job(con, [1.0] * 25 + [None] + [1.0] * 25 + [90.0] * 69)
    assert row["idle_allocated_usd"] == pytest.approx(0.0)
    assert row["underused_usd"] == pytest.approx(50 * 60 * (60 - 1) / 60 / 3600 * RATE)
    assert row["unmeasured_usd"] == pytest.approx(1 / 60 * RATE)  # the 1 minute without a reading


def test_job_without_telemetry_is_entirely_unmeasured(con):
    ingest(con, jobs=[job("j1", 0, 90, gpu_count=2.0)])
    row = job_waste(con).row(0, named=True)
    assert row["cost_usd"] == pytest.approx(2 * 1.5 * RATE)  # 2 GPUs × 1.5 h × $4 = $12
    assert row["unmeasured_usd"] == pytest.approx(12.0)
    assert row["productive_usd"] == row["idle_allocated_usd"] == row["underused_usd"] == 0.0


def test_failed_training_loses_the_time_after_its_checkpoint(con):
    ingest(
        con,
        jobs=[
            job("f1", 0, 600, gpu_count=2.0, state="FAILED", last_checkpoint_ts=at(360)),
            job("nb", 0, 60, kind="interactive", state="CANCELLED"),
            job("inf", 0, 60, kind="inference", state="TIMEOUT"),
            job("oom", 0, 30, kind="fine-tune", state="OOM"),
        ],
    )
    rows = {r["job_id"]: r for r in job_waste(con).iter_rows(named=True)}
    f1 = rows["f1"]
    assert f1["cost_usd"] == pytest.approx(2 * 10 * RATE)  # 2 GPUs × 10 h × $4 = $80
    assert f1["failed_usd"] == pytest.approx(2 * 4 * RATE)  # 2 GPUs × (10 h − 6 h) × $4 = $32 lost
    assert f1["failed_lost_usd"] == pytest.approx(32.0)
    assert f1["failed_checkpointed_usd"] == pytest.approx(2 * 6 * RATE)  # $48 kept in the checkpoint
    assert f1["failed_basis"] == "lost after the last checkpoint"
    # the kept 6 h had no telemetry: classified like any other held time, so unmeasured
    assert f1["unmeasured_usd"] == pytest.approx(48.0)
    # no checkpoint known: the whole run is lost, and the row says so
    assert rows["oom"]["failed_usd"] == pytest.approx(0.5 * RATE)
    assert rows["oom"]["failed_lost_usd"] == pytest.approx(0.5 * RATE)
    assert rows["oom"]["failed_checkpointed_usd"] == pytest.approx(0.0)
    assert rows["oom"]["failed_basis"] == "no checkpoint known: whole run lost"
    # A cancelled notebook and a timed-out inference service ended normally.
    assert rows["nb"]["failed_usd"] == 0.0 and rows["nb"]["unmeasured_usd"] == pytest.approx(RATE)
    assert rows["inf"]["failed_usd"] == 0.0 and rows["inf"]["failed_basis"] is None
    totals = waste_totals(con)
    assert totals["failed_usd"] == pytest.approx(32.0 + 2.0)
    assert totals["failed_checkpointed_usd"] == pytest.approx(48.0)
    assert totals["failed_no_checkpoint_usd"] == pytest.approx(2.0)  # the OOM job's $2


def test_failed_10h_run_with_a_checkpoint_at_hour_8_wastes_2_of_10(con):
    # 10 h on 1 GPU, a sample a minute: 8 h at 90 % up to the checkpoint, then 2 h at 90 % that were lost.
    row = one_job(con, [90.0] * 600, end=600, state="FAILED", last_checkpoint_ts=at(480))
    cost = 10 * RATE  # $40
    assert row["cost_usd"] == pytest.approx(cost)
    assert row["failed_usd"] == pytest.approx(2 / 10 * cost)  # $8: the 2 h after the checkpoint
    # the checkpointed 8 h were busy at 90 % ≥ target: productive
    assert row["productive_usd"] == pytest.approx(8 / 10 * cost)  # $32
    assert row["unmeasured_usd"] == pytest.approx(0.0, abs=1e-9)
    assert row["waste_usd"] == pytest.approx(8.0)


def test_underused_share_is_relative_to_target(con):
    # 120 min at 30 %: half of the time below a 60 % target is unused → $8 × 0.5 = $4 under-used.
    row = one_job(con, [30.0] * 120)
    assert row["underused_usd"] == pytest.approx(2 * RATE * (60 - 30) / 60)
    assert row["productive_usd"] == pytest.approx(2 * RATE * 30 / 60)


def test_settings_thresholds_change_the_split(con):
    ingest(
        con,
        jobs=[job("j1", 0, 120)],
        allocations=[alloc("j1", "h1:0", 0, 120)],
        samples=series("h1:0", 0, [8.0] * 20 + [90.0] * 100),
        gpus=[gpu("h1:0")],
    )
    default = job_waste(con).row(0, named=True)
    loose_settings = Settings(idle_util_pct=10, idle_min_minutes=15)
    with pytest.raises(RollupMismatch):  # the rollups hold the default thresholds until the ledger is synced
        job_waste(con, settings=loose_settings)
    sync_thresholds(con, loose_settings)
    loose = job_waste(con, settings=loose_settings).row(0, named=True)
    assert default["idle_allocated_usd"] == pytest.approx(0.0)  # 8 % > 5 %
    assert loose["idle_allocated_usd"] == pytest.approx(20 / 60 * RATE)  # 20 min ≥ 15 min at ≤ 10 %


def test_telemetry_only_gpu_becomes_an_unattributed_pseudo_job(con):
    # A lone nvidia-smi log of a T4 ($0.50/h): 60 min at 0 %, no job records at all.
    ingest(con, samples=series("ws:0", 0, [0.0] * 60), gpus=[gpu("ws:0", model="T4", cluster="lab")])
    rows = job_waste(con).to_dicts()
    assert [(r["job_id"], r["team"], r["kind"]) for r in rows] == [
        ("unattributed:ws:0", "unattributed", "other")
    ]
    assert rows[0]["cost_usd"] == pytest.approx(0.5)  # 1 GPU × 1 h × $0.50
    assert rows[0]["idle_allocated_usd"] == pytest.approx(0.5)


def test_unpriced_model_is_null_money_and_counted_as_unpriced(con):
    # The test price sheet has no A100 price.
    ingest(con, jobs=[job("a", 0, 120, gpu_model="A100-SXM4-80GB"), job("h", 0, 60)])
    rows = {r["job_id"]: r for r in job_waste(con).iter_rows(named=True)}
    assert rows["a"]["cost_usd"] is None and rows["a"]["idle_allocated_usd"] is None
    totals = waste_totals(con)
    assert totals["unpriced_gpu_hours"] == pytest.approx(2.0)
    assert totals["spend_usd"] == pytest.approx(RATE)  # only the priced H100 hour


def _capacity_settings(tier: str | None = None) -> Settings:
    return Settings(clusters={"c1": ClusterSettings(tier=tier, capacity=(Capacity("H100-SXM-80GB", 4),))})


@pytest.mark.parametrize(("tier", "price"), [(None, 4.0), ("spot", 1.0)], ids=["default-tier", "spot"])
def test_unallocated_capacity_priced_at_the_cluster_tier(con, tier, price):
    settings = _capacity_settings(tier)
    load_reference(con, settings)
    set_test_prices(con)
    ingest(con, jobs=[job("j1", 0, 120)])
    un = unallocated(con, settings=settings).row(0, named=True)
    # Window = first job start .. data horizon = 2 h; capacity 4 GPUs × 2 h = 8; held 1 × 2 h = 2.
    assert un["capacity_gpu_hours"] == pytest.approx(8.0)
    assert un["allocated_gpu_hours"] == pytest.approx(2.0)
    assert un["unallocated_usd"] == pytest.approx(6.0 * price)
    assert waste_totals(con, settings=settings)["unallocated_usd"] == pytest.approx(6.0 * price)
    # It belongs to the team "unallocated": a filter on another team sees none of it.
    assert waste_totals(con, settings=settings, filters=Filters(teams=("nlp",)))["unallocated_usd"] == 0.0
    only = waste_totals(con, settings=settings, filters=Filters(teams=("unallocated",)))
    assert only["spend_usd"] == pytest.approx(6.0 * price)


def _mixed_fleet(con):
    settings = _capacity_settings()
    load_reference(con, settings)
    set_test_prices(con)
    ingest(
        con,
        jobs=[
            job("a1", 0, 180, team="nlp", gpu_count=2.0),
            job("b1", 30, 150, team="cv", user_name="bob"),
            job("b2", 0, 600, team="cv", user_name="bob", state="FAILED", last_checkpoint_ts=at(300)),
            job("c1", 0, 60, team="rl", pricing_tier="spot", kind="interactive", state="CANCELLED"),
        ],
        allocations=[
            alloc("a1", "h1:0", 0, 180),
            alloc("a1", "h1:1", 0, 180),
            alloc("b1", "h2:0", 30, 150),
            alloc("c1", "h3:0", 0, 60),
        ],
        samples=series("h1:0", 0, [0.0] * 45 + [70.0] * 135)
        + series("h1:1", 0, [20.0] * 180)
        + series("h2:0", 30, [3.0] * 10 + [95.0] * 50 + [None] * 60)
        + series("h3:0", 0, [1.0] * 60)
        + series("ws:0", 0, [50.0] * 30),
        gpus=[gpu(g) for g in ("h1:0", "h1:1", "h2:0", "h3:0")] + [gpu("ws:0", model="T4", cluster="lab")],
    )
    return settings


def test_parts_sum_to_spend_to_the_cent_and_teams_sum_to_the_total(con):
    settings = _mixed_fleet(con)
    totals = waste_totals(con, settings=settings)
    assert round(sum(totals[p] for p in PARTS), 2) == round(totals["spend_usd"], 2)
    jobs = job_waste(con, settings=settings)
    for r in jobs.iter_rows(named=True):
        assert sum(r[p] for p in PARTS if p != "unallocated_usd") == pytest.approx(r["cost_usd"], abs=0.005)
    by_team = waste_by(con, by="team", settings=settings)
    assert set(by_team["key"]) == {"nlp", "cv", "rl", "unattributed", "unallocated"}
    assert by_team["spend_usd"].sum() == pytest.approx(totals["spend_usd"], abs=0.005)
    for team in ("nlp", "cv", "rl", "unattributed", "unallocated"):
        alone = waste_totals(con, settings=settings, filters=Filters(teams=(team,)))
        assert alone["spend_usd"] == pytest.approx(
            by_team.filter(by_team["key"] == team)["spend_usd"].item(), abs=0.005
        )
    # Independent spend: Σ gpu_count × hours × price in plain SQL (one price per model and tier here),
    # plus the T4 pseudo-job (30 min × $0.50) and unallocated: minute by minute, the 4 declared H100s
    # minus those held then (at least 0: 30-60 min holds 5, one more than exists), × $4.
    (jobs_usd,) = con.execute(
        """SELECT sum(j.gpu_count * epoch(j.end_ts - j.start_ts) / 3600 * p.usd_per_gpu_hour)
           FROM jobs j JOIN prices p ON p.gpu_model = j.gpu_model AND p.tier = j.pricing_tier"""
    ).fetchall()[0]
    (free_h, over_h) = con.execute(
        """WITH m AS (SELECT unnest(generate_series(TIMESTAMP '2025-03-03 00:00', TIMESTAMP '2025-03-03 09:59',
                                                    INTERVAL 1 MINUTE)) AS t),
                held AS (SELECT m.t, coalesce(sum(j.gpu_count), 0) AS n FROM m LEFT JOIN jobs j
                         ON j.start_ts <= m.t AND j.end_ts > m.t GROUP BY m.t)
           SELECT sum(greatest(0, 4 - n)) / 60, sum(greatest(0, n - 4)) / 60 FROM held"""
    ).fetchall()[0]
    assert (free_h, over_h) == (pytest.approx(21.5), pytest.approx(0.5))  # vs 40 − 19 held = 21 netted
    expected = jobs_usd + 0.5 * 0.5 + free_h * 4.0
    assert totals["spend_usd"] == pytest.approx(expected, abs=0.005)
    un = unallocated(con, settings=settings).row(0, named=True)
    assert un["oversubscribed_gpu_hours"] == pytest.approx(over_h)  # reported, not billed


def test_view_dates_clip_cost_and_samples(con):
    # A 2-day job at 90 %: a view of the second day holds 24 h of it.
    ingest(
        con,
        jobs=[job("j1", 0, 48 * 60)],
        allocations=[alloc("j1", "h1:0", 0, 48 * 60)],
        samples=series("h1:0", 0, [90.0] * (48 * 12), step_s=300),
        gpus=[gpu("h1:0")],
    )
    day2 = Filters(since=at(24 * 60).date(), until=at(24 * 60).date())
    row = job_waste(con, filters=day2).row(0, named=True)
    assert row["gpu_hours"] == pytest.approx(24.0)
    assert row["cost_usd"] == pytest.approx(24 * RATE)
    assert row["productive_usd"] == pytest.approx(24 * RATE)


def test_a_running_job_is_billed_through_its_last_sample_and_its_idle_hours_are_not_scaled(con):
    """A RUNNING job (no end) with 60 one-minute samples at 0 % from 00:00: the data ends with its last sample
    (00:59 + 60 s = 01:00), so the job holds its card 1 h: $4, idle 1 GPU-h = $4, nothing unallocated.
    Until 2026-12-06 the horizon was the last sample's start (00:59): $3.9333, the last minute billed nowhere,
    and the idle hours scaled by held/covered (59/60 h)."""
    ingest(
        con,
        jobs=[job("run", 0, None, state="RUNNING")],
        allocations=[alloc("run", "h1:0", 0, None)],
        samples=series("h1:0", 0, [0.0] * 60),
        gpus=[gpu("h1:0")],
    )
    totals = waste_totals(con)
    assert totals["spend_usd"] == pytest.approx(1 * RATE)
    assert totals["idle_allocated_usd"] == pytest.approx(1 * RATE)
    assert totals["idle_gpu_hours"] == pytest.approx(60 / 60)  # Σ interval_s of the idle stretch / 3600
    assert totals["unallocated_usd"] == pytest.approx(0.0)
    (row,) = job_waste(con).to_dicts()
    assert row["gpu_hours"] == pytest.approx(1.0) and row["cost_usd"] == pytest.approx(RATE)


def test_parts_are_priced_at_the_price_in_force_so_days_add_up(con):
    """The H100 price rises from $4 to $6 at midnight of day 2. Job j1 holds h1:0 from 22:00 on day 1 to
    02:00 on day 2: busy (90 %) until 23:00, then idle (0 %) for 3 h across midnight. Cost 2 h × $4 + 2 h × $6
    = $20; idle 1 h × $4 + 2 h × $6 = $16, productive $4, and the two days' views add up to that in every part.
    Before, the whole view priced the idle hours at the job's average rate: 3 h × $5 = $15, while the days
    gave $4 + $12 = $16."""
    import datetime as dt

    con.execute(
        "INSERT INTO prices VALUES ('H100-SXM-80GB', 'on_demand', NULL, DATE '2025-03-04', 6.0, 'test', "
        "DATE '2025-03-04', 'sheet', NULL)"
    )
    # 22:00 day 1 .. 02:00 day 2: busy 90 % for the first hour, then idle 3 h (the idle stretch crosses midnight)
    one_job(con, [90.0] * 60 + [0.0] * 180, start=22 * 60, end=26 * 60)
    whole = waste_totals(con)
    days = [
        waste_totals(con, filters=Filters(since=d, until=d))
        for d in (dt.date(2025, 3, 3), dt.date(2025, 3, 4))
    ]
    assert whole["spend_usd"] == pytest.approx(2 * 4.0 + 2 * 6.0)  # $20
    # idle 23:00-02:00: 1 h at $4 + 2 h at $6 = $16 (the average rate would give 3 × $5 = $15)
    assert whole["idle_allocated_usd"] == pytest.approx(1 * 4.0 + 2 * 6.0)
    assert whole["productive_usd"] == pytest.approx(1 * 4.0)
    for p in PARTS:
        assert sum(d[p] for d in days) == pytest.approx(whole[p]), p
