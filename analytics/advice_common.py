"""What every kind of advice shares: the item (:class:`Recommendation`), the view each kind reads
(:class:`AdviceView`), the one job builder (:func:`job_item`) and the one way a job is named (:func:`job_label`).

Every advice module (``analytics/advice_*.py``) has the same shape: ``KINDS``, the kinds it makes, and
``advise(v: AdviceView, found: Found) -> Found``, its items for the view (``found``: what the modules
before it made, for the one kind that leaves out what another already covers). analytics/recommend.py
runs them in order, groups run families, merges each problem's items and ranks them.

Why a frozen dataclass: the items were dicts from three builders with different signatures, and a kind that
forgot a key (or spelled it another way) only showed as a NULL column on a page. A :class:`Recommendation`
has every field typed once; the list the CLI, pages and reports read is :func:`Recommendation.row` of each.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any, Protocol

import duckdb
import polars as pl

from analytics.filters import Filters
from analytics.telemetry_source import TelemetrySource
from analytics.waste import job_waste
from gpuledger.ledger.settings import Settings

# job kinds whose items concern a habit or a service, so they recur
RECURRING_JOB_KINDS = ("interactive", "inference")


@dataclass(frozen=True)
class BatchPlan:
    """What a larger_batch item adds (analytics/batch_size.py's plan for the job)."""

    current_batch_size: int | None
    recommended_batch_size: int | None
    largest_observed_batch_size: int | None
    memory_model: str | None  # fitted | analytic
    fit_quality: str | None  # good | flat | analytic
    memory_r2: float | None
    predicted_peak_mem_mib: float | None
    card_mem_mib: float | None
    predicted_throughput_gain_pct: float | None
    knee_batch_size: int | None  # the knee: the recommended batch
    lr_rule: str | None

    @classmethod
    def of(cls, plan: dict[str, Any]) -> BatchPlan:
        return cls(**{f.name: plan[f.name] for f in fields(cls)})


BATCH_FIELDS = tuple(f.name for f in fields(BatchPlan))


@dataclass(frozen=True)
class Recommendation:
    """One action: what to change (``action``), what it saves, who acts, how sure, and why (``evidence``).

    ``saving_usd``: what it saves (would have saved, for a one-off) in the view; ``usd_per_week`` is set by
    analytics/recommend.py (saving × 7 ÷ view days, recurring items only), as are ``owner_type``/``owner``
    and ``alternatives`` (analytics/problems.py). ``evidence`` may be a function: the per-job kinds with
    thousands of items write the sentence only for the items that are shown (:func:`evidence_text`)."""

    kind: str
    target_type: str  # job | family | user | cluster
    target: str
    user_name: str | None
    team: str | None
    evidence: str | Callable[[], str]
    action: str
    saving_usd: float
    confidence: str  # high | medium | low
    job_ids: tuple[str, ...]
    job_saving_usd: tuple[float, ...]  # the saving on each of job_ids
    job_cost_usd: tuple[float | None, ...]  # each job's cost in the view
    lever: str  # time | price | work (analytics/savings.py)
    addresses: tuple[str, ...]  # the waste parts (analytics.waste) of its jobs it addresses
    recurring: bool
    confidence_reasons: str | None = None
    batch: BatchPlan | None = None
    usd_per_week: float | None = None
    owner_type: str | None = None  # team | operators
    owner: str | None = None
    alternatives: tuple[str, ...] | None = None  # None: the list was not merged into problems

    def but(self, **changes: Any) -> Recommendation:
        """A copy with ``changes`` (the item is frozen)."""
        return replace(self, **changes)

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> Recommendation:
        """A row of the list (analytics.recommend.RECOMMENDATION_COLUMNS) as the item it was made from, for
        the pages and reports that read one item at a time."""
        plain = {f.name for f in fields(cls)} - {"batch", *_TUPLES}
        tuples = {k: tuple(row[k] or ()) for k in _TUPLES if k != "alternatives"}
        alternatives = row.get("alternatives")
        return cls(
            **{k: row[k] for k in plain},
            **tuples,
            alternatives=None if alternatives is None else tuple(alternatives),
            batch=BatchPlan.of(row) if row.get("recommended_batch_size") is not None else None,
        )

    def row(self, kind_label: str) -> dict[str, object]:
        """The item as one row of analytics.recommend.RECOMMENDATION_COLUMNS (without the counted columns)."""
        plan = self.batch
        return {
            "id": None,
            "kind": self.kind,
            "kind_label": kind_label,
            "target_type": self.target_type,
            "target": self.target,
            "user_name": self.user_name,
            "team": self.team,
            "evidence": evidence_text(self.evidence),
            "action": self.action,
            "saving_usd": self.saving_usd,
            "usd_per_week": self.usd_per_week,
            "recurring": self.recurring,
            "confidence": self.confidence,
            "confidence_reasons": self.confidence_reasons,
            "addresses": list(self.addresses),
            "job_ids": list(self.job_ids),
            "lever": self.lever,
            "job_saving_usd": list(self.job_saving_usd),
            "job_cost_usd": list(self.job_cost_usd),
            **{f: getattr(plan, f) if plan else None for f in BATCH_FIELDS},
            "owner_type": self.owner_type,
            "owner": self.owner,
            "alternatives": None if self.alternatives is None else list(self.alternatives),
        }


# the fields a row holds as lists
_TUPLES = ("job_ids", "job_saving_usd", "job_cost_usd", "addresses", "alternatives")


def evidence_text(evidence: str | Callable[[], str]) -> str:
    """An item's evidence as text: the per-job kinds with thousands of items (right_size_gpu, larger_batch)
    write it only for the items that are shown, a single run or the largest of a family card, not for every
    run a card sums (9.6 k right-sizing items on a 50 M-sample ledger)."""
    return evidence() if callable(evidence) else evidence


def job_item(
    j: dict[str, Any],
    kind: str,
    evidence: str | Callable[[], str],
    action: str,
    saving: float,
    confidence: str,
    lever: str,
    addresses: Sequence[str] = ("underused_usd",),
    *,
    reasons: str | None = None,
    recurring: bool | None = None,
    batch: BatchPlan | None = None,
) -> Recommendation:
    """The one builder of a job's item: it concerns that one job, recurs when the job is a habit or a
    service (RECURRING_JOB_KINDS) unless ``recurring`` says otherwise."""
    return Recommendation(
        kind=kind,
        target_type="job",
        target=str(j["job_id"]),
        user_name=j["user_name"],
        team=j["team"],
        evidence=evidence,
        action=action,
        saving_usd=saving,
        confidence=confidence,
        confidence_reasons=reasons,
        job_ids=(str(j["job_id"]),),
        job_saving_usd=(saving,),
        job_cost_usd=(j["cost_usd"],),
        lever=lever,
        addresses=tuple(addresses),
        recurring=j["kind"] in RECURRING_JOB_KINDS if recurring is None else recurring,
        batch=batch,
    )


def job_label(j: dict[str, Any]) -> str:
    """How every kind names a job: ``Job 42 (ft-run-3, ana)``; the name when it is not the id, the user when
    known (``Job 42 (ana)``, ``Job 42``)."""
    name = j.get("name")
    extra = ", ".join(str(x) for x in (name if name != j["job_id"] else None, j.get("user_name")) if x)
    return f"Job {j['job_id']}" + (f" ({extra})" if extra else "")


def held(j: dict[str, Any]) -> str:
    """``held 2 × A100-80GB for 3.0 h at 41 % utilization``."""
    util = j.get("mean_util_pct")
    at = f" at {util:.0f} % utilization" if util is not None else ""
    return f"held {j['gpu_count']:g} × {j['gpu_model']} for {j['hours']:.1f} h{at}"


@dataclass(frozen=True)
class JobItems:
    """The per-job items of one kind as a frame, one row an item, until analytics.recommend groups them
    into run families.

    Why: the kinds with thousands of items (right_size_gpu: 9.6 k on a 50 M-sample ledger, which collapse
    into 130 family cards) made an item and an evidence sentence per job that no card showed. ``rows`` holds
    the job's ITEM_FIELDS, ``saving_usd``, ``action``, ``confidence`` and what ``evidence(row)`` reads; only
    the items a card shows (a single run, the largest of a family) become items (:meth:`item`)."""

    kind: str
    rows: pl.DataFrame
    evidence: Callable[[dict[str, Any]], str]
    lever: str
    addresses: tuple[str, ...] = ("underused_usd",)

    def item(self, i: int) -> Recommendation:
        r = self.rows.row(i, named=True)
        return job_item(
            r,
            self.kind,
            functools.partial(self.evidence, r),
            str(r["action"]),
            r["saving_usd"],
            str(r["confidence"]),
            self.lever,
            self.addresses,
        )


Found = list[Recommendation | JobItems]  # what an advice module makes


class AdviceModule(Protocol):
    """The shape of every ``analytics/advice_*.py`` module analytics.recommend runs."""

    KINDS: tuple[str, ...]  # the kinds it makes

    def advise(self, v: AdviceView, found: Found) -> Found: ...


@dataclass(frozen=True)
class AdviceView:
    """What every advice module reads: the view's jobs, once.

    ``view``: analytics.job_signals.view_jobs_sql's rows; ``jobs``: those joined with the signals (``sig``)
    and each job's rate (cost ÷ held GPU-seconds); ``stretches``: the idle stretches; ``days``: the view's
    length (analytics.recommend.view_window); ``want``: the kinds asked for."""

    con: duckdb.DuckDBPyConnection
    filters: Filters
    settings: Settings
    as_of: dt.datetime | None
    source: TelemetrySource
    view: pl.DataFrame
    jobs: pl.DataFrame
    sig: pl.DataFrame
    stretches: pl.DataFrame
    want: frozenset[str]

    @cached_property
    def waste(self) -> pl.DataFrame:
        """analytics.waste.job_waste of the view."""
        return job_waste(
            self.con, filters=self.filters, settings=self.settings, as_of=self.as_of, source=self.source
        )

    def positive(self, column: str) -> dict[str, float]:
        """Job id -> ``column`` of the view's waste rows where it is above 0 (a later row of a job wins).

        Filtered in polars before any value becomes Python: the few hundred jobs with failed or under-used
        dollars, not all 39 k of a 50 M-sample ledger's view (NaN is no saving: polars orders it above 0)."""
        value = pl.col(column)
        hit = self.waste.filter(value.is_not_null() & value.is_not_nan() & (value > 0))
        return dict(zip(hit["job_id"].to_list(), hit[column].to_list(), strict=True))


# The job fields the per-job items read (job_item, job_label, held, the notebook and batch kinds): rows_by_id
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
) -> dict[str, dict[str, Any]]:
    """Job id → the job's ``fields`` as a dict, for the jobs in ``ids`` (all when None); the last row wins.

    Why not one dict of every job up front: ``to_dicts`` costs per cell, and each kind reads a few hundred
    to a few thousand of the view's jobs (39 k on a 50 M-sample ledger); each asks for its own."""
    if ids is not None:
        jobs = jobs.filter(pl.col("job_id").is_in(ids.implode()))
    return {j["job_id"]: j for j in jobs.select(list(fields)).to_dicts()}


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


def family_stem(name: str | None, job_id: str) -> str:
    """A job's run family by name: its name without the trailing parts that carry a digit (run numbers,
    week suffixes, ids): ``ft-valentina-3284`` → ``ft-valentina``, ``small-batch-gpt2-medium-b4-w1-0`` →
    ``small-batch-gpt2-medium``. A name made only of such parts is its own family."""
    return _stem(name or job_id)


# Cached by the name alone (the job id only stands in for a missing name): the failure kinds and the family
# cards ask for every job of the view (39 k on a 50 M-sample ledger, 0.25 s uncached) and names repeat (3.5 k
# distinct there). Bounded, since a dashboard runs for weeks.
@functools.lru_cache(maxsize=1 << 16)
def _stem(name: str) -> str:
    parts = name.split("-")
    while len(parts) > 1 and any(ch.isdigit() for ch in parts[-1]):
        parts.pop()
    return "-".join(parts)


def plural(n: float, word: str) -> str:
    """``1 run``, ``2 runs``, ``1.5 GPUs``."""
    return f"{n:g} {word}" + ("" if n == 1 else "s")


def gpus(n: float) -> str:
    """ "1 GPU", "2 GPUs", "0.5 GPU"."""
    return f"{n:g} GPU" + ("s" if n > 1 else "")


def some(values: Sequence[object], shown: int = 5) -> str:
    """The first few values, then how many more."""
    head = ", ".join(str(x) for x in values[:shown])
    return head + (f" and {len(values) - shown} more" if len(values) > shown else "")
