"""Badput first (analytics/badput.py), then idle, under-used and productive on the rest of a job's time.

Every figure is worked out by hand at $2.99 per H100-hour (the issue's reproductions), and the fast path
(rollups) must give what raw samples give.
"""

from __future__ import annotations

import datetime as dt

import pytest

from analytics.filters import Filters
from analytics.telemetry_source import ROLLUPS
from analytics.waste import job_waste, job_waste_by_week, waste_totals
from tests.analytics.build import H100, T0, alloc, at, gpu, ingest, job, series
from tests.analytics.oracle import ORACLE

RATE = 2.99  # $/H100-hour in these tests


@pytest.fixture
def con(ledger):
    ledger.execute("DELETE FROM prices")
    ledger.execute(
        "INSERT INTO prices VALUES (?, 'on_demand', NULL, DATE '2025-01-01', ?, 'test price', DATE '2025-01-01', "
        "'sheet', NULL)",
        [H100, RATE],
    )
    return ledger


def hung_run(con, *, state: str = "FAILED", start: float = 0.0) -> None:
    """10 h on 1 GPU, a sample a minute: 8 h at 90 % up to the checkpoint at hour 8, then 2 h hung at 0 %."""
    ingest(
        con,
        jobs=[job("r1", start, start + 600, state=state, last_checkpoint_ts=at(start + 480))],
        allocations=[alloc("r1", "h1:0", start, start + 600)],
        samples=series("h1:0", start, [90.0] * 480 + [0.0] * 120),
        gpus=[gpu("h1:0")],
    )


@pytest.mark.parametrize("source", [ROLLUPS, ORACLE], ids=["rollups", "oracle"])
def test_a_hung_run_after_its_checkpoint_is_failed_only_never_idle_too(con, source):
    hung_run(con)
    row = job_waste(con, source=source).row(0, named=True)
    assert row["cost_usd"] == pytest.approx(10 * RATE)  # $29.90
    # the 2 h after the checkpoint are badput, taken first: 2 × $2.99 = $5.98 (before: also idle $4.78)
    assert row["failed_usd"] == pytest.approx(2 * RATE)
    assert row["idle_allocated_usd"] == pytest.approx(0.0, abs=1e-9)
    # the 8 h before it ran at 90 % ≥ the 60 % target: 8 × $2.99 = $23.92 productive (before: $19.14)
    assert row["productive_usd"] == pytest.approx(8 * RATE)
    assert row["underused_usd"] == pytest.approx(0.0, abs=1e-9)
    assert row["unmeasured_usd"] == pytest.approx(0.0, abs=1e-9)
    assert row["idle_gpu_hours"] == pytest.approx(0.0, abs=1e-9)  # the hung 2 h sit in failed, not idle
    totals = waste_totals(con, source=source)
    assert totals["idle_gpu_hours"] == pytest.approx(0.0, abs=1e-9)
    assert totals["spend_usd"] == pytest.approx(10 * RATE)


def test_a_hung_run_across_a_week_boundary_splits_the_same_way(con):
    # Sunday 20:00 → Monday 06:00: 4 h of the kept 8 h in week 10, 4 h + the 2 lost hours in week 11
    hung_run(con, start=6 * 24 * 60 + 20 * 60)
    weeks = {r["week"]: r for r in job_waste_by_week(con).iter_rows(named=True)}
    assert weeks["2025-W10"]["productive_usd"] == pytest.approx(4 * RATE)
    assert weeks["2025-W10"]["failed_usd"] == pytest.approx(0.0, abs=1e-9)
    assert weeks["2025-W11"]["productive_usd"] == pytest.approx(4 * RATE)
    assert weeks["2025-W11"]["failed_usd"] == pytest.approx(2 * RATE)
    assert weeks["2025-W11"]["idle_allocated_usd"] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("state", ["PREEMPTED", "NODE_FAIL", "TIMEOUT", "OOM", "REQUEUED"])
def test_every_disruption_loses_the_time_since_its_checkpoint(con, state):
    # 8 × H100 for 10 h, checkpoint at hour 8: 8 GPUs × 2 h × $2.99 = $47.84 lost (PREEMPTED was $0 before)
    ingest(con, jobs=[job("p1", 0, 600, gpu_count=8.0, state=state, last_checkpoint_ts=at(480))])
    row = job_waste(con).row(0, named=True)
    assert row["failed_usd"] == pytest.approx(8 * 2 * RATE)
    assert row["failed"] is True


def test_a_preempted_and_a_node_fail_run_lose_95_68_together(con):
    ingest(
        con,
        jobs=[
            job("p1", 0, 600, gpu_count=8.0, state="PREEMPTED", last_checkpoint_ts=at(480)),
            job("n1", 0, 600, gpu_count=8.0, state="NODE_FAIL", last_checkpoint_ts=at(480)),
        ],
    )
    assert waste_totals(con)["failed_usd"] == pytest.approx(2 * 8 * 2 * RATE)  # $95.68


@pytest.mark.parametrize("source", [ROLLUPS, ORACLE], ids=["rollups", "oracle"])
def test_a_cancelled_run_is_classified_by_telemetry_and_shown_as_cancelled_spend(con, source):
    # cancelled by its user after 2 h: 1 h at 90 % then 1 h at 0 % (an idle stretch), no checkpoint
    ingest(
        con,
        jobs=[job("c1", 0, 120, state="CANCELLED")],
        allocations=[alloc("c1", "h1:0", 0, 120)],
        samples=series("h1:0", 0, [90.0] * 60 + [0.0] * 60),
        gpus=[gpu("h1:0")],
    )
    row = job_waste(con, source=source).row(0, named=True)
    assert row["failed_usd"] == 0.0 and row["failed"] is False  # before: the whole $5.98 was "failed"
    assert row["productive_usd"] == pytest.approx(RATE)
    assert row["idle_allocated_usd"] == pytest.approx(RATE)
    assert row["cancelled_usd"] == pytest.approx(2 * RATE)
    totals = waste_totals(con, source=source)
    assert totals["cancelled_usd"] == pytest.approx(2 * RATE)
    assert totals["failed_usd"] == 0.0
    assert totals["team_waste_usd"] == pytest.approx(RATE)  # the idle hour only


@pytest.mark.parametrize("source", [ROLLUPS, ORACLE], ids=["rollups", "oracle"])
def test_a_retry_loses_its_restart_overhead_up_to_its_first_logged_step(con, source):
    # attempt 2 of job q runs 10:00–12:00 at 90 %; its training log's first step is at 10:30: the half hour
    # of restart (loading, warm-up) is badput, $1.495; the 1.5 h after it are productive, $4.485
    ingest(
        con,
        jobs=[job("q", 600, 720, state="COMPLETED", attempt=2, attempt_of="q")],
        allocations=[alloc("q", "h1:0", 600, 720)],
        samples=series("h1:0", 600, [90.0] * 120),
        gpus=[gpu("h1:0")],
    )
    con.execute(
        "INSERT INTO train_log (job_id, step, ts, ingest_id) VALUES ('q', 10, ?, 1), ('q', 20, ?, 1)",
        [at(630), at(660)],
    )
    row = job_waste(con, source=source).row(0, named=True)
    assert row["failed_usd"] == pytest.approx(0.5 * RATE)
    assert row["productive_usd"] == pytest.approx(1.5 * RATE)
    assert row["failed_basis"] == "restart overhead: start to the first logged step"
    # the first attempt (no log) has no restart overhead
    assert job_waste(con, filters=Filters(since=(T0 + dt.timedelta(days=1)).date())).is_empty()


@pytest.mark.parametrize("source", [ROLLUPS, ORACLE], ids=["rollups", "oracle"])
def test_a_failed_run_on_a_card_shared_before_its_checkpoint_loses_what_it_held_after(con, source):
    # r fails Mon 20:00 → Tue 06:00 on h1:0 (checkpoint 22:00); s time-slices the card with it 20:00–22:00.
    # r held ½ × 2 h + 8 h = 9 GPU-h; the 8 h after its checkpoint it held alone: 8 × $2.99 lost, 1 h productive.
    # (A wall-time share of its held hours gave 9 × 8/10 = 7.2 h lost, and its two days 1.5 + 6 = 7.5 h.)
    ingest(
        con,
        jobs=[job("r", 1200, 1800, state="FAILED", last_checkpoint_ts=at(1320)), job("s", 1200, 1320)],
        allocations=[alloc("r", "h1:0", 1200, 1800), alloc("s", "h1:0", 1200, 1320)],
        samples=series("h1:0", 1200, [90.0] * 600),
        gpus=[gpu("h1:0")],
    )
    rows = {r["job_id"]: r for r in job_waste(con, source=source).iter_rows(named=True)}
    r = rows["r"]
    assert r["cost_usd"] == pytest.approx(9 * RATE)
    assert r["failed_gpu_hours"] == pytest.approx(8.0)
    assert r["failed_usd"] == pytest.approx(8 * RATE)
    assert r["productive_usd"] == pytest.approx(1 * RATE)
    assert r["unmeasured_usd"] == pytest.approx(0.0, abs=1e-9)
    assert rows["s"]["productive_usd"] == pytest.approx(1 * RATE)
    monday, tuesday = (Filters(since=d, until=d) for d in (T0.date(), T0.date() + dt.timedelta(days=1)))
    days = [
        job_waste(con, filters=f, source=source).filter(job_id="r").row(0, named=True)
        for f in (monday, tuesday)
    ]
    # Monday 22:00-24:00, Tuesday 00:00-06:00
    assert [d["failed_gpu_hours"] for d in days] == pytest.approx([2.0, 6.0])
    assert [d["productive_usd"] for d in days] == pytest.approx([RATE, 0.0], abs=1e-9)
