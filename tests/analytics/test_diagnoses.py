"""Diagnoses on a hand-built ledger (tests/analytics/recommend_ledgers.py), and scaling on Lambda's
measured multi-GPU throughput."""

from __future__ import annotations

import csv

import polars as pl
import pytest

from analytics.diagnoses import diagnoses, scaling_table
from analytics.filters import Filters
from gpuledger.ledger.db import memory_ledger
from tests.analytics.build import ingest, job
from tests.analytics.recommend_ledgers import DAY, diagnosis_ledger
from tests.conftest import dataset


@pytest.fixture(scope="module")
def flags() -> pl.DataFrame:
    con = memory_ledger()
    diagnosis_ledger(con)
    out = diagnoses(con, filters=Filters(since=DAY, until=DAY))
    con.close()
    return out


# (job, diagnosis, statistic, value worked out by hand)
EXPECTED = [
    ("busy", "busy_but_unproductive", "sm_active_pct", 20.0),  # 95 % util, 20 % SM-active < 40
    # [90, 90, 90, 2] × 15: 15 of 60 samples dip, 29 of 59 consecutive pairs swing (15 down + 14 up)
    ("input", "input_bound", "swing_rate", 29 / 59),
    ("hot", "throttling", "throttled_share", 30 / 60),  # 30 of 60 samples with HwThermalSlowdown 0x40
    ("sc16", "poor_scaling", "scaling_efficiency", (112000 / 16) / (80000 / 8)),
    ("tiny1", "oversized_gpu", "peak_mem_mib", 6000.0),  # L4 holds it: 6000 ≤ 0.9 × 23034
    ("half", "idle_gpus", "idle_gpu_share", 2 / 4),  # GPUs 2 and 3 at 0 % the whole hour, as its chart shows
]


@pytest.mark.parametrize(
    ("job_id", "diagnosis", "statistic", "value"), EXPECTED, ids=[e[1] for e in EXPECTED]
)
def test_each_diagnosis_with_its_evidence(flags, job_id, diagnosis, statistic, value):
    row = flags.filter((pl.col("job_id") == job_id) & (pl.col("diagnosis") == diagnosis)).to_dicts()
    assert len(row) == 1
    assert row[0]["statistic"] == statistic
    assert row[0]["value"] == pytest.approx(value)
    assert row[0]["evidence"].startswith(f"Job {job_id}")


def test_look_alikes_are_not_flagged(flags):
    # healthy: 95 % util with 80 % SM-active; serve: the input-bound pattern on an inference job; quarter: 1
    # of 4 GPUs idle, under half
    assert set(flags["job_id"]) == {e[0] for e in EXPECTED}
    assert flags.height == len(EXPECTED)


def test_oversized_names_the_cheapest_fitting_card(flags):
    row = flags.filter(pl.col("diagnosis") == "oversized_gpu").to_dicts()[0]
    # 15 % SM-active × 312 (A100 fp16) / 121 (L4) = 38.7 % busy on an L4
    assert "L4" in row["evidence"] and f"{15 * 312 / 121:.0f} % busy" in row["evidence"]


def _lambda_rows(name: str) -> dict[tuple[str, int], dict[str, str]]:
    with dataset(f"lambda-benchmark/{name}").open() as fh:
        return {(r["name_gpu"], int(float(r["num_gpu"]))): r for r in csv.DictReader(fh)}


@pytest.mark.datasets
def test_scaling_on_lambda_a100_bert_large_throughput():
    """Lambda measured BERT-large fp16 training on 1, 2, 4 and 8 × A100 80GB SXM4 (samples/s, whole
    system): the per-GPU efficiency is independent arithmetic on the CSV's numbers."""
    rows = _lambda_rows("pytorch-train-throughput-fp16.csv")
    names = {1: "A100 80GB SXM4", 2: "2x A100 80GB SXM4", 4: "4x A100 80GB SXM4", 8: "8x A100 80GB SXM4"}
    tput = {n: float(rows[(name, n)]["bert_large_squad"]) for n, name in names.items()}
    con = memory_ledger()
    jobs = [job(f"bert{n}", 0, 60, gpu_model="A100-80GB", gpu_count=float(n)) for n in names]
    runs = [
        {
            "job_id": f"bert{n}",
            "source": "lambda",
            "model": "bert-large",
            "precision": "fp16",
            "batch_size": 64,
            "seq_len": 384,
            "samples_per_s": tput[n],
        }
        for n in names
    ]
    ingest(con, jobs=jobs, training_runs=runs)
    table = scaling_table(con).sort("gpu_count")
    assert table["gpu_count"].to_list() == [1, 2, 4, 8]
    expected = [tput[n] / n / tput[1] for n in (1, 2, 4, 8)]  # e.g. 8 GPUs: 746/8/152 = 0.61
    assert table["efficiency"].to_list() == pytest.approx(expected)
    assert table["best_gpu_count"].unique().to_list() == [1]
    flagged = diagnoses(con).filter(pl.col("diagnosis") == "poor_scaling")
    assert sorted(flagged["job_id"]) == sorted(f"bert{n}" for n in (2, 4, 8) if tput[n] / n / tput[1] < 0.8)
    con.close()


def test_right_size_takes_the_cheapest_card_that_holds_the_job_and_its_work():
    """Candidates cheapest first (L4 $0.50, then L40S $1.00, against the A100's $2.00); the first that
    holds the peak memory (within 0.9 of the card) and runs the work at most 80 % busy wins."""
    from analytics.diagnoses import right_size
    from tests.analytics.build import alloc, series
    from tests.analytics.recommend_ledgers import A100, set_prices

    con = memory_ledger()
    set_prices(con)
    names = ("fits", "big", "busy")
    ingest(
        con,
        jobs=[job(j, 0, 60, gpu_model=A100, kind="inference", name=j) for j in names],
        allocations=[alloc(j, f"h{j}:0", 0, 60) for j in names],
        samples=(
            # L4 holds 6,000 MiB (≤ 0.9 × 23,034) at 15 × 312 / 121 = 38.7 % busy: L4
            series("hfits:0", 0, [20.0] * 60, mem_used_mib=6000.0, sm_active_pct=15.0)
            # 30,000 MiB > 0.9 × 23,034 on an L4; ≤ 0.9 × 46,068 on an L40S: L40S
            + series("hbig:0", 0, [20.0] * 60, mem_used_mib=30000.0, sm_active_pct=15.0)
            # 40 × 312 / 121 = 103 % busy on an L4 (over 80); 40 × 312 / 362.05 = 34.5 % on an L40S: L40S
            + series("hbusy:0", 0, [50.0] * 60, mem_used_mib=6000.0, sm_active_pct=40.0)
        ),
    )
    rows = {r["job_id"]: r for r in right_size(con, filters=Filters(since=DAY, until=DAY)).to_dicts()}
    con.close()
    assert {j: r["candidate"] for j, r in rows.items()} == {"fits": "L4", "big": "L40S", "busy": "L40S"}
    assert rows["fits"]["busy_pct_there"] == pytest.approx(15 * 312 / 121)
    assert rows["busy"]["busy_pct_there"] == pytest.approx(40 * 312 / 362.05)
    assert rows["big"]["candidate_usd_per_gpu_hour"] == 1.0 and rows["big"]["rate_usd_per_gpu_hour"] == 2.0
    assert rows["busy"]["needed_tflops"] == pytest.approx(312 * 40 / 100)
    assert rows["fits"]["basis"] == "SM-active"
