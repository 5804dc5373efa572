"""Batch-size planner: a per-GPU batch bounded by evidence, its throughput, and its dollars.

The model (docs/recommendations.md, "Batch-size plan"):

- **memory** (per GPU, MiB), one of two models, named in ``memory_model``:

  - ``fitted``: least squares peak = fixed + per_sample × batch over the run family's measured (batch, peak)
    points, only with at least two distinct batch sizes and a good fit (R² ≥ ``MIN_R2`` when there are more
    points than batch sizes' worth of a line); the analytic per-sample floor below is a sanity bound (a
    fitted slope under it is raised to it). **Flat** points (the peaks of all batch sizes within
    ``FLAT_SPREAD`` of each other: the caching allocator holds the memory) say that memory does not limit
    the batch here: no per-sample figure is extrapolated, the observed peak is reported;
  - ``analytic`` (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"):
    weights + gradients + optimizer states (bytes per parameter from precision and optimizer) + the CUDA
    context (``CUDA_CONTEXT_MIB``) fixed, plus activations per sample: from one measured run, what the peak
    leaves above the fixed part; else s·h·L·34 bytes (16-bit activations with selective recomputation /
    flash attention); never under 2·s·h·L bytes (full recomputation keeps each layer's input).
- **bound**: on a fitted model never more than ``EXTRAPOLATION_LIMIT`` (2×) the family's largest observed
  batch; the analytic model may go further, at low confidence. The global batch changes at most up to the
  critical batch size when the run logs a gradient-noise scale (McCandlish et al. 2018, B_crit ≈ B_noise),
  else at most ``GLOBAL_CHANGE_LIMIT`` (4×) per piece of advice (none when gradient accumulation absorbs the
  change). Batches are multiples of ``BATCH_MULTIPLE`` (8), or the bound itself.
- **throughput** (per GPU): measured at a batch → that measurement; a saturating fit T(b) = T_max·b/(b+k)
  over ≥ 2 measured batch sizes inside the measured range; past the largest measured batch the prediction
  is capped by the largest measured marginal gain per doubling (and gains nothing when the last measured
  step gained nothing). Without measurements at two batch sizes: half the utilization headroom, ½ (min(new/
  old, 100/util) − 1). Without either, no gain is claimed; at ≥ ``batch_saturated_util_pct`` (85 %, gpuledger/ledger/thresholds.py) utilization a larger
  batch offers little and no batch is advised; nor is one whose predicted gain is under ``MIN_GAIN`` (5 %).
- **recommendation**: the knee, the smallest candidate batch with ``GAIN_KNEE`` (90 %) of the gain
  predicted at the largest allowed batch (past it more batch buys little speed for a larger change to the
  optimization); ``knee_batch_size`` is that batch.
- **dollars**: the same work at a higher throughput takes 1/(1+gain) of the GPU time: saving = cost ×
  gain / (1 + gain).
- **no advice** for runs that failed, were cancelled, timed out or ran out of memory (analytics.waste's
  FAILED_STATES): an OOM run is analytics.advice_failures' (a smaller batch or activation checkpointing).
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import polars as pl

from analytics.batch_memory import (
    ACT_BYTES_FULL_RECOMPUTE,
    ACT_BYTES_SELECTIVE,
    ADAM_LIKE,
    BATCH_MULTIPLE,
    CUDA_CONTEXT_MIB,
    FLAT_SPREAD,
    MIB,
    MIN_R2,
    SGD_LIKE,
    MemoryModel,
    NoModel,
    activation_floor_mib,
    bytes_per_param,
    fit_memory,
    largest_batch,
)
from analytics.batch_throughput import (
    ThroughputCurve,
    ThroughputFit,
    fit_throughput,
    headroom_gain,
    throughput_curve,
)
from analytics.filters import Filters, horizon
from analytics.job_signals import view_jobs_sql
from analytics.query import frame
from analytics.shared import ledger_frame
from gpuledger.ledger.job_states import FAILED_STATES, OOM
from gpuledger.ledger.settings import Settings
from gpuledger.ledger.thresholds import DEFAULT

GAIN_KNEE = 0.9  # the knee: the smallest batch with this share of the gain at the largest allowed batch
EXTRAPOLATION_LIMIT = 2.0  # × the family's largest observed batch, on a fitted memory model
GLOBAL_CHANGE_LIMIT = 4.0  # × the global batch per piece of advice, without a gradient-noise scale
SATURATED_PCT = DEFAULT.batch_saturated_util_pct  # at or above: a larger batch offers little
MIN_GAIN = 0.05  # a predicted gain under 5 % is within the noise of a throughput measurement: not advised
TRAINING_KINDS = ("training", "fine-tune")

# the models' names callers import from here (analytics/batch_memory.py, analytics/batch_throughput.py)
__all__ = [
    "ACT_BYTES_FULL_RECOMPUTE",
    "ACT_BYTES_SELECTIVE",
    "BATCH_COLUMNS",
    "CUDA_CONTEXT_MIB",
    "FLAT_SPREAD",
    "MIB",
    "MIN_R2",
    "BatchPlan",
    "MemoryModel",
    "NoModel",
    "ThroughputCurve",
    "ThroughputFit",
    "activation_floor_mib",
    "batch_recommendations",
    "bytes_per_param",
    "fit_memory",
    "fit_throughput",
    "headroom_gain",
    "largest_batch",
    "lr_rule",
    "plan_batch",
    "points_of",
    "throughput_curve",
]


def lr_rule(optimizer: str | None, current: int, new: int, grad_accum: int | None) -> str:
    """How to keep optimization equivalent when the per-GPU micro-batch grows from ``current`` to ``new``:
    a starting point, to be checked on the loss curve."""
    ratio = float(f"{new / current:.3g}")
    if grad_accum and grad_accum > 1 and (grad_accum * current) % new == 0:
        return (
            f"keep the global batch: micro-batch {current} → {new} and gradient accumulation "
            f"{grad_accum} → {grad_accum * current // new}; learning rate unchanged"
        )
    opt = (optimizer or "").lower()
    warm = "; a starting point: keep a warm-up of ~5 % of steps and watch the loss for the first few thousand"
    if opt.startswith(SGD_LIKE):
        return f"global batch × {ratio:g}: scale the learning rate linearly (× {ratio:g}){warm}"
    if opt.startswith(ADAM_LIKE):
        return (
            f"global batch × {ratio:g}: scale the learning rate by √{ratio:g} = × {math.sqrt(ratio):.2f} "
            f"(square-root rule for Adam-type optimizers){warm}"
        )
    return (
        f"global batch × {ratio:g}: keep it with gradient accumulation, or rescale the learning rate "
        f"(× {math.sqrt(ratio):.2f} for Adam-type, × {ratio:g} for SGD){warm}"
    )


@dataclass(frozen=True)
class BatchPlan:
    """A plan for one job. ``recommended_batch_size == current_batch_size`` means no change is advised
    (``reason`` says why: memory, the bounds, the gain, or high utilization)."""

    current_batch_size: int
    recommended_batch_size: int
    largest_observed_batch_size: int
    predicted_peak_mem_mib: float | None
    card_mem_mib: float
    memory: MemoryModel | None
    throughput_method: str | None  # measured | fit | headroom | None
    throughput_gain: float | None  # fraction at the recommendation; None when it cannot be told
    lr_rule: str | None
    confidence: str
    confidence_reasons: tuple[str, ...]
    reason: str
    knee_batch_size: int | None = None
    bound_batch_size: int | None = None  # the largest batch the bounds allow

    @property
    def advised(self) -> bool:
        return self.recommended_batch_size > self.current_batch_size and bool(self.throughput_gain)

    @property
    def memory_model(self) -> str | None:
        return self.memory.model if self.memory else None

    @property
    def fit_quality(self) -> str | None:
        return self.memory.quality if self.memory else None


def plan_batch(
    *,
    current_batch: int,
    card_mem_mib: float,
    safety: float,
    mem_points: Sequence[tuple[float, float]],
    tput_points: Sequence[tuple[float, float]] = (),
    params: float | None = None,
    precision: str | None = None,
    optimizer: str | None = None,
    util_pct: float | None = None,
    grad_accum: int | None = None,
    grad_noise_scale: float | None = None,
    gpu_count: float = 1.0,
    seq_len: float | None = None,
    hidden_size: float | None = None,
    n_layers: float | None = None,
    observed_batches: Sequence[float] = (),
) -> BatchPlan | None:
    """The batch plan for one job; None without a current batch or a card size.

    ``observed_batches``: every per-GPU batch the family ran at, its points' included (only its largest
    matters; defaults to the memory and throughput points' batches); the fitted model's bound is 2× the
    largest.
    """
    if current_batch <= 0 or card_mem_mib <= 0:
        return None
    # given, the family's batches include every point's: its points are not read again for each of its
    # jobs (a family of 374 runs and as many jobs: 1.2 s of a 1,232-GPU month's recommendations)
    seen = (
        [float(b) for b in observed_batches]
        if observed_batches
        else [float(b) for b, _ in mem_points] + [float(b) for b, _ in tput_points]
    )
    largest = int(max([*seen, float(current_batch)]))
    mem = _memory_fit(_frozen(mem_points), params, precision, optimizer, seq_len, hidden_size, n_layers)

    def keep(reason: str, model: MemoryModel | None = None, method: str | None = None) -> BatchPlan:
        return BatchPlan(
            current_batch,
            current_batch,
            largest,
            model.predict(current_batch) if model else None,
            card_mem_mib,
            model,
            method,
            None,
            None,
            "low",
            (),
            reason,
        )

    if isinstance(mem, NoModel):
        return keep(f"no memory model: {mem.reason}")
    if util_pct is not None and util_pct >= SATURATED_PCT:
        return keep(
            f"at {util_pct:.0f} % utilization (≥ {SATURATED_PCT:g} %) a larger batch offers little: the GPU is "
            "already kept busy",
            mem,
        )
    # the bounds: memory, extrapolation, the global batch change
    bound = largest_batch(mem, card_mem_mib, safety)
    notes = [mem.note]
    if mem.model == "fitted":
        limit = int(EXTRAPOLATION_LIMIT * largest)
        if limit < bound:
            bound = limit
            notes.append(
                f"bounded at {EXTRAPOLATION_LIMIT:g}× the family's largest observed batch ({largest})"
            )
    accum = max(grad_accum or 1, 1)
    gpus = max(gpu_count, 1.0)
    global_now = current_batch * accum * gpus
    if grad_noise_scale and grad_noise_scale > 0:
        if global_now >= grad_noise_scale:
            return keep(
                f"the global batch {global_now:,.0f} is already at or above the critical batch (gradient-noise "
                f"scale {grad_noise_scale:,.0f}; McCandlish et al. 2018): a larger batch would spend more "
                "samples for the same progress",
                mem,
            )
        cap = int(grad_noise_scale / (accum * gpus))
        if cap < bound:
            bound = cap
            notes.append(f"capped at the critical batch (B_noise {grad_noise_scale:,.0f} → {cap} per GPU)")
    else:
        cap = int(GLOBAL_CHANGE_LIMIT * current_batch)
        if cap < bound:
            bound = cap
            notes.append(f"at most {GLOBAL_CHANGE_LIMIT:g}× the global batch per step of advice")
    if bound <= current_batch:
        return keep(f"no larger batch is allowed: {'; '.join(notes)}", mem)
    # candidates: multiples of 8 above the current batch, and the bound itself
    first = (current_batch // BATCH_MULTIPLE + 1) * BATCH_MULTIPLE
    # (walked lazily, in ascending order: a bound of tens of thousands made the set of them most of a plan's
    # cost, built for every plan before the checks below turned most of them away)
    cands = itertools.chain(range(first, bound + 1, BATCH_MULTIPLE), (bound,))
    curve = _curve(_frozen(tput_points))
    if curve is not None:
        base = curve.predict(float(current_batch))
        method = "fit" if curve.fit is not None else "measured"

        def gain_at(b: int) -> float | None:
            return curve.predict(float(b)) / base - 1.0
    elif util_pct is not None and util_pct > 0:
        method = "headroom"

        def gain_at(b: int) -> float | None:
            return headroom_gain(current_batch, b, util_pct)
    else:
        return keep(
            "no throughput measured at two batch sizes and no utilization: no gain can be claimed", mem
        )
    top = gain_at(bound) or 0.0
    if 0 < top < MIN_GAIN:
        return keep(
            f"the predicted gain up to batch {bound} is {top * 100:.1f} % ({method}), under {MIN_GAIN * 100:g} %: "
            "a larger batch offers little",
            mem,
            method,
        )
    if top <= 0:
        return keep(
            f"no throughput gain is predicted up to batch {bound} ({method}): "
            + ("the last measured step gained nothing" if curve is not None else "no headroom"),
            mem,
            method,
        )
    knee = next(b for b in cands if (gain_at(b) or 0.0) >= GAIN_KNEE * top)
    gain = gain_at(knee) or 0.0
    if knee < bound:
        notes.append(f"batch {knee} already gives {gain / top * 100:.0f} % of the gain at {bound}")
    reasons = []
    level = 3
    if mem.model == "analytic":
        level = min(level, 1)
        reasons.append("memory from the analytic model, not measured at two batch sizes")
    elif mem.flat:
        level = min(level, 2)
        reasons.append("memory flat across batches (the allocator's cache hides the per-sample cost)")
    elif len(mem.batches) < 3:
        level = min(level, 2)
        reasons.append(f"memory fitted on {len(mem.batches)} batch sizes (R² {mem.r2:.2f})")
    else:
        reasons.append(f"memory fitted on {len(mem.batches)} batch sizes (R² {mem.r2:.2f})")
    if method == "headroom":
        level = min(level, 1)
        reasons.append(f"gain estimated from {util_pct:.0f} % utilization, not measured")
    else:
        assert curve is not None
        if knee > curve.top:
            level = min(level, 2)
            reasons.append(
                f"throughput extrapolated past the largest measured batch {curve.top:g}, capped by the largest "
                f"measured gain per doubling ({curve.max_marginal * 100:+.0f} %)"
            )
        elif len(curve.measured) < 3:
            level = min(level, 2)
            reasons.append("throughput measured at 2 batch sizes")
        else:
            reasons.append(
                f"throughput measured at {len(curve.measured)} batch sizes, inside the measured range"
            )
    if mem.model == "fitted" and not mem.flat and knee > max(mem.batches):
        reasons.append(f"memory extrapolated to {knee} from at most {max(mem.batches):g}")
    confidence = {3: "high", 2: "medium", 1: "low"}[level]
    return BatchPlan(
        current_batch_size=current_batch,
        recommended_batch_size=knee,
        largest_observed_batch_size=largest,
        predicted_peak_mem_mib=mem.predict(knee),
        card_mem_mib=card_mem_mib,
        memory=mem,
        throughput_method=method,
        throughput_gain=gain,
        lr_rule=lr_rule(optimizer, current_batch, knee, grad_accum),
        confidence=confidence,
        confidence_reasons=tuple(reasons),
        reason="; ".join(notes),
        knee_batch_size=knee,
        bound_batch_size=bound,
    )


class Points(tuple):  # type: ignore[type-arg]
    """A run family's (batch, value) points, hashed once: the cached fits below key on them for each of the
    family's jobs, and hashing a tuple of a few hundred pairs each time was most of a plan's cost (a
    1,232-GPU month: 5,753 plans)."""

    _hash: int

    def __new__(cls, items: Sequence[tuple[float, float]]) -> Points:
        self = super().__new__(cls, items)
        self._hash = tuple.__hash__(self)
        return self

    def __hash__(self) -> int:
        return self._hash


def points_of(items: Sequence[tuple[float, float]]) -> Points:
    """The one Points for these pairs, the same object on every call (within the cache's size).

    The cached fits below keep the Points they were first called with. A later, equal Points (the same
    family in the next page's recommendations) found its entry by hash and was then compared with it pair
    by pair, for each of the family's jobs: on a 1,232-GPU month, 5,753 plans took 0.05 s on the first
    run and 0.33-0.38 s on every later one. The same object is matched by identity, without a comparison."""
    return _interned(tuple(items))


@functools.lru_cache(maxsize=1024)
def _interned(items: tuple[tuple[float, float], ...]) -> Points:
    return Points(items)


def _frozen(points: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    return points if isinstance(points, tuple) else tuple(points)


@functools.lru_cache(maxsize=1024)
def _memory_fit(
    points: tuple[tuple[float, float], ...],
    params: float | None,
    precision: str | None,
    optimizer: str | None,
    seq_len: float | None,
    hidden_size: float | None,
    n_layers: float | None,
) -> MemoryModel | NoModel:
    """fit_memory, once per run family (its jobs share the points)."""
    return fit_memory(
        points,
        params=params,
        precision=precision,
        optimizer=optimizer,
        seq_len=seq_len,
        hidden_size=hidden_size,
        n_layers=n_layers,
    )


@functools.lru_cache(maxsize=1024)
def _curve(points: tuple[tuple[float, float], ...]) -> ThroughputCurve | None:
    return throughput_curve(points)


BATCH_COLUMNS = {
    "job_id": "",
    "name": "",
    "user_name": "",
    "team": "",
    "state": "the job's state (failed, cancelled and OOM runs get no batch advice)",
    "model": "training_runs.model",
    "family": "model | GPU model | precision | seq len | GPU count: the runs whose points are shared",
    "gpu_model": "",
    "gpu_count": "",
    "current_batch_size": "per-GPU micro-batch",
    "recommended_batch_size": "the knee: smallest candidate with 90 % of the gain at the largest allowed batch",
    "knee_batch_size": "the same knee (kept for readers of the older field)",
    "bound_batch_size": "the largest batch memory, the 2× extrapolation bound and the global-batch rule allow",
    "largest_observed_batch_size": "largest per-GPU batch the family ran at (OOM runs excluded)",
    "predicted_peak_mem_mib": "the memory model at the recommended batch (flat: the observed peak)",
    "card_mem_mib": "",
    "fixed_mib": "",
    "per_sample_mib": "",
    "memory_model": "fitted | analytic",
    "fit_quality": "good | flat | analytic",
    "memory_r2": "R² of the memory line (fitted), else NULL",
    "throughput_method": "measured | fit | headroom",
    "predicted_throughput_gain_pct": "at the recommended batch",
    "usd_per_mtok_now": "$ per 1M tokens at the job's rate (NULL without tokens/s)",
    "usd_per_mtok_after": "",
    "usd_per_epoch_now": "cost / epochs, when the whole job lies in the view",
    "usd_per_epoch_after": "",
    "cost_usd": "job cost in the view",
    "saving_usd": "cost × gain / (1 + gain)",
    "lr_rule": "a starting point, with its warm-up note",
    "confidence": "high | medium | low",
    "confidence_reasons": "why, in words (; separated)",
    "reason": "the memory model and the bounds applied, in words",
}


# the job fields batch_recommendations reads of each job
PLAN_FIELDS = (
    "job_id",
    "name",
    "user_name",
    "team",
    "state",
    "model",
    "family",
    "gpu_model",
    "gpu_count",
    "card_mem_mib",
    "batch_size",
    "params",
    "precision",
    "optimizer",
    "util_pct",
    "grad_accum",
    "grad_noise_scale",
    "seq_len",
    "hidden_size",
    "n_layers",
    "cost_usd",
    "tokens_per_s",
    "gpu_hours",
    "span_start",
    "span_end",
    "start_ts",
    "end_ts",
    "epochs",
)


def batch_recommendations(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters | None = None,
    settings: Settings | None = None,
    as_of: dt.datetime | None = None,
    view: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """One row per training/fine-tune job in the view that ended normally (or still runs) for which a larger
    batch is advised (BATCH_COLUMNS).

    ``view``: this view's analytics.job_signals.view_jobs_sql rows, when the caller has them.

    Run families (memory and throughput points) use every run in the ledger, inside the view or not: a
    measurement of how a model behaves on a card does not expire; dollars use the job's cost in the view.
    OOM runs give no point (their peak is the card) but bound the family: no batch at or above theirs.
    """
    filters = filters or Filters()
    settings = settings or Settings()
    as_of = as_of or horizon(con)
    runs = ledger_frame(  # every run of the ledger: once per sharing block (the items scan: once, not weekly)
        con,
        """
        WITH peak AS (SELECT job_id, max(mem_used_max_mib) AS peak, max(mem_total_mib) AS total,
                             sum(util_s) / nullif(sum(util_cov_s), 0) * 100 AS util
                      FROM samples_day WHERE job_id IS NOT NULL GROUP BY job_id)
        SELECT r.job_id, j.kind, j.state, j.gpu_model, j.gpu_count, r.model, r.params, r.precision, r.optimizer,
               r.batch_size, r.grad_accum, r.seq_len, r.hidden_size, r.n_layers, r.grad_noise_scale, r.epochs,
               coalesce(r.peak_mem_mib, peak.peak) AS peak_mem_mib,
               coalesce(peak.total, c.memory_mib) AS card_mem_mib, peak.util AS util_pct,
               coalesce(r.tokens_per_s, r.samples_per_s) / nullif(j.gpu_count, 0) AS tput_per_gpu,
               r.tokens_per_s
        FROM training_runs r JOIN jobs j USING (job_id)
        LEFT JOIN peak USING (job_id) LEFT JOIN gpu_catalog c ON c.model = j.gpu_model
        WHERE r.batch_size > 0
        """,
    )
    if view is None:
        vj, params = view_jobs_sql(filters, as_of)
        view = frame(con, vj, params)
    if runs.is_empty() or view.is_empty():
        return pl.DataFrame(schema=_schema())
    runs = runs.with_columns(
        pl.concat_str(
            [
                pl.coalesce(pl.col("model"), pl.col("job_id")),
                pl.col("gpu_model"),
                pl.col("precision"),
                pl.col("seq_len").cast(pl.Utf8),
                pl.col("gpu_count").cast(pl.Utf8),
            ],
            separator="|",
            ignore_nulls=True,
        ).alias("family"),
        (pl.col("state") == OOM).fill_null(False).alias("oom"),
    )
    ok = runs.filter(~pl.col("oom"))
    fam = ok.group_by("family").agg(
        pl.struct("batch_size", "peak_mem_mib").alias("mem"),
        pl.struct("batch_size", "tput_per_gpu").alias("tput"),
        pl.col("batch_size").max().alias("largest"),
    )
    points = {
        r["family"]: (
            points_of(
                sorted(
                    (p["batch_size"], p["peak_mem_mib"]) for p in r["mem"] if p["peak_mem_mib"] is not None
                )
            ),
            points_of(
                sorted(
                    (p["batch_size"], p["tput_per_gpu"]) for p in r["tput"] if p["tput_per_gpu"] is not None
                )
            ),
            r["largest"],
        )
        for r in fam.to_dicts()
    }
    oom_at = dict(runs.filter(pl.col("oom")).group_by("family").agg(pl.col("batch_size").min()).iter_rows())
    jobs = view.join(runs.drop("gpu_model", "gpu_count", "kind", "state"), on="job_id", how="inner").filter(
        pl.col("kind").is_in(TRAINING_KINDS) & ~pl.col("state").is_in(list(FAILED_STATES)).fill_null(False)
    )
    rows: list[dict[str, object]] = []
    # only the jobs a plan can be made for, and only the fields it reads, become dicts (per cell: 5.8 k
    # training jobs of 60 columns on a 50 M-sample ledger)
    jobs = jobs.filter(pl.col("family").is_in(list(points)) & pl.col("card_mem_mib").is_not_null()).select(
        PLAN_FIELDS
    )
    for job in jobs.to_dicts():
        mem_pts, tput_pts, largest = points[job["family"]]
        plan = plan_batch(
            current_batch=int(job["batch_size"]),
            card_mem_mib=float(job["card_mem_mib"]),
            safety=settings.batch_safety_fraction,
            mem_points=mem_pts,
            tput_points=tput_pts,
            params=job["params"],
            precision=job["precision"],
            optimizer=job["optimizer"],
            util_pct=job["util_pct"],
            grad_accum=job["grad_accum"],
            grad_noise_scale=job["grad_noise_scale"],
            gpu_count=float(job["gpu_count"] or 1),
            seq_len=job["seq_len"],
            hidden_size=job["hidden_size"],
            n_layers=job["n_layers"],
            observed_batches=(largest,),
        )
        if plan is None or not plan.advised:
            continue
        oom = oom_at.get(job["family"])
        if oom is not None and plan.recommended_batch_size >= oom:
            continue  # a run of the family ran out of memory at this batch or below
        assert plan.memory is not None and plan.throughput_gain is not None
        gain = plan.throughput_gain
        cost = job["cost_usd"]
        factor = 1.0 / (1.0 + gain)
        mtok = None
        if job["tokens_per_s"] and cost is not None and job["gpu_hours"]:
            rate = cost / job["gpu_hours"]
            mtok = rate * job["gpu_count"] / (job["tokens_per_s"] * 3600.0) * 1e6
        whole = (
            job["span_start"] == job["start_ts"]
            and job["end_ts"] is not None
            and job["span_end"] == job["end_ts"]
        )
        epoch = cost / job["epochs"] if whole and cost is not None and job["epochs"] else None
        rows.append(
            {
                "job_id": job["job_id"],
                "name": job["name"],
                "user_name": job["user_name"],
                "team": job["team"],
                "state": job["state"],
                "model": job["model"],
                "family": job["family"],
                "gpu_model": job["gpu_model"],
                "gpu_count": job["gpu_count"],
                "current_batch_size": plan.current_batch_size,
                "recommended_batch_size": plan.recommended_batch_size,
                "knee_batch_size": plan.knee_batch_size,
                "bound_batch_size": plan.bound_batch_size,
                "largest_observed_batch_size": plan.largest_observed_batch_size,
                "predicted_peak_mem_mib": plan.predicted_peak_mem_mib,
                "card_mem_mib": plan.card_mem_mib,
                "fixed_mib": plan.memory.fixed_mib,
                "per_sample_mib": plan.memory.per_sample_mib,
                "memory_model": plan.memory.model,
                "fit_quality": plan.memory.quality,
                "memory_r2": plan.memory.r2,
                "throughput_method": plan.throughput_method,
                "predicted_throughput_gain_pct": gain * 100.0,
                "usd_per_mtok_now": mtok,
                "usd_per_mtok_after": mtok * factor if mtok is not None else None,
                "usd_per_epoch_now": epoch,
                "usd_per_epoch_after": epoch * factor if epoch is not None else None,
                "cost_usd": cost,
                "saving_usd": cost * gain / (1.0 + gain) if cost is not None else 0.0,
                "lr_rule": plan.lr_rule,
                "confidence": plan.confidence,
                "confidence_reasons": "; ".join(plan.confidence_reasons),
                "reason": plan.reason,
            }
        )
    return pl.DataFrame(rows, schema=_schema())


def _schema() -> dict[str, pl.DataType]:
    text = (
        "job_id",
        "name",
        "user_name",
        "team",
        "state",
        "model",
        "family",
        "gpu_model",
        "memory_model",
        "fit_quality",
        "throughput_method",
        "lr_rule",
        "confidence",
        "confidence_reasons",
        "reason",
    )
    ints = (
        "current_batch_size",
        "recommended_batch_size",
        "knee_batch_size",
        "bound_batch_size",
        "largest_observed_batch_size",
    )
    return {c: (pl.Utf8() if c in text else pl.Int64() if c in ints else pl.Float64()) for c in BATCH_COLUMNS}
