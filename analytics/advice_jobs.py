"""Advice on running jobs that the per-job sizing kinds do not cover: starved input, idle-ish services.

Kinds (docs/recommendations.md):

- ``fix_input_pipeline`` (job; a family card when its runs repeat): a training job with the input-bound
  pattern of analytics.diagnoses (utilization swinging between bursts > 70 % and dips < 10 %): the GPU
  waits for data in the dips, so saving = cost × dip share (the dips' share of its samples);
- ``consolidate_inference`` (job; a family card for a service's replicas): an inference job whose
  utilization outside idle stretches is under ``recommend.serve_low_util_pct`` and that no smaller GPU or MIG slice
  item covers: pack its replicas onto fewer GPUs (request batching, several replicas per GPU, MIG):
  saving = its underused $ (analytics.waste: the GPU-time below the utilization target), at low
  confidence (packing depends on the latency budget).
"""

from __future__ import annotations

import polars as pl

from analytics.advice_common import AdviceView, Found, JobItems, Recommendation, job_item, job_label
from analytics.advice_sizing import SIZING_KINDS
from analytics.diagnoses import THRESHOLDS, TRAINING_KINDS
from analytics.job_signals import with_active

KINDS = ("fix_input_pipeline", "consolidate_inference")
# both address a job's under-used and idle $
ADDRESSES = ("underused_usd", "idle_allocated_usd")


def advise(v: AdviceView, found: Found) -> Found:
    """``found``: the items before these; consolidate_inference leaves out the jobs a right_size_gpu or
    mig_slice item there already sizes."""
    out: Found = []
    if "fix_input_pipeline" in v.want:
        out += input_pipeline_items(v.jobs)
    if "consolidate_inference" in v.want:
        sized = {
            k for f in found if isinstance(f, JobItems) and f.kind in SIZING_KINDS for k in f.rows["job_id"]
        }
        out += inference_items(v.jobs, v.positive("underused_usd"), sized, v.settings.serve_low_util_pct)
    return out


def input_pipeline_items(jobs: pl.DataFrame) -> list[Recommendation]:
    """fix_input_pipeline items from the view's jobs joined with their signals (analytics.job_signals)."""
    t = THRESHOLDS
    hit = jobs.filter(
        pl.col("kind").is_in(list(TRAINING_KINDS))
        & (pl.col("n_samples") >= t["input_min_samples"])
        & (pl.col("dip_share") >= t["input_dip_share"])
        & (pl.col("burst_share") >= t["input_burst_share"])
        & (pl.col("swing_rate") >= t["input_swing_rate"])
        & pl.col("cost_usd").is_not_null()
    )
    items = []
    for j in hit.to_dicts():
        saving = j["cost_usd"] * j["dip_share"]
        util = j["mean_util_pct"]
        evidence = (
            f"{job_label(j)} held {j['gpu_count']:g} × {j['gpu_model']} for {j['hours']:.1f} h at {util:.0f} % mean "
            f"utilization, swinging between bursts (> 70 %, {j['burst_share'] * 100:.0f} % of samples) and dips "
            f"(< 10 %, {j['dip_share'] * 100:.0f} %): the GPUs wait for data in the dips, ${saving:,.2f} of its "
            f"${j['cost_usd']:,.2f}."
        )
        action = (
            "Feed the GPUs faster: more DataLoader workers (about the CPU cores per GPU), pin_memory and "
            "prefetch, a CPU:GPU ratio that matches, data on local or faster storage."
        )
        reasons = "the swing pattern is measured; CPU and I/O wait are not in the ledger"
        items.append(
            job_item(
                j,
                "fix_input_pipeline",
                evidence,
                action,
                saving,
                "medium",
                "work",
                ADDRESSES,
                reasons=reasons,
                recurring=False,
            )
        )
    return items


def inference_items(
    jobs: pl.DataFrame, underused: dict[str, float], covered: set[str], low_util_pct: float
) -> list[Recommendation]:
    """consolidate_inference items. ``underused``: job_id → its underused $ (analytics.waste);
    ``covered``: jobs a right_size_gpu or mig_slice item already covers; ``low_util_pct``: a service busy
    under this when active (``recommend.serve_low_util_pct``)."""
    cands = (
        with_active(jobs)
        .filter(
            (pl.col("kind") == "inference")
            & pl.col("active_util_pct").is_not_null()
            & (pl.col("active_util_pct") < low_util_pct)
            & ~pl.col("job_id").is_in(list(covered))
            & pl.col("cost_usd").is_not_null()
        )
        .select(
            "job_id",
            "name",
            "user_name",
            "team",
            "cost_usd",
            "gpu_count",
            "gpu_model",
            "hours",
            "active_util_pct",
        )
    )
    items = []
    for j in cands.to_dicts():  # the fields read below alone: to_dicts costs per cell
        saving = underused.get(j["job_id"], 0.0)
        if saving <= 0:
            continue
        evidence = (
            f"{job_label(j)} served on {j['gpu_count']:g} × {j['gpu_model']} for {j['hours']:.1f} h at "
            f"{j['active_util_pct']:.0f} % utilization when active: ${saving:,.2f} of GPU-time below the "
            "utilization target."
        )
        action = (
            "Consolidate: batch requests (dynamic batching), run more replicas per GPU or on a MIG slice, "
            "and scale replicas with the request rate."
        )
        reasons = "how far replicas pack depends on the service's latency budget"
        items.append(
            job_item(
                j,
                "consolidate_inference",
                evidence,
                action,
                saving,
                "low",
                "time",
                ADDRESSES,
                reasons=reasons,
                recurring=True,
            )
        )
    return items
