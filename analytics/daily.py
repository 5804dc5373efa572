"""Spend per UTC day (or any run of whole days) per team, cluster or the fleet: the series budgets are
forecast from and chargeback months are cut from.

The day is the same cut as the week in analytics/waste_weeks.py: every job's in-view span is cut at the
period's bounds and priced per piece at the price in force (analytics/periods.py), and each period's
capacity nobody held is computed on its own (analytics/capacity.py), so each period's rows equal the view
narrowed to that period and all rows sum to the view's spend.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from analytics.capacity import UNALLOCATED, unallocated_periods
from analytics.filters import Filters, horizon
from analytics.periods import Period, buckets_sql, job_bucket_costs_sql, view_days
from analytics.query import frame
from analytics.waste_jobs import ALL_FILTERS, DEFAULT_SETTINGS
from gpuledger.ledger.settings import Settings

KEYS = ("team", "cluster", "user_name", "gpu_model")
SCHEMA = {"period": pl.Utf8, "key": pl.Utf8, "spend_usd": pl.Float64}


def narrowed(filters: Filters, first: dt.date, last: dt.date) -> Filters:
    """The view's filters on the days first..last (both included)."""
    return Filters(first, last, filters.teams, filters.clusters, filters.users)


def day_periods(con: duckdb.DuckDBPyConnection, filters: Filters) -> list[Period]:
    """Each UTC day of the view as (``YYYY-MM-DD``, the view narrowed to that day); an open end is the
    ledger's first (last) day with data (analytics/periods.py view_days). Empty when the ledger is."""
    days = view_days(con, filters)
    if days is None:
        return []
    first, last = days
    return [
        ((d := first + dt.timedelta(days=i)).isoformat(), narrowed(filters, d, d))
        for i in range((last - first).days + 1)
    ]


def spend_by_period(
    con: duckdb.DuckDBPyConnection,
    periods: list[Period],
    *,
    by: str | None = "team",
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
) -> pl.DataFrame:
    """Columns period, key, spend_usd: each period's spend per ``by`` (team, cluster, user_name, gpu_model;
    None: one key "fleet"), jobs' pieces at the price in force plus the period's capacity nobody held (under
    the key "unallocated" for team and user, else its cluster or model). Periods must not overlap; each
    period's rows equal the summary's spend of the view narrowed to it."""
    if by is not None and by not in KEYS:
        raise ValueError(f"unknown grouping {by!r}; use one of {', '.join(KEYS)}")
    if not periods:
        return pl.DataFrame(schema=SCHEMA)
    as_of = as_of or horizon(con)
    key_sql = f"coalesce({by}, '(none)')" if by else "'fleet'"
    jobs_sql, params = job_bucket_costs_sql(filters, as_of, buckets_sql(periods))
    jobs = frame(
        con,
        f"SELECT week AS period, {key_sql} AS key, sum(cost_usd) AS spend_usd FROM ({jobs_sql}) GROUP BY ALL",
        params,
    )
    cap = unallocated_periods(con, periods, filters=filters, settings=settings, as_of=as_of)
    if cap.height:
        key = pl.col(by) if by in ("cluster", "gpu_model") else pl.lit(UNALLOCATED if by else "fleet")
        jobs = pl.concat(
            [
                jobs,
                cap.select(
                    "period", key.cast(pl.Utf8).alias("key"), pl.col("unallocated_usd").alias("spend_usd")
                ),
            ]
        )
    out = jobs.group_by("period", "key").agg(pl.col("spend_usd").sum())
    return out.select(list(SCHEMA)).sort(["period", "key"])


def spend_by_day(
    con: duckdb.DuckDBPyConnection,
    *,
    by: str | None = "team",
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
) -> pl.DataFrame:
    """:func:`spend_by_period` over :func:`day_periods`: columns day (a date), key, spend_usd."""
    out = spend_by_period(
        con, day_periods(con, filters), by=by, filters=filters, settings=settings, as_of=as_of
    )
    return out.with_columns(pl.col("period").str.to_date().alias("day")).select("day", "key", "spend_usd")
