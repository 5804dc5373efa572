"""Advice on the batch size: ``larger_batch`` (job; a family card when runs repeat; docs/recommendations.md).

analytics/batch_size.py plans the batch (its memory model, throughput fit and learning-rate rule); the
saving = cost × gain ÷ (1 + gain). Jobs starved of input (analytics.diagnoses' input-bound pattern) or
holding GPUs they do not use are left out: a larger batch does not help a GPU that waits or idles.
"""

from __future__ import annotations

import functools
from typing import Any

import polars as pl

from analytics.advice_common import AdviceView, BatchPlan, Found, job_item, job_label, rows_by_id
from analytics.batch_size import batch_recommendations
from analytics.diagnoses import THRESHOLDS

KINDS = ("larger_batch",)


def advise(v: AdviceView, found: Found) -> Found:
    skip = input_bound_or_unused(v.jobs)
    plans = batch_recommendations(v.con, filters=v.filters, settings=v.settings, as_of=v.as_of, view=v.view)
    plans = plans.filter((pl.col("saving_usd") > 0) & ~pl.col("job_id").is_in(list(skip)))
    by_id = rows_by_id(v.jobs, plans["job_id"])
    out: Found = []
    for p in plans.to_dicts():
        j = by_id[p["job_id"]]
        action = (
            f"Raise the per-GPU batch from {p['current_batch_size']} to {p['recommended_batch_size']}; "
            f"{p['lr_rule']}."
        )
        evidence = functools.partial(_evidence, j, p)
        out.append(
            job_item(
                j,
                "larger_batch",
                evidence,
                action,
                p["saving_usd"],
                p["confidence"],
                "work",
                reasons=p["confidence_reasons"],
                batch=BatchPlan.of(p),
            )
        )
    return out


def input_bound_or_unused(jobs: pl.DataFrame) -> set[str]:
    """Jobs with unused GPUs or the input_bound pattern (analytics.diagnoses thresholds)."""
    t = THRESHOLDS
    hit = jobs.filter(
        (pl.col("unused_gpus") > 0)
        | (
            (pl.col("n_samples") >= t["input_min_samples"])
            & (pl.col("dip_share") >= t["input_dip_share"])
            & (pl.col("burst_share") >= t["input_burst_share"])
            & (pl.col("swing_rate") >= t["input_swing_rate"])
        )
    )
    return set(hit["job_id"].to_list())


def _evidence(j: dict[str, Any], p: dict[str, Any]) -> str:
    util = j.get("mean_util_pct")
    how = {
        "fit": "saturating fit of the measured batches",
        "measured": "measured",
        "headroom": "estimated from utilization headroom",
    }[p["throughput_method"]]
    return (
        f"{job_label(j)} trains {p['model'] or 'its model'} at batch {p['current_batch_size']} per GPU on "
        f"{p['gpu_model']}" + (f" at {util:.0f} % utilization" if util is not None else "") + "; its family "
        f"ran up to batch {p['largest_observed_batch_size']}. At {p['recommended_batch_size']} memory is "
        f"predicted at {p['predicted_peak_mem_mib'] / 1024:.1f} of {p['card_mem_mib'] / 1024:.0f} GiB "
        f"({p['memory_model']} model, {p['fit_quality']}) and throughput {p['predicted_throughput_gain_pct']:+.0f} % "
        f"({how}): ${p['saving_usd']:,.2f} less for the same work. {p['reason']}."
    )
