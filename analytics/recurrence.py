"""Recurring or one-off: decided by a job's history in the ledger, never by the dates a view picks.

Why: "recurring" used to mean "at least two runs inside the chosen dates", so one training run was a
one-off in its week and part of a recurring family card in the month around it. The demo's 28-day month
then said its one-off actions would have saved $21.93 while each of its four weeks said $1,262.94 to
$1,587.11. Here the same job is recurring or one-off at every range, so the one-offs of a range's weeks add
up to the range's (docs/recommendations.md, "Recurring or one-off"):

- a **job recurs** when it is a service or a habit (an ``inference`` or ``interactive`` job), or its run
  family (one user's jobs whose names share a stem, analytics.advice_common.family_stem) has at least
  ``MIN_RUNS`` jobs in the ledger that started up to the data horizon (``as_of``), inside the view or not;
- an **item is recurring** when it concerns a cluster (capacity, an idle cluster), when it is a user's
  habit (a user item, and the user has at least ``MIN_RUNS`` jobs in the ledger), or when any of its jobs
  recurs; else it is a one-off. A family card's runs share one family, so they are all recurring or all
  one-off.

The advice rules still set a ``recurring`` of their own while they build items; :func:`mark` replaces it
with this one before the list is priced per week.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

import duckdb
import polars as pl

from analytics.advice_common import RECURRING_JOB_KINDS, Recommendation, family_stem
from analytics.query import frame
from analytics.shared import memo

MIN_RUNS = 2  # a run family (or a user) with at least this many jobs in the ledger recurs
RECURRING_TARGETS = ("cluster",)  # a cluster's capacity is there every week


def history(
    con: duckdb.DuckDBPyConnection, job_ids: Iterable[str], as_of: dt.datetime | None
) -> tuple[set[str], set[str]]:
    """(the jobs of ``job_ids`` that recur, the users with at least MIN_RUNS jobs), from every job of the
    ledger that started up to ``as_of`` (all of them when None)."""
    wanted = {str(j) for j in job_ids}
    jobs, habits = memo(con, ("recurrence", as_of), lambda: _ledger_history(con, as_of))
    if jobs is None:
        return set(), set()
    recurs = jobs.filter(pl.col("job_id").is_in(list(wanted)))
    return set(recurs["job_id"].to_list()), set(habits)


def _ledger_history(
    con: duckdb.DuckDBPyConnection, as_of: dt.datetime | None
) -> tuple[pl.DataFrame | None, frozenset[str]]:
    """(the ledger's jobs up to ``as_of`` that recur, the users with at least MIN_RUNS jobs): what
    :func:`history` needs of the whole ledger, read once per sharing block (analytics.shared.memo; the items
    scan marks each week's items against the same ledger). None for the jobs when the ledger has none."""
    cut = "WHERE start_ts <= ?" if as_of is not None else ""
    jobs = frame(
        con,
        f"""SELECT job_id, user_name, coalesce(name, job_id) AS family_key, kind
            FROM jobs {cut}""",
        [as_of] if as_of is not None else [],
    )
    if jobs.is_empty():
        return None, frozenset()
    keys = jobs["family_key"].unique().to_list()
    jobs = jobs.with_columns(
        pl.col("user_name").fill_null("(unknown)"),
        pl.col("family_key").replace_strict({k: family_stem(k, k) for k in keys}).alias("stem"),
    ).with_columns(
        pl.len().over("user_name", "stem").alias("family_runs"),
        pl.len().over("user_name").alias("user_jobs"),
    )
    recurs = jobs.filter(
        pl.col("kind").is_in(list(RECURRING_JOB_KINDS)) | (pl.col("family_runs") >= MIN_RUNS)
    ).select("job_id")
    habits = jobs.filter(pl.col("user_jobs") >= MIN_RUNS)["user_name"].unique()
    return recurs, frozenset(habits.to_list())


def recurring(item: Recommendation, jobs: set[str], users: set[str]) -> bool:
    """Whether ``item`` is recurring, given :func:`history`'s recurring jobs and habitual users."""
    if item.target_type in RECURRING_TARGETS:
        return True
    if item.target_type == "user" and str(item.target) in users:
        return True
    return any(str(j) in jobs for j in item.job_ids)


def mark(
    con: duckdb.DuckDBPyConnection, items: list[Recommendation], as_of: dt.datetime | None
) -> list[Recommendation]:
    """``items`` with ``recurring`` set by the job's history (this module's rule), not the view's dates."""
    jobs, users = history(con, (j for it in items for j in it.job_ids), as_of)
    return [it.but(recurring=recurring(it, jobs, users)) for it in items]
