"""The waste parts reconcile to spend (to the cent) on a real cluster trace and on the demo fleet."""

from __future__ import annotations

import importlib.util

import pytest

from analytics.summary import summary
from analytics.waste import PARTS, waste_by
from collectors.base import ingest_file
from tests.conftest import dataset


def _check(con, summary_kwargs=None):
    s = summary(con, **(summary_kwargs or {}))
    assert s["spend_usd"] > 0
    assert round(sum(s["waste"][p] for p in PARTS), 2) == round(s["spend_usd"], 2)
    teams = waste_by(con, by="team", **(summary_kwargs or {}))
    assert round(teams["spend_usd"].sum(), 2) == round(s["spend_usd"], 2)
    # GPU-hours of the job records in plain SQL (running jobs up to the data horizon).
    (job_h,) = con.execute(
        """WITH h AS (SELECT greatest((SELECT max(ts) FROM samples),
                                      (SELECT max(greatest(coalesce(end_ts, start_ts), start_ts)) FROM jobs)) AS h)
           SELECT coalesce(sum(gpu_count * epoch(coalesce(end_ts, h.h) - start_ts) / 3600), 0)
           FROM jobs, h WHERE start_ts IS NOT NULL AND coalesce(end_ts, h.h) > start_ts"""
    ).fetchall()[0]
    return s, job_h


@pytest.mark.datasets
def test_parts_reconcile_on_the_alibaba_openb_trace(ledger):
    ingest_file(ledger, dataset("alibaba-gpu-v2023/openb_pod_list_default.csv"))
    # The trace names no GPU model for most pods (any GPU): price them all as T4s so its ~8,000 pods,
    # running, failed and completed, with fractional GPU shares, carry money through the taxonomy.
    ledger.execute("UPDATE jobs SET gpu_model = 'T4' WHERE gpu_model IS NULL")
    s, job_h = _check(ledger)
    assert s["waste"]["failed_usd"] > 0
    # No telemetry in this trace: every dollar is unmeasured or failed, and GPU-hours are the jobs'.
    assert s["gpu_hours"] == pytest.approx(job_h, rel=1e-9)
    assert s["waste"]["productive_usd"] == 0.0


@pytest.mark.skipif(
    importlib.util.find_spec("gpuledger.demo.build") is None, reason="gpuledger.demo.build not present"
)
def test_parts_reconcile_on_the_demo_fleet(ledger):
    from gpuledger.demo.build import MIN_DAYS, build_demo

    build_demo(ledger, days=MIN_DAYS)
    s, _ = _check(ledger)
    assert s["waste"]["idle_allocated_usd"] > 0 and s["waste"]["failed_usd"] > 0
