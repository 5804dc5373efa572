"""Utilization per job and rolled up: time-weighted, over the held GPUs, gaps reported as unknown."""

from __future__ import annotations

import pytest

from analytics.utilization import job_utilization, utilization_by
from tests.analytics.build import alloc, gpu, ingest, job, series


def _two_gpu_job(con):
    # j1 holds h1:0 and h1:1 for 60 min. h1:0: 30 samples at 100 %, 30 s apart (15 min) then 45 min silent;
    # h1:1: 60 one-minute samples at 40 %, memory 40 of 80 GiB. h1:2 on the same host is named by no
    # allocation: it is telemetry-only (its own pseudo-job) and must not dilute j1's figures.
    ingest(
        con,
        jobs=[job("j1", 0, 60, gpu_count=2.0)],
        allocations=[alloc("j1", "h1:0", 0, 60), alloc("j1", "h1:1", 0, 60)],
        samples=series("h1:0", 0, [100.0] * 30, step_s=30)
        + series("h1:1", 0, [40.0] * 60, mem_used_mib=40_960.0, mem_total_mib=81_920.0)
        + series("h1:2", 0, [0.0] * 60),
        gpus=[gpu("h1:0"), gpu("h1:1"), gpu("h1:2")],
    )


def test_job_utilization_is_time_weighted_over_the_held_gpus(ledger):
    _two_gpu_job(ledger)
    rows = {r["job_id"]: r for r in job_utilization(ledger).iter_rows(named=True)}
    assert set(rows) == {"j1", "unattributed:h1:2"}
    assert rows["unattributed:h1:2"]["mean_util_pct"] == 0.0
    r = rows["j1"]
    covered_s = 30 * 30 + 60 * 60  # 900 s + 3,600 s
    assert r["held_gpu_h"] == pytest.approx(2.0)
    assert r["covered_gpu_h"] == pytest.approx(covered_s / 3600)
    assert r["unknown_share"] == pytest.approx(1 - covered_s / 7200)  # 0.375
    assert r["mean_util_pct"] == pytest.approx((900 * 100 + 3600 * 40) / covered_s)  # 52 %
    assert r["effective_gpu_h"] == pytest.approx((900 * 1.0 + 3600 * 0.4) / 3600)
    assert r["p50_util_pct"] == pytest.approx(40.0)  # 3,600 of 4,500 s are at 40 %
    assert r["p95_util_pct"] == pytest.approx(100.0)
    assert r["peak_mem_frac"] == pytest.approx(0.5)
    assert r["mean_mem_frac"] == pytest.approx(0.5)
    assert r["sm_active_pct"] is None  # the source has no profiling metrics: NULL, not 0


def test_rollups_by_team_gpu_and_day(ledger):
    _two_gpu_job(ledger)
    team = utilization_by(ledger, by="team").row(0, named=True)
    assert team["key"] == "nlp" and team["held_gpu_h"] == pytest.approx(2.0)
    assert team["mean_util_pct"] == pytest.approx(52.0)
    gpus = {r["key"]: r for r in utilization_by(ledger, by="gpu").iter_rows(named=True)}
    assert set(gpus) == {"h1:0", "h1:1", "h1:2"}
    assert gpus["h1:0"]["mean_util_pct"] == pytest.approx(100.0)
    day = utilization_by(ledger, by="day").row(0, named=True)
    # j1's 2 GPU-hours plus the pseudo-job's hour; covered 4,500 s + 3,600 s of h1:2.
    assert day["key"] == "2025-03-03" and day["held_gpu_h"] == pytest.approx(3.0)
    assert day["unknown_share"] == pytest.approx(1 - (4500 + 3600) / 10800)
    week = utilization_by(ledger, by="week").row(0, named=True)
    assert week["key"] == "2025-W10"
