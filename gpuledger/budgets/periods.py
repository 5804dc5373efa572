"""The calendar periods budgets are kept over: ISO weeks (Monday to Sunday), calendar months and quarters,
all in UTC days like every other view."""

from __future__ import annotations

import datetime as dt


def period_bounds(day: dt.date, period: str) -> tuple[dt.date, dt.date]:
    """The first and last day (both included) of the week, month or quarter holding ``day``."""
    if period == "week":
        first = day - dt.timedelta(days=day.isoweekday() - 1)
        return first, first + dt.timedelta(days=6)
    if period == "month":
        first = day.replace(day=1)
    elif period == "quarter":
        first = dt.date(day.year, 3 * ((day.month - 1) // 3) + 1, 1)
    else:
        raise ValueError(f"unknown period {period!r}")
    months = 1 if period == "month" else 3
    y, m = divmod(first.month - 1 + months, 12)
    return first, dt.date(first.year + y, m + 1, 1) - dt.timedelta(days=1)


def previous_period(first: dt.date, period: str) -> tuple[dt.date, dt.date]:
    """The period before the one starting on ``first``."""
    return period_bounds(first - dt.timedelta(days=1), period)


def period_label(first: dt.date, period: str) -> str:
    """2026-W47, 2026-11 or 2026-Q4."""
    if period == "week":
        y, w, _ = first.isocalendar()
        return f"{y}-W{w:02d}"
    if period == "month":
        return f"{first.year}-{first.month:02d}"
    return f"{first.year}-Q{(first.month - 1) // 3 + 1}"
