"""All of the dashboard's data access and Streamlit caching, in one place.

Why one module: the cache keys are the whole concurrency story (docs/concurrency.md). Every cached function
takes ``(db, version, ...)`` where ``version`` is :func:`gpuledger.ledger.db.data_version` — the ledger file's
(mtime, size), which changes with every commit — so the first page load after an ingest recomputes and no
page shows stale data forever. Each call asks :func:`gpuledger.ledger.db.reader` for a connection; within one
script run they share one (:func:`one_connection`, opened at the first cache miss and closed at the run's end),
so a writer (``gpuledger ingest``, a collector) only ever waits for one page run.

Functions here never compute a figure: they call the same analytics functions the CLI's ``--json`` prints
(``analytics.summary.summary``, ``analytics.waste``, ``analytics.recommend`` …) and pass the result through.
Arguments are hashable (``Filters`` is a frozen dataclass); the settings object is passed as ``_settings``
(not hashed) next to its fingerprint (hashed).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from dataclasses import dataclass
from typing import Any

import duckdb
import polars as pl
import streamlit as st

from analytics.filters import Filters
from gpuledger.ledger.access import Scope, resolve_scope
from gpuledger.ledger.db import data_version, one_reader, reader, resolve_db
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.prices import PriceBook, price_book
from gpuledger.ledger.settings import Settings, load_settings

# Every cache is bounded: its keys carry the ledger's version, which changes at every collector flush, so an
# unbounded cache grows for as long as a collector runs. An entry no rerun asked for in CACHE_TTL_S goes;
# max_entries bounds what one server holds at once (older views are evicted first).
CACHE_TTL_S = 1800
CACHE_VIEWS = 32  # filter views kept per data function (a view: ledger version x settings x filters)
CACHE_VERSIONS = 4  # ledger versions kept by the functions keyed on the version alone


@dataclass(frozen=True)
class Choices:
    """What the sidebar filters can offer: the ledger's teams, clusters and first/last UTC day."""

    teams: tuple[str, ...]
    clusters: tuple[str, ...]
    first_day: dt.date | None
    last_day: dt.date | None


# ---------------------------------------------------------------- the view: db, version, settings, filters


def db() -> str:
    """The ledger this server reads: ``$GPULEDGER_DB`` (set by ``gpuledger dashboard``) or the default."""
    return resolve_db(None)


def one_connection() -> contextlib.AbstractContextManager[None]:
    """One read-only connection for the data functions of this script run (app.py wraps the page in it),
    not one per function: :func:`gpuledger.ledger.db.one_reader`."""
    return one_reader(db())


def settings() -> Settings:
    """The user's settings; a broken settings file stops the page with the error sentence."""
    try:
        return load_settings(None)
    except LedgerError as exc:
        st.error(f"{exc}\n\nFix the settings file (docs/settings.md), then reload this page.")
        st.stop()
        raise  # not reached


def open_page(title: str, *, caption: bool = True) -> Filters:
    """How every ledger page starts: the router, the title, an empty state with a next step (then stop), and
    the view the sidebar filters chose, described under the title unless ``caption`` is False."""
    from pages import _ui

    _ui.require_router()
    st.title(title)
    if not has_data():
        _ui.empty_state()
        st.stop()
    filters = current_filters()
    if caption:
        st.caption(describe_filters(filters))
    return filters


def current_filters() -> Filters:
    """The sidebar's filters (bound to the URL query string by app.py) as analytics Filters, narrowed to
    the teams the signed-in person may see (:func:`scoped`)."""
    state = st.session_state
    since = state.get("since")
    until = state.get("until")
    if since and until and since > until:
        since, until = until, since
    return scoped(
        Filters(
            since=since,
            until=until,
            teams=tuple(sorted(state.get("team") or ())),
            clusters=tuple(sorted(state.get("cluster") or ())),
        )
    )


def describe_filters(filters: Filters) -> str:
    """The view in words, for ``st.caption`` (team and cluster names escaped: they are user data)."""
    from pages._ui import md

    parts = [
        f"{filters.since or 'start'} – {filters.until or 'latest'} (UTC)",
        "clusters: " + (", ".join(md(c) for c in filters.clusters) or "all"),
        "teams: " + (", ".join(md(t) for t in filters.teams) or "all"),
    ]
    return " · ".join(parts)


# ---------------------------------------------------------------- who is looking: sign-in and team scope


def sign_in_configured() -> bool:
    """True when the settings have ``[auth]``: nobody sees data without signing in."""
    return settings().auth is not None


def viewer() -> Scope | None:
    """None when sign-in is off (everyone who reaches the server sees the fleet, as before). Otherwise the
    signed-in person's Scope from their identity claims (``st.user``) and ``[access]``; a visitor who has
    not signed in gets a Scope that sees nothing."""
    s = settings()
    if s.auth is None:
        return None
    user = st.user.to_dict()
    if not user.get("is_logged_in"):
        return Scope(who="")
    return resolve_scope(s.access, user)


def scoped(filters: Filters) -> Filters:
    """``filters`` narrowed to what the viewer may see: an admin (or anyone, without sign-in) keeps them;
    a lead's team filter becomes the chosen teams among theirs, or all of theirs when none is chosen (never
    "all teams"); someone who may see nothing is stopped here. Every data function below passes its filters
    through this, so a page that builds its own Filters cannot widen the view either."""
    scope = viewer()
    if scope is None or scope.admin:
        return filters
    if not scope.sees_anything:
        _stop_unscoped()
    allowed = scope.teams
    teams = tuple(t for t in filters.teams if t in allowed) or allowed
    if teams == filters.teams:
        return filters
    return Filters(filters.since, filters.until, teams, filters.clusters, filters.users)


def _stop_unscoped() -> None:
    st.warning("Sign in with an account that is given a team to see this page.", icon=":material/lock:")
    st.stop()


def _job_in_scope(job_id: str) -> bool:
    scope = viewer()
    if scope is None or scope.admin:
        return True
    if not scope.sees_anything:
        _stop_unscoped()
    path, ver, _, _ = _ctx()
    return _job_team(path, ver, job_id) in scope.teams


@st.cache_data(show_spinner=False, max_entries=256, ttl=CACHE_TTL_S)
def _job_team(db_path: str, ver: tuple[int, int], job_id: str) -> str | None:
    with reader(db_path) as con:
        row = con.execute("SELECT team FROM jobs WHERE job_id = ?", [job_id]).fetchone()
    return row[0] if row else None


def _sync(db_path: str, s: Settings) -> None:
    _sync_reference(db_path, s.fingerprint(), s)


@st.cache_resource(show_spinner=False, max_entries=CACHE_VERSIONS, ttl=CACHE_TTL_S)
def _sync_reference(db_path: str, fingerprint: str, _settings: Settings) -> bool:
    """Mirror the price sheet and catalog of these settings into the ledger, once per settings version."""
    from gpuledger.ledger.db import sync_reference

    return sync_reference(db_path, _settings)


def _ctx() -> tuple[str, tuple[int, int], str, Settings]:
    path = db()
    s = settings()
    _sync(path, s)
    return path, data_version(path), s.fingerprint(), s


# ---------------------------------------------------------------- sidebar


def filter_choices() -> Choices:
    """The sidebar's choices; a lead's team list holds only their teams."""
    path, ver, _, _ = _ctx()
    choices = _filter_choices(path, ver)
    scope = viewer()
    if scope is None or scope.admin:
        return choices
    return Choices(scope.teams, choices.clusters, choices.first_day, choices.last_day)


@st.cache_data(show_spinner=False, max_entries=CACHE_VERSIONS, ttl=CACHE_TTL_S)
def _filter_choices(db_path: str, ver: tuple[int, int]) -> Choices:
    with reader(db_path) as con:
        teams = [
            r[0]
            for r in con.execute(
                "SELECT DISTINCT team FROM jobs WHERE team IS NOT NULL ORDER BY 1"
            ).fetchall()
        ]
        clusters = [
            r[0]
            for r in con.execute(
                """SELECT DISTINCT cluster FROM (SELECT cluster FROM jobs UNION ALL SELECT cluster FROM gpus)
                   WHERE cluster IS NOT NULL ORDER BY 1"""
            ).fetchall()
        ]
        lo, hi = con.execute(
            """SELECT least((SELECT min(start_ts) FROM jobs), (SELECT min(ts) FROM samples))::DATE,
                      greatest((SELECT max(coalesce(end_ts, start_ts)) FROM jobs), (SELECT max(ts) FROM samples))::DATE"""
        ).fetchall()[0]
    return Choices(tuple(teams), tuple(clusters), lo, hi)


def ledger_caption() -> str:
    path, ver, _, _ = _ctx()
    scope = viewer()
    if scope is not None and not scope.admin:  # the fleet's totals are not a lead's to see
        return f"Ledger `{os.path.basename(path)}`."
    return _ledger_caption(path, ver)


@st.cache_data(show_spinner=False, max_entries=CACHE_VERSIONS, ttl=CACHE_TTL_S)
def _ledger_caption(db_path: str, ver: tuple[int, int]) -> str:
    with reader(db_path) as con:
        jobs, samples, ingests = con.execute(
            "SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM samples), (SELECT count(*) FROM ingests)"
        ).fetchall()[0]
    name = os.path.basename(db_path)
    return f"Ledger `{name}`: {_count(jobs, 'job')}, {_count(samples, 'sample')} from {_count(ingests, 'ingest')}."


def _count(n: int, word: str) -> str:
    """``1 ingest``, ``3,555 jobs``."""
    return f"{n:,} {word}" + ("" if n == 1 else "s")


# ---------------------------------------------------------------- overview


def has_data() -> bool:
    path, ver, _, _ = _ctx()
    return _has_data(path, ver)


@st.cache_data(show_spinner=False, max_entries=CACHE_VERSIONS, ttl=CACHE_TTL_S)
def _has_data(db_path: str, ver: tuple[int, int]) -> bool:
    with reader(db_path) as con:
        return bool(con.execute("SELECT EXISTS (FROM jobs) OR EXISTS (FROM samples)").fetchall()[0][0])


def as_of() -> str | None:
    """The ledger's data horizon (analytics.filters.horizon) as ``summary --json`` prints it (``as_of``),
    for a page that needs only the date: a cold summary costs ~0.2 s on the 28-day demo, this one query."""
    path, ver, _, _ = _ctx()
    return _as_of(path, ver)


@st.cache_data(show_spinner=False, max_entries=CACHE_VERSIONS, ttl=CACHE_TTL_S)
def _as_of(db_path: str, ver: tuple[int, int]) -> str | None:
    from analytics.filters import horizon

    with reader(db_path) as con:
        when = horizon(con)
    return when.isoformat() if when else None


def summary(filters: Filters) -> dict[str, Any]:
    """``gpuledger summary --json`` for these filters (the same function, the same numbers)."""
    filters = scoped(filters)
    path, ver, fp, s = _ctx()
    return _summary(path, ver, fp, filters, s)


@st.cache_data(show_spinner="Computing the summary…", max_entries=CACHE_VIEWS, ttl=CACHE_TTL_S)
def _summary(
    db_path: str, ver: tuple[int, int], fp: str, filters: Filters, _settings: Settings
) -> dict[str, Any]:
    compute = _analytics("summary").summary
    with reader(db_path) as con, _sharing(con, db_path, ver):
        return compute(con, filters=filters, settings=_settings)


def _sharing(con: duckdb.DuckDBPyConnection, db_path: str, ver: tuple[int, int]) -> Any:
    """The view's intermediate results (unallocated capacity, per-job waste) computed once for all the data
    functions of this ledger version (analytics/shared.py), not once per function."""
    from analytics.shared import sharing

    return sharing(con, (db_path, ver))


class NotReady(Exception):
    """An analysis whose analytics module this install does not have (yet)."""


def _analytics(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(f"analytics.{module}")
    except ModuleNotFoundError as exc:
        if exc.name == f"analytics.{module}":
            raise NotReady(f"analytics/{module}.py is not part of this install yet") from exc
        raise


# ---------------------------------------------------------------- upload: an in-memory ledger per file


@dataclass(frozen=True)
class UploadResult:
    """What the Upload page shows for one file: the ingest report and the analyses, or the error sentence."""

    name: str
    error: str | None = None
    ingest: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    jobs: pl.DataFrame | None = None
    timeline: pl.DataFrame | None = None
    # past FLEET_GROUP_PAST GPUs on several hosts: one line per host, and each GPU's host (key)
    timeline_groups: pl.DataFrame | None = None
    gpu_groups: pl.DataFrame | None = None
    # a host of more than FLEET_GROUP_PAST GPUs: its GPUs' lines, pooled past that
    group_gpus: dict[str | None, pl.DataFrame] | None = None
    recommendations: pl.DataFrame | None = None
    missing: tuple[str, ...] = ()  # analyses this install lacks
    needs_gpu: tuple[str, ...] = ()  # jobs (training logs) that name no GPU model or count: ask for them
    gpu_assumed: str | None = None  # what was assumed for them, in words, when the page gave the GPU facts


def _safe_name(name: str) -> str:
    base = os.path.basename(name.replace("\\", "/")).strip() or "upload"
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in base)


def _error_sentence(exc: LedgerError, tmp_path: str, name: str) -> str:
    """The CLI's ``FILE:LINE: reason`` with the uploaded file's own name instead of the temp copy's path."""
    from gpuledger.ledger.errors import FormatError

    if isinstance(exc, FormatError):
        return f"{name}:{exc.line}: {exc.reason}" if exc.line is not None else f"{name}: {exc.reason}"
    return str(exc).replace(tmp_path, name)


def limit_upload_memory(con: duckdb.DuckDBPyConnection, s: Settings, spill_dir: str) -> None:
    """One upload may not take the server down: past ``dashboard.upload_memory_mb`` DuckDB spills into the
    upload's own temp folder (removed with it) or fails with an out-of-memory error, shown as a sentence."""
    con.execute(f"SET memory_limit = '{int(s.upload_memory_mb)}MB'")  # an int: nothing to inject
    con.execute("SET temp_directory = ?", [spill_dir])


def analyse_upload(
    name: str,
    data: bytes,
    cluster: str | None,
    tz: str | None,
    gpu_model: str | None = None,
    gpu_count: float | None = None,
) -> UploadResult:
    """The upload's analysis; ``gpu_model``/``gpu_count``: what ran the file's jobs that name no GPU (a
    training log), given on the page, so the run can be priced."""
    s = settings()
    gpu = (gpu_model, float(gpu_count)) if gpu_model and gpu_count else None
    return _analyse_upload(name, data, cluster or None, tz or None, s.fingerprint(), s, gpu)


_NO_GPU_SQL = "FROM jobs WHERE gpu_model IS NULL OR coalesce(gpu_count, 0) = 0"


def _assume_gpu(con: duckdb.DuckDBPyConnection, gpu: tuple[str, float]) -> str | None:
    """Give the jobs that name no GPU the page's model and count; a job with no start or end (a training
    log's summary) runs for its logged runtime, ending now (the log does not say when it ran, so today's
    price applies). Returns the assumption in words, or None when no job could be priced."""
    import datetime as dt_

    end = dt_.datetime.now(dt_.UTC).replace(tzinfo=None, microsecond=0)
    rows = con.execute(
        f"""SELECT j.job_id, r.runtime_s, j.start_ts, j.end_ts
            FROM jobs j LEFT JOIN training_runs r USING (job_id)
            WHERE j.job_id IN (SELECT job_id {_NO_GPU_SQL})"""
    ).fetchall()
    timed = [r for r in rows if (r[2] is not None and r[3] is not None) or r[1]]
    if not timed:
        return None
    con.execute(
        f"""UPDATE jobs SET gpu_model = ?, gpu_count = ?,
                start_ts = coalesce(start_ts, ?::TIMESTAMP - to_seconds(
                    (SELECT round(runtime_s)::BIGINT FROM training_runs r WHERE r.job_id = jobs.job_id))),
                end_ts = coalesce(end_ts, ?::TIMESTAMP)
            WHERE job_id IN (SELECT job_id {_NO_GPU_SQL})""",
        [gpu[0], gpu[1], end, end],
    )
    hours = sum((r[1] or 0.0) for r in timed) / 3600.0
    return (
        f"{gpu[1]:g} × {gpu[0]} for the logged runtime ({hours:,.2f} h), at the price in force today "
        "(the log does not say when it ran)"
    )


@st.cache_data(show_spinner="Reading the file…", max_entries=16, ttl=CACHE_TTL_S)
def _analyse_upload(
    name: str,
    data: bytes,
    cluster: str | None,
    tz: str | None,
    fp: str,
    _settings: Settings,
    gpu: tuple[str, float] | None = None,
) -> UploadResult:
    """Ingest a copy of the uploaded bytes into an in-memory ledger and run the Overview's analyses on it.

    The fleet's ledger file is never touched. The copy keeps the uploaded name (parsers sniff by it too).
    """
    import tempfile

    from collectors.base import IngestOptions
    from collectors.ingest import ingest_file
    from gpuledger.ledger.db import memory_ledger
    from gpuledger.ledger.reference import load_reference

    opts = IngestOptions.from_settings(_settings, cluster=cluster, tz=tz)
    with tempfile.TemporaryDirectory(prefix="gpuledger-upload-") as tmp:
        path = os.path.join(tmp, _safe_name(name))
        with open(path, "wb") as fh:
            fh.write(data)
        con = memory_ledger()
        try:
            limit_upload_memory(con, _settings, tmp)
            con.execute("BEGIN TRANSACTION")
            load_reference(con, _settings)
            con.execute("COMMIT")
            try:
                report = ingest_file(con, path, opts=opts)
            except LedgerError as exc:
                return UploadResult(name, error=_error_sentence(exc, path, name))
            except duckdb.OutOfMemoryException:
                return UploadResult(
                    name,
                    error=f"{name}: reading it needs more than the upload's memory limit "
                    f"({int(_settings.upload_memory_mb):,} MB, dashboard.upload_memory_mb in the settings)",
                )
            ingest = report.as_dict() | {"path": name}
            no_gpu = tuple(r[0] for r in con.execute(f"SELECT job_id {_NO_GPU_SQL} ORDER BY 1").fetchall())
            assumed = _assume_gpu(con, gpu) if gpu and no_gpu else None
            filters = Filters()
            missing: list[str] = []
            out: dict[str, Any] = {}
            for key, fn in (
                ("summary", lambda: _analytics("summary").summary(con, filters=filters, settings=_settings)),
                ("jobs", lambda: _jobs_table(con, filters, _settings)),
                ("recommendations", lambda: _recommendations(con, filters, _settings)),
            ):
                try:
                    out[key] = fn()
                except NotReady as exc:
                    missing.append(str(exc))
            out.update(_upload_timelines(con, filters))
            return UploadResult(
                name,
                ingest=ingest,
                missing=tuple(missing),
                needs_gpu=no_gpu,
                gpu_assumed=assumed,
                **out,
            )
        finally:
            con.close()


# ---------------------------------------------------------------- weeks, waste


def weeks_of(filters: Filters) -> list[tuple[str, Filters]]:
    """The ISO weeks of the view, each as (``YYYY-Www``, the view's filters narrowed to that week)."""
    filters = scoped(filters)
    c = filter_choices()
    first = filters.since or c.first_day
    last = filters.until or c.last_day
    if first is None or last is None:
        return []
    out = []
    monday = first - dt.timedelta(days=first.isoweekday() - 1)
    while monday <= last:
        y, w, _ = monday.isocalendar()
        since = max(first, monday)
        until = min(last, monday + dt.timedelta(days=6))
        out.append((f"{y}-W{w:02d}", Filters(since, until, filters.teams, filters.clusters, filters.users)))
        monday += dt.timedelta(days=7)
    return out


def waste_by_team_week(filters: Filters) -> pl.DataFrame:
    """``analytics.waste.waste_by_week(by="team")`` for the view: columns week, team, spend_usd, the
    taxonomy's parts and waste_usd. Each job's cost is cut at week boundaries (one query for all weeks), so
    the rows sum exactly to the view's spend; rows under half a cent are left out."""
    filters = scoped(filters)
    path, ver, fp, s = _ctx()
    return _waste_by_team_week(path, ver, fp, filters, s)


@st.cache_data(show_spinner="Splitting the spend by team and week…", max_entries=CACHE_VIEWS, ttl=CACHE_TTL_S)
def _waste_by_team_week(
    db_path: str, ver: tuple[int, int], fp: str, filters: Filters, _settings: Settings
) -> pl.DataFrame:
    with reader(db_path) as con, _sharing(con, db_path, ver):
        out = _analytics("waste").waste_by_week(con, by="team", filters=filters, settings=_settings)
    out = out.rename({"key": "team"})
    return out.filter(pl.col("spend_usd").abs() > 0.005).sort("week", "team")


def spend_by_team_week(filters: Filters) -> pl.DataFrame:
    """week, team, cost_usd — the Overview's stacked bars: ``analytics.waste.spend_by_week(by="team")``, the
    spend of :func:`waste_by_team_week` without the waste parts the bars do not show (rows under half a cent
    left out)."""
    filters = scoped(filters)
    path, ver, fp, s = _ctx()
    return _spend_by_team_week(path, ver, fp, filters, s)


@st.cache_data(show_spinner="Splitting the spend by team and week…", max_entries=CACHE_VIEWS, ttl=CACHE_TTL_S)
def _spend_by_team_week(
    db_path: str, ver: tuple[int, int], fp: str, filters: Filters, _settings: Settings
) -> pl.DataFrame:
    with reader(db_path) as con, _sharing(con, db_path, ver):
        out = _analytics("waste").spend_by_week(con, by="team", filters=filters, settings=_settings)
    out = out.filter(pl.col("spend_usd").abs() > 0.005).sort("week", "key")
    return out.select("week", pl.col("key").alias("team"), pl.col("spend_usd").alias("cost_usd"))


def waste_by(filters: Filters, by: str) -> pl.DataFrame:
    """``analytics.waste.waste_by`` for the view (key, spend_usd, the parts, waste_usd)."""
    filters = scoped(filters)
    path, ver, fp, s = _ctx()
    return _waste_by(path, ver, fp, filters, by, s)


@st.cache_data(show_spinner=False, max_entries=CACHE_VIEWS, ttl=CACHE_TTL_S)
def _waste_by(
    db_path: str, ver: tuple[int, int], fp: str, filters: Filters, by: str, _settings: Settings
) -> pl.DataFrame:
    with reader(db_path) as con, _sharing(con, db_path, ver):
        return _analytics("waste").waste_by(con, by=by, filters=filters, settings=_settings)


def top_wasted_jobs(filters: Filters, limit: int = 20) -> pl.DataFrame:
    """The view's jobs with the most wasted $ (``analytics.waste.job_waste``, sorted by waste_usd)."""
    filters = scoped(filters)
    path, ver, fp, s = _ctx()
    return _top_wasted_jobs(path, ver, fp, filters, limit, s)


@st.cache_data(show_spinner=False, max_entries=CACHE_VIEWS, ttl=CACHE_TTL_S)
def _top_wasted_jobs(
    db_path: str, ver: tuple[int, int], fp: str, filters: Filters, limit: int, _settings: Settings
) -> pl.DataFrame:
    with reader(db_path) as con, _sharing(con, db_path, ver):
        return _top_wasted(con, filters, _settings, limit)


def _top_wasted(con: Any, filters: Filters, s: Settings, limit: int) -> pl.DataFrame:
    jobs = _analytics("waste").job_waste(con, filters=filters, settings=s)
    return jobs.filter(pl.col("waste_usd") > 0).sort("waste_usd", descending=True).head(limit)


# ---------------------------------------------------------------- jobs


def jobs_table(filters: Filters) -> pl.DataFrame:
    """``analytics.jobs.jobs_table`` for the view (the same rows as ``gpuledger jobs --json``)."""
    filters = scoped(filters)
    path, ver, fp, s = _ctx()
    return _jobs_table_cached(path, ver, fp, filters, s)


@st.cache_data(show_spinner="Loading jobs…", max_entries=CACHE_VIEWS, ttl=CACHE_TTL_S)
def _jobs_table_cached(
    db_path: str, ver: tuple[int, int], fp: str, filters: Filters, _settings: Settings
) -> pl.DataFrame:
    with reader(db_path) as con, _sharing(con, db_path, ver):
        return _jobs_table(con, filters, _settings)


def _jobs_table(con: Any, filters: Filters, s: Settings) -> pl.DataFrame:
    return _analytics("jobs").jobs_table(con, filters=filters, settings=s)


def job_timeline(job_id: str, lines: str) -> pl.DataFrame:
    """``analytics.timeline.job_timeline``: one line per GPU, per host, or the mean over the job's GPUs
    (``lines``: gpu, host, job; no rows for a job of a team the viewer may not see)."""
    path, ver, _, _ = _ctx()
    if not _job_in_scope(job_id):
        return _job_timeline(path, ver, "", lines).clear()
    return _job_timeline(path, ver, job_id, lines)


@st.cache_data(show_spinner=False, max_entries=64, ttl=CACHE_TTL_S)
def _job_timeline(db_path: str, ver: tuple[int, int], job_id: str, lines: str) -> pl.DataFrame:
    from analytics.timeline import job_timeline as compute

    with reader(db_path) as con:
        return compute(con, job_id, lines=lines, max_lines=FLEET_GROUP_PAST)


# ---------------------------------------------------------------- fleet


FLEET_GROUP_PAST = 60  # more GPUs than this in the view: the heatmap has one row per host or cluster


def fleet(filters: Filters) -> dict[str, Any]:
    """n_gpus and n_hosts (GPUs with telemetry in the view and the hosts they sit in,
    analytics.timeline.view_groups), heatmap (per GPU,
    analytics.timeline.gpu_hour_heatmap; only when n_gpus <= FLEET_GROUP_PAST, else None: see
    :func:`fleet_groups`), idle (idle_gpus), by_model and by_cluster (analytics.utilization.utilization_by)
    for the view, in one reader batch."""
    filters = scoped(filters)
    path, ver, fp, s = _ctx()
    return _fleet(path, ver, fp, filters, s)


@st.cache_data(show_spinner="Reading the fleet's telemetry…", max_entries=CACHE_VIEWS, ttl=CACHE_TTL_S)
def _fleet(
    db_path: str, ver: tuple[int, int], fp: str, filters: Filters, _settings: Settings
) -> dict[str, Any]:
    from analytics.timeline import gpu_hour_heatmap, idle_gpus, view_groups

    util = _analytics("utilization")
    with reader(db_path) as con, _sharing(con, db_path, ver):
        groups = view_groups(con, filters=filters)
        n_gpus = groups["gpus"]
        heat = gpu_hour_heatmap(con, filters=filters) if n_gpus <= FLEET_GROUP_PAST else None
        return {
            "n_gpus": n_gpus,
            "n_hosts": groups["hosts"],
            "heatmap": heat,
            "idle": idle_gpus(con, filters=filters),
            "by_model": util.utilization_by(con, by="gpu_model", filters=filters, settings=_settings),
            "by_cluster": util.utilization_by(con, by="cluster", filters=filters, settings=_settings),
        }


def fleet_groups(
    filters: Filters, by: str, within: tuple[str, str | None] | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """analytics.timeline.group_hour_heatmap: one heatmap row per host or cluster (``by``) over every GPU
    of the view (``within``: of one cluster), aggregated in DuckDB, at most FLEET_GROUP_PAST rows (the rest
    pooled); and analytics.timeline.group_sizes: every group of the view with its GPU count, pooled or not,
    for the drill-down."""
    filters = scoped(filters)
    path, ver, _, _ = _ctx()
    return _fleet_groups(path, ver, filters, by, within)


@st.cache_data(show_spinner="Reading the fleet's telemetry…", max_entries=CACHE_VIEWS, ttl=CACHE_TTL_S)
def _fleet_groups(
    db_path: str, ver: tuple[int, int], filters: Filters, by: str, within: tuple[str, str | None] | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    from analytics.timeline import group_hour_heatmap, group_sizes

    with reader(db_path) as con:
        return (
            group_hour_heatmap(con, by=by, filters=filters, within=within, max_groups=FLEET_GROUP_PAST),
            group_sizes(con, by=by, filters=filters, within=within),
        )


def fleet_drill(filters: Filters, within: tuple[tuple[str, str | None], ...]) -> pl.DataFrame:
    """The per-GPU heatmap (analytics.timeline.gpu_hour_heatmap) of one group of the view: ``within`` as
    (group, name) pairs, e.g. a host inside one cluster, so an unnamed host is that cluster's alone."""
    filters = scoped(filters)
    path, ver, _, _ = _ctx()
    return _fleet_drill(path, ver, filters, within)


@st.cache_data(show_spinner=False, max_entries=CACHE_VIEWS, ttl=CACHE_TTL_S)
def _fleet_drill(
    db_path: str, ver: tuple[int, int], filters: Filters, within: tuple[tuple[str, str | None], ...]
) -> pl.DataFrame:
    from analytics.timeline import gpu_hour_heatmap

    with reader(db_path) as con:
        return gpu_hour_heatmap(con, filters=filters, within=within, max_gpus=FLEET_GROUP_PAST)


def _upload_timelines(con: Any, filters: Filters) -> dict[str, Any]:
    """The Upload page's timelines, each computed once: per GPU (``timeline``) up to FLEET_GROUP_PAST GPUs,
    or when they all sit on one host (pooled past that: one line for the only host says nothing); else also
    per host (``timeline_groups``, at most FLEET_GROUP_PAST lines, the hosts with the most unused GPU-hours
    and one line for the rest), which host each GPU is on (``gpu_groups``, the drill-down), and the pooled
    GPU lines of each host of more GPUs than that (``group_gpus``)."""
    from analytics.timeline import gpu_groups, gpu_timeline, group_sizes, group_timeline, view_groups

    n = view_groups(con, filters=filters)
    if n["gpus"] <= FLEET_GROUP_PAST or n["hosts"] == 1:
        return {"timeline": gpu_timeline(con, filters=filters, max_gpus=FLEET_GROUP_PAST)}
    sizes = group_sizes(con, by="host", filters=filters)  # GPUs with telemetry in the view, per host
    big = sizes.filter(pl.col("gpus") > FLEET_GROUP_PAST)["key"].to_list()
    return {
        "timeline": gpu_timeline(con, filters=filters),
        "timeline_groups": group_timeline(con, by="host", filters=filters, max_groups=FLEET_GROUP_PAST),
        "gpu_groups": gpu_groups(con, by="host"),
        "group_gpus": {
            key: gpu_timeline(con, filters=filters, within=("host", key), max_gpus=FLEET_GROUP_PAST)
            for key in big
        },
    }


# ---------------------------------------------------------------- recommendations, diagnoses, training


def _recommendations(con: Any, filters: Filters, s: Settings) -> pl.DataFrame:
    return _analytics("recommend").recommendations(con, filters=filters, settings=s)


def recommendations(filters: Filters) -> pl.DataFrame:
    """``analytics.recommend.recommendations`` for the view: the ranked list ``gpuledger recommend --json`` prints."""
    filters = scoped(filters)
    path, ver, fp, s = _ctx()
    return _recommendations_cached(path, ver, fp, filters, s)


@st.cache_data(show_spinner="Looking for savings…", max_entries=CACHE_VIEWS, ttl=CACHE_TTL_S)
def _recommendations_cached(
    db_path: str, ver: tuple[int, int], fp: str, filters: Filters, _settings: Settings
) -> pl.DataFrame:
    with reader(db_path) as con, _sharing(con, db_path, ver):
        return _recommendations(con, filters, _settings)


def diagnoses(filters: Filters) -> pl.DataFrame:
    """``analytics.diagnoses.diagnoses`` for the view: one row per (job, diagnosis) with its evidence."""
    filters = scoped(filters)
    path, ver, fp, s = _ctx()
    return _diagnoses(path, ver, fp, filters, s)


@st.cache_data(show_spinner="Diagnosing jobs…", max_entries=CACHE_VIEWS, ttl=CACHE_TTL_S)
def _diagnoses(
    db_path: str, ver: tuple[int, int], fp: str, filters: Filters, _settings: Settings
) -> pl.DataFrame:
    with reader(db_path) as con, _sharing(con, db_path, ver):  # the view's signals, as recommendations' are
        return _analytics("diagnoses").diagnoses(con, filters=filters, settings=_settings)


def training(filters: Filters) -> dict[str, pl.DataFrame]:
    """unit_costs (analytics.unit_costs.job_unit_costs: $ per 1M tokens, MFU per run) and batch (the larger_batch
    recommendations of analytics.recommend) for the view."""
    filters = scoped(filters)
    path, ver, fp, s = _ctx()
    return _training(path, ver, fp, filters, s)


@st.cache_data(show_spinner="Computing unit costs…", max_entries=CACHE_VIEWS, ttl=CACHE_TTL_S)
def _training(
    db_path: str, ver: tuple[int, int], fp: str, filters: Filters, _settings: Settings
) -> dict[str, pl.DataFrame]:
    unit_costs = _analytics("unit_costs")
    # in the view's sharing block: its per-job costs become the temp table the recommendations read too
    recommend = _analytics("recommend")
    with reader(db_path) as con, _sharing(con, db_path, ver):
        out = {"unit_costs": unit_costs.job_unit_costs(con, filters=filters)}
        # the larger_batch kind alone, not the whole list the Overview and Recommendations pages share: the
        # same items (their counted $ aside, which this page does not show) for a fraction of the work (a
        # 50 M-sample ledger: 2.4 s for the list, ~0.6 s for its batch items)
        out["batch"] = recommend.recommendations(
            con, filters=filters, settings=_settings, kinds=("larger_batch",)
        )
    return out


# ---------------------------------------------------------------- reports


def report(filters: Filters) -> dict[str, str]:
    """The weekly report (gpuledger/reports/weekly.py) for the view in every format (weekly.FORMATS: html, md,
    csv, json, txt), from one analysis."""
    filters = scoped(filters)
    path, ver, fp, s = _ctx()
    return _report(path, ver, fp, filters, s)


@st.cache_data(show_spinner="Writing the report…", max_entries=16, ttl=CACHE_TTL_S)
def _report(
    db_path: str, ver: tuple[int, int], fp: str, filters: Filters, _settings: Settings
) -> dict[str, str]:
    from gpuledger.reports.weekly import FORMATS, collect, render

    try:
        with reader(db_path) as con, _sharing(con, db_path, ver):
            data = collect(con, filters=filters, settings=_settings)
    except ModuleNotFoundError as exc:
        raise NotReady(f"{exc.name} is not part of this install yet") from exc
    return {fmt: render(data, fmt) for fmt in FORMATS}


# ---------------------------------------------------------------- overview: the previous period, savings, capacity


def view_period(filters: Filters) -> Filters:
    """The view with its open ends closed at the ledger's first/last day (the period the figures cover)."""
    c = filter_choices()
    since = filters.since or c.first_day
    until = filters.until or c.last_day
    return Filters(since, until, filters.teams, filters.clusters, filters.users)


def previous_summary(filters: Filters) -> tuple[Filters | None, dict[str, Any] | None]:
    """The period of equal length just before the view (gpuledger.reports.content.previous_period, what the
    report's change column uses) and ``summary --json`` for it; (None, None) when the view has no dates."""
    from gpuledger.reports.content import previous_period

    prev = previous_period(view_period(filters))
    if prev is None:
        return None, None
    return prev, summary(prev)


def savings(filters: Filters) -> dict[str, Any]:
    """``gpuledger recommend --total --json`` for the view: analytics.savings.savings_total plus coverage."""
    filters = scoped(filters)
    path, ver, fp, s = _ctx()
    return _savings(path, ver, fp, filters, s)


@st.cache_data(show_spinner=False, max_entries=CACHE_VIEWS, ttl=CACHE_TTL_S)
def _savings(
    db_path: str, ver: tuple[int, int], fp: str, filters: Filters, _settings: Settings
) -> dict[str, Any]:
    rec = _analytics("recommend")
    # the same list the Recommendations cache holds (computed once for both, not again here)
    recs = _recommendations_cached(db_path, ver, fp, filters, _settings)
    with reader(db_path) as con, _sharing(con, db_path, ver):
        total = rec.savings_total(recs, whole=True)
        total["coverage"] = rec.view_coverage(con, recs, filters=filters, settings=_settings)
    return total


def capacity(filters: Filters) -> pl.DataFrame:
    """``analytics.waste.unallocated`` for the view: paid-for capacity per cluster and GPU model (no rows
    for a team view that leaves out "unallocated")."""
    filters = scoped(filters)
    path, ver, fp, s = _ctx()
    return _capacity(path, ver, fp, filters, s)


@st.cache_data(show_spinner=False, max_entries=CACHE_VIEWS, ttl=CACHE_TTL_S)
def _capacity(
    db_path: str, ver: tuple[int, int], fp: str, filters: Filters, _settings: Settings
) -> pl.DataFrame:
    with reader(db_path) as con, _sharing(con, db_path, ver):
        return _analytics("waste").unallocated(con, filters=filters, settings=_settings)


def job(job_id: str) -> dict[str, Any] | None:
    """One job for its page: ``row`` (its row of ``gpuledger jobs --json``), ``stretches`` (its idle stretches,
    analytics.job_signals.idle_stretches: gpu_id, start_ts, end_ts, idle_s), ``diagnoses`` and
    ``recommendations`` (the rows of the view of the job's own days that name it). None when the job is
    not in the ledger or belongs to a team the viewer may not see."""
    if not job_id or not _job_in_scope(job_id):
        return None
    path, ver, fp, s = _ctx()
    return _job(path, ver, fp, job_id, s)


@st.cache_data(show_spinner="Loading the job…", max_entries=64, ttl=CACHE_TTL_S)
def _job(
    db_path: str, ver: tuple[int, int], fp: str, job_id: str, _settings: Settings
) -> dict[str, Any] | None:
    from analytics.job_signals import idle_stretches
    from analytics.query import frame

    with reader(db_path) as con, _sharing(con, db_path, ver):
        row = con.execute(
            "SELECT start_ts::DATE, coalesce(end_ts, start_ts)::DATE, team FROM jobs WHERE job_id = ?",
            [job_id],
        ).fetchone()
        if row is None:
            return None
        f = Filters(since=row[0], until=row[1], teams=(row[2],) if row[2] else ())
        table = _jobs_table(con, f, _settings).filter(pl.col("job_id") == job_id)
        if table.is_empty():
            return None
        stretches = idle_stretches(con, filters=f, settings=_settings).filter(pl.col("job_id") == job_id)
        try:
            diags = _analytics("diagnoses").diagnoses(con, filters=f, settings=_settings)
            diags = diags.filter(pl.col("job_id") == job_id)
        except NotReady:
            diags = pl.DataFrame()
        recs = _recommendations(con, f, _settings)
        recs = recs.filter(pl.col("job_ids").list.contains(job_id))
        run = frame(con, "SELECT * FROM training_runs WHERE job_id = ?", [job_id])
        curve = frame(
            con,
            "SELECT step, ts, loss, eval_loss, learning_rate FROM train_log WHERE job_id = ? ORDER BY step, ts",
            [job_id],
        )
    return {
        "row": table.row(0, named=True),
        "stretches": stretches,
        "diagnoses": diags,
        "recommendations": recs,
        "training_run": run.row(0, named=True) if run.height else None,
        "train_log": curve,
    }


def settings_file() -> tuple[str, str]:
    """The settings file in use and where that choice came from (gpuledger.ledger.paths.choose_settings);
    with none, the user's ``~/.config/gpuledger/settings.toml`` (created on the first edit)."""
    from gpuledger.ledger.paths import choose_settings, user_config_dir

    chosen = choose_settings(None)
    if chosen.path is None:
        return str(user_config_dir() / "settings.toml"), "none yet: the first edit creates the user's file"
    return chosen.path, chosen.origin


def prices_in_force() -> PriceBook:
    """The ledger's prices in force (gpuledger.ledger.prices: the sheet, the settings and the prices sources
    declared, cluster rows included), the one book every page prices with."""
    path, ver, _, _ = _ctx()
    return _prices_in_force(path, ver)


@st.cache_data(show_spinner=False, max_entries=CACHE_VERSIONS, ttl=CACHE_TTL_S)
def _prices_in_force(db_path: str, ver: tuple[int, int]) -> PriceBook:
    with reader(db_path) as con:
        return price_book(con)
