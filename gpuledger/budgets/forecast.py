"""Forecast a period's total spend from a daily series, with an interval (docs/metrics.md, "Forecast").

Three methods, compared by bench/forecast.py's rolling-origin back-test:
- ``last_period``: the period will cost what the one before it cost (scaled by its length in days);
- ``linear``: the burn rate so far, spent ÷ days elapsed × days in the period (cloud budgets' forecast);
- ``weekday``: spent so far plus, for each day left, the mean of the same weekday over the last
  ``WEEKS`` weeks (GPU fleets run a weekly rhythm: jobs start on workdays, notebooks idle on weekends);
- ``weekday_level``: the same weekly rhythm (each weekday's share of the last ``WEEKS`` weeks) times the
  current level: an exponentially weighted mean (``ALPHA``) of the days with the rhythm taken out, so a team
  that doubled its work last week is forecast at its new level, not at its four-week mean (Holt-Winters'
  level and seasonal terms without the trend).

Its interval is empirical: the same method's own errors over the same number of days left, from every
origin of the last ``HISTORY_DAYS`` days that has them, at the ``COVERAGE`` central quantiles (75 %, as
Kubecost's). With fewer than ``MIN_ORIGINS`` such origins it is the days left ±50 %.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from gpuledger.budgets.periods import previous_period

METHODS = ("last_period", "linear", "weekday", "weekday_level")
CHOSEN = "weekday_level"  # by bench/forecast.py (docs/metrics.md gives its figures)
WEEKS = 4
ALPHA = 0.2
HISTORY_DAYS = 56
COVERAGE = 0.75
MIN_ORIGINS = 5

Series = Mapping[dt.date, float]  # spend (or GPU-hours) per UTC day; a missing day is 0
ONE = dt.timedelta(days=1)


@dataclass(frozen=True)
class Forecast:
    total: float  # the period's spend forecast to its end
    low: float  # the interval's ends (COVERAGE central): never below what is spent already
    high: float
    spent: float  # spent in the period up to the as-of day
    method: str


def _days(first: dt.date, last: dt.date) -> list[dt.date]:
    return [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]


def _sum(series: Series, first: dt.date, last: dt.date) -> float:
    return sum(series.get(d, 0.0) for d in _days(first, last)) if last >= first else 0.0


def _weekday_rate(series: Series, day: dt.date, as_of: dt.date, start: dt.date) -> float:
    """The mean of ``day``'s weekday over the last WEEKS weeks up to ``as_of`` (the data's first day is
    ``start``); the mean of every day there is when no such weekday is in the data yet."""
    back = (as_of - day).days % 7 if day <= as_of else (as_of.isoweekday() - day.isoweekday()) % 7
    same = [as_of - dt.timedelta(days=back + 7 * k) for k in range(WEEKS)]
    same = [d for d in same if d >= start]
    if same:
        return sum(series.get(d, 0.0) for d in same) / len(same)
    have = _days(start, as_of)
    return sum(series.get(d, 0.0) for d in have) / len(have) if have else 0.0


def _rhythm(series: Series, as_of: dt.date, start: dt.date) -> dict[int, float]:
    """ISO weekday → its mean over the last WEEKS weeks up to ``as_of`` over the mean of all those days (1.0
    for every weekday when they spent nothing or no such weekday is in the data)."""
    days = [as_of - dt.timedelta(days=i) for i in range(7 * WEEKS) if as_of - dt.timedelta(days=i) >= start]
    mean = sum(series.get(d, 0.0) for d in days) / len(days) if days else 0.0
    out = {}
    for wd in range(1, 8):
        same = [series.get(d, 0.0) for d in days if d.isoweekday() == wd]
        out[wd] = sum(same) / len(same) / mean if same and mean > 0 else 1.0
    return out


def _level(series: Series, as_of: dt.date, start: dt.date, rhythm: dict[int, float]) -> float:
    """The exponentially weighted mean (ALPHA) of the last HISTORY_DAYS days up to ``as_of``, each divided by
    its weekday's rhythm (a weekday that never spends tells nothing of the level and is passed over)."""
    level = None
    day = max(start, as_of - dt.timedelta(days=HISTORY_DAYS - 1))
    while day <= as_of:
        factor = rhythm[day.isoweekday()]
        if factor > 0:
            value = series.get(day, 0.0) / factor
            level = value if level is None else ALPHA * value + (1 - ALPHA) * level
        day += ONE
    return level or 0.0


def point(
    series: Series, first: dt.date, last: dt.date, as_of: dt.date, method: str, start: dt.date
) -> float:
    """The period [first, last]'s total by ``method``, knowing the series up to ``as_of`` (first day of
    data ``start``)."""
    elapsed_to = min(as_of, last)
    spent = _sum(series, first, elapsed_to)
    if as_of >= last:
        return spent
    if method == "last_period":
        p_first, p_last = previous_period(first, _period_of(first, last))
        length = (last - first).days + 1
        return _sum(series, max(p_first, start), p_last) * length / ((p_last - p_first).days + 1)
    if method == "linear":
        elapsed = (elapsed_to - first).days + 1
        if elapsed <= 0:  # the period has not begun: the last day's rate
            return _sum(series, as_of, as_of) * ((last - first).days + 1)
        return spent / elapsed * ((last - first).days + 1)
    left = _days(max(first, as_of + ONE), last)
    if method == "weekday":
        return spent + sum(_weekday_rate(series, d, as_of, start) for d in left)
    if method == "weekday_level":
        rhythm = _rhythm(series, as_of, start)
        level = _level(series, as_of, start, rhythm)
        return spent + sum(level * rhythm[d.isoweekday()] for d in left)
    raise ValueError(f"unknown method {method!r}")


def _period_of(first: dt.date, last: dt.date) -> str:
    n = (last - first).days + 1
    return "week" if n == 7 else "month" if n <= 31 else "quarter"


def _quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def forecast(
    series: Series,
    first: dt.date,
    last: dt.date,
    as_of: dt.date,
    *,
    method: str = CHOSEN,
    start: dt.date | None = None,
) -> Forecast:
    """The period [first, last]'s total spend knowing the series up to ``as_of`` (inclusive), with its
    interval from the method's own errors over as many days left (module docstring)."""
    start = start or (min(series) if series else first)
    spent = _sum(series, first, min(as_of, last))
    total = point(series, first, last, as_of, method, start)
    left = (last - max(as_of, first - ONE)).days
    if left <= 0:
        return Forecast(spent, spent, spent, spent, method)
    errors = []
    for back in range(left, HISTORY_DAYS + 1):
        origin = as_of - dt.timedelta(days=back)
        if (origin - start).days < 7:
            break
        span = (origin + ONE, origin + dt.timedelta(days=left))
        # the same horizon: forecast the next `left` days from `origin` as if they were a period's end
        predicted = (
            point(series, span[0], span[1], origin, method, start) if method != "last_period" else None
        )
        if predicted is None:  # last_period's own error: the `left` days before against the `left` days after
            predicted = _sum(series, origin - dt.timedelta(days=left - 1), origin)
        errors.append(_sum(series, *span) - predicted)
    rest = total - spent
    if len(errors) >= MIN_ORIGINS:
        lo_err, hi_err = _quantile(errors, (1 - COVERAGE) / 2), _quantile(errors, (1 + COVERAGE) / 2)
    else:
        lo_err, hi_err = -0.5 * abs(rest), 0.5 * abs(rest)
    low = max(spent, total + lo_err)
    high = max(low, total + hi_err)
    return Forecast(total, low, high, spent, method)
