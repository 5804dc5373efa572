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

Each item's ``counted_saving_usd`` is what it adds on top of the items counted before it, walking the
recurring items first (in the list's order), then the one-offs: so the weekly total (recurring items only,
``counted_usd_per_week``) counts every recurring dollar in full, and ``one_off_saved_usd`` is what the
one-off items would have saved beyond them.

Capacity items concern a pseudo-job ``capacity:<cluster>:<gpu model>`` whose cost is its unallocated $.

:func:`coverage`: the view's waste dollars (analytics.waste's parts per job, and unallocated per cluster
and model) that at least one item addresses (its ``addresses`` parts on its ``job_ids``), each dollar once.
"""

from __future__ import annotations

from collections import defaultdict

import polars as pl

from analytics.money import cents

LEVERS = ("time", "price", "work")
WASTE_PARTS = ("idle_allocated_usd", "underused_usd", "failed_usd", "unallocated_usd")
CAPACITY_PREFIX = "capacity:"
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


def _order(recs: pl.DataFrame) -> list[int]:
    """Row indices in counting order: recurring rows first, then one-offs, each in the list's order."""
    rec = recs["recurring"].to_list() if "recurring" in recs.columns else [True] * recs.height
    return [i for i, r in enumerate(rec) if r is not False] + [i for i, r in enumerate(rec) if r is False]


def _first_max(current: float | None, value: float) -> float:
    """Builtin ``max``'s step: a value replaces the current one only when strictly greater."""
    return value if current is None or value > current else current


class _Levers:
    """One job's items applied so far, folded as :func:`_combined` reads them: the running sum of the
    additive time items, and the running max of the policy time items, the price items and the work items
    (None while a lever has none). The same numbers as keeping every (kind, saving) and folding them again at
    each item: the sum adds in the same order from the same int 0, and each max keeps its first maximal
    value as builtin ``max`` does (a later value replaces it only when strictly greater; NaN included)."""

    __slots__ = ("price", "time_add", "time_policy", "work")

    def __init__(self) -> None:
        self.time_add: float = 0  # sum()'s start: an int, as in _combined
        self.time_policy: float | None = None
        self.price: float | None = None
        self.work: float | None = None

    def add(self, lever: str, kind: str, saving: float) -> None:
        if lever == "time" and kind not in POLICY_KINDS:
            self.time_add += saving
        elif lever == "time":
            self.time_policy = _first_max(self.time_policy, saving)
        elif lever == "price":
            self.price = _first_max(self.price, saving)
        elif lever == "work":
            self.work = _first_max(self.work, saving)
        # any other lever: _combined reads only these three

    def combined(self, cost: float) -> float:
        """:func:`_combined` of the items added so far."""
        if cost <= 0:
            return 0.0
        policy = self.time_policy if self.time_policy is not None else 0.0
        left = 1.0
        for value in (
            max(self.time_add, policy),
            self.price if self.price is not None else 0.0,
            self.work if self.work is not None else 0.0,
        ):
            left *= 1.0 - min(max(value / cost, 0.0), 1.0)
        return cost * (1.0 - left)


def counted_savings(recs: pl.DataFrame) -> list[float]:
    """Per row: the saving (US$, in the view) it adds beyond the rows counted before it (recurring rows
    first, then one-offs, each in the list's order).

    Each job's levers are folded as its items come (:class:`_Levers`) instead of every item of the job
    being folded again at each new one (:func:`_combined`, the rule as written): the same figures, without
    the per-item re-scan (0.29 s for the 21 k job savings of a 50 M-sample ledger's list)."""
    applied: dict[str, _Levers] = defaultdict(_Levers)
    done: dict[str, float] = defaultdict(float)
    out = [0.0] * recs.height
    cols = ("kind", "lever", "job_ids", "job_saving_usd", "job_cost_usd")
    rows = list(zip(*(recs[c].to_list() for c in cols), strict=True))
    for i in _order(recs):
        kind, lever, ids, savings, costs = rows[i]
        added = 0.0
        for job, saving, cost in zip(ids, savings, costs, strict=True):
            if saving is None or cost is None:
                continue
            levers = applied[job]
            levers.add(lever, kind, saving)
            now = levers.combined(cost)
            added += now - done[job]
            done[job] = now
        out[i] = max(added, 0.0)
    return out


def overlaps(recs: pl.DataFrame) -> list[list[str]]:
    """Per row: the ids of the other rows that concern at least one of its jobs (sorted).

    As a self-join of the rows' (row, job) pairs on the job: a family card lists thousands of jobs (15 k job
    entries in a 50 M-sample ledger's 340 items), each in one to three items."""
    if recs.is_empty():
        return []
    pairs = pl.DataFrame(
        {"row": range(recs.height), "item": item_ids(recs), "job": recs["job_ids"]},
        schema={"row": pl.Int64, "item": pl.Utf8, "job": pl.List(pl.Utf8)},
    ).explode("job")
    others = (
        pairs.join(pairs.select("job", pl.col("item").alias("other")), on="job")
        .filter(pl.col("other") != pl.col("item"))
        .group_by("row")
        .agg(pl.col("other").unique().sort())
    )
    by_row = dict(zip(others["row"].to_list(), others["other"].to_list(), strict=True))
    return [by_row.get(i, []) for i in range(recs.height)]


def _counted_columns(recs: pl.DataFrame) -> list[pl.Series]:
    """``counted_saving_usd`` and ``counted_usd_per_week`` of ``recs`` (ranked)."""
    counted = counted_savings(recs)
    weekly = [
        (c * w / s if s else 0.0) if w is not None else None
        for c, w, s in zip(counted, recs["usd_per_week"], recs["saving_usd"], strict=True)
    ]
    return [
        pl.Series("counted_saving_usd", counted, dtype=pl.Float64),
        pl.Series("counted_usd_per_week", weekly, dtype=pl.Float64),
    ]


def with_counted(recs: pl.DataFrame) -> pl.DataFrame:
    """``recs`` (ranked) plus ``id``, ``overlaps_with`` and ``counted_saving_usd`` / ``counted_usd_per_week``."""
    return recs.with_columns(
        pl.Series("id", item_ids(recs), dtype=pl.Utf8),
        pl.Series("overlaps_with", overlaps(recs), dtype=pl.List(pl.Utf8)),
        *_counted_columns(recs),
    )


def savings_total(recs: pl.DataFrame, *, whole: bool = False) -> dict[str, object]:
    """The deduplicated total of a recommendations frame (any subset of the list, in its ranked order).

    Returns ``total_usd_per_week`` (recurring items, each dollar once: the figure to show as "possible
    savings"), ``listed_usd_per_week`` (the plain sum of the recurring items, which double-counts
    overlaps), ``overlap_usd_per_week`` (the difference), ``items``, ``recurring_items``,
    ``one_off_items``, ``one_off_saved_usd`` (what the one-off items would have saved in the view beyond
    the recurring ones, each dollar once; not a weekly figure) and ``by_kind`` (kind → counted $ per week
    of its recurring items). Money is rounded to cents.

    ``whole``: ``recs`` is a whole list as analytics.recommend.recommendations returns it, so its
    ``counted_*`` columns already are what this would count (the same rule in the same order) and are
    summed as they are; a part of a list (one kind, one owner) is counted again by itself.
    """
    if recs.is_empty():
        return {
            "total_usd_per_week": 0.0,
            "listed_usd_per_week": 0.0,
            "overlap_usd_per_week": 0.0,
            "items": 0,
            "recurring_items": 0,
            "one_off_items": 0,
            "one_off_saved_usd": 0.0,
            "by_kind": {},
        }
    if whole:
        counted = recs
    else:
        recs = recs.sort(["saving_usd", "kind", "target"], descending=[True, False, False])
        counted = recs.with_columns(*_counted_columns(recs))  # the totals need no ids or overlaps
    rec = counted.filter(pl.col("usd_per_week").is_not_null())
    once = counted.filter(pl.col("usd_per_week").is_null())
    total = float(rec["counted_usd_per_week"].sum())
    listed = float(rec["usd_per_week"].sum())
    by_kind = rec.group_by("kind").agg(pl.col("counted_usd_per_week").sum()).sort("kind")
    return {
        "total_usd_per_week": cents(total),
        "listed_usd_per_week": cents(listed),
        "overlap_usd_per_week": cents(listed - total),
        "items": counted.height,
        "recurring_items": rec.height,
        "one_off_items": once.height,
        "one_off_saved_usd": cents(float(once["counted_saving_usd"].sum())),
        "by_kind": {k: cents(float(v)) for k, v in by_kind.iter_rows()},
    }


def coverage(recs: pl.DataFrame, waste: pl.DataFrame, unallocated: pl.DataFrame) -> dict[str, object]:
    """``{addressable_usd, addressed_usd, addressed_pct, by_part: {part: {usd, addressed_usd}}}``:
    addressable_usd = the waste teams control + the capacity no job held (the parts an action can take away;
    not "waste": docs/metrics.md names the two apart).

    ``waste``: analytics.waste.job_waste rows (a job's waste parts); ``unallocated``: analytics.waste.
    unallocated rows (cluster, gpu_model, unallocated_usd). A job's part counts as addressed, in full and
    once, when at least one item lists the job in ``job_ids`` and the part in ``addresses``; a cluster's
    unallocated $ when an item concerns its ``capacity:<cluster>:<gpu model>`` key."""
    # (job, part) pairs some item addresses, against each job's parts: as frames (39 k jobs on a 50 M-sample
    # ledger; a loop over their rows was 0.08 s)
    hit = (
        pl.DataFrame(schema={"job_id": pl.Utf8, "part": pl.Utf8})
        if recs.is_empty()
        else recs.select(pl.col("job_ids").alias("job_id"), pl.col("addresses").alias("part"))
        .explode("job_id")
        .explode("part")
        .drop_nulls()
        .unique()
    )
    parts = (
        waste.select("job_id", *WASTE_PARTS[:3])
        .unpivot(index="job_id", variable_name="part", value_name="usd")
        .with_columns(pl.col("usd").fill_null(0.0))
    )
    waste_usd = dict(parts.group_by("part").agg(pl.col("usd").sum()).iter_rows())
    addressed_usd = dict(
        parts.join(hit, on=["job_id", "part"], how="semi")
        .group_by("part")
        .agg(pl.col("usd").sum())
        .iter_rows()
    )
    by_part = {
        p: {"usd": float(waste_usd.get(p, 0.0)), "addressed_usd": float(addressed_usd.get(p, 0.0))}
        for p in WASTE_PARTS
    }
    capacity_hit = set(hit.filter(pl.col("part") == "unallocated_usd")["job_id"].to_list())
    for row in unallocated.iter_rows(named=True):
        usd = row["unallocated_usd"] or 0.0
        by_part["unallocated_usd"]["usd"] += usd
        if f"{CAPACITY_PREFIX}{row['cluster']}:{row['gpu_model']}" in capacity_hit:
            by_part["unallocated_usd"]["addressed_usd"] += usd
    total = sum(p["usd"] for p in by_part.values())
    addressed = sum(p["addressed_usd"] for p in by_part.values())
    return {
        "addressable_usd": cents(total),
        "addressed_usd": cents(addressed),
        "addressed_pct": round(addressed / total * 100.0, 1) if total else None,
        "by_part": {
            k: {"usd": cents(v["usd"]), "addressed_usd": cents(v["addressed_usd"])}
            for k, v in by_part.items()
        },
    }
