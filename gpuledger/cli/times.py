"""One grammar for every time and duration on the command line.

- A **duration** (``--every``, ``--step``, ``--chunk``, ``--overlap``): a number with an optional unit, or several
  run together: ``90`` (seconds), ``90s``, ``5m``, ``1.5h``, ``2d``, ``1w``, ``1h30m``.
- A **moment** (``--since``, ``--until``): an ISO 8601 date or time (UTC unless it carries an offset; ``Z`` is
  UTC), epoch seconds (``1733011200``), ``now``, or an age: a duration back from now (``6h``, ``7d``).
- A **day** (the report filters' ``--since``/``--until``): any moment, taken as its UTC day.

Every parse error is an ``argparse.ArgumentTypeError``, so a bad value is a usage error (exit 2) with the
same wording everywhere.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_HINT = "like 90s, 5m, 1.5h, 2d, 1w or 1h30m"


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def _seconds(text: str) -> float | None:
    t = text.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", t):
        return float(t)
    if not t or _PART.sub("", t):
        return None
    return sum(float(n) * _UNITS[u] for n, u in _PART.findall(t))


def duration(text: str) -> dt.timedelta:
    """A positive duration → timedelta."""
    seconds = _seconds(text)
    if seconds is None or seconds <= 0:
        raise argparse.ArgumentTypeError(f"not a duration ({_HINT}): {text!r}")
    return dt.timedelta(seconds=seconds)


def span(text: str) -> dt.timedelta:
    """A duration that may be zero (``--overlap 0s``)."""
    seconds = _seconds(text)
    if seconds is None or seconds < 0:
        raise argparse.ArgumentTypeError(f"not a duration ({_HINT}, or 0): {text!r}")
    return dt.timedelta(seconds=seconds)


def duration_s(text: str) -> int:
    """A positive duration in whole seconds (Prometheus steps)."""
    seconds = duration(text).total_seconds()
    if seconds < 1 or seconds != int(seconds):
        raise argparse.ArgumentTypeError(f"not a whole number of seconds ({_HINT}): {text!r}")
    return int(seconds)


def moment(text: str, *, now: dt.datetime | None = None) -> dt.datetime:
    """A moment → naive UTC datetime."""
    t = text.strip()
    if t.lower() == "now":
        return now or utcnow()
    if re.fullmatch(r"\d+(?:\.\d+)?", t) and len(t.split(".")[0]) >= 9:  # epoch seconds, not a bare number
        return dt.datetime.fromtimestamp(float(t), dt.UTC).replace(tzinfo=None)
    age = _seconds(t) if not re.fullmatch(r"\d+(?:\.\d+)?", t) else None
    if age is not None:
        return (now or utcnow()) - dt.timedelta(seconds=age)
    try:
        value = dt.datetime.fromisoformat(t.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time (YYYY-MM-DD[THH:MM[:SS]][+HH:MM], epoch seconds, now, or an age like 6h or 7d): {text!r}"
        ) from None
    return value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value


def day(text: str) -> dt.date:
    """A moment → its UTC day."""
    try:
        return moment(text).date()
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"not a date (YYYY-MM-DD, an ISO time, epoch seconds, or an age like 7d): {text!r}"
        ) from None
