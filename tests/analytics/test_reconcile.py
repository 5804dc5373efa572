"""The waste parts reconcile to spend (to the cent) on a real cluster trace and on the demo fleet."""

from __future__ import annotations

import pytest

from analytics.summary import summary
from analytics.waste import PARTS, unallocated, waste_by
from collectors.ingest import ingest_file
from gpuledger.ledger.db import writer
from tests.conftest import dataset


def _check(con, summary_kwargs=None):
    s = summary(con, **(summary_kwargs or {}))
    assert s["spend_usd"] > 0
    assert round(sum(s["waste"][p] for p in PARTS), 2) == round(s["spend_usd"], 2)
    teams = waste_by(con, by="team", **(summary_kwargs or {}))
    assert round(teams["spend_usd"].sum(), 2) == round(s["spend_usd"], 2)
    # GPU-hours of the job records in plain SQL (running jobs up to the data horizon).
    (job_h,) = con.execute(
        """WITH h AS (SELECT greatest((SELECT max(ts + to_microseconds(CAST(interval_s * 1e6 AS BIGINT))) FROM samples),
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


@pytest.mark.datasets
def test_openb_pods_of_unknown_model_consume_the_node_capacity(ledger):
    ingest_file(ledger, dataset("alibaba-gpu-v2023/openb_node_list_all_node.csv"))
    ingest_file(ledger, dataset("alibaba-gpu-v2023/openb_pod_list_default.csv"))
    s, job_h = _check(ledger)
    # Plain SQL: the node list's GPUs over the window (first pod start .. the data horizon), and the GPU-hours
    # the pods held in it; a pod with num_gpu = 1 holds gpu_milli / 1000 of its GPU.
    (cap_h, held_h, unknown_h, shared_h, shared_share) = ledger.execute(
        """WITH w AS (SELECT min(start_ts) AS lo,
                             max(greatest(coalesce(end_ts, start_ts), start_ts)) AS hi FROM jobs),
                pods AS (SELECT j.*, greatest(j.start_ts, w.lo) AS a, least(coalesce(j.end_ts, w.hi), w.hi) AS b
                         FROM jobs j, w WHERE j.start_ts IS NOT NULL)
           SELECT (SELECT sum(c.gpu_count) * epoch(w.hi - w.lo) / 3600 FROM capacity c, w GROUP BY w.hi, w.lo),
                  sum(gpu_count * epoch(b - a) / 3600) FILTER (WHERE b > a),
                  sum(gpu_count * epoch(b - a) / 3600) FILTER (WHERE b > a AND gpu_model IS NULL),
                  sum(gpu_count * epoch(b - a) / 3600) FILTER (WHERE b > a AND gpu_count < 1),
                  min(gpu_count) FILTER (WHERE name = 'openb-pod-0001')
           FROM pods"""
    ).fetchall()[0]
    assert unknown_h == pytest.approx(held_h)  # no pod names one GPU model: all are unknown
    assert held_h == pytest.approx(job_h, rel=1e-9) and held_h > 50_000  # 51,470.7 GPU-h of real pods
    assert shared_h > 0 and shared_share == pytest.approx(460 / 1000)  # pod-0001: gpu_milli 460 of one GPU
    un = unallocated(ledger)
    assert un["capacity_gpu_hours"].sum() == pytest.approx(cap_h, rel=1e-9)
    # every held GPU-hour of an unknown model is taken from some model's free capacity (or oversubscribes)
    assert un["unknown_model_gpu_hours"].sum() + un["oversubscribed_gpu_hours"].sum() == pytest.approx(
        held_h, rel=1e-9
    )
    assert un["unallocated_gpu_hours"].sum() == pytest.approx(
        cap_h - held_h + un["oversubscribed_gpu_hours"].sum(), rel=1e-9
    )
    # The pods are unpriced held hours, never unallocated; the priced models' unallocated dollars are less
    # than their whole capacity's.
    assert s["unpriced_gpu_hours"] == pytest.approx(held_h, rel=1e-9)
    priced = un.filter(un["unallocated_usd"].is_not_null())
    whole = (priced["capacity_gpu_hours"] * priced["usd_per_gpu_hour"]).sum()
    assert s["waste"]["unallocated_usd"] == pytest.approx(priced["unallocated_usd"].sum())
    assert s["waste"]["unallocated_usd"] < whole


def test_parts_reconcile_on_the_demo_fleet(demo_db):
    with writer(demo_db) as ledger:
        s, _ = _check(ledger)
    assert s["waste"]["idle_allocated_usd"] > 0 and s["waste"]["failed_usd"] > 0
