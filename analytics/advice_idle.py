"""Advice on held GPUs that sat idle (docs/recommendations.md).

- ``reclaim_idle`` (job; a family card when its runs repeat): idle stretches on GPUs the job otherwise
  used (``thresholds.idle_util_pct`` for ``thresholds.idle_min_minutes``); saving = rate × idle GPU-seconds;
- ``stop_idle_notebooks`` (user): an auto-stop after ``thresholds.notebook_idle_stop_minutes`` saves
  rate × (stretch − N min) on every idle stretch of their interactive jobs longer than N minutes.
"""

from __future__ import annotations

import functools
from typing import Any

import polars as pl

from analytics.advice_common import (
    ITEM_FIELDS,
    AdviceView,
    Found,
    JobItems,
    Recommendation,
    held,
    held_share_expr,
    job_label,
    rows_by_id,
)
from gpuledger.ledger.settings import Settings

KINDS = ("reclaim_idle", "stop_idle_notebooks")


def advise(v: AdviceView, found: Found) -> Found:
    out: Found = []
    if "reclaim_idle" in v.want:
        out.append(reclaim_idle(v.jobs, v.settings))
    if "stop_idle_notebooks" in v.want:
        out += stop_idle_notebooks(v.stretches, v.jobs, v.settings)
    return out


def reclaim_idle(jobs: pl.DataFrame, settings: Settings) -> JobItems:
    """Per job: idle stretches on GPUs it otherwise used; saving = rate × idle GPU-seconds."""
    rows = jobs.filter(
        (pl.col("idle_s_on_used_gpus") > 0) & pl.col("rate_usd_per_gpu_s").is_not_null()
    ).select(
        *ITEM_FIELDS,
        "idle_s_on_used_gpus",
        "idle_stretches",
        (pl.col("rate_usd_per_gpu_s") * held_share_expr() * pl.col("idle_s_on_used_gpus")).alias(
            "saving_usd"
        ),
        pl.when(pl.col("kind") == "interactive")
        .then(
            pl.lit(
                "Stop the notebook when you step away instead of holding the GPU idle; restart it when you return."
            )
        )
        .otherwise(
            pl.lit(
                "Release idle GPUs: end the job when its work is done, or fix what stalls it (data, a hung step)."
            )
        )
        .alias("action"),
        pl.lit("high").alias("confidence"),
    )
    return JobItems(
        "reclaim_idle", rows, functools.partial(_reclaim_evidence, settings), "time", ("idle_allocated_usd",)
    )


def _reclaim_evidence(settings: Settings, j: dict[str, Any]) -> str:
    idle_s = j["idle_s_on_used_gpus"]
    return (
        f"{job_label(j)} {held(j)}; {idle_s / 3600:.1f} GPU-hours sat idle (≤ {settings.idle_util_pct:g} % for "
        f"≥ {settings.idle_min_minutes:g} min, {j['idle_stretches']} stretch(es)): ${j['saving_usd']:,.2f} idle."
    )


def stop_idle_notebooks(
    stretches: pl.DataFrame, jobs: pl.DataFrame, settings: Settings
) -> list[Recommendation]:
    """Per user: an auto-stop after N idle minutes saves rate × (stretch − N min) on every idle stretch of
    their interactive jobs longer than N minutes."""
    stop_s = settings.notebook_idle_stop_minutes * 60.0
    # only the jobs the loop below keeps (priced notebooks): a stretch of any other job is skipped
    by_id = rows_by_id(
        jobs.filter(
            (pl.col("kind") == "interactive") & pl.col("rate_usd_per_gpu_s").is_not_null()
        ).with_columns((pl.col("rate_usd_per_gpu_s") * held_share_expr()).alias("held_rate")),
        fields=(*ITEM_FIELDS, "held_rate"),
    )
    per_user: dict[str, dict[str, Any]] = {}
    # only the stretches of those jobs become dicts (6 k stretches of every kind on a 50 M-sample ledger)
    mine = stretches.filter(pl.col("job_id").is_in(list(by_id))).select("job_id", "idle_s")
    for st in mine.to_dicts():
        j = by_id.get(st["job_id"])
        if j is None or j["kind"] != "interactive" or j["rate_usd_per_gpu_s"] is None:
            continue
        u = per_user.setdefault(
            j["user_name"] or "(unknown)",
            {
                "team": j["team"],
                "jobs": set(),
                "stretches": 0,
                "idle_s": 0.0,
                "idle_usd": 0.0,
                "saving": 0.0,
                "longest": 0.0,
                "models": set(),
                "per_job": {},
            },
        )
        u["jobs"].add(j["job_id"])
        u["models"].add(j["gpu_model"])
        u["stretches"] += 1
        u["idle_s"] += st["idle_s"]
        rate = j["held_rate"]
        u["idle_usd"] += st["idle_s"] * rate
        cut = max(0.0, st["idle_s"] - stop_s) * rate
        u["saving"] += cut
        u["per_job"][j["job_id"]] = u["per_job"].get(j["job_id"], 0.0) + cut
        u["longest"] = max(u["longest"], st["idle_s"])
    items = []
    minutes = settings.notebook_idle_stop_minutes
    for user, u in sorted(per_user.items()):
        ids = sorted(u["jobs"])
        evidence = (
            f"{user}'s {len(u['jobs'])} notebook(s) on {', '.join(sorted(m or '?' for m in u['models']))} sat idle "
            f"{u['idle_s'] / 3600:.1f} GPU-hours in {u['stretches']} stretch(es) (longest {u['longest'] / 3600:.1f} h): "
            f"${u['idle_usd']:,.2f}; stopping after {minutes:g} idle minutes would have saved ${u['saving']:,.2f}."
        )
        items.append(
            Recommendation(
                kind="stop_idle_notebooks",
                target_type="user",
                target=user,
                user_name=user,
                team=u["team"],
                evidence=evidence,
                action=f"Turn on idle auto-stop for {user}'s notebooks after {minutes:g} min "
                "(JupyterHub idle culler or the platform's idle shutdown).",
                saving_usd=u["saving"],
                confidence="high",
                job_ids=tuple(ids),
                lever="time",
                addresses=("idle_allocated_usd",),
                recurring=True,
                job_saving_usd=tuple(u["per_job"][k] for k in ids),
                job_cost_usd=tuple(by_id[k]["cost_usd"] for k in ids),
            )
        )
    return items
