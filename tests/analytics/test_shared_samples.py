"""A shared card's samples count for each job holding it, weighted by its share (gpuledger/ledger/shares.py).

Every expected figure is plain arithmetic at the test price (H100 $4.00/GPU-h = $1/900 per GPU-second,
tests/analytics/build.py); the raw-sample path and the rollups must both give it, before and after a rebuild.
Defaults: idle ≤ 5 % for ≥ 30 min, target 60 %.
"""

from __future__ import annotations

import datetime as dt

import pytest

from analytics.filters import Filters
from analytics.telemetry_source import ROLLUPS, TelemetrySource
from analytics.utilization import job_utilization
from analytics.waste import PARTS, job_waste, waste_totals
from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from gpuledger.ledger.rollup import rebuild_rollup
from tests.analytics.build import T0, alloc, at, gpu, ingest, job, series, set_test_prices
from tests.analytics.oracle import ORACLE
from tests.analytics.test_fast_path import assert_fast_equals_raw
from tests.analytics.test_process_shares import _two_jobs_on_one_card, pmon

RATE = 4.0  # $/GPU-h
JOB_PARTS = tuple(p for p in PARTS if p != "unallocated_usd")
FIGURES = ("gpu_hours", "covered_gpu_hours", "idle_gpu_hours", "cost_usd", *JOB_PARTS)


def _waste(con, source: TelemetrySource, filters: Filters | None = None) -> dict[str, dict]:
    rows = job_waste(con, filters=filters or Filters(), source=source)
    return {r["job_id"]: r for r in rows.iter_rows(named=True)}


def _both_sources(con, filters: Filters | None = None) -> dict[str, dict]:
    """The per-job figures, checked equal from raw samples (the plain-SQL oracle), the rollups, and the
    rollups rebuilt whole."""
    raw = _waste(con, ORACLE, filters)
    fast = _waste(con, ROLLUPS, filters)
    rebuild_rollup(con, idle_util_pct=5.0, idle_min_minutes=30.0, target_util_pct=60.0)
    rebuilt = _waste(con, ROLLUPS, filters)
    assert raw.keys() == fast.keys() == rebuilt.keys()
    if filters is None:  # every figure of both sources, over the whole ledger and its views
        assert_fast_equals_raw(con)
    for j, r in raw.items():
        for c in FIGURES:
            assert fast[j][c] == pytest.approx(r[c], abs=1e-9), (j, c)
            assert rebuilt[j][c] == pytest.approx(r[c], abs=1e-9), (j, c)
    return raw


def _b1_jobs() -> dict:
    holds = [
        {"job_id": j, "host": "b1", "gpu_id": None, "gpu_count": 1.0, "start_ts": at(0), "end_ts": at(60)}
        for j in ("a", "b")
    ]
    return {"jobs": [job("a", 0, 60), job("b", 0, 60)], "allocations": holds}


def _b1_telemetry() -> dict:
    # b1's one card: 30 min at 0 % (one idle stretch of 30 min), then 30 min at 80 %
    return {"samples": series("b1:0", 0, [0.0] * 30 + [80.0] * 30), "gpus": [gpu("b1:0")]}


def _check_b1(con) -> None:
    rows = _both_sources(con)
    for j in ("a", "b"):
        r = rows[j]
        assert r["cost_usd"] == pytest.approx(RATE / 2)  # $4.00 for the card-hour, ½ each
        assert r["gpu_hours"] == pytest.approx(0.5)
        assert r["covered_gpu_hours"] == pytest.approx(0.5)  # 60 samples × 60 s × ½: its share, no more
        assert r["idle_gpu_hours"] == pytest.approx(0.25)  # the 30-min stretch × ½
        assert r["idle_allocated_usd"] == pytest.approx(0.25 * RATE)  # $1.00
        assert r["underused_usd"] == pytest.approx(0.0)  # 80 % is above the 60 % target
        assert r["productive_usd"] == pytest.approx(0.25 * RATE)  # $1.00
        assert r["unmeasured_usd"] == pytest.approx(0.0)  # measured from the card's samples, not "unmeasured"
    util = {r["job_id"]: r for r in job_utilization(con).iter_rows(named=True)}
    for j in ("a", "b"):
        # the card's mean over the hour: (30 × 0 + 30 × 80) / 60 = 40 %, for each job
        assert util[j]["mean_util_pct"] == pytest.approx(40.0)
        assert util[j]["effective_gpu_h"] == pytest.approx(0.8 * 0.5 * 0.5)  # 80 % × ½ h × share ½
    totals = waste_totals(con)
    assert totals["spend_usd"] == pytest.approx(RATE)
    assert totals["idle_allocated_usd"] == pytest.approx(2.0)  # the card's ½ h idle at $4/h, once
    assert round(sum(totals[p] for p in PARTS), 9) == round(totals["spend_usd"], 9)


def test_two_sacct_jobs_on_b1_are_each_measured_by_the_card_weighted_by_share(ledger):
    """Issue 35's reproduction: two host-level jobs hold b1 (1 card) for the same hour. Before: the card's
    samples counted for job a only (b "unmeasured", a's coverage capped at its ½ share)."""
    set_test_prices(ledger)
    ingest(ledger, **_b1_jobs(), **_b1_telemetry())
    _check_b1(ledger)


def test_telemetry_landed_before_the_jobs_gives_the_same_figures(ledger):
    set_test_prices(ledger)
    ingest(ledger, **_b1_telemetry())
    ingest(ledger, **_b1_jobs())
    _check_b1(ledger)


def test_telemetry_landed_after_the_jobs_gives_the_same_figures(ledger):
    set_test_prices(ledger)
    ingest(ledger, **_b1_jobs())
    ingest(ledger, **_b1_telemetry())
    _check_b1(ledger)


def test_a_second_job_landing_later_re_weights_the_rolled_up_samples(ledger):
    # a alone first (the card's whole hour is a's), then b's record arrives: the rollup re-weights
    set_test_prices(ledger)
    jobs = _b1_jobs()
    ingest(ledger, jobs=jobs["jobs"][:1], allocations=jobs["allocations"][:1], **_b1_telemetry())
    alone = _waste(ledger, ROLLUPS)["a"]
    assert alone["covered_gpu_hours"] == pytest.approx(1.0) and alone["cost_usd"] == pytest.approx(RATE)
    ingest(ledger, jobs=jobs["jobs"][1:], allocations=jobs["allocations"][1:])
    _check_b1(ledger)


def test_pmon_shares_weight_the_samples_and_the_untied_job_is_measured(ledger, tmp_path):
    """a and b hold h1:0 for an hour, the card at 50 %; their pmon logs say SM 60 % and 20 %: shares ¾ and
    ¼ (the same shares cost uses). Before: the samples counted for one job, the other read "unmeasured"."""
    _two_jobs_on_one_card(ledger, tmp_path, a={"sm": {1001: 60}}, b={"sm": {2002: 20}})
    rows = _both_sources(ledger)
    for j, share in (("a", 0.75), ("b", 0.25)):
        r = rows[j]
        cost = RATE * share  # $3.00, $1.00
        assert r["cost_usd"] == pytest.approx(cost)
        assert r["covered_gpu_hours"] == pytest.approx(share)
        # 50 % against the 60 % target: under-used (60 − 50) / 60 = 1/6 of every second, productive 5/6
        assert r["underused_usd"] == pytest.approx(cost / 6)
        assert r["productive_usd"] == pytest.approx(cost * 5 / 6)
        assert r["idle_allocated_usd"] == pytest.approx(0.0)
        assert r["unmeasured_usd"] == pytest.approx(0.0)
    util = {r["job_id"]: r for r in job_utilization(ledger).iter_rows(named=True)}
    assert util["a"]["mean_util_pct"] == pytest.approx(50.0)
    assert util["b"]["mean_util_pct"] == pytest.approx(50.0)
    assert util["a"]["p50_util_pct"] == util["b"]["p50_util_pct"] == pytest.approx(50.0)


def _across_midnight(con) -> None:
    """a and b share h1:0 from 22:00 to 02:00 (declared 1 card each: ½ each); the card reads 90 % for an
    hour, 0 % for 90 min (23:00-00:30, one idle stretch across midnight), then 30 % for 90 min. Beside them a
    host-level job c holds one card of host h1 (dealt h1:1, at 50 %) for the same four hours."""
    set_test_prices(con)
    start, end = 22 * 60, 26 * 60
    ingest(
        con,
        jobs=[job("a", start, end), job("b", start, end), job("c", start, end)],
        allocations=[
            alloc("a", "h1:0", start, end),
            alloc("b", "h1:0", start, end),
            {**alloc("c", "h1:1", start, end), "gpu_id": None},
        ],
        samples=series("h1:0", start, [90.0] * 60 + [0.0] * 90 + [30.0] * 90)
        + series("h1:1", start, [50.0] * 240),
        gpus=[gpu("h1:0"), gpu("h1:1")],
    )


def test_a_shared_card_across_midnight_adds_up_day_by_day_in_every_part(ledger):
    """docs/metrics.md's former known limit: idle over the two days was $167.64 where day 1 + day 2 gave
    $167.07 (the cap on a job's coverage, not linear across the cut). Now coverage is the share and the parts
    add up."""
    _across_midnight(ledger)
    day1, day2 = T0.date(), T0.date() + dt.timedelta(days=1)
    whole = _both_sources(ledger)
    d1 = _both_sources(ledger, Filters(since=day1, until=day1))
    d2 = _both_sources(ledger, Filters(since=day2, until=day2))
    # by hand, per sharing job (share ½, $2/h): day 1 = 22:00-24:00: 1 h at 90 % (productive $2.00) and
    # 23:00-24:00 idle ($2.00); day 2 = 00:00-00:30 idle ($1.00), 00:30-02:00 at 30 %: under-used
    # (60 − 30) / 60 = ½ of it ($1.50), productive the other ½ ($1.50)
    hand = {
        "d1": {"productive_usd": 2.0, "idle_allocated_usd": 2.0, "underused_usd": 0.0},
        "d2": {"productive_usd": 1.5, "idle_allocated_usd": 1.0, "underused_usd": 1.5},
    }
    for j in ("a", "b"):
        for part, v in hand["d1"].items():
            assert d1[j][part] == pytest.approx(v), (j, part)
        for part, v in hand["d2"].items():
            assert d2[j][part] == pytest.approx(v), (j, part)
        assert whole[j]["covered_gpu_hours"] == pytest.approx(whole[j]["gpu_hours"]) == pytest.approx(2.0)
    for j in ("a", "b", "c"):
        for c in FIGURES:
            assert whole[j][c] == pytest.approx(d1[j][c] + d2[j][c], abs=1e-9), (j, c)
        assert whole[j]["unmeasured_usd"] == pytest.approx(0.0)


def test_replacing_a_pmon_log_re_weights_the_samples(ledger, tmp_path):
    """b's pmon log replaced (--replace) by one where b's process ran at 60 % like a's: the shares become
    ½ / ½ and the samples already rolled up are re-weighted with them."""
    _two_jobs_on_one_card(ledger, tmp_path, a={"sm": {1001: 60}}, b={"sm": {2002: 20}})
    assert _both_sources(ledger)["b"]["covered_gpu_hours"] == pytest.approx(0.25)
    log = pmon(tmp_path / "b.log", T0, 60, {2002: 60})
    ingest_file(ledger, log, opts=IngestOptions(tz="UTC", host="h1", job_id="b", replace=True))
    rows = _both_sources(ledger)
    for j in ("a", "b"):
        assert rows[j]["cost_usd"] == pytest.approx(RATE / 2)  # 60 / (60 + 60) of the $4.00 card-hour
        assert rows[j]["covered_gpu_hours"] == pytest.approx(0.5)
        assert rows[j]["underused_usd"] == pytest.approx(RATE / 2 / 6)  # 50 % against 60 %: 1/6


def test_declared_fractions_that_fit_weight_the_samples_by_fraction(ledger):
    """Two pods on one card declaring 0.5 and 0.25 of it (gpu_milli 500 and 250) for an hour, the card at
    50 %: they fit, so each is billed its fraction ($2.00, $1.00) and the card's samples count for each by
    it: covered 0.5 and 0.25 GPU-h (= held), both at the card's 50 %; the free quarter is no job's. Before:
    the samples counted for one pod (covered 1.0 GPU-h, capped) and the other read unmeasured."""
    set_test_prices(ledger)
    ingest(
        ledger,
        jobs=[job("a", 0, 60, gpu_count=0.5), job("b", 0, 60, gpu_count=0.25)],
        allocations=[
            {**alloc("a", "h1:0", 0, 60), "gpu_count": 0.5},
            {**alloc("b", "h1:0", 0, 60), "gpu_count": 0.25},
        ],
        samples=series("h1:0", 0, [50.0] * 60),
        gpus=[gpu("h1:0")],
    )
    rows = _both_sources(ledger)
    for j, d in (("a", 0.5), ("b", 0.25)):
        assert rows[j]["cost_usd"] == pytest.approx(RATE * d)
        assert rows[j]["covered_gpu_hours"] == pytest.approx(d)
        assert rows[j]["underused_usd"] == pytest.approx(RATE * d / 6)  # (60 − 50) / 60 of it
        assert rows[j]["unmeasured_usd"] == pytest.approx(0.0)
    util = {r["job_id"]: r for r in job_utilization(ledger).iter_rows(named=True)}
    assert util["a"]["mean_util_pct"] == util["b"]["mean_util_pct"] == pytest.approx(50.0)
    # the card's 60 samples × 60 s: ½ + ¼ to the pods, ¼ to no job, in the minute rollup
    by_job = dict(
        ledger.execute("SELECT job_id, sum(covered_s) FROM samples_minute GROUP BY job_id").fetchall()
    )
    assert by_job == {"a": pytest.approx(1800.0), "b": pytest.approx(900.0), None: pytest.approx(900.0)}


def test_a_job_joining_a_card_midway_is_measured_from_then(ledger):
    """a holds h1:0 for 2 h, b joins for the second hour; the card reads 0 % for the first 40 min, then 90 %.
    a: 1 h alone + ½ of the second; b: ½ of the second hour. a's idle stretch (40 min, all in its own hour)
    is its alone; b's hour is all at 90 %."""
    set_test_prices(ledger)
    ingest(
        ledger,
        jobs=[job("a", 0, 120), job("b", 60, 120)],
        allocations=[alloc("a", "h1:0", 0, 120), alloc("b", "h1:0", 60, 120)],
        samples=series("h1:0", 0, [0.0] * 40 + [90.0] * 80),
        gpus=[gpu("h1:0")],
    )
    rows = _both_sources(ledger)
    assert rows["a"]["cost_usd"] == pytest.approx(RATE * 1.5)  # $6.00
    assert rows["b"]["cost_usd"] == pytest.approx(RATE * 0.5)  # $2.00
    assert rows["a"]["covered_gpu_hours"] == pytest.approx(1.5)
    assert rows["b"]["covered_gpu_hours"] == pytest.approx(0.5)
    assert rows["a"]["idle_allocated_usd"] == pytest.approx(RATE * 40 / 60)  # 40 min alone at $4/h
    assert rows["b"]["idle_allocated_usd"] == pytest.approx(0.0)
    assert rows["b"]["productive_usd"] == pytest.approx(RATE * 0.5)
