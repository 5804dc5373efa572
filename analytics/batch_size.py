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
from dataclasses import dataclass, field

import duckdb
import polars as pl

from analytics.filters import Filters, horizon
from analytics.job_signals import view_jobs_sql
from analytics.query import frame
from gpuledger.ledger.job_states import FAILED_STATES, OOM
from gpuledger.ledger.settings import Settings
from gpuledger.ledger.thresholds import DEFAULT

MIB = 1024.0 * 1024.0
BATCH_MULTIPLE = 8
GAIN_KNEE = 0.9  # the knee: the smallest batch with this share of the gain at the largest allowed batch
CUDA_CONTEXT_MIB = 1024.0  # CUDA context + cuDNN/cuBLAS workspaces: 0.5–2 GiB measured; the middle
MIN_R2 = 0.9  # a memory line must explain at least this share of the variance
FLAT_SPREAD = 0.05  # peaks within 5 % of each other across batch sizes: memory does not grow with batch
EXTRAPOLATION_LIMIT = 2.0  # × the family's largest observed batch, on a fitted memory model
GLOBAL_CHANGE_LIMIT = 4.0  # × the global batch per piece of advice, without a gradient-noise scale
SATURATED_PCT = DEFAULT.batch_saturated_util_pct  # at or above: a larger batch offers little
MIN_GAIN = 0.05  # a predicted gain under 5 % is within the noise of a throughput measurement: not advised
ACT_BYTES_SELECTIVE = 34.0  # Korthikanti et al. 2022: s·h·L·34 bytes per sample (16-bit, selective recompute)
ACT_BYTES_FULL_RECOMPUTE = 2.0  # ... s·h·L·2 with full recomputation (each layer's input): the floor
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


def activation_floor_mib(seq_len: float | None, hidden: float | None, layers: float | None) -> float | None:
    """The least activation memory one sample can need (MiB): 2·s·h·L bytes, full recomputation
    (Korthikanti et al. 2022, 16-bit activations); None without the three dimensions."""
    if not (seq_len and hidden and layers):
        return None
    return ACT_BYTES_FULL_RECOMPUTE * seq_len * hidden * layers / MIB


@dataclass(frozen=True)
class MemoryModel:
    """Peak memory per GPU ≈ fixed_mib + per_sample_mib × batch (``flat``: the observed peak, whatever the
    batch). ``model``: fitted | analytic; ``quality``: good | flat | analytic; ``r2``: the line's R² (fitted)."""

    model: str
    quality: str
    fixed_mib: float
    per_sample_mib: float
    points: int
    batches: tuple[float, ...]
    note: str
    r2: float | None = None

    @property
    def flat(self) -> bool:
        return self.quality == "flat"

    def predict(self, batch: float) -> float:
        return self.fixed_mib + self.per_sample_mib * batch


@dataclass(frozen=True)
class NoModel:
    """Why no memory model could be built (said in the plan instead of a guess)."""

    reason: str


def fit_memory(
    points: Sequence[tuple[float, float]],
    *,
    params: float | None = None,
    precision: str | None = None,
    optimizer: str | None = None,
    seq_len: float | None = None,
    hidden_size: float | None = None,
    n_layers: float | None = None,
) -> MemoryModel | NoModel:
    """The memory model of a run family from its (batch, peak_mem_mib) points and what the run logs."""
    pts = [(float(b), float(m)) for b, m in points if b and b > 0 and m is not None and m > 0]
    floor = activation_floor_mib(seq_len, hidden_size, n_layers)
    xs = tuple(sorted({b for b, _ in pts}))
    if len(xs) >= 2:
        ms = [m for _, m in pts]
        lo, hi = min(ms), max(ms)
        mean_m = sum(ms) / len(ms)
        if hi - lo <= FLAT_SPREAD * mean_m:
            return MemoryModel(
                "fitted",
                "flat",
                hi,
                0.0,
                len(pts),
                xs,
                f"memory is flat across batch sizes {_list(xs)} ({lo:,.0f}–{hi:,.0f} MiB, within "
                f"{FLAT_SPREAD * 100:.0f} %): the caching allocator holds it, so memory does not limit the "
                "batch here",
            )
        n = len(pts)
        mx = sum(b for b, _ in pts) / n
        sxx = sum((b - mx) ** 2 for b, _ in pts)
        slope = sum((b - mx) * (m - mean_m) for b, m in pts) / sxx
        intercept = mean_m - slope * mx
        sst = sum((m - mean_m) ** 2 for m in ms)
        sse = sum((m - (intercept + slope * b)) ** 2 for b, m in pts)
        r2 = 1.0 - sse / sst if sst > 0 else 1.0
        if slope <= 0 or r2 < MIN_R2:
            fallback = _analytic(pts, params, precision, optimizer, seq_len, hidden_size, n_layers, floor)
            why = (
                f"memory does not grow with batch over {n} runs (slope ≤ 0)"
                if slope <= 0
                else f"the memory line fits poorly (R² {r2:.2f} < {MIN_R2:g} over {n} runs)"
            )
            if isinstance(fallback, MemoryModel):
                return MemoryModel(
                    fallback.model,
                    fallback.quality,
                    fallback.fixed_mib,
                    fallback.per_sample_mib,
                    fallback.points,
                    fallback.batches,
                    f"{why}; {fallback.note}",
                    r2,
                )
            return NoModel(f"{why}, and the run does not log enough for the analytic model")
        fixed = intercept
        if intercept < 0:  # clamp at 0; the slope through the origin at the steepest point (cautious)
            fixed, slope = 0.0, max(m / b for b, m in pts)
        note = f"least-squares line over {n} runs at batch sizes {_list(xs)} (R² {r2:.3f})"
        if floor is not None and slope < floor:
            note += (
                f"; the slope {slope:,.0f} MiB/sample is under the analytic floor 2·s·h·L = {floor:,.0f} MiB "
                "(full recomputation), so the floor is used"
            )
            slope = floor
        return MemoryModel("fitted", "good", fixed, slope, n, xs, note, r2)
    return _analytic(pts, params, precision, optimizer, seq_len, hidden_size, n_layers, floor)


def _analytic(
    pts: list[tuple[float, float]],
    params: float | None,
    precision: str | None,
    optimizer: str | None,
    seq_len: float | None,
    hidden_size: float | None,
    n_layers: float | None,
    floor: float | None,
) -> MemoryModel | NoModel:
    """Korthikanti-style model: states + CUDA context fixed; per sample from the largest measured point
    (else 34·s·h·L bytes), never under the 2·s·h·L floor."""
    if not params:
        return NoModel(
            "one batch size measured and no parameter count: the fixed and per-sample memory cannot be told apart"
        )
    per_param, words = bytes_per_param(precision, optimizer)
    fixed = params * per_param / MIB + CUDA_CONTEXT_MIB
    xs = tuple(sorted({b for b, _ in pts}))
    head = (
        f"analytic: {params / 1e9:.3g} B params × {per_param:g} bytes ({words}) + {CUDA_CONTEXT_MIB:,.0f} MiB "
        f"CUDA context = {fixed:,.0f} MiB fixed"
    )
    if pts:
        b, m = max(pts, key=lambda p: (p[0], p[1]))
        if m <= fixed:
            return NoModel(
                f"the measured peak {m:,.0f} MiB at batch {b:g} is under the {fixed:,.0f} MiB the parameter "
                "count implies (LoRA, quantized or sharded states): the analytic model does not apply"
            )
        per_sample = (m - fixed) / b
        note = f"{head}; activations {per_sample:,.0f} MiB/sample from the run at batch {b:g} ({m:,.0f} MiB)"
    elif seq_len and hidden_size and n_layers:
        per_sample = ACT_BYTES_SELECTIVE * seq_len * hidden_size * n_layers / MIB
        note = f"{head}; activations 34·s·h·L = {per_sample:,.0f} MiB/sample (no peak measured)"
    else:
        return NoModel("no peak memory measured and no model dimensions logged")
    if floor is not None and per_sample < floor:
        note += f", raised to the full-recomputation floor 2·s·h·L = {floor:,.0f} MiB"
        per_sample = floor
    return MemoryModel("analytic", "analytic", fixed, per_sample, len(pts), xs, note)


def largest_batch(
    fit: MemoryModel, card_mem_mib: float, safety: float, multiple: int = BATCH_MULTIPLE
) -> int:
    """Largest multiple of ``multiple`` whose predicted memory ≤ safety × card; 0 when none fits
    (a flat model never limits: a very large number)."""
    if fit.flat:
        return 1 << 30 if fit.fixed_mib <= safety * card_mem_mib else 0
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
    linearly) or fall: such a line is not extrapolated.
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


@dataclass(frozen=True)
class ThroughputCurve:
    """Measured throughput per batch size (means), the saturating fit, and the marginal gains per doubling
    between consecutive measured batch sizes."""

    measured: dict[float, float]
    fit: ThroughputFit | None
    marginal: tuple[float, ...] = field(default=())

    @property
    def top(self) -> float:
        return max(self.measured)

    @property
    def max_marginal(self) -> float:
        return max(self.marginal, default=0.0)

    def predict(self, batch: float) -> float:
        if batch in self.measured:
            return self.measured[batch]
        top = self.top
        if batch < top:
            if self.fit is not None:
                return self.fit.predict(batch)
            lo = max((b for b in self.measured if b < batch), default=None)
            hi = min(b for b in self.measured if b > batch)
            if lo is None:
                return self.measured[hi] * batch / hi  # below the range: no better than proportional
            w = (batch - lo) / (hi - lo)
            return self.measured[lo] * (1 - w) + self.measured[hi] * w
        base = self.measured[top]
        if not self.marginal or self.marginal[-1] <= 0:
            return base  # the last measured step gained nothing: nothing beyond it is claimed
        cap = base * (1.0 + self.max_marginal) ** math.log2(batch / top)
        if self.fit is not None:
            return min(base * self.fit.predict(batch) / self.fit.predict(top), cap)
        return cap


def throughput_curve(points: Sequence[tuple[float, float]]) -> ThroughputCurve | None:
    """The curve from (batch, throughput) points at ≥ 2 batch sizes; None otherwise."""
    pts = [(float(b), float(t)) for b, t in points if b and b > 0 and t and t > 0]
    by: dict[float, list[float]] = {}
    for b, t in pts:
        by.setdefault(b, []).append(t)
    if len(by) < 2:
        return None
    measured = {b: sum(ts) / len(ts) for b, ts in sorted(by.items())}
    xs = sorted(measured)
    marginal = tuple(
        (measured[b2] / measured[b1]) ** (1.0 / math.log2(b2 / b1)) - 1.0 for b1, b2 in itertools.pairwise(xs)
    )
    return ThroughputCurve(measured, fit_throughput(pts), marginal)


def headroom_gain(current: int, new: int, util_pct: float | None) -> float | None:
    """Cautious throughput gain (fraction) without a curve: half the headroom, capped by the batch ratio."""
    if util_pct is None or util_pct <= 0:
        return None
    return max(0.0, 0.5 * (min(new / current, 100.0 / util_pct) - 1.0))


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


def _list(xs: Sequence[float]) -> str:
    return ", ".join(f"{x:g}" for x in xs)


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
    runs = frame(
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
