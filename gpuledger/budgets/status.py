"""Each budget's period, spend so far and forecast to the period's end (``gpuledger budgets``, the Budgets
page, the Overview's card and the report's lines: one function, one number).

"As of" a day means the ledger as it stood at the end of that day: the spend of the days up to it, running
jobs costed up to its last moment (or the ledger's horizon when that comes first). Without a day: the day of
the ledger's horizon.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import duckdb

from analytics.daily import spend_by_day
from analytics.filters import Filters, horizon
from analytics.money import cents
from analytics.periods import view_days
from gpuledger.budgets.forecast import CHOSEN, HISTORY_DAYS, WEEKS, Forecast, forecast
from gpuledger.budgets.periods import period_bounds, period_label
from gpuledger.ledger.budget_settings import Budget
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.settings import Settings

STATUSES = ("ok", "at_risk", "over")  # spent under budget and forecast under it / forecast over / spent over
BY = {"team": "team", "cluster": "cluster", "fleet": None}


@dataclass(frozen=True)
class AsOf:
    day: dt.date  # the last day whose spend counts
    moment: dt.datetime  # running jobs are costed up to here


def as_of(con: duckdb.DuckDBPyConnection, day: dt.date | None = None) -> AsOf | None:
    """The as-of of the figures: the end of ``day`` (capped at the ledger's horizon), or the horizon's day.
    None on an empty ledger."""
    end = horizon(con)
    if end is None:
        return None
    if day is None:
        last = end.date() if end.time() != dt.time() else end.date() - dt.timedelta(days=1)
        return AsOf(last, end)
    midnight = dt.datetime.combine(day + dt.timedelta(days=1), dt.time())
    return AsOf(day, min(midnight, end))


def daily(
    con: duckdb.DuckDBPyConnection,
    scope: str,
    target: str | None,
    first: dt.date,
    at: AsOf,
    settings: Settings,
) -> dict[dt.date, float]:
    """The scope's spend per day from ``first`` to the as-of day (a team: its jobs; a cluster: its jobs and
    its capacity no job held; the fleet: everything), as analytics/daily.py cuts it."""
    if scope not in BY:
        raise LedgerError(f"unknown budget scope {scope!r}; use team, cluster or fleet")
    filters = Filters(
        since=first,
        until=at.day,
        teams=(target,) if scope == "team" and target else (),
        clusters=(target,) if scope == "cluster" and target else (),
    )
    frame = spend_by_day(con, by=BY[scope], filters=filters, settings=settings, as_of=at.moment)
    key = target if scope != "fleet" else "fleet"
    return {r["day"]: r["spend_usd"] for r in frame.iter_rows(named=True) if r["key"] == key}


def history_start(first: dt.date) -> dt.date:
    """How far back a forecast for a period starting on ``first`` reads: its own days, the weeks the
    weekday rate averages and the origins its interval is measured on."""
    return first - dt.timedelta(days=HISTORY_DAYS + 7 * WEEKS)


def scope_forecast(
    con: duckdb.DuckDBPyConnection,
    scope: str,
    target: str | None,
    period: str,
    at: AsOf,
    settings: Settings,
    data_start: dt.date | None = None,
) -> tuple[dt.date, dt.date, Forecast]:
    """(period start, period end, the forecast of its spend) for one team, cluster or the fleet."""
    first, last = period_bounds(at.day, period)
    series = daily(con, scope, target, history_start(first), at, settings)
    start = max(data_start or min(series, default=first), history_start(first))
    return first, last, forecast(series, first, last, at.day, method=CHOSEN, start=start)


def data_first_day(con: duckdb.DuckDBPyConnection) -> dt.date | None:
    """The ledger's first UTC day with a job or a sample (analytics/periods.py ``view_days``' open start)."""
    days = view_days(con, Filters())
    return days[0] if days else None


def budget_row(
    con: duckdb.DuckDBPyConnection, budget: Budget, at: AsOf, settings: Settings, data_start: dt.date | None
) -> dict[str, Any]:
    """One budget's figures (the ``budgets --json`` row)."""
    first, last, f = scope_forecast(con, budget.scope, budget.target, budget.period, at, settings, data_start)
    amount = budget.amount_usd
    status = "over" if f.spent >= amount else "at_risk" if f.total >= amount else "ok"
    return {
        "scope": budget.scope,
        "name": budget.name,
        "target": budget.target,
        "period": budget.period,
        "period_label": period_label(first, budget.period),
        "period_start": first.isoformat(),
        "period_end": last.isoformat(),
        "as_of": at.day.isoformat(),
        "days_elapsed": (min(at.day, last) - first).days + 1,
        "days_in_period": (last - first).days + 1,
        "budget_usd": cents(amount),
        "spent_usd": cents(f.spent),
        "spent_pct": round(100 * f.spent / amount, 1),
        "forecast_usd": cents(f.total),
        "forecast_low_usd": cents(f.low),
        "forecast_high_usd": cents(f.high),
        "forecast_pct": round(100 * f.total / amount, 1),
        "method": f.method,
        "status": status,
        "thresholds_pct": list(budget.thresholds_pct),
        "crossed_pct": [p for p in budget.thresholds_pct if f.spent >= amount * p / 100],
        "forecast_crossed_pct": [p for p in budget.thresholds_pct if f.total >= amount * p / 100],
        "notify": list(budget.notify),
    }


def budget_rows(
    con: duckdb.DuckDBPyConnection, settings: Settings, day: dt.date | None = None
) -> list[dict[str, Any]]:
    """Every ``[[budget]]``'s row as of ``day`` (module docstring); empty without budgets or data."""
    at = as_of(con, day)
    if at is None or not settings.budgets:
        return []
    start = data_first_day(con)
    return [budget_row(con, b, at, settings, start) for b in settings.budgets]


def forecast_row(
    con: duckdb.DuckDBPyConnection, spec: str, period: str, settings: Settings, day: dt.date | None = None
) -> dict[str, Any]:
    """A forecast for a scope that has no budget: ``team:NAME``, ``cluster:NAME`` or ``fleet``."""
    scope, _, target = spec.partition(":")
    if scope not in BY or (scope != "fleet") != bool(target):
        raise LedgerError(f"--forecast: {spec!r}: use team:NAME, cluster:NAME or fleet")
    at = as_of(con, day)
    if at is None:
        raise LedgerError("the ledger holds no data to forecast from")
    first, last, f = scope_forecast(con, scope, target or None, period, at, settings, data_first_day(con))
    return {
        "scope": scope,
        "name": spec,
        "target": target or None,
        "period": period,
        "period_label": period_label(first, period),
        "period_start": first.isoformat(),
        "period_end": last.isoformat(),
        "as_of": at.day.isoformat(),
        "spent_usd": cents(f.spent),
        "forecast_usd": cents(f.total),
        "forecast_low_usd": cents(f.low),
        "forecast_high_usd": cents(f.high),
        "method": f.method,
    }
