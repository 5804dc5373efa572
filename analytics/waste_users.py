"""Who wastes: users ranked by the waste teams control of their own jobs (issue 44 item 5), each with the
costliest wasteful job, so a lead sees whom to talk to and about which run (docs/metrics.md, "Waste by
user")."""

from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from analytics.filters import Filters, horizon
from analytics.waste import UNALLOCATED, job_waste, waste_by
from analytics.waste_jobs import ALL_FILTERS, DEFAULT_SETTINGS
from gpuledger.ledger.settings import Settings

USER_WASTE_COLUMNS = {
    "user_name": "the user ('(none)' for jobs without one); capacity no job held is nobody's and not a row",
    "spend_usd": "the user's jobs' in-view cost",
    "team_waste_usd": "idle while allocated + under-used + failed of the user's jobs (analytics.waste.waste_by)",
    "top_job_id": "the user's job with the most waste (job_waste's waste_usd, the same three parts)",
    "top_job_name": "its name",
    "top_job_waste_usd": "its waste",
}


def user_waste(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
    limit: int | None = None,
) -> pl.DataFrame:
    """``waste_by(by="user_name")`` rows with waste, largest team_waste_usd first (ties by name), each with
    its costliest wasteful job (USER_WASTE_COLUMNS plus the parts)."""
    as_of = as_of or horizon(con)
    users = (
        waste_by(con, by="user_name", filters=filters, settings=settings, as_of=as_of)
        .rename({"key": "user_name"})
        .filter((pl.col("user_name") != UNALLOCATED) & (pl.col("team_waste_usd") >= 0.005))
    )
    jobs = job_waste(con, filters=filters, settings=settings, as_of=as_of)
    top = (
        jobs.filter(pl.col("waste_usd").fill_null(0) >= 0.005)
        .with_columns(pl.col("user_name").fill_null("(none)"))
        .sort(["waste_usd", "job_id"], descending=[True, False])
        .group_by("user_name", maintain_order=True)
        .first()
        .select(
            "user_name",
            pl.col("job_id").alias("top_job_id"),
            pl.col("name").alias("top_job_name"),
            pl.col("waste_usd").alias("top_job_waste_usd"),
        )
    )
    out = users.join(top, on="user_name", how="left").sort(
        ["team_waste_usd", "user_name"], descending=[True, False]
    )
    return out.head(limit) if limit else out
