"""The batch-size planner's parts, checked by hand and against Lambda's measured maximum batch sizes."""

from __future__ import annotations

import csv
import re

import pytest

from analytics.batch_size import (
    CUDA_CONTEXT_MIB,
    MemoryModel,
    NoModel,
    activation_floor_mib,
    bytes_per_param,
    fit_memory,
    fit_throughput,
    headroom_gain,
    largest_batch,
    lr_rule,
    plan_batch,
    points_of,
    throughput_curve,
)
from tests.conftest import dataset

MIB = 1024 * 1024


def test_two_batch_sizes_fit_a_line_and_the_batch_rounds_down_to_a_multiple_of_8():
    fit = fit_memory([(8, 20480), (16, 30720)])
    assert isinstance(fit, MemoryModel)
    assert (fit.model, fit.quality, fit.fixed_mib, fit.per_sample_mib) == ("fitted", "good", 10240, 1280)
    # (0.9 × 81920 − 10240) / 1280 = 49.6 → 48; 10240 + 1280 × 48 = 71680 ≤ 73728
    assert largest_batch(fit, 81920, 0.9) == 48


def test_a_poor_memory_line_is_not_used():
    # peaks 20, 60, 25, 55 GiB at 8, 8, 16, 16: slope 0, R² 0 → no fitted model, and nothing to fall back on
    fit = fit_memory([(8, 20480), (8, 61440), (16, 25600), (16, 56320)])
    assert isinstance(fit, NoModel)
    assert "no parameter count" in fit.reason or "does not grow" in fit.reason


def test_flat_memory_says_memory_does_not_limit_the_batch():
    # 61,000 / 61,500 / 62,000 MiB at 4, 8, 16: within 5 % (the caching allocator holds it)
    fit = fit_memory([(4, 61000), (8, 61500), (16, 62000)])
    assert (fit.model, fit.quality, fit.per_sample_mib) == ("fitted", "flat", 0.0)
    assert "does not limit the batch" in fit.note
    plan = plan_batch(
        current_batch=4,
        card_mem_mib=81920,
        safety=0.9,
        mem_points=[(4, 61000), (8, 61500), (16, 62000)],
        tput_points=[(4, 1000.0), (8, 1600.0), (16, 2000.0)],
    )
    # flat memory does not bound the batch: the 2× rule does (2 × 16 = 32), and 4× the current batch (16)
    # is tighter: the gain at 16 is the measured 2000/1000 − 1 = 100 %
    assert plan.bound_batch_size == 16
    assert plan.recommended_batch_size <= 2 * 16
    assert plan.predicted_peak_mem_mib == 62000  # the observed peak, not an extrapolation


def test_one_batch_size_with_params_is_the_analytic_model_with_the_cuda_context():
    fit = fit_memory([(8, 40000)], params=1e9, precision="bf16", optimizer="adamw")
    fixed = 1e9 * 16 / MIB + 1024  # 15258.8 MiB of weights, grads, fp32 master, two Adam moments + context
    assert (fit.model, fit.quality) == ("analytic", "analytic")
    assert fit.fixed_mib == pytest.approx(fixed)
    assert CUDA_CONTEXT_MIB == 1024
    assert fit.per_sample_mib == pytest.approx((40000 - fixed) / 8)
    assert "16 bytes" in fit.note and "CUDA context" in fit.note


def test_one_batch_size_without_params_has_no_model():
    assert isinstance(fit_memory([(8, 16000)]), NoModel)
    # a 7B model at 16 bytes/param would need 107 GB: LoRA or sharding, so the analytic model does not apply
    assert isinstance(fit_memory([(8, 16000)], params=7e9, precision="bf16", optimizer="adamw"), NoModel)


def test_the_korthikanti_floor_for_a_7b_model_at_4096_tokens_is_1_gib_per_sample():
    # full recomputation keeps each layer's input: 2 bytes × s 4096 × h 4096 × L 32 = 2^30 bytes = 1024 MiB
    assert activation_floor_mib(4096, 4096, 32) == pytest.approx(2 * 4096 * 4096 * 32 / MIB)
    assert activation_floor_mib(4096, 4096, 32) == pytest.approx(1024)
    # a fitted slope of 100 MiB/sample is implausible for it and is raised to the floor
    fit = fit_memory([(4, 60000), (8, 60400), (16, 70000)], seq_len=4096, hidden_size=4096, n_layers=32)
    assert fit.model == "fitted" and fit.per_sample_mib >= 1024


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


def test_lr_rules_are_a_starting_point_with_a_warm_up():
    assert "accumulation 4 → 1" in lr_rule("adamw", 8, 32, 4)
    assert "√4 = × 2.00" in lr_rule("adamw", 8, 32, None)
    assert "linearly (× 4)" in lr_rule("sgd", 8, 32, None)
    assert "starting point" in lr_rule("adamw", 8, 32, None) and "warm-up" in lr_rule("sgd", 8, 32, None)


def test_two_point_profile_is_bounded_by_2x_the_largest_batch_and_the_measured_gain():
    """The issue's shape: measured at 32 and 64 only. Memory 10000 + 312.5 × b (20,000 at 32, 30,000 at 64),
    throughput 1000 → 1500 samples/s (+50 % for one doubling). The old planner extrapolated to the card."""
    plan = plan_batch(
        current_batch=64,
        card_mem_mib=81920,
        safety=0.9,
        mem_points=[(32, 20000), (64, 30000)],
        tput_points=[(32, 1000.0), (64, 1500.0)],
        optimizer="adamw",
    )
    # memory alone would allow (73728 − 10000) / 312.5 = 203.9 → 200; 2 × 64 = 128 bounds it
    assert plan.bound_batch_size == 128 == 2 * plan.largest_observed_batch_size
    # fit: 1/T = 1/3000 + (64/3000)/b → T(b) = 3000·b/(b + 64); gain(b) = 2b/(b + 64) − 1, 1/3 at 128;
    # the knee: 2b/(b + 64) − 1 ≥ 0.9/3 = 0.3 → b ≥ 118.9 → 120 (2·120/184 − 1 = 0.3043; 112 gives 0.2727)
    assert plan.recommended_batch_size == 120 == plan.knee_batch_size
    assert plan.throughput_gain == pytest.approx(2 * 120 / 184 - 1)
    measured_marginal = 1500 / 1000 - 1  # +50 % from 32 to 64
    assert plan.throughput_gain <= measured_marginal
    assert plan.predicted_peak_mem_mib == pytest.approx(10000 + 312.5 * 120)
    assert plan.confidence == "medium"  # 2 batch sizes, extrapolated past the measured 64
    assert any("extrapolated" in r for r in plan.confidence_reasons)


def test_throughput_that_falls_at_the_top_claims_no_gain_beyond_it():
    curve = throughput_curve([(32, 1000.0), (64, 660.0)])  # −34 % measured
    assert curve.predict(128) == 660.0
    plan = plan_batch(
        current_batch=64,
        card_mem_mib=81920,
        safety=0.9,
        mem_points=[(32, 20000), (64, 30000)],
        tput_points=[(32, 1000.0), (64, 660.0)],
    )
    assert not plan.advised
    assert plan.recommended_batch_size == 64
    assert "no throughput gain" in plan.reason


def test_extrapolated_throughput_is_capped_by_the_largest_measured_gain_per_doubling():
    # measured +10 % from 8 to 16 and +5 % from 16 to 32: past 32 at most +10 % per doubling
    curve = throughput_curve([(8, 1000.0), (16, 1100.0), (32, 1155.0)])
    assert curve.max_marginal == pytest.approx(0.10)
    assert curve.predict(64) <= 1155.0 * 1.10 + 1e-9


def test_high_utilization_offers_little_and_no_gain_without_a_measurement():
    mem = [(8, 20480), (16, 30720)]
    busy = plan_batch(current_batch=8, card_mem_mib=81920, safety=0.9, mem_points=mem, util_pct=87.0)
    assert not busy.advised and "offers little" in busy.reason
    blind = plan_batch(current_batch=8, card_mem_mib=81920, safety=0.9, mem_points=mem)
    assert not blind.advised and "no gain can be claimed" in blind.reason


def test_never_a_batch_that_does_not_fit_and_the_critical_batch_caps_the_global_batch():
    full = plan_batch(current_batch=64, card_mem_mib=81920, safety=0.9, mem_points=[(32, 45000), (64, 80000)])
    assert not full.advised
    plan = plan_batch(
        current_batch=8,
        card_mem_mib=81920,
        safety=0.9,
        mem_points=[(8, 20480), (16, 30720)],
        grad_noise_scale=256,
        gpu_count=8,
        util_pct=12.5,
    )
    # B_noise 256 over 8 GPUs = 32 per GPU; memory fits 48, 2 × 16 = 32: bound 32. The headroom gain
    # ½(min(b/8, 8) − 1) is 1.5 at 32; the knee needs ≥ 1.35 → b/8 ≥ 3.7 → 32 (24 gives 1.0)
    assert plan.bound_batch_size == 32
    assert plan.recommended_batch_size == 32
    assert plan.throughput_method == "headroom"
    assert plan.throughput_gain == pytest.approx(0.5 * (32 / 8 - 1))
    assert plan.confidence == "low"  # the gain is estimated from utilization
    # a global batch already at the critical batch gets no larger one
    at_crit = plan_batch(
        current_batch=32,
        card_mem_mib=81920,
        safety=0.9,
        mem_points=[(8, 20480), (16, 30720)],
        grad_noise_scale=256,
        gpu_count=8,
        util_pct=12.5,
    )
    assert not at_crit.advised and "critical batch" in at_crit.reason


def test_without_a_noise_scale_the_global_batch_grows_at_most_4x():
    # memory 1000 + 10 × b fits far more; measured throughput still rising steeply
    plan = plan_batch(
        current_batch=8,
        card_mem_mib=81920,
        safety=0.9,
        mem_points=[(8, 1080), (16, 1160), (32, 1320)],
        tput_points=[(8, 100.0), (16, 190.0), (32, 340.0)],
    )
    assert plan.bound_batch_size == 32  # 4 × 8 (2 × 32 = 64 is looser)
    assert plan.recommended_batch_size <= 32


def _card_gib(name: str) -> int:
    m = re.search(r"(\d+)GB", name)
    if m:
        return int(m.group(1))
    return {
        "Quadro RTX 8000": 48,
        "RTX 3090": 24,
        "LambdaCloud A10": 24,
        "RTX 6000 Ada": 48,
        "RTX A6000": 48,
        "RTX 4090": 24,
    }[name]


@pytest.mark.datasets
def test_lambda_never_recommends_above_the_measured_maximum_batch():
    """Lambda's largest per-GPU fp16 batch for 10 models on 18 single-GPU configurations. Each maximum is a
    measured (batch, memory ≈ card) point of that model, whatever the card (memory depends on the model, not
    the card); a job at half the maximum on each card, with the model's points from every card and a
    utilization headroom of 50 %, must never be advised (nor allowed) a batch above Lambda's maximum there."""
    with dataset("lambda-benchmark/pytorch-train-bs-fp16.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["num_gpu"] == "1"]
    models = [c for c in rows[0] if c not in ("name_gpu", "num_gpu", "watt", "price")]
    assert len(models) == 10 and len(rows) == 18
    checked = advised = 0
    for model in models:
        points = sorted({(int(r[model]), _card_gib(r["name_gpu"]) * 1024) for r in rows})
        for r in rows:
            measured = int(r[model])
            plan = plan_batch(
                current_batch=max(measured // 2, 1),
                card_mem_mib=_card_gib(r["name_gpu"]) * 1024,
                safety=0.9,
                mem_points=points,
                util_pct=50.0,
            )
            checked += 1
            advised += plan.advised
            assert plan.recommended_batch_size <= measured, (model, r["name_gpu"], plan)
            assert (plan.bound_batch_size or 0) <= measured, (model, r["name_gpu"], plan)
    assert checked == 180
    assert advised >= 90  # most of them still get a larger batch: the bound is not "never advise"


def test_equal_points_are_one_object_so_the_cached_fits_match_them_by_identity():
    """A family's points built again (the next page's recommendations) are the object the fits were cached
    with: an equal copy was compared pair by pair on every lookup, for each of the family's jobs."""
    a = points_of([(8.0, 1000.0), (16.0, 1500.0)])
    b = points_of(iter([(8.0, 1000.0), (16.0, 1500.0)]))
    assert a is b
    assert a == ((8.0, 1000.0), (16.0, 1500.0))
    assert points_of([(8.0, 1000.0)]) is not a
    # a plan from the interned points is the plan from a plain tuple of them
    kw = {"current_batch": 8, "card_mem_mib": 80_000.0, "safety": 0.9, "util_pct": 40.0}
    assert plan_batch(mem_points=a, **kw) == plan_batch(mem_points=tuple(a), **kw)
