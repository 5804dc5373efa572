"""Batch-size recommender: the largest per-GPU batch that fits the card, its throughput, and its dollars.

The model (docs/recommendations.md, "larger_batch"):

- **memory**: peak memory per GPU ≈ fixed + per_sample × batch. With observed (batch, peak memory) points
  at two or more batch sizes of one run family (same model, GPU model, precision, sequence length and GPU
  count) the two terms are a least-squares line. With one point the fixed part is estimated from the
  parameter count, precision and optimizer (weights + gradients + optimizer state, e.g. 16 bytes/param for
  bf16/fp16 mixed precision with Adam/AdamW), and the rest of the peak is per-sample memory; without a
  parameter count (or when that estimate does not fit under the observed peak: LoRA, 4-bit, sharding)
  memory is assumed proportional to the batch (fixed = 0), the most cautious assumption;
- **recommendation**: the ceiling is the largest batch whose predicted memory is at most ``safety``
  (settings ``batch_safety_fraction``, 0.9) of the card, rounded DOWN to a multiple of 8, capped at the
  critical batch when the run logs a gradient-noise scale (B_noise, a global batch in samples, split over
  GPUs and accumulation steps); that ceiling is the recommendation. The plan also names the knee: the
  smallest multiple of 8 that reaches ``GAIN_KNEE`` (90 %) of the throughput gain predicted at the
  recommendation (past it a larger batch buys little speed for a larger change to the optimization), as a
  gentler alternative. A batch predicted not to fit is never recommended;
- **throughput** (per GPU, tokens/s or samples/s): a saturating curve T(b) = T_max · b / (b + k) fitted by
  least squares on 1/T = 1/T_max + (k/T_max)·(1/b) when two or more batch sizes were measured with the
  same GPU count; otherwise a cautious estimate from utilization headroom: gain = ½ · (min(new/old,
  100/util) − 1);
- **dollars**: the same work at a higher throughput takes 1/(1+gain) of the GPU time, so $ per 1M tokens
  and $ per epoch fall by that factor and the saving on a job is cost × gain / (1 + gain).
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import polars as pl

from analytics.filters import Filters, horizon
from analytics.job_signals import view_jobs_sql
from analytics.query import frame
from gpuledger.ledger.settings import Settings

MIB = 1024.0 * 1024.0
BATCH_MULTIPLE = 8
# Past the knee of the throughput curve a larger batch buys little speed and costs optimization quality
# (a larger learning-rate change, fewer steps): the plan names the smallest batch that gets this share of
# the gain predicted at the recommended (largest fitting) batch, as a gentler alternative.
GAIN_KNEE = 0.9
ADAM_LIKE = ("adam", "adamw", "adamw_torch", "adamw_hf", "fused_adam", "lamb", "adafactor", "lion")
SGD_LIKE = ("sgd", "momentum", "nesterov")
TRAINING_KINDS = ("training", "fine-tune")


def bytes_per_param(precision: str | None, optimizer: str | None) -> tuple[float, str]:
    """Bytes of weights + gradients + optimizer state per parameter, and the breakdown in words.

    Mixed precision (bf16/fp16) with Adam-type: 2 (weights) + 2 (grads) + 4 (fp32 master) + 8 (two moments)
    = 16. fp32 with Adam-type: 4 + 4 + 8 = 16. SGD with momentum: 2+2+4+4 = 12 mixed, 4+4+4 = 12 fp32.
    Unknown optimizer: Adam-type (the common case).
    """
    prec = (precision or "").lower()
    opt = (optimizer or "").lower()
    mixed = prec in ("bf16", "fp16", "amp", "mixed", "fp8")
    if opt.startswith(SGD_LIKE):
        return 12.0, (
            "bf16/fp16 mixed precision + SGD momentum: 2+2+4+4" if mixed else "fp32 + SGD momentum: 4+4+4"
        )
    label = "Adam-type" if opt.startswith(ADAM_LIKE) else "Adam-type assumed (optimizer not logged)"
    return 16.0, (
        f"{prec or 'mixed'} mixed precision + {label}: 2+2+4+8"
        if mixed or not prec
        else f"fp32 + {label}: 4+4+8"
    )


@dataclass(frozen=True)
class MemoryFit:
    fixed_mib: float
    per_sample_mib: float
    method: str  # fit | params | proportional
    points: int
    note: str

    def predict(self, batch: float) -> float:
        return self.fixed_mib + self.per_sample_mib * batch


def fit_memory(
    points: Sequence[tuple[float, float]],
    *,
    params: float | None = None,
    precision: str | None = None,
    optimizer: str | None = None,
) -> MemoryFit | None:
    """Fit peak memory (MiB) against batch size from (batch, peak_mem_mib) points; None without a point."""
    pts = [(float(b), float(m)) for b, m in points if b and b > 0 and m is not None and m > 0]
    if not pts:
        return None
    xs = sorted({b for b, _ in pts})
    if len(xs) >= 2:
        n = len(pts)
        mx = sum(b for b, _ in pts) / n
        my = sum(m for _, m in pts) / n
        sxx = sum((b - mx) ** 2 for b, _ in pts)
        slope = sum((b - mx) * (m - my) for b, m in pts) / sxx
        intercept = my - slope * mx
        if slope > 0:
            fixed = max(intercept, 0.0)
            # A negative intercept is clamped to 0; the slope is then refitted through the origin so the
            # line still passes under no observed point's memory (cautious).
            if intercept < 0:
                slope = max(m / b for b, m in pts)
            return MemoryFit(
                fixed,
                slope,
                "fit",
                n,
                f"least-squares fit over {n} runs at batch sizes {', '.join(f'{x:g}' for x in xs)}",
            )
    # One batch size (or a non-increasing fit): anchor on the largest observed peak at the largest batch.
    b, m = max(pts, key=lambda p: (p[0], p[1]))
    if params:
        per_param, words = bytes_per_param(precision, optimizer)
        fixed = params * per_param / MIB
        if fixed < m:
            return MemoryFit(
                fixed,
                (m - fixed) / b,
                "params",
                1,
                f"one point (batch {b:g}, {m:,.0f} MiB); fixed part {params / 1e9:.3g} B params × {per_param:g} bytes ({words}) = {fixed:,.0f} MiB",
            )
    return MemoryFit(
        0.0,
        m / b,
        "proportional",
        1,
        f"one point (batch {b:g}, {m:,.0f} MiB); memory assumed proportional to batch (no usable parameter count)",
    )


def largest_batch(fit: MemoryFit, card_mem_mib: float, safety: float, multiple: int = BATCH_MULTIPLE) -> int:
    """Largest multiple of ``multiple`` whose predicted memory ≤ safety × card; 0 when none fits."""
    budget = safety * card_mem_mib - fit.fixed_mib
    if budget <= 0 or fit.per_sample_mib <= 0:
        return 0
    batch = math.floor(budget / fit.per_sample_mib / multiple) * multiple
    while batch > 0 and fit.predict(batch) > safety * card_mem_mib:  # float edge: never over the line
        batch -= multiple
    return max(batch, 0)


@dataclass(frozen=True)
class ThroughputFit:
    t_max: float
    k: float
    points: int

    def predict(self, batch: float) -> float:
        return self.t_max * batch / (batch + self.k)


def fit_throughput(points: Sequence[tuple[float, float]]) -> ThroughputFit | None:
    """Saturating T(b) = T_max·b/(b+k) from (batch, throughput) points at ≥ 2 batch sizes; None otherwise.

    None also when the points show no saturation (the fitted 1/T_max ≤ 0, i.e. throughput still grows
    linearly): extrapolating a straight line would promise more than the data support.
    """
    pts = [(float(b), float(t)) for b, t in points if b and b > 0 and t and t > 0]
    if len({b for b, _ in pts}) < 2:
        return None
    us = [1.0 / b for b, _ in pts]
    vs = [1.0 / t for _, t in pts]
    n = len(pts)
    mu, mv = sum(us) / n, sum(vs) / n
    suu = sum((u - mu) ** 2 for u in us)
    beta = sum((u - mu) * (v - mv) for u, v in zip(us, vs, strict=True)) / suu
    alpha = mv - beta * mu
    if alpha <= 0 or beta < 0:
        return None
    return ThroughputFit(1.0 / alpha, beta / alpha, n)


def headroom_gain(current: int, new: int, util_pct: float | None) -> float | None:
    """Cautious throughput gain (fraction) without a curve: half the headroom, capped by the batch ratio."""
    if util_pct is None or util_pct <= 0:
        return None
    return max(0.0, 0.5 * (min(new / current, 100.0 / util_pct) - 1.0))


def lr_rule(optimizer: str | None, current: int, new: int, grad_accum: int | None) -> str:
    """How to keep optimization equivalent when the per-GPU micro-batch grows from ``current`` to ``new``."""
    ratio = new / current
    if grad_accum and grad_accum > 1 and (grad_accum * current) % new == 0:
        return (
            f"keep the global batch: micro-batch {current} → {new} and gradient accumulation "
            f"{grad_accum} → {grad_accum * current // new}; learning rate unchanged"
        )
    opt = (optimizer or "").lower()
    if opt.startswith(SGD_LIKE):
        return (
            f"global batch × {ratio:g}: scale the learning rate linearly (× {ratio:g}) with a warm-up "
            "of ~5 % of steps, or keep the global batch with gradient accumulation"
        )
    if opt.startswith(ADAM_LIKE):
        return (
            f"global batch × {ratio:g}: scale the learning rate by √{ratio:g} = × {math.sqrt(ratio):.2f} "
            "(square-root rule for Adam-type optimizers) with a warm-up of ~5 % of steps"
        )
    return (
        f"global batch × {ratio:g}: keep it with gradient accumulation, or rescale the learning rate "
        f"(× {math.sqrt(ratio):.2f} for Adam-type, × {ratio:g} for SGD) with a warm-up"
    )


@dataclass(frozen=True)
class BatchPlan:
    current_batch_size: int
    recommended_batch_size: int
    predicted_peak_mem_mib: float
    card_mem_mib: float
    memory: MemoryFit
    throughput_method: str | None  # fit | headroom | None
    throughput_gain: float | None  # fraction; None when it cannot be told
    lr_rule: str
    confidence: str
    reason: str
    knee_batch_size: int | None = None  # smallest batch with GAIN_KNEE of the gain (a gentler alternative)


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
) -> BatchPlan | None:
    """The batch plan for one job; None when no larger batch is predicted to fit (or no data)."""
    fit = _memory_fit(tuple(mem_points), params, precision, optimizer)
    if fit is None or current_batch <= 0 or card_mem_mib <= 0:
        return None
    best = largest_batch(fit, card_mem_mib, safety)
    capped = ""
    if grad_noise_scale and grad_noise_scale > 0:
        per_gpu = grad_noise_scale / (max(gpu_count, 1.0) * max(grad_accum or 1, 1))
        cap = int(per_gpu // BATCH_MULTIPLE) * BATCH_MULTIPLE
        if cap < best:
            best, capped = (
                cap,
                f"; capped at the critical batch (B_noise {grad_noise_scale:,.0f} → {cap} per GPU)",
            )
    if best <= current_batch:
        return None
    tfit = _throughput_fit(tuple(tput_points))

    def gain_at(batch: int) -> float | None:
        if tfit is not None:
            return tfit.predict(batch) / tfit.predict(current_batch) - 1.0
        return headroom_gain(current_batch, batch, util_pct)

    method: str | None = "fit" if tfit is not None else "headroom"
    knee_batch: int | None = None
    top = gain_at(best)
    if top is None:
        method = None
    elif top > 0:
        first = (current_batch // BATCH_MULTIPLE + 1) * BATCH_MULTIPLE
        knee = next(
            (b for b in range(first, best, BATCH_MULTIPLE) if (gain_at(b) or 0.0) >= GAIN_KNEE * top), best
        )
        if knee < best:
            knee_batch = knee
            capped += f"; batch {knee} already gives {(gain_at(knee) or 0.0) / top * 100:.0f} % of the gain at {best}"
    gain = gain_at(best)
    if fit.method == "fit" and method == "fit" and tfit is not None and tfit.points >= 3:
        confidence, why = "high", "memory and throughput both fitted on measured runs"
    elif fit.method in ("fit", "params") and method is not None:
        confidence = "medium"
        why = f"memory from {'a fit' if fit.method == 'fit' else 'one run + parameter count'}, throughput from {'a 2-point fit' if method == 'fit' else 'utilization headroom'}"
    else:
        confidence = "low"
        why = (
            "memory assumed proportional to batch"
            if fit.method == "proportional"
            else "throughput gain unknown"
        )
    return BatchPlan(
        current_batch_size=current_batch,
        recommended_batch_size=best,
        predicted_peak_mem_mib=fit.predict(best),
        card_mem_mib=card_mem_mib,
        memory=fit,
        throughput_method=method,
        throughput_gain=gain,
        lr_rule=lr_rule(optimizer, current_batch, best, grad_accum),
        confidence=confidence,
        reason=f"{why}; {fit.note}{capped}",
        knee_batch_size=knee_batch,
    )


@functools.lru_cache(maxsize=1024)
def _memory_fit(
    points: tuple[tuple[float, float], ...],
    params: float | None,
    precision: str | None,
    optimizer: str | None,
) -> MemoryFit | None:
    """fit_memory, once per run family (its jobs share the points)."""
    return fit_memory(points, params=params, precision=precision, optimizer=optimizer)


@functools.lru_cache(maxsize=1024)
def _throughput_fit(points: tuple[tuple[float, float], ...]) -> ThroughputFit | None:
    return fit_throughput(points)


BATCH_COLUMNS = {
    "job_id": "",
    "name": "",
    "user_name": "",
    "team": "",
    "model": "training_runs.model",
    "gpu_model": "",
    "gpu_count": "",
    "current_batch_size": "per-GPU micro-batch",
    "recommended_batch_size": "largest multiple of 8 predicted to fit under safety × card (≤ critical batch)",
    "knee_batch_size": "smallest multiple of 8 with 90 % of the recommended batch's gain; NULL when that is it",
    "predicted_peak_mem_mib": "fixed + per_sample × recommended",
    "card_mem_mib": "",
    "fixed_mib": "",
    "per_sample_mib": "",
    "memory_method": "fit | params | proportional",
    "throughput_method": "fit | headroom | NULL",
    "predicted_throughput_gain_pct": "NULL when it cannot be told",
    "usd_per_mtok_now": "$ per 1M tokens at the job's rate (NULL without tokens/s)",
    "usd_per_mtok_after": "",
    "usd_per_epoch_now": "cost / epochs, when the whole job lies in the view",
    "usd_per_epoch_after": "",
    "cost_usd": "job cost in the view",
    "saving_usd": "cost × gain / (1 + gain) (0 when the gain is unknown)",
    "lr_rule": "",
    "confidence": "high | medium | low",
    "reason": "",
}


def batch_recommendations(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters | None = None,
    settings: Settings | None = None,
    as_of: dt.datetime | None = None,
    view: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """One row per training/fine-tune job in the view for which a larger batch is predicted to fit.

    ``view``: this view's analytics.job_signals.view_jobs_sql rows, when the caller has them.

    Run families (memory and throughput points) use every run in the ledger, inside the view or not: a
    measurement of how a model behaves on a card does not expire; dollars use the job's cost in the view.
    """
    filters = filters or Filters()
    settings = settings or Settings()
    as_of = as_of or horizon(con)
    runs = frame(
        con,
        """
        WITH peak AS (SELECT job_id, max(mem_used_max_mib) AS peak, max(mem_total_mib) AS total,
                             sum(util_s) / nullif(sum(util_cov_s), 0) * 100 AS util
                      FROM samples_day WHERE job_id IS NOT NULL GROUP BY job_id)
        SELECT r.job_id, j.kind, j.gpu_model, j.gpu_count, r.model, r.params, r.precision, r.optimizer,
               r.batch_size, r.grad_accum, r.seq_len, r.grad_noise_scale, r.epochs,
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
    rows: list[dict[str, object]] = []
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
        ).alias("family")
    )
    fam = runs.group_by("family").agg(
        pl.struct("batch_size", "peak_mem_mib").alias("mem"),
        pl.struct("batch_size", "tput_per_gpu").alias("tput"),
    )
    points = {
        r["family"]: (
            tuple((p["batch_size"], p["peak_mem_mib"]) for p in r["mem"] if p["peak_mem_mib"] is not None),
            tuple((p["batch_size"], p["tput_per_gpu"]) for p in r["tput"] if p["tput_per_gpu"] is not None),
        )
        for r in fam.to_dicts()
    }
    jobs = view.join(runs.drop("gpu_model", "gpu_count", "kind"), on="job_id", how="inner").filter(
        pl.col("kind").is_in(TRAINING_KINDS)
    )
    for job in jobs.to_dicts():
        mem_pts, tput_pts = points[job["family"]]
        card = job["card_mem_mib"]
        if card is None:
            continue
        plan = plan_batch(
            current_batch=int(job["batch_size"]),
            card_mem_mib=float(card),
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
        )
        if plan is None:
            continue
        gain = plan.throughput_gain
        cost = job["cost_usd"]
        factor = 1.0 / (1.0 + gain) if gain is not None else None
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
                "model": job["model"],
                "gpu_model": job["gpu_model"],
                "gpu_count": job["gpu_count"],
                "current_batch_size": plan.current_batch_size,
                "recommended_batch_size": plan.recommended_batch_size,
                "knee_batch_size": plan.knee_batch_size,
                "predicted_peak_mem_mib": plan.predicted_peak_mem_mib,
                "card_mem_mib": plan.card_mem_mib,
                "fixed_mib": plan.memory.fixed_mib,
                "per_sample_mib": plan.memory.per_sample_mib,
                "memory_method": plan.memory.method,
                "throughput_method": plan.throughput_method,
                "predicted_throughput_gain_pct": gain * 100.0 if gain is not None else None,
                "usd_per_mtok_now": mtok,
                "usd_per_mtok_after": mtok * factor if mtok is not None and factor is not None else None,
                "usd_per_epoch_now": epoch,
                "usd_per_epoch_after": epoch * factor if epoch is not None and factor is not None else None,
                "cost_usd": cost,
                "saving_usd": cost * gain / (1.0 + gain) if cost is not None and gain else 0.0,
                "lr_rule": plan.lr_rule,
                "confidence": plan.confidence,
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
        "model",
        "gpu_model",
        "memory_method",
        "throughput_method",
        "lr_rule",
        "confidence",
        "reason",
    )
    ints = ("current_batch_size", "recommended_batch_size", "knee_batch_size")
    return {c: (pl.Utf8() if c in text else pl.Int64() if c in ints else pl.Float64()) for c in BATCH_COLUMNS}
