"""Count each saved dollar once: the recommendations list's deduplicated total.

Items of the list overlap: a notebook's idle time is both ``reclaim_idle`` and ``stop_idle_notebooks``; a
MIG slice and a smaller GPU are alternatives for one job; a larger batch and spot pricing on the same job
compound. Summing ``usd_per_week`` would add some dollars twice, so every item is split into what it saves
on each job it concerns (``job_ids`` / ``job_saving_usd``, priced on the job's in-view cost
``job_cost_usd``), and each job's items are combined by one rule (docs/recommendations.md, "Counting each
dollar once"):

- every item pulls one **lever** on the job's cost C = GPU-seconds held × price per GPU-second:
  ``time`` (held GPU-time that did no work: reclaim_idle, fewer_gpus on unused GPUs, stop_idle_notebooks),
  ``price`` (what a GPU-second costs: right_size_gpu, mig_slice, use_spot) or ``work`` (GPU-time per unit
  of work: larger_batch, fewer_gpus for poor scaling);
- within a lever, alternatives count once: time = max(Σ reclaim_idle + unused-GPU items, which cover
  disjoint GPU-seconds, and the largest stop_idle_notebooks share, which is part of the same idle seconds);
  price = the largest item (one card, slice or tier at a time); work = the largest item (a larger batch is
  also a cure for poor scaling, so the two are not stacked);
- levers compound: the job's saving is C × (1 − Π over levers (1 − lever ÷ C)), i.e. the changes applied
  one after another, each on what the previous ones left; never more than C.

Each item's ``counted_usd_per_week`` is what it adds on top of the items ranked above it (walking the list
in its order), so the column sums to the deduplicated total and the top item of every job counts in full.
"""

from __future__ import annotations

from collections import defaultdict

import polars as pl

LEVERS = ("time", "price", "work")
# Kinds whose saving is part of other items' idle seconds (an alternative to them, never added).
POLICY_KINDS = ("stop_idle_notebooks",)


def item_ids(recs: pl.DataFrame) -> list[str]:
    """``kind:target`` for each row: unique within one list (one item per kind and target)."""
    return [f"{k}:{t}" for k, t in zip(recs["kind"], recs["target"], strict=True)]


def _combined(cost: float, parts: dict[str, list[tuple[str, float]]]) -> float:
    """The job's saving from the items applied so far (``parts``: lever → [(kind, saving)])."""
    if cost <= 0:
        return 0.0
    time_add = sum(s for k, s in parts.get("time", ()) if k not in POLICY_KINDS)
    time_policy = max((s for k, s in parts.get("time", ()) if k in POLICY_KINDS), default=0.0)
    levers = {
        "time": max(time_add, time_policy),
        "price": max((s for _, s in parts.get("price", ())), default=0.0),
        "work": max((s for _, s in parts.get("work", ())), default=0.0),
    }
    left = 1.0
    for value in levers.values():
        left *= 1.0 - min(max(value / cost, 0.0), 1.0)
    return cost * (1.0 - left)


def counted_savings(recs: pl.DataFrame) -> list[float]:
    """Per row, in the list's order: the saving (US$, in the view) it adds beyond the rows above it."""
    applied: dict[str, dict[str, list[tuple[str, float]]]] = defaultdict(lambda: defaultdict(list))
    done: dict[str, float] = defaultdict(float)
    out = []
    cols = ("kind", "lever", "job_ids", "job_saving_usd", "job_cost_usd")
    for kind, lever, ids, savings, costs in zip(*(recs[c] for c in cols), strict=True):
        added = 0.0
        for job, saving, cost in zip(ids, savings, costs, strict=True):
            if saving is None or cost is None:
                continue
            applied[job][lever].append((kind, saving))
            now = _combined(cost, applied[job])
            added += now - done[job]
            done[job] = now
        out.append(max(added, 0.0))
    return out


def overlaps(recs: pl.DataFrame) -> list[list[str]]:
    """Per row: the ids of the other rows that concern at least one of its jobs."""
    ids = item_ids(recs)
    by_job: dict[str, list[str]] = defaultdict(list)
    for item, jobs in zip(ids, recs["job_ids"], strict=True):
        for job in jobs:
            by_job[job].append(item)
    return [
        sorted({o for job in jobs for o in by_job[job] if o != item})
        for item, jobs in zip(ids, recs["job_ids"], strict=True)
    ]


def with_counted(recs: pl.DataFrame) -> pl.DataFrame:
    """``recs`` (ranked) plus ``id``, ``overlaps_with`` and ``counted_saving_usd`` / ``counted_usd_per_week``."""
    counted = counted_savings(recs)
    weekly = [
        c * w / s if s else 0.0
        for c, w, s in zip(counted, recs["usd_per_week"], recs["saving_usd"], strict=True)
    ]
    return recs.with_columns(
        pl.Series("id", item_ids(recs), dtype=pl.Utf8),
        pl.Series("overlaps_with", overlaps(recs), dtype=pl.List(pl.Utf8)),
        pl.Series("counted_saving_usd", counted, dtype=pl.Float64),
        pl.Series("counted_usd_per_week", weekly, dtype=pl.Float64),
    )


def savings_total(recs: pl.DataFrame) -> dict[str, object]:
    """The deduplicated total of a recommendations frame (any subset of the list, in its ranked order).

    Returns ``total_usd_per_week`` (each dollar once: the figure to show as "possible savings"),
    ``listed_usd_per_week`` (the plain sum of the items, which double-counts overlaps),
    ``overlap_usd_per_week`` (the difference), ``items``, and ``by_kind`` (kind → counted $ per week).
    Money is rounded to cents.
    """
    if recs.is_empty():
        return {
            "total_usd_per_week": 0.0,
            "listed_usd_per_week": 0.0,
            "overlap_usd_per_week": 0.0,
            "items": 0,
            "by_kind": {},
        }
    recs = recs.sort(["usd_per_week", "kind", "target"], descending=[True, False, False])
    counted = with_counted(recs)
    total = float(counted["counted_usd_per_week"].sum())
    listed = float(counted["usd_per_week"].sum())
    by_kind = counted.group_by("kind").agg(pl.col("counted_usd_per_week").sum()).sort("kind")
    return {
        "total_usd_per_week": round(total, 2),
        "listed_usd_per_week": round(listed, 2),
        "overlap_usd_per_week": round(listed - total, 2),
        "items": counted.height,
        "by_kind": {k: round(float(v), 2) for k, v in by_kind.iter_rows()},
    }
