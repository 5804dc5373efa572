"""All of the dashboard's data access and Streamlit caching, in one place (docs/concurrency.md).

:func:`cached` turns a read of the ledger into a cached data function keyed on the ledger file and its
:func:`gpuledger.ledger.db.data_version` (which changes with every commit: the first load after an ingest
recomputes), the settings' fingerprint and the arguments. Reads share one connection per script run
(:func:`one_connection`), so a writer only ever waits for one page run. Nothing here computes a figure: each
read calls the analytics function the CLI's ``--json`` prints. The Upload page's analysis runs in a worker
process (gpuledger/upload/), cached by :func:`bounded` alone."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from collections.abc import Callable, Hashable
from typing import Any, Concatenate, ParamSpec, TypeVar

import duckdb
import polars as pl
import streamlit as st

from analytics import diagnoses as diagnoses_
from analytics import guard_actions as guard_actions_
from analytics import jobs, recommend, timeline, unit_costs, utilization, waste
from analytics import overview as overview_
from analytics import summary as summary_
from analytics.filters import Filters, UnknownName, horizon, known_names
from analytics.filters import unknown_names as unknown_names_
from analytics.job_detail import JobDetail, job_detail
from analytics.shared import sharing
from gpuledger.guard.replay import replay as guard_replay_
from gpuledger.ledger.db import data_version, one_reader, reader, sync_reference
from gpuledger.ledger.guard_policy import Policy
from gpuledger.ledger.prices import PriceBook, price_book
from gpuledger.ledger.settings import Settings
from gpuledger.ledger.sql import job_count_sql
from gpuledger.reports.weekly import FORMATS, collect, render
from gpuledger.upload import GpuFacts, UploadResult, analyse_isolated, gpu_facts
from gpuledger.upload.analysis import LINES_PAST
from pages._results import Choices, Fleet, Training
from pages._scope import db, scoped, settings, viewer, visible_teams

# Every cache is bounded (its keys carry the ledger's version, new at every collector flush): an entry no rerun
# asked for in CACHE_TTL_S goes; max_entries bounds what one server holds (older views are evicted first).
CACHE_TTL_S = 1800
CACHE_VIEWS = 32  # filter views kept per data function (a view: ledger version x settings x filters)
CACHE_VERSIONS = 4  # ledger versions kept by the functions keyed on the version alone
FLEET_GROUP_PAST = LINES_PAST  # more GPUs than this in the view: one heatmap row per host or cluster

P = ParamSpec("P")
R = TypeVar("R")
Read = Callable[Concatenate[duckdb.DuckDBPyConnection, Settings, P], R]
Key = tuple[tuple[Hashable, ...], tuple[tuple[str, Hashable], ...]]  # a call's (args, sorted kwargs)


# ---------------------------------------------------------------- the one caching decorator


def bounded(spinner: str | bool, entries: int) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """``st.cache_data`` with a bound (``entries``) and CACHE_TTL_S: the only place a data cache is made."""
    return st.cache_data(show_spinner=spinner, max_entries=entries, ttl=CACHE_TTL_S)


def cached(
    spinner: str | bool = False, *, entries: int = CACHE_VIEWS
) -> Callable[[Read[P, R]], Callable[P, R]]:
    """A read ``fn(con, settings, *args)`` of the ledger becomes the data function ``fn(*args)``: cached on
    (ledger, its version, the settings' fingerprint, args), run on a reader inside the ledger version's
    sharing block (analytics/shared.py: the view's per-job costs once for all the page's functions). Every
    ``Filters`` argument is first narrowed to what the viewer may see (:func:`scoped`), so no page can widen
    its view. The settings object travels unhashed beside its fingerprint."""

    def decorate(read: Read[P, R]) -> Callable[P, R]:
        def compute(db_path: str, ver: tuple[int, int], fp: str, key: Key, _s: Settings) -> R:
            args, kwargs = key
            with reader(db_path) as con, sharing(con, (db_path, ver)):
                return read(con, _s, *args, **dict(kwargs))  # type: ignore[arg-type]

        # Streamlit keys a cache on the function's module, qualified name and source: one cache per read
        compute.__qualname__ = f"{read.__qualname__}.cached"
        compute.__module__ = read.__module__
        store = bounded(spinner, entries)(compute)

        def data(*args: P.args, **kwargs: P.kwargs) -> R:
            path, ver, fp, s = _ctx()
            args_ = tuple(scoped(a) if isinstance(a, Filters) else a for a in args)
            kw = tuple(sorted((k, scoped(v) if isinstance(v, Filters) else v) for k, v in kwargs.items()))
            return store(path, ver, fp, (args_, kw), s)

        data.__doc__, data.__name__ = read.__doc__, read.__name__
        return data

    return decorate


# ---------------------------------------------------------------- the view: db, version, settings, filters


def one_connection() -> contextlib.AbstractContextManager[None]:
    """One read-only connection for the data functions of this script run (app.py wraps the page in it)."""
    return one_reader(db())


def _sees_job(job_id: str) -> bool:
    teams = visible_teams()
    return teams is None or _job_team(job_id) in teams


@cached(entries=256)
def _job_team(con: duckdb.DuckDBPyConnection, s: Settings, job_id: str) -> str | None:
    row = con.execute("SELECT team FROM jobs WHERE job_id = ?", [job_id]).fetchone()
    return row[0] if row else None


@st.cache_resource(show_spinner=False, max_entries=CACHE_VERSIONS, ttl=CACHE_TTL_S)
def _sync_reference(db_path: str, fingerprint: str, version: tuple[int, int], _settings: Settings) -> bool:
    """Mirror the price sheet, catalog and rollup thresholds of these settings into the ledger, once per
    settings and ledger version: a write by another process (an ingest under other settings rebuilds the
    rollups for its thresholds) is followed by a check, so the analytics never read rollups built for other
    thresholds (they raise RollupMismatch)."""
    return sync_reference(db_path, _settings)


def _ctx() -> tuple[str, tuple[int, int], str, Settings]:
    path, s = db(), settings()
    _sync_reference(path, s.fingerprint(), data_version(path), s)
    return path, data_version(path), s.fingerprint(), s


# ---------------------------------------------------------------- sidebar, ledger facts, prices


def filter_choices() -> Choices:
    """The sidebar's choices; a lead's team and cluster lists hold only their teams and the clusters their
    teams' jobs ran on (analytics.filters.known_names ``within_teams``)."""
    choices, scope = _filter_choices(), viewer()
    if scope is None or scope.admin:
        return choices
    return dataclasses.replace(choices, teams=scope.teams, clusters=_scoped_names("cluster", scope.teams))


@cached(entries=CACHE_VERSIONS)
def _scoped_names(
    con: duckdb.DuckDBPyConnection, s: Settings, what: str, teams: tuple[str, ...]
) -> tuple[str, ...]:
    return known_names(con, what, within_teams=teams)


@cached(entries=CACHE_VERSIONS)
def _filter_choices(con: duckdb.DuckDBPyConnection, s: Settings) -> Choices:
    # the lists the unknown-name check uses (a cluster of declared capacity alone is offered too)
    teams, clusters = known_names(con, "team"), known_names(con, "cluster")
    lo, hi = con.execute(
        """SELECT least((SELECT min(start_ts) FROM jobs), (SELECT min(ts) FROM samples))::DATE, greatest((SELECT
             max(coalesce(end_ts, start_ts)) FROM jobs), (SELECT max(ts) FROM samples))::DATE"""
    ).fetchall()[0]
    return Choices(teams, clusters, lo, hi)


@cached(entries=CACHE_VERSIONS)
def ledger_counts(con: duckdb.DuckDBPyConnection, s: Settings) -> tuple[int, int, int]:
    """The ledger's jobs, samples and ingests: the fleet's totals (pages/_view.ledger_caption, an admin's)."""
    return con.execute(
        f"SELECT (SELECT {job_count_sql('j')} FROM jobs j), (SELECT count(*) FROM samples), "
        "(SELECT count(*) FROM ingests)"
    ).fetchall()[0]


@cached(entries=CACHE_VERSIONS)
def has_data(con: duckdb.DuckDBPyConnection, s: Settings) -> bool:
    """True when the ledger holds any job or sample."""
    return bool(con.execute("SELECT EXISTS (FROM jobs) OR EXISTS (FROM samples)").fetchall()[0][0])


@cached(entries=CACHE_VERSIONS)
def as_of(con: duckdb.DuckDBPyConnection, s: Settings) -> str | None:
    """The ledger's data horizon (analytics.filters.horizon) as ``summary --json`` prints it (``as_of``),
    for a page that needs only the date: a cold summary costs ~0.2 s on the 28-day demo, this one query."""
    when = horizon(con)
    return when.isoformat() if when else None


@cached(entries=CACHE_VERSIONS)
def prices_in_force(con: duckdb.DuckDBPyConnection, s: Settings) -> PriceBook:
    """The ledger's prices in force (gpuledger.ledger.prices: the sheet, the settings and the prices sources
    declared, cluster rows included), the one book every page prices with."""
    return price_book(con)


# ---------------------------------------------------------------- overview, waste, jobs


@cached("Computing the summary…")
def summary(con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters) -> dict[str, Any]:
    """``gpuledger summary --json`` for these filters (the same function, the same numbers)."""
    return summary_.summary(con, filters=filters, settings=s)


@cached("Computing the overview…")
def overview(
    con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters, previous: Filters | None
) -> overview_.Overview:
    """``analytics.overview.overview``: the period against ``previous`` (the period before; None: none)."""
    return overview_.overview(con, filters=filters, previous=previous, settings=s)


@cached(entries=CACHE_VERSIONS)
def unknown_names(
    con: duckdb.DuckDBPyConnection,
    s: Settings,
    teams: tuple[str, ...],
    clusters: tuple[str, ...],
    users: tuple[str, ...],
    within_teams: tuple[str, ...] | None = None,
) -> list[UnknownName]:
    """``analytics.filters.unknown_names``: the values the ledger lacks, or with ``within_teams`` (a lead's
    teams) the values outside them, answered alike (names, not a Filters view: a lead's scope must not turn
    another team's name into one of theirs before it is checked)."""
    return unknown_names_(
        con, Filters(teams=teams, clusters=clusters, users=users), within_teams=within_teams
    )


@cached("Splitting the spend by team and week…")
def team_weeks(con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters, parts: bool) -> pl.DataFrame:
    """week, team, spend_usd: ``analytics.waste.spend_by_week(by="team")`` (the Overview's bars), or with
    ``parts`` ``waste_by_week``, which adds the taxonomy's parts and team_waste_usd. Each job's cost is cut at week
    boundaries (one query for all weeks), so the rows sum exactly to the view's spend; rows under half a cent
    are left out."""
    by_week = waste.waste_by_week if parts else waste.spend_by_week
    out = by_week(con, by="team", filters=filters, settings=s).rename({"key": "team"})
    return out.filter(pl.col("spend_usd").abs() > 0.005).sort("week", "team")


@cached()
def waste_by(con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters, by: str) -> pl.DataFrame:
    """``analytics.waste.waste_by`` for the view (key, spend_usd, the parts, team_waste_usd)."""
    return waste.waste_by(con, by=by, filters=filters, settings=s)


@cached()
def allocation(con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters, by: str) -> pl.DataFrame:
    """key (``cluster`` or ``gpu_model``), capacity_gpu_hours, allocated_gpu_hours, allocation_pct (allocated ÷
    capacity × 100, NULL without capacity), idle_allocated_usd and unallocated_usd: the Fleet's per cluster
    and per GPU model money (analytics.waste.unallocated and waste_by, docs/metrics.md "Fleet")."""
    cap = waste.unallocated(con, filters=filters, settings=s)
    money = waste.waste_by(con, by=by, filters=filters, settings=s).select(
        "key", "idle_allocated_usd", "unallocated_usd"
    )
    if cap.height:
        hours = cap.group_by(pl.col(by).alias("key")).agg(
            pl.col("capacity_gpu_hours").sum(), pl.col("allocated_gpu_hours").sum()
        )
    else:
        hours = pl.DataFrame(
            schema={"key": pl.Utf8, "capacity_gpu_hours": pl.Float64, "allocated_gpu_hours": pl.Float64}
        )
    return money.join(hours, on="key", how="left").with_columns(
        pl.when(pl.col("capacity_gpu_hours") > 0)
        .then(100.0 * pl.col("allocated_gpu_hours") / pl.col("capacity_gpu_hours"))
        .alias("allocation_pct")
    )


@cached()
def user_waste(
    con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters, limit: int = 15
) -> pl.DataFrame:
    """``analytics.waste_users.user_waste``: users by the waste teams control, each with the costliest
    wasteful job (the report's table)."""
    from analytics.waste_users import user_waste as user_waste_

    return user_waste_(con, filters=filters, settings=s, limit=limit)


@cached()
def top_wasted_jobs(
    con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters, limit: int = 20
) -> pl.DataFrame:
    """The view's jobs with the most wasted $ (``analytics.waste.job_waste``, sorted by waste_usd: a job's idle +
    under-used + failed, its part of the waste teams control)."""
    found = waste.job_waste(con, filters=filters, settings=s)
    return found.filter(pl.col("waste_usd") > 0).sort("waste_usd", descending=True).head(limit)


@cached("Loading jobs…")
def jobs_table(con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters) -> pl.DataFrame:
    """``analytics.jobs.jobs_table`` for the view (the same rows as ``gpuledger jobs --json``)."""
    return jobs.jobs_table(con, filters=filters, settings=s)


@cached("Loading jobs…")
def whatif_jobs(con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters) -> pl.DataFrame:
    """``analytics.whatif.whatif_jobs``: the view's jobs with the span and tier a what-if reprices by."""
    from analytics.whatif import whatif_jobs as read

    return read(con, filters=filters, settings=s)


@cached("Loading jobs…")
def whatif_days(con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters) -> float | None:
    """``analytics.whatif.period_days``: the view's days, as recommendations scale $/week."""
    from analytics.whatif import period_days

    return period_days(con, filters)


def job_timeline(job_id: str, lines: str) -> pl.DataFrame:
    """``analytics.timeline.job_timeline``: one line per GPU, per host, or the mean over the job's GPUs
    (``lines``: gpu, host, job; no rows for a job of a team the viewer may not see)."""
    if not _sees_job(job_id):
        return _job_timeline("", lines).clear()
    return _job_timeline(job_id, lines)


@cached(entries=64)
def _job_timeline(con: duckdb.DuckDBPyConnection, s: Settings, job_id: str, lines: str) -> pl.DataFrame:
    return timeline.job_timeline(con, job_id, lines=lines, max_lines=FLEET_GROUP_PAST)


def job(job_id: str) -> JobDetail | None:
    """One job for its page (:class:`JobDetail`); None when it is not in the ledger or belongs to a team the
    viewer may not see."""
    if not job_id or not _sees_job(job_id):
        return None
    return _job(job_id)


@cached("Loading the job…", entries=64)
def _job(con: duckdb.DuckDBPyConnection, s: Settings, job_id: str) -> JobDetail | None:
    return job_detail(con, job_id, settings=s)


# ---------------------------------------------------------------- fleet


@cached("Reading the fleet's telemetry…")
def fleet(con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters) -> Fleet:
    """The Fleet page's view (:class:`Fleet`), in one reader batch."""
    groups = timeline.view_groups(con, filters=filters)
    n_gpus = groups["gpus"]
    return Fleet(
        n_gpus=n_gpus,
        n_hosts=groups["hosts"],
        heatmap=timeline.gpu_hour_heatmap(con, filters=filters) if n_gpus <= FLEET_GROUP_PAST else None,
        idle=timeline.idle_gpus(con, filters=filters, settings=s),
        by_model=utilization.utilization_by(con, by="gpu_model", filters=filters, settings=s),
        by_cluster=utilization.utilization_by(con, by="cluster", filters=filters, settings=s),
    )


@cached("Reading the fleet's telemetry…")
def fleet_groups(
    con: duckdb.DuckDBPyConnection,
    s: Settings,
    filters: Filters,
    by: str,
    within: tuple[str, str | None] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """analytics.timeline.group_hour_heatmap (a row per host or cluster of the view, or of ``within``, the rest
    pooled past FLEET_GROUP_PAST) and group_sizes (every group with its GPU count, for the drill-down)."""
    return (
        timeline.group_hour_heatmap(con, by=by, filters=filters, within=within, max_groups=FLEET_GROUP_PAST),
        timeline.group_sizes(con, by=by, filters=filters, within=within),
    )


@cached()
def fleet_drill(
    con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters, within: tuple[tuple[str, str | None], ...]
) -> pl.DataFrame:
    """analytics.timeline.gpu_hour_heatmap of one group: ``within`` as (group, name) pairs (host in cluster)."""
    return timeline.gpu_hour_heatmap(con, filters=filters, within=within, max_gpus=FLEET_GROUP_PAST)


# ---------------------------------------------------------------- recommendations, diagnoses, training, reports


@cached("Looking for savings…")
def recommendations(con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters) -> pl.DataFrame:
    """``analytics.recommend.recommendations`` for the view: the list ``gpuledger recommend --json`` prints."""
    return recommend.recommendations(con, filters=filters, settings=s)


@cached("Following the actions across weeks…", entries=CACHE_VERSIONS)
def action_items(
    con: duckdb.DuckDBPyConnection, s: Settings, teams: tuple[str, ...] | None
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The items ``gpuledger actions --json`` lists, of ``teams`` (None: all), and their last complete week's
    groups: new, still open, done, the quarter's measured savings (gpuledger/items/tracker.py)."""
    from gpuledger.items import scan, tracker

    sc = scan.scan(con, settings=s)
    its = tracker.items(con, week_scan=sc)
    if teams is not None:
        its = [it for it in its if it["team"] in teams]
    week = tracker.groups(its, sc.weeks[-1], sc) if sc.weeks else None
    return [tracker.public(it) for it in its], week


@cached("Diagnosing jobs…")
def diagnoses(con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters) -> pl.DataFrame:
    """``analytics.diagnoses.diagnoses`` for the view: one row per (job, diagnosis) with its evidence."""
    return diagnoses_.diagnoses(con, filters=filters, settings=s)


@cached("Computing unit costs…")
def training(con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters) -> Training:
    """The Training page's view. The larger_batch kind alone, not the whole list: the same items for a
    fraction of the work (a 50 M-sample ledger: 2.4 s for the list, ~0.6 s for its batch items)."""
    return Training(
        unit_costs=unit_costs.job_unit_costs(con, filters=filters),
        batch=recommend.recommendations(con, filters=filters, settings=s, kinds=("larger_batch",)),
        weekly=unit_costs.weekly_usd_per_mtok(con, by="team", filters=filters),
    )


@cached("Writing the report…", entries=16)
def report(con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters) -> dict[str, str]:
    """The weekly report (gpuledger/reports/weekly.py) for the view in every format, from one analysis."""
    data = collect(con, filters=filters, settings=s)
    return {fmt: render(data, fmt) for fmt in FORMATS}


@cached()
def savings(con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters) -> dict[str, object]:
    """``gpuledger recommend --total --json`` for the view, over the list the Recommendations cache holds."""
    recs = recommendations(filters)
    total = recommend.savings_total(recs, whole=True)
    total["coverage"] = recommend.view_coverage(con, recs, filters=filters, settings=s)
    return total


# ---------------------------------------------------------------- guard


@cached("Replaying the policy…", entries=16)
def guard_replay(
    con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters, policy: Policy, since: Any, until: Any
) -> dict[str, Any]:
    """``gpuledger guard replay --json --policy NAME`` for the view's days, its jobs kept to the view's teams
    and clusters. The policy travels as an argument: it is not part of the settings' fingerprint."""
    out = guard_replay_(con, since=since, until=until, settings=s, policies=(policy,))["policies"][0]
    keep = [
        j
        for j in out["jobs"]
        if (not filters.teams or j["team"] in filters.teams)
        and (not filters.clusters or j["cluster"] in filters.clusters)
    ]
    return dict(out, jobs=keep)


@cached()
def guard_actions(
    con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """``gpuledger guard actions --json`` for the view: the steps taken and what the cancels saved."""
    kw = {
        "since": filters.since,
        "until": filters.until,
        "teams": filters.teams,
        "clusters": filters.clusters,
    }
    return guard_actions_.guard_actions(con, **kw), guard_actions_.guard_saved(con, **kw)


@cached("Forecasting the budgets…")
def budgets(con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters) -> list[dict[str, Any]]:
    """``gpuledger budgets --json`` rows; a view that names teams (a lead's always does) keeps those teams'."""
    from gpuledger.budgets.status import budget_rows

    rows = budget_rows(con, s)
    if filters.teams:
        rows = [r for r in rows if r["scope"] == "team" and r["target"] in filters.teams]
    return rows


@cached("Forecasting the month…")
def month_forecasts(con: duckdb.DuckDBPyConnection, s: Settings, filters: Filters) -> list[dict[str, Any]]:
    """``gpuledger budgets --forecast team:NAME --json`` for each team of the view (every team the ledger knows
    when the view names none), then ``--forecast fleet`` when it names none: the month's spend so far and its
    forecast, for the Budgets page of a view without a budget."""
    from gpuledger.budgets.status import as_of, forecast_row

    if as_of(con) is None:
        return []
    teams = filters.teams or tuple(known_names(con, "team"))
    specs = [f"team:{t}" for t in teams] + ([] if filters.teams else ["fleet"])
    return [forecast_row(con, spec, "month", s) for spec in specs]


@cached()
def budget_days(
    con: duckdb.DuckDBPyConnection, s: Settings, scope: str, target: str | None, first: dt.date, day: dt.date
) -> dict[dt.date, float]:
    """A budget's spend per day of its period up to ``day`` (the Budgets page's chart)."""
    from gpuledger.budgets.status import as_of, daily

    at = as_of(con, day)
    return {} if at is None else daily(con, scope, target, first, at, s)


# ---------------------------------------------------------------- upload


def analyse_upload(
    name: str,
    data: bytes,
    cluster: str | None,
    tz: str | None,
    gpu_model: str | None = None,
    gpu_count: float | None = None,
    wall_hours: float | None = None,
) -> UploadResult:
    """gpuledger.upload.analyse_isolated (a worker process within the settings' limits); ``gpu_model`` and
    ``gpu_count``, given on the page: the ingest option ``--gpu-model``/``--gpu-count``; ``wall_hours``: the
    run's wall time typed on the page for a log that records no runtime (collectors/gpu_facts.py)."""
    s = settings()
    gpu = gpu_facts(gpu_model, gpu_count, wall_hours or None) if gpu_model and gpu_count else None
    return _analyse_upload(name, data, cluster or None, tz or None, gpu, s.fingerprint(), s)


@bounded("Reading the file…", entries=16)
def _analyse_upload(
    name: str, data: bytes, cluster: str | None, tz: str | None, gpu: GpuFacts | None, fp: str, _s: Settings
) -> UploadResult:
    return analyse_isolated(name, data, _s, cluster=cluster, tz=tz, gpu=gpu)
