"""Failure advice on a hand-built ledger: a Young/Daly worked example, repeated and early failures, OOM.

Prices: H100 $3.00 per GPU-hour on demand (tests/analytics/recommend_ledgers.py). The view is T0's day;
the data ends at 10:00 (the latest job end), so view_days floors at 1.
"""

from __future__ import annotations

import math

import polars as pl
import pytest

from analytics.advice_failures import checkpoint_cost_s, young_daly_s
from analytics.filters import Filters
from analytics.recommend import recommendations
from gpuledger.ledger.db import memory_ledger
from gpuledger.ledger.settings import Settings
from tests.analytics.build import at, ingest, job
from tests.analytics.recommend_ledgers import DAY, run, set_prices

VIEW = Filters(since=DAY, until=DAY)


@pytest.fixture(scope="module")
def recs() -> pl.DataFrame:
    con = memory_ledger()
    set_prices(con)
    ingest(
        con,
        jobs=[
            # family pre-alice: two 4-GPU runs of 10 h; one failed 8 h after its last checkpoint
            job("pa1", 0, 600, gpu_count=4.0, name="pre-alice-1", state="FAILED", last_checkpoint_ts=at(120)),
            job("pa2", 0, 600, gpu_count=4.0, name="pre-alice-2"),
            # family crash-bob: three 1-GPU runs of 1 h, each failed on the same NaN
            *(
                job(
                    f"cb{i}",
                    60 * i,
                    60 * i + 60,
                    user_name="bob",
                    name=f"crash-bob-{i}",
                    state="FAILED",
                    exit_reason="loss became NaN",
                )
                for i in range(3)
            ),
            # carol's 8-GPU run that failed 10 min after its start
            job("mc1", 0, 10, gpu_count=8.0, user_name="carol", name="multi-carol-1", state="FAILED"),
            # dave's run ran out of memory at batch 32; the family completed at 16
            job("od1", 0, 5, user_name="dave", name="oom-dave-1", state="OOM"),
            job("od2", 0, 60, user_name="dave", name="oom-dave-2"),
        ],
        training_runs=[
            run("od1", model="m-1b", batch_size=32, peak_mem_mib=81000.0, tokens_per_s=1000.0),
            run("od2", model="m-1b", batch_size=16, peak_mem_mib=60000.0, tokens_per_s=900.0),
        ],
    )
    out = recommendations(con, filters=VIEW, min_usd_per_week=0.0)
    con.close()
    return out


def _one(recs: pl.DataFrame, kind: str, target: str) -> dict[str, object]:
    rows = recs.filter((pl.col("kind") == kind) & (pl.col("target") == target)).to_dicts()
    assert len(rows) == 1, (kind, target, recs.select("kind", "target").to_dicts())
    return rows[0]


def test_young_daly_interval():
    # τ = √(2 × 300 s × 72,000 s) = √43,200,000 = 6,572.67 s
    assert young_daly_s(300.0, 72000.0) == pytest.approx(6572.67, abs=0.01)
    # a 7B model in bf16 with AdamW: 6.7e9 × 16 bytes = 107.2 GB at 2 GB/s = 53.6 s → the 60 s minimum
    assert checkpoint_cost_s(6.7e9, "bf16", "adamw")[0] == 60.0
    assert checkpoint_cost_s(70e9, "bf16", "adamw")[0] == pytest.approx(70e9 * 16 / 1e9 / 2.0)  # 560 s
    assert checkpoint_cost_s(None, None, None)[0] == 300.0


def test_checkpoint_interval_worked_example(recs):
    item = _one(recs, "checkpoint_interval", "alice/pre-alice")
    # the family ran 2 × 10 h = 72,000 s with 1 interruption: MTBF 72,000 s; no parameter count: C = 300 s
    tau = math.sqrt(2 * 300 * 72000)  # 6,572.67 s = 110 min
    rate = 3.00 / 3600  # $ per GPU-second
    # pa1 lost 10 h − 2 h = 28,800 s since its checkpoint on 4 GPUs; with τ it loses τ/2 on average
    gross = rate * 4 * (28800 - tau / 2)  # $85.05
    # the extra checkpoint writes: both runs, 4 GPUs × 36,000 s × C/τ
    overhead = 2 * rate * 4 * 36000 * 300 / tau  # $10.95
    assert item["saving_usd"] == pytest.approx(gross - overhead, abs=0.01)  # $74.09
    assert item["job_ids"] == ["pa1"]
    assert f"every {tau / 60:,.0f} min" in item["action"]  # 110 min
    assert "Young/Daly" in item["evidence"] and f"${gross - overhead:,.2f}" in item["evidence"]
    assert item["recurring"] and item["addresses"] == ["failed_usd"]


def test_repeated_failures_count_every_retry_after_the_first(recs):
    item = _one(recs, "fix_repeated_failures", "bob/crash-bob")
    # three 1-GPU hours at $3, no checkpoint: the 2nd and 3rd failures ($3 each) would have been saved
    assert item["saving_usd"] == pytest.approx(2 * 3.00)
    assert "loss became NaN" in item["action"]


def test_an_early_multi_gpu_failure_suggests_a_1_gpu_test(recs):
    item = _one(recs, "test_small_first", "carol")
    # 8 GPUs × 10 min × $3/h = $4 lost, of which the 7 GPUs a 1-GPU test would not hold: 4 × 7/8
    assert item["saving_usd"] == pytest.approx(4.0 * 7 / 8)
    assert item["recurring"] is False and item["usd_per_week"] is None  # one run: a one-off


def test_an_oom_run_gets_a_smaller_batch_and_no_larger_one(recs):
    item = _one(recs, "oom_smaller_batch", "dave/oom-dave")
    assert item["saving_usd"] == pytest.approx(5 / 60 * 3.00)  # 5 min on 1 GPU
    assert "lower the per-GPU batch to 16" in item["action"] and "activation checkpointing" in item["action"]
    batch = recs.filter(pl.col("kind") == "larger_batch")
    assert not any(j in ("od1", "pa1", "mc1") for ids in batch["job_ids"] for j in ids)


def test_failure_advice_does_not_depend_on_the_order_of_the_view_rows():
    """The view's rows come from DuckDB in no fixed order; the failure cards (their sums of lost GPU-hours,
    the run they size the checkpoint by) must come out the same for every order."""
    from analytics.advice_failures import failure_items
    from analytics.filters import horizon
    from analytics.job_signals import view_jobs_sql
    from analytics.query import frame

    con = memory_ledger()
    set_prices(con)
    ingest(
        con,
        jobs=[
            job(
                f"pb{i}",
                0,
                600,
                gpu_count=3.0,
                name=f"pre-bea-{i}",
                state="FAILED",
                last_checkpoint_ts=at(7 * i),
            )
            for i in range(1, 7)
        ],
        training_runs=[run(f"pb{i}", model="m-7b", params=7e9, batch_size=8) for i in range(1, 7)],
    )
    sql, params = view_jobs_sql(VIEW, horizon(con))
    view = frame(con, sql, params)
    failed = {str(j): 1.0 for j in view["job_id"]}
    forward = failure_items(con, view.sort("job_id"), failed, Settings())
    backward = failure_items(con, view.sort("job_id", descending=True), failed, Settings())
    con.close()
    assert forward and forward == backward
