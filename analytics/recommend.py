"""The recommendations engine: one list of actions, each with its evidence and its dollars per week, ranked.

Kinds (stable names; KIND_LABELS gives each its words for pages and reports; docs/recommendations.md gives
each rule, threshold, savings formula and confidence): see KINDS. Failed runs are analytics.advice_failures',
capacity analytics.advice_capacity's.

Recurring vs one-off (analytics/recurrence.py, from the job's history in the ledger, not the view's dates:
a run family with ≥ 2 runs in the ledger, a user's habit, a service, a cluster): a recurring item has a
``usd_per_week``; a one-off (a training run whose family ran once) has ``usd_per_week`` NULL and says what
it would have saved (``saving_usd``). Near-identical job items of one family (same kind, user, name stem
and action) are merged into one family card.

Money: ``saving_usd`` is what the change would have saved on the jobs of the view, priced at each job's own
rate (its cost in the view ÷ its GPU-hours in the view); ``usd_per_week = saving_usd × 7 / view_days``, where
the view runs from the later of ``--since`` and the first job in the view to the earlier of ``--until`` and
the ledger's data horizon, and view_days is at least 1. Items of different kinds may concern the same
dollars (stopping a notebook reclaims its idle time; a MIG slice and a smaller GPU are alternatives), so
``usd_per_week`` is not summed: ``counted_usd_per_week`` is what an item adds beyond the items ranked above
it, and its sum, :func:`analytics.savings.savings_total`, counts each dollar once (analytics/savings.py).
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import duckdb
import polars as pl

from analytics.advice_capacity import capacity_items, idle_cluster_items
from analytics.advice_common import family_stem
from analytics.advice_failures import failure_items
from analytics.advice_jobs import inference_items, input_pipeline_items
from analytics.batch_size import batch_recommendations
from analytics.diagnoses import THRESHOLDS, TRAINING_KINDS, right_size, scaling_table, view_right_size
from analytics.filters import Filters, horizon
from analytics.job_signals import (
    prices_at,
    view_jobs_sql,
    view_signals,
    with_active,
)
from analytics.money import cents
from analytics.problems import PRICE_MOVES, one_per_problem, owner_of, where_paid_for
from analytics.query import frame
from analytics.recurrence import RECURRING_JOB_KINDS, mark
from analytics.savings import coverage, savings_total, with_counted
from analytics.shared import active
from analytics.utilization import Source, use_rollup
from analytics.waste import job_waste, unallocated
from gpuledger.ledger.settings import Settings

# savings_total is re-exported: the list and its deduplicated total come from this module
__all__ = [
    "KINDS",
    "KIND_LABELS",
    "RECOMMENDATION_COLUMNS",
    "as_json",
    "recommendations",
    "savings_total",
    "view_coverage",
    "view_window",
]
# kind → the words pages, reports and the CLI show (never the raw code)
KIND_LABELS = {
    "reclaim_idle": "Release idle GPUs",
    "stop_idle_notebooks": "Auto-stop idle notebooks",
    "right_size_gpu": "Use a smaller GPU",
    "fewer_gpus": "Use fewer GPUs",
    "larger_batch": "Raise the batch size",
    "use_spot": "Run on spot",
    "mig_slice": "Use a MIG slice",
    "checkpoint_interval": "Checkpoint more often",
    "fix_repeated_failures": "Fix repeated failures",
    "test_small_first": "Test on 1 GPU first",
    "oom_smaller_batch": "Fix out-of-memory runs",
    "release_capacity": "Release unused capacity",
    "offpeak_capacity": "Scale down or backfill off-peak capacity",
    "scale_down_idle": "Scale down an idle cluster",
    "fix_input_pipeline": "Feed the GPUs faster",
    "consolidate_inference": "Consolidate inference replicas",
}
KINDS = tuple(KIND_LABELS)
SPOT_REWORK = 0.10  # spot cost is inflated by 10 % for work redone after preemptions
CHECKPOINT_MAX_GAP_H = 2.0  # use_spot: last checkpoint at most this long before the job's end
MIG_MAX_UTIL_PCT = 30.0  # mig_slice: only jobs using less than this share of one GPU
# MIG profiles per catalog model: (profile, share of the GPU's compute, usable memory MiB as nvidia-smi reports)
MIG_PROFILES: dict[str, tuple[tuple[str, float, float], ...]] = {
    "A100-80GB": (("1g.10gb", 1 / 7, 9728), ("2g.20gb", 2 / 7, 19968), ("3g.40gb", 3 / 7, 40192)),
    "A100-40GB": (("1g.5gb", 1 / 7, 4864), ("2g.10gb", 2 / 7, 9728), ("3g.20gb", 3 / 7, 19968)),
    "H100-SXM-80GB": (("1g.10gb", 1 / 7, 9728), ("2g.20gb", 2 / 7, 19968), ("3g.40gb", 3 / 7, 40192)),
    "H100-PCIe-80GB": (("1g.10gb", 1 / 7, 9728), ("2g.20gb", 2 / 7, 19968), ("3g.40gb", 3 / 7, 40192)),
    "H200": (("1g.18gb", 1 / 7, 16896), ("2g.35gb", 2 / 7, 33792), ("3g.71gb", 3 / 7, 69632)),
    "A30": (("1g.6gb", 1 / 4, 5632), ("2g.12gb", 2 / 4, 11520)),
}
BATCH_FIELDS = (
    "current_batch_size",
    "recommended_batch_size",
    "largest_observed_batch_size",
    "memory_model",
    "fit_quality",
    "memory_r2",
    "predicted_peak_mem_mib",
    "card_mem_mib",
    "predicted_throughput_gain_pct",
    "knee_batch_size",
    "lr_rule",
)
RECOMMENDATION_COLUMNS: dict[str, pl.DataType] = {
    "id": pl.Utf8(),  # kind:target, unique in the list
    "kind": pl.Utf8(),
    "kind_label": pl.Utf8(),  # KIND_LABELS[kind]
    "target_type": pl.Utf8(),  # job | family | user | cluster
    "target": pl.Utf8(),
    "user_name": pl.Utf8(),
    "team": pl.Utf8(),
    "evidence": pl.Utf8(),
    "action": pl.Utf8(),
    "saving_usd": pl.Float64(),  # what it saves (would have saved, for a one-off) in the view
    "usd_per_week": pl.Float64(),  # recurring items only: saving_usd × 7 / view_days; NULL for one-offs
    "recurring": pl.Boolean(),
    "confidence": pl.Utf8(),
    "confidence_reasons": pl.Utf8(),
    "addresses": pl.List(pl.Utf8()),  # the waste parts (analytics.waste) of its jobs it addresses
    "job_ids": pl.List(pl.Utf8()),
    "lever": pl.Utf8(),  # time | price | work (analytics/savings.py)
    "job_saving_usd": pl.List(pl.Float64()),  # the saving on each of job_ids
    "job_cost_usd": pl.List(pl.Float64()),  # each job's cost in the view
    "overlaps_with": pl.List(pl.Utf8()),  # ids of other items concerning one of the same jobs
    "counted_saving_usd": pl.Float64(),  # what the item adds beyond the items ranked above it
    "counted_usd_per_week": pl.Float64(),  # the same per week (recurring); sums to savings_total()
    "current_batch_size": pl.Int64(),
    "recommended_batch_size": pl.Int64(),
    "largest_observed_batch_size": pl.Int64(),
    "memory_model": pl.Utf8(),  # fitted | analytic
    "fit_quality": pl.Utf8(),  # good | flat | analytic
    "memory_r2": pl.Float64(),
    "predicted_peak_mem_mib": pl.Float64(),
    "card_mem_mib": pl.Float64(),
    "predicted_throughput_gain_pct": pl.Float64(),
    "lr_rule": pl.Utf8(),
    "knee_batch_size": pl.Int64(),  # the knee: the recommended batch (analytics/batch_size.py)
    "owner_type": pl.Utf8(),  # team | operators (analytics/problems.py)
    "owner": pl.Utf8(),  # the team (or user), or "operators of <cluster>"
    "alternatives": pl.List(pl.Utf8()),  # the problem's other actions, not added: "label: $x/week"
}


def view_window(
    con: duckdb.DuckDBPyConnection, filters: Filters, as_of: dt.datetime | None
) -> tuple[dt.datetime, dt.datetime, float] | None:
    """(start, end, days) of the view the savings are scaled from; None when the view has no job.

    start = the later of ``--since`` and the first in-view job start; end = the earlier of the midnight after
    ``--until`` and the data horizon; days = (end − start) in days, at least 1.
    """
    vj, params = view_jobs_sql(filters, as_of)
    rows = con.execute(f"SELECT min(span_start), max(span_end) FROM ({vj})", params).fetchall()
    return _window(rows[0][0], rows[0][1], filters, as_of)


def _window(
    first: dt.datetime | None, last: dt.datetime | None, filters: Filters, as_of: dt.datetime | None
) -> tuple[dt.datetime, dt.datetime, float] | None:
    if first is None or last is None:
        return None
    lo = max(first, filters.lo) if filters.lo else first
    ends = [t for t in (filters.hi, as_of) if t is not None]
    hi = min(ends) if ends else last
    days = max((hi - lo).total_seconds() / 86400.0, 1.0)
    return lo, hi, days


# The kinds each advice step below can make (recommendations(kinds=...) runs only the steps it needs).
FAILURE_ADVICE = ("checkpoint_interval", "fix_repeated_failures", "test_small_first", "oom_smaller_batch")
# consolidate_inference leaves out the jobs a smaller GPU or a MIG slice already sizes: it needs their items
SIZING_KINDS = ("right_size_gpu", "mig_slice")


def recommendations(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters | None = None,
    settings: Settings | None = None,
    as_of: dt.datetime | None = None,
    min_usd_per_week: float = 1.0,
    source: Source = "auto",
    kinds: Collection[str] | None = None,
    problems: bool = True,
) -> pl.DataFrame:
    """All recommendations for the view, ranked by usd_per_week (RECOMMENDATION_COLUMNS).

    Items saving less than ``min_usd_per_week`` are left out; ``counted_usd_per_week`` is then worked
    out over the items that remain, so it sums to ``savings_total`` of the returned list. ``source``: the
    telemetry signals' source (analytics.utilization; the same recommendations either way).

    ``kinds``: only these kinds (KINDS), and only the work they need (the Training page shows the
    larger_batch items alone: on a 50 M-sample ledger the whole list costs it 2.4 s). Each item is the one
    the whole list holds, with two exceptions: ``counted_*`` is then counted over the kinds asked for, and
    problems are merged among those kinds only.

    ``problems``: one item per problem, its best action (analytics/problems.py: items sharing a job or a
    target are one problem; the others become its ``alternatives``). False gives every rule's own item, as
    each kind's rule computes it (the tests of each rule's dollars, and a what-if over every action).
    """
    want = set(KINDS) if kinds is None else set(kinds)
    if unknown := want - set(KINDS):
        raise ValueError(f"unknown recommendation kind(s): {', '.join(sorted(unknown))}")
    filters = filters or Filters()
    settings = settings or Settings()
    as_of = as_of or horizon(con)
    vj, params = view_jobs_sql(filters, as_of)
    view = frame(con, vj, params)  # read once: every kind below works on these rows
    window = _window(view["span_start"].min(), view["span_end"].max(), filters, as_of)
    if window is None:
        return pl.DataFrame(schema=RECOMMENDATION_COLUMNS)
    days = window[2]
    fast = use_rollup(con, settings, source)
    stretches, sig = view_signals(con, filters=filters, settings=settings, as_of=as_of, source=source)
    jobs = view.join(sig.drop("held_gpu_s"), on="job_id", how="left").with_columns(
        (pl.col("cost_usd") / pl.col("held_gpu_s")).alias("rate_usd_per_gpu_s")
    )
    inference = "consolidate_inference" in want
    need_waste = inference or "scale_down_idle" in want or bool(want & set(FAILURE_ADVICE))
    waste = (
        job_waste(con, filters=filters, settings=settings, as_of=as_of, source=source if fast else "raw")
        if need_waste
        else None
    )
    items: list[dict[str, object]] = []
    frames: list[JobItems] = []  # the kinds with thousands of per-job items, as frames until _families
    if "reclaim_idle" in want:
        frames.append(_reclaim_idle(jobs, settings))
    if "stop_idle_notebooks" in want:
        items += _stop_idle_notebooks(stretches, jobs, settings)
    if "right_size_gpu" in want or inference:
        frames.append(_right_size(con, jobs, filters, settings, as_of, sig, view, source))
    if "fewer_gpus" in want:
        items += _fewer_gpus(con, jobs, settings, as_of)
    if "larger_batch" in want:
        items += _larger_batch(con, jobs, filters, settings, as_of, _input_bound_or_unused(jobs), view)
    if "use_spot" in want:
        items += _use_spot(con, jobs, as_of)
    if "mig_slice" in want or inference:
        frames.append(_mig_slice(jobs, settings))
    if "fix_input_pipeline" in want:
        items += input_pipeline_items(jobs)
    if inference:
        assert waste is not None
        sized = {k for f in frames if f.kind in SIZING_KINDS for k in f.rows["job_id"]}
        underused = _positive(waste, "underused_usd")
        items += inference_items(jobs, underused, sized)
    items = [it for it in items if it["kind"] in want]
    # the names of the dict items' jobs alone (a dict for each of 39 k jobs was 0.03 s; the frames carry theirs)
    named = jobs.filter(pl.col("job_id").is_in([it["target"] for it in items if it["target_type"] == "job"]))
    names = {k: {"job_id": k, "name": n} for k, n in zip(named["job_id"], named["name"], strict=True)}
    items = _families(items, names, [f for f in frames if f.kind in want])
    if want & set(FAILURE_ADVICE):
        assert waste is not None
        failed = _positive(waste, "failed_usd")
        items += failure_items(con, view, failed)
    # spot and a smaller GPU on a paid-for cluster stay only next to its capacity items (analytics/problems.py)
    if want & {"release_capacity", "offpeak_capacity", *PRICE_MOVES}:
        items += capacity_items(con, filters=filters, settings=settings, as_of=as_of)
    if "scale_down_idle" in want:
        assert waste is not None
        items += idle_cluster_items(con, view, waste)
    # recurring or one-off by the job's history, the same at every range (analytics/recurrence.py); a
    # one-off's saving is not a weekly figure, so it is held against the floor as it is
    kept = [
        {
            **dict.fromkeys(RECOMMENDATION_COLUMNS),
            **it,
            "kind_label": KIND_LABELS[str(it["kind"])],
            "usd_per_week": it["saving_usd"] * 7.0 / days if it["recurring"] else None,
        }
        for it in mark(con, where_paid_for(items, view, settings), as_of)
        if it["kind"] in want
        and (it["saving_usd"] or 0) > 0
        and it["saving_usd"] * (7.0 / days if it["recurring"] else 1.0) >= min_usd_per_week
    ]
    rows = [
        {
            **it,
            "evidence": text(it["evidence"]),
            **dict(zip(("owner_type", "owner"), owner_of(it), strict=True)),
        }
        for it in (one_per_problem(kept, KIND_LABELS) if problems else kept)
    ]
    ranked = pl.DataFrame(rows, schema=RECOMMENDATION_COLUMNS).sort(
        ["saving_usd", "kind", "target"], descending=[True, False, False]
    )
    return with_counted(
        ranked.drop("id", "overlaps_with", "counted_saving_usd", "counted_usd_per_week")
    ).select(list(RECOMMENDATION_COLUMNS))


def _positive(waste: pl.DataFrame, column: str) -> dict[str, float]:
    """Job id -> ``column`` of the per-job waste rows where it is above 0 (a later row of a job wins).

    Filtered in polars before any value becomes Python: the few hundred jobs with failed or under-used
    dollars, not all 39 k of a 50 M-sample ledger's view (NaN is no saving: polars orders it above 0)."""
    value = pl.col(column)
    hit = waste.filter(value.is_not_null() & value.is_not_nan() & (value > 0))
    return dict(zip(hit["job_id"].to_list(), hit[column].to_list(), strict=True))


INTERNAL_FIELDS = ("lever", "job_saving_usd", "job_cost_usd", "counted_saving_usd")


def as_json(recs: pl.DataFrame) -> list[dict[str, object]]:
    """The ``recommend --json`` list: batch fields only on larger_batch items, money rounded to cents.

    Each item also carries ``id``, ``overlaps_with`` and ``counted_usd_per_week`` (what it adds beyond the
    items above it; the sum over the whole list is the deduplicated total, ``recommend --total``)."""
    out = []
    for r in recs.to_dicts():
        item = {
            k: v
            for k, v in r.items()
            if k not in INTERNAL_FIELDS and (k not in BATCH_FIELDS or r["kind"] == "larger_batch")
        }
        for money in ("saving_usd", "usd_per_week", "counted_usd_per_week"):
            item[money] = cents(r[money])
        out.append(item)
    return out


def view_coverage(
    con: duckdb.DuckDBPyConnection,
    recs: pl.DataFrame,
    *,
    filters: Filters | None = None,
    settings: Settings | None = None,
    as_of: dt.datetime | None = None,
) -> dict[str, object]:
    """analytics.savings.coverage of ``recs`` over the view's waste (analytics.waste's parts)."""
    filters = filters or Filters()
    settings = settings or Settings()
    as_of = as_of or horizon(con)
    waste = job_waste(con, filters=filters, settings=settings, as_of=as_of)
    return coverage(recs, waste, unallocated(con, filters=filters, settings=settings, as_of=as_of))


def _job_item(
    j: dict[str, object],
    kind: str,
    evidence: str | Callable[[], str],
    action: str,
    saving: float,
    confidence: str,
    lever: str,
    addresses: tuple[str, ...] = ("underused_usd",),
) -> dict[str, object]:
    return {
        "addresses": list(addresses),
        "recurring": j["kind"] in RECURRING_JOB_KINDS,
        "kind": kind,
        "target_type": "job",
        "target": j["job_id"],
        "user_name": j["user_name"],
        "team": j["team"],
        "evidence": evidence,
        "action": action,
        "saving_usd": saving,
        "confidence": confidence,
        "job_ids": [j["job_id"]],
        "lever": lever,
        "job_saving_usd": [saving],
        "job_cost_usd": [j["cost_usd"]],
    }


def _label(j: dict[str, object]) -> str:
    name = j.get("name")
    extra = ", ".join(str(x) for x in (name if name != j["job_id"] else None, j.get("user_name")) if x)
    return f"Job {j['job_id']}" + (f" ({extra})" if extra else "")


def _held(j: dict[str, object]) -> str:
    util = j.get("mean_util_pct")
    at = f" at {util:.0f} % utilization" if util is not None else ""
    return f"held {j['gpu_count']:g} × {j['gpu_model']} for {j['hours']:.1f} h{at}"


def _reclaim_idle(jobs: pl.DataFrame, settings: Settings) -> JobItems:
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
        f"{_label(j)} {_held(j)}; {idle_s / 3600:.1f} GPU-hours sat idle (≤ {settings.idle_util_pct:g} % for "
        f"≥ {settings.idle_min_minutes:g} min, {j['idle_stretches']} stretch(es)): ${j['saving_usd']:,.2f} idle."
    )


def _stop_idle_notebooks(
    stretches: pl.DataFrame, jobs: pl.DataFrame, settings: Settings
) -> list[dict[str, object]]:
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
    per_user: dict[str, dict[str, object]] = {}
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
    for user, u in sorted(per_user.items()):
        evidence = (
            f"{user}'s {len(u['jobs'])} notebook(s) on {', '.join(sorted(m or '?' for m in u['models']))} sat idle "
            f"{u['idle_s'] / 3600:.1f} GPU-hours in {u['stretches']} stretch(es) (longest {u['longest'] / 3600:.1f} h): "
            f"${u['idle_usd']:,.2f}; stopping after {settings.notebook_idle_stop_minutes:g} idle minutes would "
            f"have saved ${u['saving']:,.2f}."
        )
        action = (
            f"Turn on idle auto-stop for {user}'s notebooks after {settings.notebook_idle_stop_minutes:g} min "
            "(JupyterHub idle culler or the platform's idle shutdown)."
        )
        items.append(
            {
                "kind": "stop_idle_notebooks",
                "target_type": "user",
                "target": user,
                "user_name": user,
                "team": u["team"],
                "evidence": evidence,
                "action": action,
                "saving_usd": u["saving"],
                "confidence": "high",
                "job_ids": sorted(u["jobs"]),
                "lever": "time",
                "addresses": ["idle_allocated_usd"],
                "recurring": True,
                "job_saving_usd": [u["per_job"][k] for k in sorted(u["jobs"])],
                "job_cost_usd": [by_id[k]["cost_usd"] for k in sorted(u["jobs"])],
            }
        )
    return items


def _right_size(
    con: duckdb.DuckDBPyConnection,
    jobs: pl.DataFrame,
    filters: Filters,
    settings: Settings,
    as_of: dt.datetime | None,
    sig: pl.DataFrame,
    view: pl.DataFrame,
    source: Source = "auto",
) -> JobItems:
    """Per job: the cheaper catalog GPU of analytics.diagnoses.right_size; saving = GPU-hours × Δprice.

    With the default source, ``sig`` and ``view`` are right_size's own defaults for the view (the shared
    view_signals, the view_jobs_sql rows): inside a sharing block, the shared result the diagnoses use too."""
    sized = (
        view_right_size(con, filters=filters, settings=settings, as_of=as_of)
        if source == "auto" and active(con)
        else right_size(con, filters=filters, settings=settings, as_of=as_of, signals=sig, view=view)
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
    ).join(jobs.select(ITEM_FIELDS), on="job_id", how="left", maintain_order="left")
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
        f"{_label(r)} {_held(r)}, peaking at {r['peak_mem_mib'] / 1024:.1f} GiB of memory at "
        f"{r['busy_pct']:.0f} % {r['basis']}; {r['candidate']} ({r['candidate_mem_mib'] / 1024:.0f} GiB) would "
        f"run the same work ~{r['busy_pct_there']:.0f} % busy at ${r['candidate_usd_per_gpu_hour']:.2f}/GPU-h "
        f"instead of ${r['rate_usd_per_gpu_hour']:.2f}: ${r['saving_usd']:,.2f} less."
    )


def _fewer_gpus(
    con: duckdb.DuckDBPyConnection, jobs: pl.DataFrame, settings: Settings, as_of: dt.datetime | None
) -> list[dict[str, object]]:
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
            f"{_label(j)} {_held(j)}; {unused} of its {j['gpus_seen']} measured GPUs averaged ≤ "
            f"{settings.idle_util_pct:g} % utilization the whole time: ${saving:,.2f} for GPUs it did not use."
        )
        action = f"Request {_gpus(n - unused)} instead of {n:g}, or make the code use all of them."
        items.append(
            _job_item(
                j,
                "fewer_gpus",
                evidence,
                action,
                saving,
                "high" if j["gpus_seen"] >= n else "medium",
                "time",
                ("idle_allocated_usd", "underused_usd"),
            )
        )
    scaling = scaling_table(con, as_of=as_of)
    if scaling.is_empty():
        return items
    runs = frame(
        con,
        """SELECT r.job_id, concat_ws('|', r.model, j.gpu_model, r.precision, r.batch_size::VARCHAR,
                  r.seq_len::VARCHAR, CASE WHEN r.tokens_per_s IS NOT NULL THEN 'tokens' ELSE 'samples' END) AS family
           FROM training_runs r JOIN jobs j USING (job_id) WHERE r.model IS NOT NULL""",
    )
    poor = (
        jobs.join(runs, on="job_id")
        .join(scaling.drop("unit"), on=["family", "gpu_count"])
        .filter(
            (pl.col("efficiency") < 0.8)
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
        evidence = (
            f"{_label(j)} {_held(j)}; this run family reaches {j['tput_per_gpu']:,.0f} {unit}/s per GPU at "
            f"{_gpus(j['gpu_count'])} vs {j['best_tput_per_gpu']:,.0f} at {_gpus(j['best_gpu_count'])} "
            f"({j['efficiency'] * 100:.0f} % scaling efficiency): the same {unit} on {_gpus(j['best_gpu_count'])} "
            f"cost ${saving:,.2f} less (and take longer)."
        )
        action = (
            f"Run on {_gpus(j['best_gpu_count'])} instead of {j['gpu_count']:g} unless time-to-result matters "
            "more than cost; or fix the scaling (communication overlap, larger per-GPU batch)."
        )
        items.append(_job_item(j, "fewer_gpus", evidence, action, saving, "medium", "work"))
    return items


def _larger_batch(
    con: duckdb.DuckDBPyConnection,
    jobs: pl.DataFrame,
    filters: Filters,
    settings: Settings,
    as_of: dt.datetime | None,
    skip: set[str],
    view: pl.DataFrame,
) -> list[dict[str, object]]:
    """Per job: analytics.batch_size's plan; saving = cost × gain ÷ (1 + gain). Jobs in ``skip`` (starved of
    input, or holding unused GPUs) are left out: a larger batch does not help a GPU that waits or idles."""
    items = []
    plans = batch_recommendations(con, filters=filters, settings=settings, as_of=as_of, view=view)
    plans = plans.filter((pl.col("saving_usd") > 0) & ~pl.col("job_id").is_in(list(skip)))
    by_id = rows_by_id(jobs, plans["job_id"])
    for p in plans.to_dicts():
        j = by_id[p["job_id"]]
        action = (
            f"Raise the per-GPU batch from {p['current_batch_size']} to {p['recommended_batch_size']}; "
            f"{p['lr_rule']}."
        )
        evidence = functools.partial(_larger_batch_evidence, j, p)
        item = _job_item(j, "larger_batch", evidence, action, p["saving_usd"], p["confidence"], "work")
        item.update({f: p[f] for f in BATCH_FIELDS})
        item["confidence_reasons"] = p["confidence_reasons"]
        items.append(item)
    return items


def _larger_batch_evidence(j: dict[str, object], p: dict[str, Any]) -> str:
    util = j.get("mean_util_pct")
    how = {
        "fit": "saturating fit of the measured batches",
        "measured": "measured",
        "headroom": "estimated from utilization headroom",
    }[p["throughput_method"]]
    return (
        f"{_label(j)} trains {p['model'] or 'its model'} at batch {p['current_batch_size']} per GPU on "
        f"{p['gpu_model']}" + (f" at {util:.0f} % utilization" if util is not None else "") + "; its family "
        f"ran up to batch {p['largest_observed_batch_size']}. At {p['recommended_batch_size']} memory is "
        f"predicted at {p['predicted_peak_mem_mib'] / 1024:.1f} of {p['card_mem_mib'] / 1024:.0f} GiB "
        f"({p['memory_model']} model, {p['fit_quality']}) and throughput {p['predicted_throughput_gain_pct']:+.0f} % "
        f"({how}): ${p['saving_usd']:,.2f} less for the same work. {p['reason']}."
    )


def text(evidence: str | Callable[[], str]) -> str:
    """An item's evidence as text: the per-job kinds with thousands of items (right_size_gpu, larger_batch)
    write it only for the items that are shown, a single run or the largest of a family card (_families),
    not for every run a card sums (9.6 k right-sizing items on a 50 M-sample ledger)."""
    return evidence() if callable(evidence) else evidence


@dataclass(frozen=True)
class JobItems:
    """The per-job items of one kind as a frame, one row an item, until :func:`_families` groups them.

    Why: the kinds with thousands of items (right_size_gpu: 9.6 k on a 50 M-sample ledger, which collapse
    into 130 family cards) made a dict and an evidence sentence per job that no card showed. ``rows`` holds
    the job's ITEM_FIELDS, ``saving_usd``, ``action``, ``confidence`` and what ``evidence(row)`` reads; only
    the items a card shows (a single run, the largest of a family) become dicts (:meth:`item`)."""

    kind: str
    rows: pl.DataFrame
    evidence: Callable[[dict[str, Any]], str]
    lever: str
    addresses: tuple[str, ...] = ("underused_usd",)

    def item(self, i: int) -> dict[str, object]:
        r = self.rows.row(i, named=True)
        return _job_item(
            r,
            self.kind,
            functools.partial(self.evidence, r),
            str(r["action"]),
            r["saving_usd"],
            str(r["confidence"]),
            self.lever,
            self.addresses,
        )


def held_share_expr() -> pl.Expr:
    """held ÷ covered GPU-seconds, at most 1 (1 when nothing is covered): samples never stand for more time
    than the job held (the waste taxonomy's clamp; a running job's sample at the horizon, or one a source tied
    to it past its end)."""
    covered = pl.col("covered_gpu_s")
    return (
        pl.when(covered.is_not_null() & (covered != 0))
        .then(pl.min_horizontal(pl.lit(1.0), pl.col("held_gpu_s") / covered))
        .otherwise(pl.lit(1.0))
    )


def _families(
    items: list[dict[str, object]],
    by_id: Mapping[str, Mapping[str, object]],
    frames: Collection[JobItems] = (),
) -> list[dict[str, object]]:
    """Near-identical job items of one run family (same kind, user, name stem and action) become one
    family card: "4 runs of X: …", its money the sum, its confidence the lowest, recurring.

    ``by_id``: job id → at least the job's ``job_id`` and ``name`` (for the dict ``items``); ``frames``: more
    job items, as :class:`JobItems`. One grouping for both (:func:`_frame_families`): the dict items of a
    kind are put in a frame of the same shape first (:class:`_MadeItems`)."""
    out = [it for it in items if it["target_type"] != "job"]
    by_kind: dict[str, list[dict[str, object]]] = {}
    for it in items:
        if it["target_type"] == "job":
            by_kind.setdefault(str(it["kind"]), []).append(it)
    for its in by_kind.values():
        out += _frame_families(_MadeItems.of(its, by_id))
    for f in frames:
        out += _frame_families(f)
    return out


@dataclass(frozen=True)
class _MadeItems:
    """Per-job items of one kind already made as dicts (the kinds with few of them), with the frame
    :func:`_frame_families` groups (a job item concerns its one job: _job_item)."""

    rows: pl.DataFrame
    items: list[dict[str, object]]

    @classmethod
    def of(cls, items: list[dict[str, object]], by_id: Mapping[str, Mapping[str, object]]) -> _MadeItems:
        rows = pl.DataFrame(
            {
                "job_id": [str(it["target"]) for it in items],
                "user_name": [it["user_name"] for it in items],
                "name": [by_id[str(it["target"])].get("name") for it in items],
                "action": [it["action"] for it in items],
                "saving_usd": [it["saving_usd"] for it in items],
                "confidence": [it["confidence"] for it in items],
                "cost_usd": [it["job_cost_usd"][0] for it in items],  # type: ignore[index]
            },
            schema={
                "job_id": pl.Utf8,
                "user_name": pl.Utf8,
                "name": pl.Utf8,
                "action": pl.Utf8,
                "saving_usd": pl.Float64,
                "confidence": pl.Utf8,
                "cost_usd": pl.Float64,
            },
        )
        return cls(rows, items)

    def item(self, i: int) -> dict[str, object]:
        return self.items[i]


def _run_order(saving: float, target: str) -> tuple[float, str]:
    """A family's runs, largest saving first; savings equal to a millionth of a dollar (the same job shape,
    summed in another order) by job id, so which run the card names does not hang on float rounding."""
    return -round(saving, 6), target


def _frame_families(f: JobItems | _MadeItems) -> list[dict[str, object]]:
    """:func:`_families` of one kind's items: grouped in polars, a dict made only for each card's top run."""
    if f.rows.is_empty():
        return []
    rows = f.rows.select(
        pl.int_range(pl.len()).alias("i"),
        "job_id",
        "user_name",
        "name",
        "action",
        "saving_usd",
        "confidence",
        "cost_usd",
    )
    order = [_run_order(float(v), str(k)) for v, k in zip(rows["saving_usd"], rows["job_id"], strict=True)]
    rows = rows.with_columns(
        pl.Series(
            "stem", [family_stem(n, str(k)) for n, k in zip(rows["name"], rows["job_id"], strict=True)]
        ),
        pl.Series("o1", [o[0] for o in order], dtype=pl.Float64),
        pl.Series("o2", [o[1] for o in order], dtype=pl.Utf8),
    ).sort("o1", "o2")
    grouped = rows.group_by("user_name", "stem", "action", maintain_order=True).agg(
        "i", "job_id", "saving_usd", "confidence", "cost_usd"
    )
    out: list[dict[str, object]] = []
    for user, stem, _, idx, ids, savings, confidences, costs in grouped.iter_rows():
        top = f.item(idx[0])
        if len(idx) == 1:
            out.append({**top, "evidence": text(top["evidence"])})  # type: ignore[arg-type]
        else:
            out.append(_card(str(user), str(stem), top, savings, ids, confidences, ids, savings, costs))
    return out


def _card(
    user: str,
    stem: str,
    top: dict[str, object],
    savings: list[float],
    ids: list[str],
    confidences: list[str],
    job_ids: list[object],
    job_savings: list[object],
    job_costs: list[object],
) -> dict[str, object]:
    """The family card of runs (ordered by :func:`_run_order`) whose largest is ``top``."""
    rank = {"high": 2, "medium": 1, "low": 0}
    saving = sum(savings)
    card = dict(top)
    card.update(
        {
            "target_type": "family",
            "target": f"{user}/{stem}",
            "evidence": f"{len(ids)} runs of family {stem} ({user}: {_some(ids)}), "
            f"${saving:,.2f} in all. The largest: {text(top['evidence'])}",  # type: ignore[arg-type]
            "saving_usd": saving,
            "confidence": min(confidences, key=lambda c: rank.get(c, 0)),
            "job_ids": job_ids,
            "job_saving_usd": job_savings,
            "job_cost_usd": job_costs,
            "recurring": True,
        }
    )
    return card


# The job fields the per-job items read (_job_item, _label, _held, the notebook and batch kinds): rows_by_id
# converts only these (the view's rows have 40 columns; each cell costs in to_dicts).
ITEM_FIELDS = (
    "job_id",
    "name",
    "user_name",
    "team",
    "kind",
    "cost_usd",
    "gpu_count",
    "gpu_model",
    "hours",
    "mean_util_pct",
    "rate_usd_per_gpu_s",
    "held_gpu_s",
    "covered_gpu_s",
)


def rows_by_id(
    jobs: pl.DataFrame, ids: pl.Series | None = None, fields: Collection[str] = ITEM_FIELDS
) -> dict[str, dict[str, object]]:
    """Job id → the job's ``fields`` as a dict, for the jobs in ``ids`` (all when None); the last row wins.

    Why not one dict of every job up front: ``to_dicts`` costs per cell, and each kind reads a few hundred
    to a few thousand of the view's jobs (39 k on a 50 M-sample ledger); each asks for its own."""
    if ids is not None:
        jobs = jobs.filter(pl.col("job_id").is_in(ids.implode()))
    return {j["job_id"]: j for j in jobs.select(list(fields)).to_dicts()}


def _some(ids: list[object], shown: int = 5) -> str:
    """The first few ids, then how many more."""
    head = ", ".join(str(x) for x in ids[:shown])
    return head + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def _input_bound_or_unused(jobs: pl.DataFrame) -> set[str]:
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


def _use_spot(
    con: duckdb.DuckDBPyConnection, jobs: pl.DataFrame, as_of: dt.datetime | None
) -> list[dict[str, object]]:
    """Per job: checkpointed on-demand training; saving = GPU-hours × (rate − spot × (1 + rework))."""
    prices = prices_at(con, as_of)
    items = []
    cands = jobs.filter(
        pl.col("kind").is_in(TRAINING_KINDS)
        & (pl.col("pricing_tier") == "on_demand")
        & pl.col("cost_usd").is_not_null()
        & (pl.col("gpu_hours") > 0)
    )
    ckpt = frame(con, "SELECT job_id, last_checkpoint_ts FROM jobs WHERE last_checkpoint_ts IS NOT NULL")
    for j in cands.join(ckpt, on="job_id").to_dicts():
        spot = prices.get((j["gpu_model"], "spot"))
        if spot is None:
            continue
        end = j["end_ts"] or j["span_end"]
        gap_h = (end - j["last_checkpoint_ts"]).total_seconds() / 3600.0
        if gap_h < 0 or gap_h > CHECKPOINT_MAX_GAP_H:
            continue
        rate = j["cost_usd"] / j["gpu_hours"]
        saving = j["gpu_hours"] * (rate - spot * (1.0 + SPOT_REWORK))
        evidence = (
            f"{_label(j)} {_held(j)} on demand at ${rate:.2f}/GPU-h (${j['cost_usd']:,.2f}); it checkpoints "
            f"(last checkpoint {gap_h:.1f} h before its end), so preemption costs little: at the spot price "
            f"${spot:.2f}/GPU-h plus {SPOT_REWORK * 100:.0f} % rework it would have cost ${saving:,.2f} less."
        )
        action = "Run it on spot capacity with automatic resume from the last checkpoint."
        items.append(_job_item(j, "use_spot", evidence, action, saving, "medium", "price", ()))
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


def _mig_slice(jobs: pl.DataFrame, settings: Settings) -> JobItems:
    """Per 1-GPU job on a MIG-capable card using < 30 % of it outside its idle stretches (the slice must
    serve the job when it works; idle time is reclaim_idle's): saving = cost × (1 − slice share)."""
    cands = with_active(jobs).filter(
        (pl.col("gpu_count") <= 1)
        & pl.col("active_util_pct").is_not_null()
        & (pl.col("active_util_pct") > settings.idle_util_pct)
        & (pl.col("active_util_pct") < MIG_MAX_UTIL_PCT)
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
        f"{_label(j)} {_held(j)}, peaking at {j['peak_mem_mib'] / 1024:.1f} GiB and {basis_pct:.0f} % {basis}: a "
        f"{j['slice']} MIG slice ({j['slice_mem_mib'] / 1024:.1f} GiB, {_frac(j['share'])} of the GPU) holds it, "
        f"freeing ${j['saving_usd']:,.2f} of GPU time for other work."
    )


def _gpus(n: float) -> str:
    """ "1 GPU", "2 GPUs", "0.5 GPU"."""
    return f"{n:g} GPU" + ("s" if n > 1 else "")


def _frac(share: float) -> str:
    for den in (7, 4):
        num = share * den
        if math.isclose(num, round(num)):
            return f"{round(num)}/{den}"
    return f"{share:.2f}"
