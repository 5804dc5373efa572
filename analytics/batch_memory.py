"""Peak GPU memory of a training run as a function of its per-GPU batch, and the largest batch that fits.

One of two models (docs/recommendations.md, "Batch-size plan"; analytics/batch_size.py plans with it):

- ``fitted``: least squares peak = fixed + per_sample × batch over a run family's measured (batch, peak)
  points, only with at least two distinct batch sizes and a good fit (R² ≥ ``MIN_R2``); the analytic
  per-sample floor is a sanity bound. **Flat** points (all peaks within ``FLAT_SPREAD`` of each other: the
  caching allocator holds the memory) say memory does not limit the batch;
- ``analytic`` (Korthikanti et al. 2022): weights + gradients + optimizer states (bytes per parameter from
  precision and optimizer) + the CUDA context fixed, plus activations per sample: from one measured run, what
  the peak leaves above the fixed part; else s·h·L·34 bytes; never under 2·s·h·L bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MIB = 1024.0 * 1024.0
BATCH_MULTIPLE = 8
CUDA_CONTEXT_MIB = 1024.0  # CUDA context + cuDNN/cuBLAS workspaces: 0.5–2 GiB measured; the middle
MIN_R2 = 0.9  # a memory line must explain at least this share of the variance
FLAT_SPREAD = 0.05  # peaks within 5 % of each other across batch sizes: memory does not grow with batch
ACT_BYTES_SELECTIVE = 34.0  # Korthikanti et al. 2022: s·h·L·34 bytes per sample (16-bit, selective recompute)
ACT_BYTES_FULL_RECOMPUTE = 2.0  # ... s·h·L·2 with full recomputation (each layer's input): the floor
ADAM_LIKE = ("adam", "adamw", "adamw_torch", "adamw_hf", "fused_adam", "lamb", "adafactor", "lion")
SGD_LIKE = ("sgd", "momentum", "nesterov")


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


def _list(xs: Sequence[float]) -> str:
    return ", ".join(f"{x:g}" for x in xs)
