"""Advice on failed runs: a checkpoint interval (Young/Daly), repeated failures, early failures, OOM.

The dollars are analytics.waste's failed part: the in-view cost of a failed, cancelled or timed-out run
since its last checkpoint (the whole run without one). Kinds (docs/recommendations.md):

- ``checkpoint_interval`` (a run family: one user's runs sharing a name stem, analytics.advice_common):
  the family's mean time between interruptions MTBF = its in-view run time ÷ its interruptions (failed,
  node failure, time-out, cancelled, preempted), the checkpoint cost C (writing params × bytes/param of
  weights and optimizer state at ``recommend.checkpoint_write_gbps``, at least
  ``recommend.checkpoint_min_seconds``; without a parameter count ``recommend.checkpoint_default_seconds``), the Young/Daly interval τ = √(2·C·MTBF). With it an
  interruption loses τ/2 on average; saving = Σ over interrupted runs of rate × GPUs × (lost − min(lost,
  τ/2)) − rate × GPU-seconds of the family × C/τ (the extra checkpoint writes);
- ``fix_repeated_failures`` (a family with ≥ 2 failed runs, time-outs and cancellations left out): every
  failure after the first would have been saved by fixing the cause on a short test first;
- ``test_small_first`` (a user): multi-GPU runs that failed within ``recommend.early_fail_minutes`` of their start; a
  1-GPU smoke test finds the same crash: saving = failed $ × (GPUs − 1) ÷ GPUs;
- ``oom_smaller_batch`` (a family): runs that ran out of memory: a smaller batch (the family's largest
  that completed) or activation checkpointing; saving = their failed $.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict

import duckdb
import polars as pl

from analytics.advice_common import AdviceView, Found, Recommendation, family_stem, plural
from analytics.badput import FAILURE_KINDS
from analytics.batch_memory import bytes_per_param
from analytics.shared import ledger_frame
from gpuledger.ledger.job_states import (
    COMPLETED,
    CRASHED_STATES,
    FAULT_STATES,
    INTERRUPTED_STATES,
    OOM,
)
from gpuledger.ledger.settings import Settings

KINDS = ("checkpoint_interval", "fix_repeated_failures", "test_small_first", "oom_smaller_batch")


def advise(v: AdviceView, found: Found) -> Found:
    return list(failure_items(v.con, v.view, v.positive("failed_usd"), v.settings))


def checkpoint_cost_s(
    params: float | None, precision: str | None, optimizer: str | None, settings: Settings | None = None
) -> tuple[float, str]:
    """Seconds to write one checkpoint (``recommend.checkpoint_*`` of ``settings``), and how it was told."""
    s = settings or Settings()
    if not params:
        default = s.checkpoint_default_seconds
        return default, f"{default:g} s assumed (no parameter count)"
    per_param, _ = bytes_per_param(precision, optimizer)
    size_gb = params * per_param / 1e9
    c = max(s.checkpoint_min_seconds, size_gb / s.checkpoint_write_gbps)
    return (
        c,
        f"{size_gb:,.0f} GB of weights and optimizer state at {s.checkpoint_write_gbps:g} GB/s = {c:,.0f} s",
    )


def young_daly_s(checkpoint_s: float, mtbf_s: float) -> float:
    """The Young/Daly checkpoint interval τ ≈ √(2·C·MTBF), seconds."""
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


# the view's columns the failure kinds read (the rest of the row is left out of the dicts)
_VIEW_FIELDS = (
    "job_id",
    "name",
    "user_name",
    "team",
    "state",
    "pricing_tier",
    "gpu_count",
    "cost_usd",
    "held_gpu_s",
    "start_ts",
    "end_ts",
    "span_start",
    "span_end",
)


def failure_items(
    con: duckdb.DuckDBPyConnection, view: pl.DataFrame, failed: dict[str, float], settings: Settings
) -> list[Recommendation]:
    """All failure kinds for the view's jobs. ``failed``: job_id → its failed $ (analytics.waste)."""
    early_s = settings.early_fail_minutes * 60.0
    extra = ledger_frame(  # every job's: once per sharing block (the items scan runs this weekly)
        con,
        """SELECT j.job_id, j.last_checkpoint_ts, j.exit_reason, r.params, r.precision, r.optimizer, r.batch_size,
                  r.model
           FROM jobs j LEFT JOIN training_runs r USING (job_id)""",
    )
    jobs = (
        view.filter(pl.col("kind").is_in(list(FAILURE_KINDS)) & pl.col("cost_usd").is_not_null())
        .select(_VIEW_FIELDS)
        .join(extra, on="job_id", how="left")
    )
    if jobs.is_empty():
        return []
    # in job id order: the view's rows come in no fixed order, and the sums and ties below (a family's lost
    # GPU-hours, its largest model) then gave another last digit, or run, from one page load to the next
    # (a stable sort: polars orders strings by their UTF-8 bytes, which is code point order, as Python's).
    lost = pl.DataFrame(
        {"job_id": list(failed), "_failed": list(failed.values())},
        schema={"job_id": jobs.schema["job_id"], "_failed": pl.Float64},
    )
    keys = jobs.select(pl.coalesce("name", "job_id").unique())["name"].to_list()
    jobs = (
        jobs.sort(pl.col("job_id").cast(pl.Utf8), maintain_order=True)
        .join(lost, on="job_id", how="left", maintain_order="left")
        .with_columns(
            pl.col("user_name").fill_null("(unknown)").alias("_user"),
            pl.coalesce("name", "job_id").replace_strict({k: family_stem(k, k) for k in keys}).alias("_stem"),
            pl.col("_failed").fill_null(0.0),
            ((pl.col("span_end") - pl.col("span_start")).dt.total_microseconds() / 1e6).alias("span_s"),
            pl.when(pl.col("held_gpu_s").fill_null(0) != 0)
            .then(pl.col("cost_usd") / pl.col("held_gpu_s"))
            .otherwise(0.0)
            .alias("rate"),
        )
    )
    hit = pl.col("state").is_in(list(INTERRUPTED_STATES)) & (pl.col("_failed") > 0)
    crashed = pl.col("state").is_in(list(CRASHED_STATES))
    oom = pl.col("state") == OOM
    done = (pl.col("state") == COMPLETED) & pl.col("batch_size").is_not_null()
    early = (
        pl.col("state").is_in(list(FAULT_STATES))
        & (pl.col("gpu_count").fill_null(1) > 1)
        & ((pl.col("end_ts") - pl.col("start_ts")).dt.total_microseconds() <= early_s * 1e6)
        & (pl.col("_failed") > 0)
    ).fill_null(False)
    # A family yields an item when it has an interrupted run that lost money (_checkpoint), two crashed runs
    # (_repeated) or an OOM (_oom). What those read of the whole family is summed here; only the runs they
    # name become dicts (to_dicts costs per cell: 35 k rows on a 50 M-sample ledger).
    family = ["_user", "_stem"]
    fams = (
        jobs.group_by(family, maintain_order=True)
        .agg(
            pl.len().alias("n_runs"),
            pl.col("span_s").sum().alias("run_s"),
            (pl.col("rate") * pl.col("gpu_count") * pl.col("span_s")).sum().alias("gpu_usd_s"),
            pl.col("team").first(),
            pl.col("params", "precision", "optimizer").get(pl.col("params").fill_null(0).arg_max()),
            hit.any().alias("_hit"),
            crashed.sum().alias("_crashed"),
            oom.any().alias("_oom"),
        )
        .filter(pl.col("_hit") | (pl.col("_crashed") >= 2) | pl.col("_oom"))
    )
    named = jobs.join(fams.select(*family, "_oom"), on=family, how="left", maintain_order="left")
    rows = (
        named.filter((pl.col("_oom").is_not_null() & (hit | crashed | oom | (pl.col("_oom") & done))) | early)
        .drop("_oom")
        .with_columns(early.alias("_early"))
        .to_dicts()
    )
    runs_of: dict[tuple[str, str], list[dict[str, object]]] = defaultdict(list)
    for j in rows:
        runs_of[(j["_user"], j["_stem"])].append(j)
    items: list[Recommendation] = []
    for f in sorted(fams.drop("_hit", "_crashed", "_oom").to_dicts(), key=lambda f: (f["_user"], f["_stem"])):
        user, stem = f["_user"], f["_stem"]
        runs = runs_of[(user, stem)]
        items += _checkpoint(user, stem, f, runs, failed, settings)
        items += _repeated(user, stem, runs, failed)
        items += _oom(user, stem, runs, failed)
    items += _early([j for j in rows if j["_early"]], failed, early_s)
    return items


def _lost_s(j: dict[str, object]) -> float:
    start = j["span_start"]
    ck = j["last_checkpoint_ts"]
    if isinstance(ck, dt.datetime) and ck > start:
        start = ck
    return max(0.0, (j["span_end"] - start).total_seconds())


def _checkpoint(
    user: str,
    stem: str,
    fam: dict[str, object],
    runs: list[dict[str, object]],
    failed: dict[str, float],
    settings: Settings,
) -> list[Recommendation]:
    """``fam``: the family's sums over all its runs (n_runs, run_s, gpu_usd_s = Σ rate × GPUs × seconds,
    team of its first run, params/precision/optimizer of its largest model); ``runs``: the ones named."""
    hit = [j for j in runs if j["state"] in INTERRUPTED_STATES and failed.get(j["job_id"], 0.0) > 0]
    if not hit:
        return []
    run_s = fam["run_s"]
    mtbf = run_s / len(hit)
    c, c_words = checkpoint_cost_s(fam["params"], fam["precision"], fam["optimizer"], settings)
    tau = young_daly_s(c, mtbf)
    per_job = {}
    lost_usd = 0.0
    lost_gpu_h = 0.0
    for j in hit:
        lost = _lost_s(j)
        lost_usd += j["rate"] * j["gpu_count"] * lost
        lost_gpu_h += j["gpu_count"] * lost / 3600.0
        per_job[j["job_id"]] = j["rate"] * j["gpu_count"] * (lost - min(lost, tau / 2.0))
    overhead = fam["gpu_usd_s"] * c / tau
    gross = sum(per_job.values())
    saving = gross - overhead
    if saving <= 0 or gross <= 0:
        return []
    scale = saving / gross  # the net saving, split over the interrupted runs by what each would save
    ids = sorted(per_job)
    spot = any(j["pricing_tier"] == "spot" for j in hit)
    states = ", ".join(f"{n} {s.lower()}" for s, n in _counts(j["state"] for j in hit))
    evidence = (
        f"{plural(fam['n_runs'], 'run')} of {stem} ({user}) ran {run_s / 3600:,.1f} h with {len(hit)} "
        f"interruption(s) ({states}): mean time between them {mtbf / 3600:,.1f} h; they lost "
        f"{lost_gpu_h:,.1f} GPU-hours since their last checkpoint (${lost_usd:,.2f}). A checkpoint costs {c_words}; "
        f"τ = √(2 × {c:,.0f} s × {mtbf:,.0f} s) = {tau / 60:,.0f} min (Young/Daly): an interruption then loses "
        f"τ/2 on average, ${saving:,.2f} less after ${overhead:,.2f} of extra checkpoint writes."
    )
    action = (
        f"Checkpoint {stem} every {tau / 60:,.0f} min and resume from the last checkpoint automatically"
        + ("; on spot capacity a preemption is an interruption too." if spot else ".")
    )
    return [
        Recommendation(
            kind="checkpoint_interval",
            target_type="family",
            target=f"{user}/{stem}",
            user_name=user,
            team=fam["team"],
            evidence=evidence,
            action=action,
            saving_usd=saving,
            confidence="medium" if fam["params"] else "low",
            confidence_reasons=f"failure rate from {len(hit)} interruption(s); checkpoint cost {c_words}",
            job_ids=tuple(ids),
            job_saving_usd=tuple(per_job[k] * scale for k in ids),
            job_cost_usd=_costs(runs, ids),
            lever="time",
            addresses=("failed_usd",),
            recurring=fam["n_runs"] >= 2,
        )
    ]


def _repeated(
    user: str, stem: str, runs: list[dict[str, object]], failed: dict[str, float]
) -> list[Recommendation]:
    crashed = sorted((j for j in runs if j["state"] in CRASHED_STATES), key=lambda j: j["span_start"])
    if len(crashed) < 2:
        return []
    ids = [j["job_id"] for j in crashed]
    savings = [0.0] + [failed.get(k, 0.0) for k in ids[1:]]
    saving = sum(savings)
    if saving <= 0:
        return []
    reasons = _counts(j["exit_reason"] or j["state"].lower() for j in crashed)
    top = ", ".join(f"{r} × {n}" for r, n in reasons[:3])
    evidence = (
        f"{len(crashed)} runs of {stem} ({user}) crashed ({top}); the {plural(len(crashed) - 1, 'retried run')} after the "
        f"first cost ${saving:,.2f} since their last checkpoints."
    )
    action = f"Fix the cause ({reasons[0][0]}) on a short test run before launching {stem} again."
    return [
        Recommendation(
            kind="fix_repeated_failures",
            target_type="family",
            target=f"{user}/{stem}",
            user_name=user,
            team=crashed[0]["team"],
            evidence=evidence,
            action=action,
            saving_usd=saving,
            confidence="medium",
            confidence_reasons="the same family failed more than once; a retry may fail for another reason",
            job_ids=tuple(ids),
            job_saving_usd=tuple(savings),
            job_cost_usd=_costs(runs, ids),
            lever="time",
            addresses=("failed_usd",),
            recurring=True,
        )
    ]


def _oom(
    user: str, stem: str, runs: list[dict[str, object]], failed: dict[str, float]
) -> list[Recommendation]:
    oom = [j for j in runs if j["state"] == OOM]
    if not oom:
        return []
    ids = sorted(j["job_id"] for j in oom)
    savings = [failed.get(k, 0.0) for k in ids]
    saving = sum(savings)
    if saving <= 0:
        return []
    tried = sorted({j["batch_size"] for j in oom if j["batch_size"]})
    done = [
        j["batch_size"]
        for j in runs
        if j["state"] == COMPLETED and j["batch_size"] and (not tried or j["batch_size"] < min(tried))
    ]
    if done:
        lower = f"lower the per-GPU batch to {max(done)} (the largest that completed in this family)"
    elif tried:
        lower = f"lower the per-GPU batch below {min(tried)}"
    else:
        lower = "lower the per-GPU batch"
    evidence = (
        f"{plural(len(oom), 'run')} of {stem} ({user}) ran out of GPU memory"
        + (f" at batch {', '.join(str(b) for b in tried)}" if tried else "")
        + f": ${saving:,.2f} of GPU time lost."
    )
    action = (
        f"Before the next launch {lower}, or turn on activation checkpointing (recompute) to keep the batch."
    )
    return [
        Recommendation(
            kind="oom_smaller_batch",
            target_type="family",
            target=f"{user}/{stem}",
            user_name=user,
            team=oom[0]["team"],
            evidence=evidence,
            action=action,
            saving_usd=saving,
            confidence="high",
            confidence_reasons="the runs' state is OOM",
            job_ids=tuple(ids),
            job_saving_usd=tuple(savings),
            job_cost_usd=_costs(runs, ids),
            lever="time",
            addresses=("failed_usd",),
            recurring=len(oom) >= 2,
        )
    ]


def _early(rows: list[dict[str, object]], failed: dict[str, float], early_s: float) -> list[Recommendation]:
    per_user: dict[str, list[dict[str, object]]] = defaultdict(list)
    for j in rows:
        if (
            j["state"] in FAULT_STATES
            and (j["gpu_count"] or 1) > 1
            and j["start_ts"] is not None
            and j["end_ts"] is not None
            and (j["end_ts"] - j["start_ts"]).total_seconds() <= early_s
            and failed.get(j["job_id"], 0.0) > 0
        ):
            per_user[j["user_name"] or "(unknown)"].append(j)
    items = []
    for user, jobs in sorted(per_user.items()):
        ids = sorted(j["job_id"] for j in jobs)
        by = {j["job_id"]: j for j in jobs}
        savings = [failed[k] * (by[k]["gpu_count"] - 1) / by[k]["gpu_count"] for k in ids]
        saving = sum(savings)
        gpus = sorted({j["gpu_count"] for j in jobs})
        evidence = (
            f"{plural(len(jobs), 'multi-GPU run')} of {user} ({', '.join(f'{g:g}' for g in gpus)} GPUs) failed within "
            f"{early_s / 60:g} min of starting: ${sum(failed[k] for k in ids):,.2f}, of which ${saving:,.2f} "
            "on GPUs a 1-GPU test would not have held."
        )
        action = f"Start {user}'s multi-GPU jobs with a few steps on 1 GPU first; launch the full job once that runs."
        items.append(
            Recommendation(
                kind="test_small_first",
                target_type="user",
                target=user,
                user_name=user,
                team=jobs[0]["team"],
                evidence=evidence,
                action=action,
                saving_usd=saving,
                confidence="medium",
                confidence_reasons="a crash in the first minutes is usually in setup, which 1 GPU reproduces",
                job_ids=tuple(ids),
                job_saving_usd=tuple(savings),
                job_cost_usd=tuple(by[k]["cost_usd"] for k in ids),
                lever="price",
                addresses=("failed_usd",),
                recurring=len(jobs) >= 2,
            )
        )
    return items


def _costs(runs: list[dict[str, object]], ids: list[str]) -> tuple[float | None, ...]:
    """The cost of each of ``ids`` (its first run in ``runs``), from one pass over the family: a scan of the
    runs per id was quadratic (a family of the 50 M-sample ledger has hundreds of runs: 0.15 s in all)."""
    first: dict[object, float | None] = {}
    for j in runs:
        first.setdefault(j["job_id"], j["cost_usd"])  # type: ignore[arg-type]
    return tuple(first[k] for k in ids)


def _counts(values) -> list[tuple[str, int]]:
    out: dict[str, int] = defaultdict(int)
    for v in values:
        out[str(v)] += 1
    return sorted(out.items(), key=lambda kv: (-kv[1], kv[0]))
