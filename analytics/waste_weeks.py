"""The waste taxonomy per ISO week: each job cut at week boundaries, each week's capacity on its own, so a
week's rows equal the view narrowed to that week and all rows sum to the view's spend (the Overview's bars,
the Waste page's weekly table)."""

from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from analytics.badput import badput_sums_sql
from analytics.capacity import UNALLOCATED, unallocated_weeks
from analytics.filters import Filters, horizon
from analytics.periods import buckets_sql, job_bucket_costs_sql, view_weeks
from analytics.query import frame
from analytics.utilization import ROLLUPS, Source, job_bucket_totals_sql
from analytics.waste_jobs import ALL_FILTERS, DEFAULT_SETTINGS, PARTS, TEAM_WASTE_PARTS, job_waste, parts_sql
from gpuledger.ledger.settings import Settings

WEEK_KEYS = ("team", "user_name", "cluster", "gpu_model", "kind")


def job_waste_by_week(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
    source: Source = ROLLUPS,
) -> pl.DataFrame:
    """JOB_WASTE_COLUMNS per (job, ISO week of the view), each job cut at week boundaries: a row equals the
    job's :func:`job_waste` row for the view narrowed to that week (:func:`view_weeks`), computed in one
    query instead of one per week. ``week`` is the week of the piece."""
    as_of = as_of or horizon(con)
    weeks = view_weeks(con, filters)
    if not weeks:  # an empty ledger
        return job_waste(con, filters=filters, settings=settings, as_of=as_of).clear()
    buckets = buckets_sql(weeks)
    sql, params = parts_sql(
        job_bucket_costs_sql(filters, as_of, buckets),
        job_bucket_totals_sql(con, filters, settings, as_of, buckets, source),
        badput_sums_sql(con, filters, settings, as_of, source, buckets),
        "job_id, week",
        settings,
    )
    return frame(con, f"SELECT * FROM ({sql}) ORDER BY week, job_id", params)


def waste_by_week(
    con: duckdb.DuckDBPyConnection,
    *,
    by: str = "team",
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
    source: Source = ROLLUPS,
) -> pl.DataFrame:
    """Columns week, key (``by``: team, user_name, cluster, gpu_model or kind), spend_usd, PARTS, team_waste_usd:
    each week's rows equal ``waste_by(by=by)`` for the view narrowed to that week (:func:`view_weeks`), so
    every job's cost is cut at week boundaries (unlike ``waste_by(by="week")``, which puts a whole job in the
    week it starts) and all rows sum exactly to the view's spend; ``spend_usd`` is :func:`spend_by_week`'s,
    which the parts sum to (to float rounding). Unallocated capacity is computed per week,
    under the key "unallocated" (team, user, kind) or its cluster / GPU model. Ordered by week, then spend
    (largest first)."""
    if by not in WEEK_KEYS:
        raise ValueError(f"unknown grouping {by!r}; use one of {', '.join(WEEK_KEYS)}")
    as_of = as_of or horizon(con)
    jobs = job_waste_by_week(con, filters=filters, settings=settings, as_of=as_of, source=source)
    sums = [pl.col(p).sum() for p in PARTS if p != "unallocated_usd"]
    out = (
        jobs.with_columns(pl.col(by).fill_null("(none)").alias("key"))
        .group_by("week", "key")
        .agg(*sums, pl.lit(0.0).alias("unallocated_usd"))
    )
    un_rows = _week_unallocated(con, by, filters, settings, as_of)
    if un_rows.height:
        out = (
            pl.concat([out, un_rows], how="diagonal_relaxed")
            .group_by("week", "key")
            .agg(pl.col(p).sum() for p in PARTS)
        )
    # the spend is spend_by_week's (the Overview's bars): one figure for one number, which the parts sum to
    spend = spend_by_week(con, by=by, filters=filters, settings=settings, as_of=as_of)
    out = out.join(spend, on=["week", "key"], how="left").with_columns(
        pl.coalesce("spend_usd", pl.sum_horizontal(*PARTS)).alias("spend_usd"),
        pl.sum_horizontal(*TEAM_WASTE_PARTS).alias("team_waste_usd"),
    )
    return out.select("week", "key", "spend_usd", *PARTS, "team_waste_usd").sort(
        ["week", "spend_usd", "key"], descending=[False, True, False]
    )


def spend_by_week(
    con: duckdb.DuckDBPyConnection,
    *,
    by: str = "team",
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
) -> pl.DataFrame:
    """Columns week, key, spend_usd: the spend per key per ISO week (the Overview's bars, and the spend column
    of :func:`waste_by_week`), without the per-job telemetry the waste parts need: each (job, week) piece's
    cost, which its parts sum to, plus each week's unallocated capacity."""
    if by not in WEEK_KEYS:
        raise ValueError(f"unknown grouping {by!r}; use one of {', '.join(WEEK_KEYS)}")
    as_of = as_of or horizon(con)
    weeks = view_weeks(con, filters)
    schema = {"week": pl.Utf8, "key": pl.Utf8, "spend_usd": pl.Float64}
    if not weeks:
        return pl.DataFrame(schema=schema)
    jobs_sql, params = job_bucket_costs_sql(filters, as_of, buckets_sql(weeks))
    jobs = frame(
        con,
        f"SELECT week, coalesce({by}, '(none)') AS key, sum(cost_usd) AS spend_usd FROM ({jobs_sql}) GROUP BY ALL",
        params,
    )
    un_rows = _week_unallocated(con, by, filters, settings, as_of)
    if un_rows.height:
        jobs = pl.concat([jobs, un_rows.select("week", "key", pl.col("unallocated_usd").alias("spend_usd"))])
    out = jobs.group_by("week", "key").agg(pl.col("spend_usd").sum())
    return out.select(list(schema)).sort(["week", "spend_usd", "key"], descending=[False, True, False])


def _week_unallocated(
    con: duckdb.DuckDBPyConnection, by: str, filters: Filters, settings: Settings, as_of: dt.datetime | None
) -> pl.DataFrame:
    """week, key, unallocated_usd: each week's capacity on its own (:func:`unallocated_weeks`), under the key
    "unallocated" (team, user, kind) or its cluster / GPU model."""
    _, un_rows = unallocated_weeks(con, filters=filters, settings=settings, as_of=as_of)
    if not un_rows.height:
        return un_rows
    key = {"cluster": "cluster", "gpu_model": "gpu_model"}.get(by)
    return (
        un_rows.with_columns(pl.col(key).alias("key") if key else pl.lit(UNALLOCATED).alias("key"))
        .group_by("week", "key")
        .agg(pl.col("unallocated_usd").sum())
    )
