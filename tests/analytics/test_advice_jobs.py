"""Input-pipeline and inference-consolidation advice on a hand-built ledger (H100 $3.00 per GPU-hour)."""

from __future__ import annotations

import polars as pl
import pytest

from analytics.filters import Filters
from analytics.recommend import recommendations
from gpuledger.ledger.db import memory_ledger
from tests.analytics.build import alloc, ingest, job, series
from tests.analytics.recommend_ledgers import DAY, set_prices


@pytest.fixture(scope="module")
def recs() -> pl.DataFrame:
    con = memory_ledger()
    set_prices(con)
    ingest(
        con,
        jobs=[
            job("inp", 0, 60, name="input-1"),
            job("srv", 0, 60, kind="inference", name="serve-1"),
        ],
        allocations=[alloc("inp", "hI:0", 0, 60), alloc("srv", "hS:0", 0, 60)],
        # 60 one-minute samples: 90, 90, 90, 2 repeated (a loader that cannot keep up)
        samples=series("hI:0", 0, [90.0, 90.0, 90.0, 2.0] * 15)
        # a replica at 30 % holding 60 GB: too much memory for an L40S/L4, too busy for an A100 (95 %)
        + series("hS:0", 0, [30.0] * 60, mem_used_mib=60000.0),
    )
    out = recommendations(con, filters=Filters(since=DAY, until=DAY), min_usd_per_week=0.0)
    con.close()
    return out


def test_input_bound_job_saves_its_dip_share(recs):
    item = recs.filter(pl.col("kind") == "fix_input_pipeline").to_dicts()
    assert len(item) == 1 and item[0]["target"] == "inp"
    # 15 of 60 samples dip under 10 %: 1 h × $3 × 15/60
    assert item[0]["saving_usd"] == pytest.approx(3.00 * 15 / 60)
    assert "DataLoader workers" in item[0]["action"] and "CPU:GPU" in item[0]["action"]
    assert "larger_batch" not in set(recs.filter(pl.col("target") == "inp")["kind"])


def test_low_utilization_replica_is_consolidated(recs):
    item = recs.filter(pl.col("kind") == "consolidate_inference").to_dicts()
    assert len(item) == 1 and item[0]["target"] == "srv"
    # underused: 60 min at 30 % against the 60 % target: 1 h × $3 × (60 − 30)/60
    assert item[0]["saving_usd"] == pytest.approx(3.00 * 30 / 60)
    assert item[0]["recurring"]  # a service recurs
    assert not {"right_size_gpu", "mig_slice"} & set(recs.filter(pl.col("target") == "srv")["kind"])


def test_every_kind_names_a_job_one_way() -> None:
    """One labeller (analytics.advice_common.job_label). advice_jobs had its own, which left the user out when
    the job had no name of its own: an input-bound job 42 of ana's read "Job 42 held …" there and
    "Job 42 (ana) held …" in every other kind; now it reads the latter everywhere."""
    from analytics.advice_common import job_label
    from analytics.advice_jobs import input_pipeline_items

    assert job_label({"job_id": "42", "name": "ft-run-3", "user_name": "ana"}) == "Job 42 (ft-run-3, ana)"
    assert job_label({"job_id": "42", "name": "42", "user_name": "ana"}) == "Job 42 (ana)"  # name = id
    assert job_label({"job_id": "42", "name": None, "user_name": "ana"}) == "Job 42 (ana)"
    assert job_label({"job_id": "42", "name": None, "user_name": None}) == "Job 42"
    unnamed = pl.DataFrame(
        {
            "job_id": ["42"],
            "name": [None],
            "user_name": ["ana"],
            "team": ["nlp"],
            "kind": ["training"],
            "n_samples": [60],
            "dip_share": [0.25],
            "burst_share": [0.75],
            "swing_rate": [0.5],
            "cost_usd": [3.0],
            "mean_util_pct": [68.0],
            "gpu_count": [1.0],
            "gpu_model": ["H100-SXM-80GB"],
            "hours": [1.0],
        },
        schema_overrides={"name": pl.Utf8},
    )
    (item,) = input_pipeline_items(unnamed)
    assert str(item.evidence).startswith("Job 42 (ana) held 1 × H100-SXM-80GB for 1.0 h")
    assert item.saving_usd == pytest.approx(3.0 * 0.25)  # cost × dip share
