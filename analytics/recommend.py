"""The recommendations engine: one list of actions, each with its evidence and its dollars per week, ranked.

This module is the loop, the merging and the ranking; each kind of advice is a module (ADVICE, in order)
with the same shape (analytics/advice_common.py): ``KINDS`` and ``advise(view, found)``, whose items are
:class:`~analytics.advice_common.Recommendation`. Kinds (stable names; KIND_LABELS gives each its words
for pages and reports; docs/recommendations.md gives each rule, threshold, savings formula and confidence):
see KINDS. The thresholds are settings (``[recommend]`` and ``[thresholds]``, docs/settings.md).

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
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import duckdb
import polars as pl

from analytics import (
    advice_batch,
    advice_capacity,
    advice_failures,
    advice_idle,
    advice_jobs,
    advice_sizing,
    advice_spot,
)
from analytics.advice_common import (
    BATCH_FIELDS,
    AdviceModule,
    AdviceView,
    Found,
    JobItems,
    Recommendation,
    evidence_text,
    family_stem,
    some,
)
from analytics.filters import Filters, horizon
from analytics.job_signals import view_jobs_sql, view_signals
from analytics.money import cents
from analytics.problems import CAPACITY_KINDS, one_per_problem, owner_of, where_paid_for
from analytics.query import frame
from analytics.recurrence import mark
from analytics.savings import coverage, savings_total, with_counted
from analytics.utilization import ROLLUPS, Source
from analytics.waste import job_waste, unallocated
from gpuledger.ledger.settings import Settings

# savings_total is re-exported: the list and its deduplicated total come from this module
__all__ = [
    "ADVICE",
    "KINDS",
    "KIND_LABELS",
    "RECOMMENDATION_COLUMNS",
    "Advised",
    "Listing",
    "Recommendation",
    "advised",
    "as_json",
    "listing",
    "recommendation_lists",
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
# The advice modules, in the order they run: each sees what the ones before it found (consolidate_inference
# leaves out what the sizing kinds cover), and the capacity items come after the moves they may release.
ADVICE: tuple[AdviceModule, ...] = (
    advice_idle,
    advice_sizing,
    advice_batch,
    advice_spot,
    advice_jobs,
    advice_failures,
    advice_capacity,
)
# The kinds a kind needs made beside it (each module makes the kinds of AdviceView.want; only the kinds
# asked for are kept): consolidate_inference leaves out the jobs the sizing kinds size, and spot and a smaller
# GPU on a paid-for cluster stay only next to the capacity item for what they free (analytics/problems.py).
NEEDS: dict[str, tuple[str, ...]] = {
    "consolidate_inference": advice_sizing.SIZING_KINDS,
    "use_spot": ("release_capacity",),
    "right_size_gpu": ("release_capacity",),
}
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


def recommendations(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters | None = None,
    settings: Settings | None = None,
    as_of: dt.datetime | None = None,
    min_usd_per_week: float = 1.0,
    source: Source = ROLLUPS,
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

    Two lists of one view (another floor, or every rule's item beside the problems): :func:`recommendation_lists`,
    which runs the rules once for both.
    """
    found = advised(con, filters=filters, settings=settings, as_of=as_of, source=source, kinds=kinds)
    return listing(found, Listing(min_usd_per_week, problems))


@dataclass(frozen=True)
class Listing:
    """Which list of a view's items: the floor (``min_usd_per_week``) and one item per problem or not
    (``problems``), as :func:`recommendations`' keywords of the same names."""

    min_usd_per_week: float = 1.0
    problems: bool = True


@dataclass(frozen=True)
class Advised:
    """A view's items before any list is drawn from them: what every rule found (the kinds asked for and the
    capacity kinds), merged into family cards, left out where not paid for (analytics.problems.where_paid_for)
    and marked recurring or one-off (analytics.recurrence.mark); ``days``: the view's days
    (:func:`view_window`); ``want``: the kinds asked for. Nothing in it depends on the floor or on
    ``problems``, so any number of :class:`Listing` s are drawn from one."""

    items: tuple[Recommendation, ...]
    days: float
    want: frozenset[str]


def advised(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters | None = None,
    settings: Settings | None = None,
    as_of: dt.datetime | None = None,
    source: Source = ROLLUPS,
    kinds: Collection[str] | None = None,
) -> Advised | None:
    """The expensive part of :func:`recommendations` (the view, its signals, every advice module): the
    view's :class:`Advised` items; None when the view has no job. Keywords as :func:`recommendations`."""
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
        return None
    stretches, sig = view_signals(con, filters=filters, settings=settings, as_of=as_of, source=source)
    jobs = view.join(sig.drop("held_gpu_s"), on="job_id", how="left").with_columns(
        (pl.col("cost_usd") / pl.col("held_gpu_s")).alias("rate_usd_per_gpu_s")
    )
    run = want.union(*(NEEDS.get(k, ()) for k in want))
    v = AdviceView(con, filters, settings, as_of, source, view, jobs, sig, stretches, frozenset(run))
    found: Found = []
    for module in ADVICE:
        if run & set(module.KINDS):
            found += module.advise(v, found)
    # the kinds asked for, and the capacity items where_paid_for reads (a move it frees stays next to them)
    items = _families([f for f in found if f.kind in want or f.kind in CAPACITY_KINDS], jobs)
    # recurring or one-off by the job's history, the same at every range (analytics/recurrence.py)
    marked = mark(con, where_paid_for(items, view, settings), as_of)
    return Advised(tuple(marked), window[2], frozenset(want))


def listing(found: Advised | None, lists: Listing) -> pl.DataFrame:
    """The cheap part of :func:`recommendations`: of ``found``'s items, the kinds asked for that save, at
    least the floor, one per problem or each rule's own, ranked, with what each adds (``counted_*``)."""
    if found is None:
        return pl.DataFrame(schema=RECOMMENDATION_COLUMNS)
    days = found.days

    def per_week(it: Recommendation) -> float:
        return it.saving_usd * 7.0 / days

    kept = [
        it.but(usd_per_week=per_week(it) if it.recurring else None)
        # a one-off's saving is not a weekly figure, so it is held against the floor as it is
        for it in found.items
        if it.kind in found.want
        and (it.saving_usd or 0) > 0
        and (per_week(it) if it.recurring else it.saving_usd) >= lists.min_usd_per_week
    ]
    rows = [
        _owned(it).row(KIND_LABELS[it.kind])
        for it in (one_per_problem(kept, KIND_LABELS) if lists.problems else kept)
    ]
    ranked = pl.DataFrame(rows, schema=RECOMMENDATION_COLUMNS).sort(
        ["saving_usd", "kind", "target"], descending=[True, False, False]
    )
    return with_counted(
        ranked.drop("id", "overlaps_with", "counted_saving_usd", "counted_usd_per_week")
    ).select(list(RECOMMENDATION_COLUMNS))


def recommendation_lists(
    con: duckdb.DuckDBPyConnection,
    lists: Sequence[Listing],
    *,
    filters: Filters | None = None,
    settings: Settings | None = None,
    as_of: dt.datetime | None = None,
    source: Source = ROLLUPS,
    kinds: Collection[str] | None = None,
) -> tuple[pl.DataFrame, ...]:
    """One :func:`recommendations` list for each of ``lists``, from ONE pass of the rules over the view
    (:func:`advised`): each the frame :func:`recommendations` gives for its floor and ``problems``.

    Why: gpuledger/items/scan.py wants each week's list a lead sees and every rule's own item; two calls
    ran the view's reads and every advice module twice (half the scan's time on the 28-day demo)."""
    found = advised(con, filters=filters, settings=settings, as_of=as_of, source=source, kinds=kinds)
    return tuple(listing(found, x) for x in lists)


INTERNAL_FIELDS = ("lever", "job_saving_usd", "job_cost_usd", "counted_saving_usd")


def _owned(it: Recommendation) -> Recommendation:
    """The item with who acts on it (analytics.problems.owner_of)."""
    owner_type, owner = owner_of(it.target_type, it.target, it.team, it.user_name)
    return it.but(owner_type=owner_type, owner=owner)


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


def _families(found: Sequence[Recommendation | JobItems], jobs: pl.DataFrame) -> list[Recommendation]:
    """Near-identical job items of one run family (same kind, user, name stem and action) become one
    family card: "4 runs of X: …", its money the sum, its confidence the lowest, recurring.

    ``found``: the items, and the kinds with thousands of job items as :class:`JobItems` frames; ``jobs``:
    the view's jobs (for the names of the items' jobs). One grouping for both (:func:`_frame_families`):
    the job items of a kind are put in a frame of the same shape first (:class:`_MadeItems`)."""
    items = [f for f in found if isinstance(f, Recommendation)]
    frames = [f for f in found if isinstance(f, JobItems)]
    # the names of the items' jobs alone (a dict for each of 39 k jobs was 0.03 s; the frames carry theirs)
    named = jobs.filter(pl.col("job_id").is_in([it.target for it in items if it.target_type == "job"]))
    names = dict(zip(named["job_id"], named["name"], strict=True))
    out = [it for it in items if it.target_type != "job"]
    by_kind: dict[str, list[Recommendation]] = {}
    for it in items:
        if it.target_type == "job":
            by_kind.setdefault(it.kind, []).append(it)
    for its in by_kind.values():
        out += _frame_families(_MadeItems.of(its, names))
    for f in frames:
        out += _frame_families(f)
    return out


@dataclass(frozen=True)
class _MadeItems:
    """Per-job items of one kind already made (the kinds with few of them), with the frame
    :func:`_frame_families` groups (a job item concerns its one job: advice_common.job_item)."""

    rows: pl.DataFrame
    items: list[Recommendation]

    @classmethod
    def of(cls, items: list[Recommendation], names: Mapping[str, str | None]) -> _MadeItems:
        rows = pl.DataFrame(
            {
                "job_id": [it.target for it in items],
                "user_name": [it.user_name for it in items],
                "name": [names.get(it.target) for it in items],
                "action": [it.action for it in items],
                "saving_usd": [it.saving_usd for it in items],
                "confidence": [it.confidence for it in items],
                "cost_usd": [it.job_cost_usd[0] for it in items],
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

    def item(self, i: int) -> Recommendation:
        return self.items[i]


def _run_order(saving: float, target: str) -> tuple[float, str]:
    """A family's runs, largest saving first; savings equal to a millionth of a dollar (the same job shape,
    summed in another order) by job id, so which run the card names does not hang on float rounding."""
    return -round(saving, 6), target


def _frame_families(f: JobItems | _MadeItems) -> list[Recommendation]:
    """:func:`_families` of one kind's items: grouped in polars, an item made only for each card's top run."""
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
    out: list[Recommendation] = []
    for user, stem, _, idx, ids, savings, confidences, costs in grouped.iter_rows():
        top = f.item(idx[0])
        if len(idx) == 1:
            out.append(top.but(evidence=evidence_text(top.evidence)))
        else:
            out.append(_card(str(user), str(stem), top, savings, ids, confidences, costs))
    return out


CONFIDENCE_ORDER = {"high": 2, "medium": 1, "low": 0}


def _card(
    user: str,
    stem: str,
    top: Recommendation,
    savings: list[float],
    ids: list[str],
    confidences: list[str],
    costs: list[float | None],
) -> Recommendation:
    """The family card of runs (ordered by :func:`_run_order`) whose largest is ``top``."""
    saving = sum(savings)
    return top.but(
        target_type="family",
        target=f"{user}/{stem}",
        evidence=f"{len(ids)} runs of family {stem} ({user}: {some(ids)}), "
        f"${saving:,.2f} in all. The largest: {evidence_text(top.evidence)}",
        saving_usd=saving,
        confidence=min(confidences, key=lambda c: CONFIDENCE_ORDER.get(c, 0)),
        job_ids=tuple(ids),
        job_saving_usd=tuple(savings),
        job_cost_usd=tuple(costs),
        recurring=True,
    )
