"""Advice on the size of what a job holds: a smaller GPU, a MIG slice, fewer GPUs (docs/recommendations.md).

- ``right_size_gpu`` (job; a family card when runs repeat): the cheaper catalog GPU of
  analytics.diagnoses.right_size; saving = GPU-hours × (rate − the candidate's price);
- ``mig_slice`` (job): a 1-GPU job on a MIG-capable card busy under ``recommend.mig_max_util_pct`` outside
  its idle stretches; the smallest slice whose memory and compute × ``recommend.batch_safety_fraction`` hold
  it; saving = cost × (1 − slice share);
- ``fewer_gpus`` (job): GPUs it held but did not use (saving = cost × unused ÷ GPUs), or a GPU count whose
  scaling efficiency is under analytics.diagnoses' ``scaling_efficiency`` (poor_scaling) at the family's best
  $ per token (saving = cost × (1 − throughput per GPU ÷ the best)).
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import duckdb
import polars as pl

from analytics.advice_common import (
    ITEM_FIELDS,
    AdviceView,
    Found,
    JobItems,
    Recommendation,
    gpus,
    held,
    job_item,
    job_label,
)
from analytics.diagnoses import THRESHOLDS, right_size, scaling_table, view_right_size
from analytics.job_signals import with_active
from analytics.shared import active, ledger_frame
from analytics.telemetry_source import ROLLUPS
from gpuledger.ledger.settings import Settings

KINDS = ("right_size_gpu", "fewer_gpus", "mig_slice")
# consolidate_inference (analytics/advice_jobs.py) leaves out the jobs these kinds already size
SIZING_KINDS = ("right_size_gpu", "mig_slice")

# MIG profiles per catalog model: (profile, share of the GPU's compute, usable memory MiB as nvidia-smi reports)
MIG_PROFILES: dict[str, tuple[tuple[str, float, float], ...]] = {
    "A100-80GB": (("1g.10gb", 1 / 7, 9728), ("2g.20gb", 2 / 7, 19968), ("3g.40gb", 3 / 7, 40192)),
    "A100-40GB": (("1g.5gb", 1 / 7, 4864), ("2g.10gb", 2 / 7, 9728), ("3g.20gb", 3 / 7, 19968)),
    "H100-SXM-80GB": (("1g.10gb", 1 / 7, 9728), ("2g.20gb", 2 / 7, 19968), ("3g.40gb", 3 / 7, 40192)),
    "H100-PCIe-80GB": (("1g.10gb", 1 / 7, 9728), ("2g.20gb", 2 / 7, 19968), ("3g.40gb", 3 / 7, 40192)),
    "H200": (("1g.18gb", 1 / 7, 16896), ("2g.35gb", 2 / 7, 33792), ("3g.71gb", 3 / 7, 69632)),
    "A30": (("1g.6gb", 1 / 4, 5632), ("2g.12gb", 2 / 4, 11520)),
}


def advise(v: AdviceView, found: Found) -> Found:
    out: Found = []
    if "right_size_gpu" in v.want:
        out.append(right_size_items(v))
    if "fewer_gpus" in v.want:
        out += fewer_gpus(v.con, v.jobs, v.settings, v.as_of)
    if "mig_slice" in v.want:
        out.append(mig_slice(v.jobs, v.settings))
    return out


def right_size_items(v: AdviceView) -> JobItems:
    """Per job: the cheaper catalog GPU of analytics.diagnoses.right_size; saving = GPU-hours × Δprice.

    With the default source, the signals and rows are right_size's own defaults for the view (the shared
    view_signals, the view_jobs_sql rows): inside a sharing block, the shared result the diagnoses use too."""
    kw: dict[str, Any] = {"filters": v.filters, "settings": v.settings, "as_of": v.as_of}
    sized = (
        view_right_size(v.con, **kw)
        if v.source is ROLLUPS and active(v.con)
        else right_size(v.con, **kw, signals=v.sig, view=v.view)
    )
    rows = sized.select(
        "job_id",
        *RIGHT_SIZE_EVIDENCE,
        (
            pl.col("gpu_hours") * (pl.col("rate_usd_per_gpu_hour") - pl.col("candidate_usd_per_gpu_hour"))
        ).alias("saving_usd"),
        pl.format("Run it on {} instead of {}.", "candidate", "gpu_model").alias("action"),
        pl.when(pl.col("basis").str.starts_with("SM-active"))
        .then(pl.lit("medium"))
        .otherwise(pl.lit("low"))
        .alias("confidence"),
    ).join(v.jobs.select(ITEM_FIELDS), on="job_id", how="left", maintain_order="left")
    return JobItems("right_size_gpu", rows, _right_size_evidence, "price")


# the right_size columns an item's evidence reads
RIGHT_SIZE_EVIDENCE = (
    "peak_mem_mib",
    "busy_pct",
    "basis",
    "candidate",
    "candidate_mem_mib",
    "busy_pct_there",
    "candidate_usd_per_gpu_hour",
    "rate_usd_per_gpu_hour",
)


def _right_size_evidence(r: dict[str, Any]) -> str:
    return (
        f"{job_label(r)} {held(r)}, peaking at {r['peak_mem_mib'] / 1024:.1f} GiB of memory at "
        f"{r['busy_pct']:.0f} % {r['basis']}; {r['candidate']} ({r['candidate_mem_mib'] / 1024:.0f} GiB) would "
        f"run the same work ~{r['busy_pct_there']:.0f} % busy at ${r['candidate_usd_per_gpu_hour']:.2f}/GPU-h "
        f"instead of ${r['rate_usd_per_gpu_hour']:.2f}: ${r['saving_usd']:,.2f} less."
    )


def fewer_gpus(
    con: duckdb.DuckDBPyConnection, jobs: pl.DataFrame, settings: Settings, as_of: dt.datetime | None
) -> list[Recommendation]:
    """Per job: GPUs it held but did not use (saving = cost × unused ÷ gpu_count), or a GPU count past the
    family's best $ per token (saving = cost × (1 − tput_per_gpu ÷ best tput_per_gpu))."""
    items = []
    multi = jobs.filter(
        (pl.col("gpu_count") >= 2)
        & (pl.col("unused_gpus") >= 1)
        & (pl.col("unused_gpus") < pl.col("gpus_seen"))
        & pl.col("cost_usd").is_not_null()
    )
    for j in multi.to_dicts():
        n, unused = j["gpu_count"], j["unused_gpus"]
        saving = j["cost_usd"] * unused / n
        evidence = (
            f"{job_label(j)} {held(j)}; {unused} of its {j['gpus_seen']} measured GPUs averaged ≤ "
            f"{settings.idle_util_pct:g} % utilization the whole time: ${saving:,.2f} for GPUs it did not use."
        )
        action = f"Request {gpus(n - unused)} instead of {n:g}, or make the code use all of them."
        confidence = "high" if j["gpus_seen"] >= n else "medium"
        addresses = ("idle_allocated_usd", "underused_usd")
        items.append(job_item(j, "fewer_gpus", evidence, action, saving, confidence, "time", addresses))
    scaling = scaling_table(con, as_of=as_of)
    if scaling.is_empty():
        return items
    runs = ledger_frame(
        con,
        """SELECT r.job_id, concat_ws('|', r.model, j.gpu_model, r.precision, r.batch_size::VARCHAR,
                  r.seq_len::VARCHAR, CASE WHEN r.tokens_per_s IS NOT NULL THEN 'tokens' ELSE 'samples' END) AS family
           FROM training_runs r JOIN jobs j USING (job_id) WHERE r.model IS NOT NULL""",
    )
    poor = (
        jobs.join(runs, on="job_id")
        .join(scaling.drop("unit"), on=["family", "gpu_count"])
        .filter(
            (pl.col("efficiency") < THRESHOLDS["scaling_efficiency"])  # the poor_scaling diagnosis
            & (pl.col("best_gpu_count") < pl.col("gpu_count"))
            & pl.col("cost_usd").is_not_null()
            # GPUs left unused are the first fix (the item above); its per-GPU throughput says little
            & (pl.col("unused_gpus").fill_null(0) == 0)
        )
    )
    for j in poor.to_dicts():
        ratio = j["tput_per_gpu"] / j["best_tput_per_gpu"]
        saving = j["cost_usd"] * (1.0 - ratio)
        unit = j["family"].rsplit("|", 1)[-1]
        best = gpus(j["best_gpu_count"])
        evidence = (
            f"{job_label(j)} {held(j)}; this run family reaches {j['tput_per_gpu']:,.0f} {unit}/s per GPU at "
            f"{gpus(j['gpu_count'])} vs {j['best_tput_per_gpu']:,.0f} at {best} "
            f"({j['efficiency'] * 100:.0f} % scaling efficiency): the same {unit} on {best} "
            f"cost ${saving:,.2f} less (and take longer)."
        )
        action = (
            f"Run on {best} instead of {j['gpu_count']:g} unless time-to-result matters "
            "more than cost; or fix the scaling (communication overlap, larger per-GPU batch)."
        )
        items.append(job_item(j, "fewer_gpus", evidence, action, saving, "medium", "work"))
    return items


def mig_profile(
    gpu_model: str | None, peak_mem_mib: float, needed_share: float, safety: float
) -> tuple[str, float, float] | None:
    """The smallest MIG profile of ``gpu_model`` whose memory × safety holds the peak and whose compute
    share × safety covers ``needed_share`` (0–1); None when no slice smaller than the GPU fits."""
    for name, share, mem in MIG_PROFILES.get(gpu_model or "", ()):
        if mem * safety >= peak_mem_mib and share * safety >= needed_share:
            return name, share, mem
    return None


def mig_slice(jobs: pl.DataFrame, settings: Settings) -> JobItems:
    """Per 1-GPU job on a MIG-capable card busy under ``mig_max_util_pct`` outside its idle stretches (the
    slice must serve the job when it works; idle time is reclaim_idle's): saving = cost × (1 − slice share)."""
    cands = with_active(jobs).filter(
        (pl.col("gpu_count") <= 1)
        & pl.col("active_util_pct").is_not_null()
        & (pl.col("active_util_pct") > settings.idle_util_pct)
        & (pl.col("active_util_pct") < settings.mig_max_util_pct)
        & pl.col("peak_mem_mib").is_not_null()
        & pl.col("cost_usd").is_not_null()
    )
    found = [
        mig_profile(model, peak, (sm if sm is not None else util) / 100.0, settings.batch_safety_fraction)
        for model, peak, sm, util in zip(
            cands["gpu_model"],
            cands["peak_mem_mib"],
            cands["active_sm_pct"],
            cands["active_util_pct"],
            strict=True,
        )
    ]
    rows = (
        cands.select(*ITEM_FIELDS, "peak_mem_mib", "active_sm_pct", "active_util_pct", "idle_s")
        .with_columns(
            pl.Series("slice", [f[0] if f else None for f in found], dtype=pl.Utf8),
            pl.Series("share", [f[1] if f else None for f in found], dtype=pl.Float64),
            pl.Series("slice_mem_mib", [f[2] if f else None for f in found], dtype=pl.Float64),
        )
        .filter(pl.col("slice").is_not_null())
    )
    rows = rows.with_columns(
        (pl.col("cost_usd") * (1.0 - pl.col("share"))).alias("saving_usd"),
        pl.format(
            "Run it on a {} MIG slice of the {} and share the rest of the GPU.", "slice", "gpu_model"
        ).alias("action"),
        pl.when(pl.col("active_sm_pct").is_not_null())
        .then(pl.lit("medium"))
        .otherwise(pl.lit("low"))
        .alias("confidence"),
    )
    return JobItems("mig_slice", rows, _mig_evidence, "price", ("underused_usd", "idle_allocated_usd"))


def _mig_evidence(j: dict[str, Any]) -> str:
    sm = j["active_sm_pct"]
    basis_pct = sm if sm is not None else j["active_util_pct"]
    basis = "SM-active" if sm is not None else "utilization"
    if j["idle_s"]:
        basis += " outside idle stretches"
    return (
        f"{job_label(j)} {held(j)}, peaking at {j['peak_mem_mib'] / 1024:.1f} GiB and {basis_pct:.0f} % {basis}: a "
        f"{j['slice']} MIG slice ({j['slice_mem_mib'] / 1024:.1f} GiB, {_frac(j['share'])} of the GPU) holds it, "
        f"freeing ${j['saving_usd']:,.2f} of GPU time for other work."
    )


def _frac(share: float) -> str:
    for den in (7, 4):
        num = share * den
        if math.isclose(num, round(num)):
            return f"{round(num)}/{den}"
    return f"{share:.2f}"
