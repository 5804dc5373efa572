"""The batch-size recommender's parts, checked by hand and against Lambda's measured maximum batch sizes."""

from __future__ import annotations

import csv

import pytest

from analytics.batch_size import (
    bytes_per_param,
    fit_memory,
    fit_throughput,
    headroom_gain,
    largest_batch,
    lr_rule,
    plan_batch,
)
from tests.conftest import dataset

MIB = 1024 * 1024


def test_two_points_fit_a_line_and_the_batch_rounds_down_to_a_multiple_of_8():
    fit = fit_memory([(8, 20480), (16, 30720)])
    assert (fit.method, fit.fixed_mib, fit.per_sample_mib) == ("fit", 10240, 1280)
    # (0.9 × 81920 − 10240) / 1280 = 49.6 → 48; 10240 + 1280 × 48 = 71680 ≤ 73728
    assert largest_batch(fit, 81920, 0.9) == 48


def test_one_point_with_params_uses_16_bytes_per_param_for_bf16_adamw():
    fit = fit_memory([(8, 40000)], params=1e9, precision="bf16", optimizer="adamw")
    fixed = 1e9 * 16 / MIB  # 15258.8 MiB of weights, grads, fp32 master and two Adam moments
    assert fit.method == "params"
    assert fit.fixed_mib == pytest.approx(fixed)
    assert fit.per_sample_mib == pytest.approx((40000 - fixed) / 8)
    assert "16 bytes" in fit.note


def test_one_point_without_params_or_when_params_do_not_fit_assumes_proportional_memory():
    assert fit_memory([(8, 16000)]).method == "proportional"
    # a 7B model at 16 bytes/param would need 107 GB: LoRA or sharding, so the estimate is not used
    fit = fit_memory([(8, 16000)], params=7e9, precision="bf16", optimizer="adamw")
    assert (fit.method, fit.fixed_mib, fit.per_sample_mib) == ("proportional", 0.0, 2000.0)


@pytest.mark.parametrize(
    ("precision", "optimizer", "expected"),
    [("bf16", "adamw", 16.0), ("fp32", "adam", 16.0), ("bf16", "sgd", 12.0), ("fp32", None, 16.0)],
)
def test_bytes_per_param(precision, optimizer, expected):
    assert bytes_per_param(precision, optimizer)[0] == expected


def test_saturating_throughput_fit_recovers_the_curve():
    # T(b) = 24000·b/(b+8): 12000 at 8, 16000 at 16, 19200 at 32
    fit = fit_throughput([(8, 12000), (16, 16000), (32, 19200)])
    assert fit.t_max == pytest.approx(24000)
    assert fit.k == pytest.approx(8)
    assert fit.predict(48) == pytest.approx(24000 * 48 / 56)


def test_no_throughput_fit_from_one_batch_size_or_unsaturated_points():
    assert fit_throughput([(8, 100), (8, 110)]) is None
    assert fit_throughput([(8, 100), (16, 200), (32, 400)]) is None  # linear: no saturation to fit


def test_headroom_gain_is_half_the_headroom_capped_by_the_batch_ratio():
    assert headroom_gain(8, 32, 25.0) == pytest.approx(0.5 * (4 - 1))  # 100/25 = 4 = batch ratio
    assert headroom_gain(8, 16, 25.0) == pytest.approx(0.5 * (2 - 1))  # the batch ratio caps it
    assert headroom_gain(8, 16, None) is None


def test_lr_rules():
    assert "accumulation 4 → 1" in lr_rule("adamw", 8, 32, 4)
    assert "√4 = × 2.00" in lr_rule("adamw", 8, 32, None)
    assert "linearly (× 4)" in lr_rule("sgd", 8, 32, None)


def test_never_recommends_a_batch_that_does_not_fit_and_caps_at_the_critical_batch():
    assert plan_batch(current_batch=64, card_mem_mib=81920, safety=0.9, mem_points=[(64, 80000)]) is None
    plan = plan_batch(
        current_batch=8,
        card_mem_mib=81920,
        safety=0.9,
        mem_points=[(8, 20480), (16, 30720)],
        grad_noise_scale=256,
        gpu_count=8,
        util_pct=12.5,
    )
    # B_noise 256 over 8 GPUs = 32 per GPU < 48 that would fit; the headroom gain still grows up to 32
    # (100/12.5 = 8 > 32/8), so 24 gives ½(3 − 1) = 1.0 < 0.9 × 1.5 and the knee does not cut it
    assert plan.recommended_batch_size == 32
    assert plan.predicted_peak_mem_mib <= 0.9 * 81920
    assert plan.throughput_method == "headroom"
    assert plan.throughput_gain == pytest.approx(0.5 * (min(32 / 8, 100 / 12.5) - 1))
    assert plan.confidence == "medium"


@pytest.mark.datasets
def test_lambda_max_batch_on_small_cards_predicts_a_batch_that_fits_the_80gb_card():
    """Lambda's largest BERT-large fp16 batch per card (V100 16 GB, RTX 3090 24 GB, A100 40 GB) as
    (batch, memory ≈ card) points: the batch predicted to fit an A100 80 GB must not exceed what Lambda
    measured there (112), and should not waste most of it."""
    with dataset("lambda-benchmark/pytorch-train-bs-fp16.csv").open() as fh:
        rows = {r["name_gpu"]: r for r in csv.DictReader(fh)}
    points = [
        (int(rows["LambdaCloud V100 16GB"]["bert_large_squad"]), 16384),
        (int(rows["RTX 3090"]["bert_large_squad"]), 24576),
        (int(rows["LambdaCloud A100 40GB PCIe"]["bert_large_squad"]), 40960),
    ]
    measured = int(rows["A100 80GB SXM4"]["bert_large_squad"])
    fit = fit_memory(points)
    assert fit.method == "fit"
    at_full = largest_batch(fit, 81920, 1.0)
    recommended = largest_batch(fit, 81920, 0.9)
    assert recommended <= at_full <= measured
    assert recommended >= 0.7 * measured
    assert recommended % 8 == 0 and fit.predict(recommended) <= 0.9 * 81920


def test_the_largest_batch_that_fits_is_recommended_and_the_knee_is_named():
    """Memory allows 632 (the 28-day demo's lm-7b family is like this), but the curve is flat long before:
    the issue's rule recommends the largest batch that fits; the knee is offered as the gentler choice."""
    # memory 10240 + 100 × b fits 0.9 × 81920 = 73728 up to 634.9 → 632
    mem = [(4, 10640), (8, 11040)]
    # T(b) = 1000·b/(b + 4): T(4) = 500, T(8) = 666.7, T(632) = 993.7
    tput = [(4, 500.0), (8, 8000 / 12), (16, 16000 / 20)]
    plan = plan_batch(current_batch=4, card_mem_mib=81920, safety=0.9, mem_points=mem, tput_points=tput)
    top = (632 / 636) / (4 / 8) - 1  # gain at the largest fit, 0.9874
    assert plan.recommended_batch_size == 632
    assert plan.throughput_gain == pytest.approx(top)
    assert (
        plan.predicted_peak_mem_mib == pytest.approx(10240 + 100 * 632)
        and plan.predicted_peak_mem_mib <= 73728
    )
    # knee: gain(b) = 2b/(b+4) − 1 ≥ 0.9 × top = 0.8887 → b ≥ 4 × 1.8887 / 0.1113 = 67.9 → 72 (64 gives 0.8824)
    assert plan.knee_batch_size == 72
    assert 2 * 64 / 68 - 1 < 0.9 * top <= 2 * 72 / 76 - 1
    assert "batch 72 already gives" in plan.reason
    assert "× 158" in plan.lr_rule  # global batch × 632/4


def test_the_headroom_gain_saturates_so_the_knee_is_the_first_batch_past_it():
    # one point, no parameter count: memory ∝ batch, 8192/4 = 2048 MiB per sample → 73728/2048 = 36 → 32
    plan = plan_batch(current_batch=4, card_mem_mib=81920, safety=0.9, mem_points=[(4, 8192)], util_pct=88.0)
    assert plan.recommended_batch_size == 32
    # 100/88 = 1.136: any batch ratio above it gives the same headroom gain ½ × 0.136 = 6.8 %, so 8 is the knee
    assert plan.throughput_gain == pytest.approx(0.5 * (100 / 88 - 1))
    assert plan.knee_batch_size == 8
