"""Throughput of a training run as a function of its per-GPU batch (docs/recommendations.md, "Batch-size
plan": **throughput**): the measured points, a saturating fit T(b) = T_max·b/(b+k) inside the measured range,
and past it a cap by the largest measured gain per doubling; without two measured batch sizes, half the
utilization headroom (:func:`headroom_gain`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field


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
