"""Utilization over time, for the fleet views: per-GPU per-hour heatmap, idle GPUs, one job's timeline.

All three read the rollups (gpuledger/ledger/rollup.py: the heatmaps ``samples_hour``, the idle GPUs
``samples_day``, a job's timeline ``samples_minute``), which store sums, so each figure is an exact
re-aggregation of the raw samples: mean utilization of a cell =
``Σ util_s / Σ util_cov_s × 100`` (time-weighted over samples with a reading; a cell with no reading is
NULL, never 0). ``idle_s`` in the rollup counts samples at or under the idle threshold the rollup was built
with (settings ``idle_util_pct``); it is *not* the idle-stretch rule of the waste taxonomy (that needs runs
of ≥ ``idle_min_minutes``; analytics/utilization.py and analytics/waste.py apply it).

Filters: the date range selects minutes in ``[since, until + 1 day)``; cluster selects GPUs of that cluster
(``gpus.cluster``, else the cluster of the job the minute is attributed to); team and user select minutes
attributed to a job of that team/user (a team filter therefore hides unallocated GPU time).
"""

from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from analytics.filters import Filters
from analytics.query import frame
from gpuledger.ledger.prices import price_book
from gpuledger.ledger.settings import Settings


def _where(filters: Filters, time_col: str = "m.minute") -> tuple[str, list[object]]:
    parts = ["TRUE"]
    params: list[object] = []
    if filters.lo:
        parts.append(f"{time_col} >= ?::TIMESTAMP")
        params.append(filters.lo)
    if filters.hi:
        parts.append(f"{time_col} < ?::TIMESTAMP")
        params.append(filters.hi)
    if filters.clusters:
        marks = ", ".join("?" for _ in filters.clusters)
        parts.append(f"coalesce(g.cluster, j.cluster) IN ({marks})")
        params.extend(filters.clusters)
    for column, values in (("team", filters.teams), ("user_name", filters.users)):
        if values:
            marks = ", ".join("?" for _ in values)
            parts.append(f"j.{column} IN ({marks})")
            params.extend(values)
    return " AND ".join(parts), params


ALL = Filters()  # the whole ledger

# The rollup tables a view reads (gpuledger/ledger/rollup.py), by grain: the same sums per (GPU, job) and
# minute, whole hour or day. The table name is inlined into the SQL, so only these are accepted.
ROLLUPS = {"minute": "samples_minute", "hour": "samples_hour", "day": "samples_day"}


def _rollup(grain: str) -> str:
    """The rollup table of ``grain`` (ROLLUPS); a ValueError for any other grain."""
    if grain not in ROLLUPS:
        raise ValueError(f"unknown grain {grain!r}; use one of {', '.join(ROLLUPS)}")
    return ROLLUPS[grain]


def _from(grain: str = "minute") -> str:
    """The rollup of ``grain`` as ``m``, with its GPU (``g``) and its job (``j``): what every filter of
    :func:`_where` can read."""
    return f"{_rollup(grain)} m LEFT JOIN gpus g USING (gpu_id) LEFT JOIN jobs j ON j.job_id = m.job_id"


def _from_for(filters: Filters, grain: str = "minute") -> str:
    """:func:`_from` without the joins this view's filters do not need (the heatmap's 4.5 M minute rows of
    a 28-day, 112-GPU fleet aggregate a third faster without them). Over the hour rollup (a cell is the same
    re-aggregation) or the day rollup, a view's bounds are midnights, so its hours and days hold exactly its
    minutes."""
    if filters.clusters:
        return _from(grain)
    if filters.teams or filters.users:
        return f"{_rollup(grain)} m LEFT JOIN jobs j ON j.job_id = m.job_id"
    return f"{_rollup(grain)} m"


HEATMAP_COLUMNS = {
    "gpu_id": "GPU (UUID, else host:index)",
    "gpu_label": "host:index (gpu_label_sql: the one name pages give a GPU); NULL on the pooled row",
    "host": "host of the GPU (NULL when the source names none)",
    "gpu_model": "catalog model (NULL when unknown)",
    "hour": "UTC hour (start)",
    "mean_util_pct": "time-weighted mean utilization in the hour; NULL when no sample had a reading",
    "covered_s": "seconds of telemetry in the hour",
    "held_idle_s": "seconds at or under the idle threshold while a job held the GPU",
    "unallocated_s": "seconds of telemetry while no job held the GPU",
    "others": "0 for one GPU; N for the row pooling the N GPUs ranked from ``max_gpus`` on (gpu_id NULL)",
}

# What a heatmap cell shows (:func:`cell_state`), each drawn in its own colour (gpuledger/ledger/palette.py
# HEATMAP_STATE_COLOURS): the two kinds of unused time are different problems with different owners.
CELL_STATES = {
    "unallocated": "no job held the GPU for at least half of the cell's telemetry seconds (capacity nobody "
    "held: the platform's to release or share)",
    "idle_held": "otherwise, a job held the GPU and at least half of the cell's telemetry seconds were at or "
    "under the idle threshold (the job's team's to fix)",
    "busy": "otherwise: drawn by its mean utilization",
}
# the sums of the hour rollup's rows that decide a cell's state (every heatmap query selects them)
_STATE_SUMS = """sum(m.idle_s) FILTER (WHERE m.job_id IS NOT NULL) AS held_idle_s,
               sum(m.covered_s) FILTER (WHERE m.job_id IS NULL) AS unallocated_s"""


def cell_state(
    covered: str = "covered_s", held_idle: str = "held_idle_s", unallocated: str = "unallocated_s"
) -> pl.Expr:
    """A heatmap cell's state (CELL_STATES) from its sums: the one place the rule lives (the Fleet page
    applies it after pooling rows whose labels coincide, so it works on sums, never on shares)."""
    cov = pl.col(covered).fill_null(0)
    return (
        pl.when((pl.col(unallocated).fill_null(0) * 2 >= cov) & (cov > 0))
        .then(pl.lit("unallocated"))
        .when((pl.col(held_idle).fill_null(0) * 2 >= cov) & (cov > 0))
        .then(pl.lit("idle_held"))
        .otherwise(pl.lit("busy"))
    )


GROUPS = {"host": "g.host", "cluster": "g.cluster"}  # the GPU's own (gpus), NULL when unknown


Within = tuple[str, str | None] | tuple[tuple[str, str | None], ...]


def _within(within: Within | None) -> tuple[str, list[object]]:
    """The condition keeping the minutes of one host or cluster (``(by, value)``; value None: none named),
    or of GPUs that match several such pairs (``(("cluster", "c1"), ("host", None))``: c1's GPUs whose host
    is not named, not every unnamed host's)."""
    if within is None:
        return "TRUE", []
    pairs = (within,) if isinstance(within[0], str) else within
    conds: list[str] = []
    params: list[object] = []
    for by, value in pairs:
        if by not in GROUPS:
            raise ValueError(f"unknown grouping {by!r}; use one of {', '.join(GROUPS)}")
        if value is None:
            conds.append(f"{GROUPS[by]} IS NULL")
        else:
            conds.append(f"{GROUPS[by]} = ?")
            params.append(value)
    # a semi-join on the GPUs (a few rows): the minute scan keeps its join-free plan (_from_for)
    return f"m.gpu_id IN (SELECT g.gpu_id FROM gpus g WHERE {' AND '.join(conds)})", params


def gpu_hour_heatmap(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = ALL,
    max_gpus: int | None = None,
    within: Within | None = None,
) -> pl.DataFrame:
    """Mean utilization per GPU per UTC hour (HEATMAP_COLUMNS), ordered by host, GPU and hour.

    ``within=("host", "n01")`` (or ``("cluster", …)``, as :func:`group_hour_heatmap` groups) keeps one
    group's GPUs: the drill-down of a grouped heatmap. ``max_gpus``: past that many GPUs, the
    ``max_gpus - 1`` with the most unused GPU-seconds keep their rows and the rest share one last row
    (gpu_id, host and model NULL, ``others`` = how many), as :func:`group_hour_heatmap` pools groups, so a
    heatmap stays legible and no GPU drops out of it.
    """
    keep = _keep(max_gpus)
    where, params = _where(filters, "m.hour")
    inside, inside_params = _within(within)
    where, params = f"{where} AND {inside}", [*params, *inside_params]
    sql = f"""
    WITH cells AS MATERIALIZED (
        SELECT m.gpu_id AS key, m.hour, sum(m.util_s) AS util_s, sum(m.util_cov_s) AS util_cov_s,
               sum(m.covered_s) AS covered_s, {_STATE_SUMS}
        FROM {_from_for(filters, "hour")}
        WHERE {where}
        GROUP BY ALL
    ),
    {_pooling_ctes("cells", keep)},
    pooled AS (
        SELECT CASE WHEN others > 0 THEN NULL ELSE key END AS gpu_id, hour,
               sum(util_s) / nullif(sum(util_cov_s), 0) * 100.0 AS mean_util_pct,
               sum(covered_s) AS covered_s, sum(held_idle_s) AS held_idle_s,
               sum(unallocated_s) AS unallocated_s, others
        FROM placed GROUP BY ALL
    )
    SELECT p.gpu_id, CASE WHEN p.gpu_id IS NULL THEN NULL ELSE {gpu_label_sql("g", "p.gpu_id")} END AS gpu_label,
           g.host, g.model AS gpu_model, p.hour, p.mean_util_pct, p.covered_s,
           coalesce(p.held_idle_s, 0) AS held_idle_s, coalesce(p.unallocated_s, 0) AS unallocated_s, p.others
    FROM pooled p LEFT JOIN gpus g USING (gpu_id)
    ORDER BY p.others, g.host NULLS LAST, p.gpu_id, p.hour
    """
    return frame(con, sql, params)


GROUP_HEATMAP_COLUMNS = {
    "key": "the GPU's host (gpus.host) or cluster (gpus.cluster); NULL when the ledger names none",
    "hour": "UTC hour (start)",
    "mean_util_pct": "time-weighted mean utilization over the group's samples in the hour (Σ util_s / "
    "Σ util_cov_s × 100); NULL when no sample had a reading",
    "covered_s": "GPU-seconds of telemetry in the hour",
    "gpus": "GPUs of the group with telemetry in the hour",
    "held_idle_s": "GPU-seconds at or under the idle threshold while a job held the GPU",
    "unallocated_s": "GPU-seconds of telemetry while no job held the GPU",
    "others": "0 for one group; N for the row pooling the N groups ranked from ``max_groups`` on (key NULL)",
}


def group_hour_heatmap(
    con: duckdb.DuckDBPyConnection,
    *,
    by: str,
    filters: Filters = ALL,
    within: Within | None = None,
    max_groups: int | None = None,
) -> pl.DataFrame:
    """Mean utilization per host or cluster (``by``) per UTC hour over every GPU of the view
    (GROUP_HEATMAP_COLUMNS), ordered by key and hour: a fleet of any size in one row per group, aggregated
    in DuckDB (the per-GPU heatmap keeps at most a few hundred GPUs). ``within=("cluster", "c1")`` keeps one
    cluster's GPUs: its hosts, the middle step of a drill-down from clusters to GPUs.

    ``max_groups``: when the view has more groups than that, the ``max_groups - 1`` with the most unused
    GPU-seconds over the view (Σ util_cov_s − Σ util_s: the reading-covered seconds not spent busy) keep
    their rows and the rest are pooled into one last row (key NULL, ``others`` = how many), so a heatmap
    stays readable and shows the groups worth a look; every GPU-second is still in exactly one row."""
    if by not in GROUPS:
        raise ValueError(f"unknown grouping {by!r}; use one of {', '.join(GROUPS)}")
    keep = _keep(max_groups)
    where, params = _where(filters, "m.hour")
    inside, inside_params = _within(within)
    where, params = f"{where} AND {inside}", [*params, *inside_params]
    # per GPU and hour first, over the hours alone (no join unless a filter needs one), then the GPUs' host
    # or cluster from gpus (a few rows): the sums, not the means, are pooled, so a group's cell is exact
    sql = f"""
    WITH cells AS (
        SELECT m.gpu_id, m.hour, sum(m.util_s) AS util_s,
               sum(m.util_cov_s) AS util_cov_s, sum(m.covered_s) AS covered_s, {_STATE_SUMS}
        FROM {_from_for(filters, "hour")}
        WHERE {where}
        GROUP BY ALL
    ),
    grouped AS MATERIALIZED (
        SELECT {GROUPS[by]} AS key, c.hour, sum(c.util_s) AS util_s, sum(c.util_cov_s) AS util_cov_s,
               sum(c.covered_s) AS covered_s, sum(c.held_idle_s) AS held_idle_s,
               sum(c.unallocated_s) AS unallocated_s, count(*) AS gpus
        FROM cells c LEFT JOIN gpus g USING (gpu_id)
        GROUP BY ALL
    ),
    {_pooling_ctes("grouped", keep)}
    SELECT CASE WHEN others > 0 THEN NULL ELSE key END AS key, hour,
           sum(util_s) / nullif(sum(util_cov_s), 0) * 100.0 AS mean_util_pct,
           sum(covered_s) AS covered_s, sum(gpus)::BIGINT AS gpus,
           coalesce(sum(held_idle_s), 0) AS held_idle_s, coalesce(sum(unallocated_s), 0) AS unallocated_s, others
    FROM placed
    GROUP BY ALL
    ORDER BY others, key NULLS LAST, hour
    """
    return frame(con, sql, params)


def view_groups(con: duckdb.DuckDBPyConnection, *, filters: Filters = ALL) -> dict[str, int]:
    """How many GPUs with telemetry the view holds (``gpus``), and how many hosts and clusters they sit in
    (``hosts``, ``clusters``; GPUs whose host or cluster the ledger does not name count as one group, as the
    grouped heatmap shows them): what decides how many rows a heatmap of the view would have. Read from the
    per-day rollup: the days inside a view hold exactly its minutes, as for :func:`idle_gpus`."""
    where, params = _where(filters, "m.day")
    sql = f"""
    SELECT count(*), count(DISTINCT coalesce(g.host, chr(0))), count(DISTINCT coalesce(g.cluster, chr(0)))
    FROM (SELECT DISTINCT m.gpu_id FROM {_from_for(filters, "day")} WHERE {where}) v
    LEFT JOIN gpus g USING (gpu_id)
    """
    n, hosts, clusters = con.execute(sql, params).fetchall()[0]
    return {"gpus": int(n), "hosts": int(hosts), "clusters": int(clusters)}


def group_sizes(
    con: duckdb.DuckDBPyConnection, *, by: str, filters: Filters = ALL, within: Within | None = None
) -> pl.DataFrame:
    """Every host or cluster (``by``) of the view, ``within`` one group if given, with its GPUs that have
    telemetry in the view (key NULL: GPUs whose ledger names none), ordered by key: what a grouped
    heatmap's drill-down offers, including the groups :func:`group_hour_heatmap` pooled. Read from the
    per-day rollup, as :func:`view_groups`."""
    if by not in GROUPS:
        raise ValueError(f"unknown grouping {by!r}; use one of {', '.join(GROUPS)}")
    where, params = _where(filters, "m.day")
    inside, inside_params = _within(within)
    sql = f"""
    SELECT {GROUPS[by]} AS key, count(*) AS gpus
    FROM (SELECT DISTINCT m.gpu_id FROM {_from_for(filters, "day")}
          WHERE {where} AND {inside}) v
    LEFT JOIN gpus g USING (gpu_id)
    GROUP BY ALL ORDER BY key NULLS LAST
    """
    return frame(con, sql, [*params, *inside_params])


def view_gpu_count(con: duckdb.DuckDBPyConnection, *, filters: Filters = ALL) -> int:
    """GPUs with telemetry in the view (:func:`view_groups`)."""
    return view_groups(con, filters=filters)["gpus"]


IDLE_GPU_COLUMNS = {
    "gpu_id": "GPU",
    "gpu_label": "host:index (the GPU id when the ledger names no host or index)",
    "host": "",
    "cluster": "gpus.cluster",
    "gpu_model": "catalog model",
    "telemetry_h": "hours with telemetry in the view",
    "mean_util_pct": "time-weighted mean utilization (NULL when no reading)",
    "idle_h": "hours of samples at or under the idle threshold (any length)",
    "idle_share": "idle_h / telemetry_h",
    "allocated_idle_h": "idle hours while a job held the GPU",
    "unallocated_idle_h": "idle hours while no job held the GPU (allocated_idle_h + this = idle_h)",
    "unallocated_h": "hours of telemetry attributed to no job (any utilization)",
    "idle_usd": "Σ over the view's days of the day's idle hours × the price in force that day for the GPU "
    "model on its cluster at the cluster's tier (NULL when the model has no price)",
}


def gpu_label_sql(gpus: str, gpu_id: str) -> str:
    """A GPU's short name, ``host:index`` (``atlas-n03:5``), from the ``gpus`` row ``gpus``; the id itself
    (``gpu_id``) when the ledger names no host or no index. What charts and tables name a GPU by: a UUID is
    40 characters and says nothing a reader can find in a rack. A MIG instance keeps its id (its card's
    host:index is its siblings' too)."""
    return (
        f"CASE WHEN {gpus}.host IS NOT NULL AND {gpus}.gpu_index IS NOT NULL AND {gpus}.parent_gpu_id IS NULL "
        f"THEN {gpus}.host || ':' || {gpus}.gpu_index ELSE {gpu_id} END"
    )


def idle_gpus(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = ALL,
    limit: int = 50,
    settings: Settings | None = None,
) -> pl.DataFrame:
    """GPUs ranked by idle hours in the view (IDLE_GPU_COLUMNS); GPUs with no idle sample are left out.

    Reads the per-day rollup (``samples_day``, the same sums per GPU-day): views start and end at midnight,
    so the days inside hold exactly the minutes inside. ``idle_usd`` prices them with :func:`_idle_usd`
    (``settings``: the clusters' tiers; default settings when None)."""
    where, params = _where(filters, "m.day")
    sql = f"""
    SELECT m.gpu_id, any_value({gpu_label_sql("g", "m.gpu_id")}) AS gpu_label, any_value(g.host) AS host,
           any_value(coalesce(g.cluster, j.cluster)) AS cluster,
           any_value(g.model) AS gpu_model,
           sum(m.covered_s) / 3600.0 AS telemetry_h,
           sum(m.util_s) / nullif(sum(m.util_cov_s), 0) * 100.0 AS mean_util_pct,
           coalesce(sum(m.idle_s), 0) / 3600.0 AS idle_h,
           coalesce(sum(m.idle_s), 0) / nullif(sum(m.covered_s), 0) AS idle_share,
           coalesce(sum(m.idle_s) FILTER (WHERE m.job_id IS NOT NULL), 0) / 3600.0 AS allocated_idle_h,
           coalesce(sum(m.idle_s) FILTER (WHERE m.job_id IS NULL), 0) / 3600.0 AS unallocated_idle_h,
           coalesce(sum(m.covered_s) FILTER (WHERE m.job_id IS NULL), 0) / 3600.0 AS unallocated_h
    FROM {_from("day")}
    WHERE {where}
    GROUP BY m.gpu_id
    HAVING sum(m.idle_s) > 0
    ORDER BY idle_h DESC, m.gpu_id
    LIMIT ?
    """
    ranked = frame(con, sql, [*params, limit])
    usd = _idle_usd(con, ranked, filters, settings or Settings())
    return ranked.with_columns(pl.Series("idle_usd", usd, dtype=pl.Float64))


def _idle_usd(
    con: duckdb.DuckDBPyConnection, ranked: pl.DataFrame, filters: Filters, settings: Settings
) -> list[float | None]:
    """Each ranked GPU's idle hours in dollars, in ``ranked``'s order: per day of the view, the day's idle
    hours × the price in force that day (gpuledger.ledger.prices.PriceBook.rate, rules 2-4: the GPU's
    model, on its cluster, own price rows first, at the cluster's tier, Settings.cluster_tier, else
    on_demand), summed. Held or not, an idle hour is priced as capacity, at the rate unallocated hours are
    (analytics/capacity.py), not at the holding job's tier. None when the model has no price."""
    if ranked.is_empty():
        return []
    where, params = _where(filters, "m.day")
    ids = ranked["gpu_id"].to_list()
    days: dict[str, list[tuple[dt.date, float]]] = {gpu: [] for gpu in ids}
    for gpu, day, idle_s in con.execute(
        f"""SELECT m.gpu_id, m.day, sum(m.idle_s) FROM {_from_for(filters, "day")}
            WHERE {where} AND m.gpu_id IN (SELECT unnest(?::VARCHAR[]))
            GROUP BY ALL HAVING sum(m.idle_s) > 0 ORDER BY ALL""",
        [*params, ids],
    ).fetchall():
        days[gpu].append((day, float(idle_s)))
    book = price_book(con)
    rates: dict[tuple[str | None, str | None, dt.date], float | None] = {}  # GPUs share models and days
    out: list[float | None] = []
    for gpu, model, cluster in ranked.select("gpu_id", "gpu_model", "cluster").iter_rows():
        tier = settings.cluster_tier(cluster)
        usd: float | None = 0.0
        for day, idle_s in days[gpu]:
            key = (model, cluster, day)
            if key not in rates:
                rates[key] = book.rate(model, tier, cluster, on=day)
            rate = rates[key]
            if rate is None:  # no price for the model (one it has prices it every day: rule 4)
                usd = None
                break
            usd = (usd or 0.0) + rate * idle_s / 3600.0
        out.append(usd)
    return out


TIMELINE_COLUMNS = {
    "gpu_id": "GPU",
    "ts": "UTC minute (start)",
    "util_pct": "time-weighted mean utilization in the minute (NULL when no reading)",
    "mem_used_mib": "highest memory used in the minute",
    "mem_total_mib": "card memory",
    "sm_active_pct": "time-weighted SM-active where reported (DCGM_FI_PROF_SM_ACTIVE)",
    "others": "0 for one line; N for the line pooling the N ranked from the limit on (gpu_id NULL)",
}
JOB_TIMELINE_COLUMNS = TIMELINE_COLUMNS | {
    "label": "the line's name: host:index for a GPU (gpu_label_sql), the host, or ALL_GPUS; NULL when pooled",
}


ALL_GPUS = "all GPUs (mean)"


JOB_LINES = {"gpu": "m.gpu_id", "host": "coalesce(g.host, 'unknown host')", "job": f"'{ALL_GPUS}'"}


# A line's sums per (key, ts) from samples_minute, and the pooled lines over them (_pooled_lines)
_LINE_SUMS = """sum(m.util_s) AS util_s, sum(m.util_cov_s) AS util_cov_s,
               max(m.mem_used_max_mib) AS mem_used_mib, max(m.mem_total_mib) AS mem_total_mib,
               sum(m.sm_active_s) AS sm_active_s, sum(m.prof_cov_s) AS prof_cov_s"""


def _pooled_lines(keep: int) -> str:
    """The rest of a per-GPU (or per-host) timeline after ``cells`` (key, ts and _LINE_SUMS): TIMELINE_COLUMNS
    and ``others``, the lines past ``keep - 1`` pooled into one (:func:`_pooling_ctes`)."""
    return f"""{_pooling_ctes("cells", keep)}
    SELECT CASE WHEN others > 0 THEN NULL ELSE key END AS gpu_id, ts,
           sum(util_s) / nullif(sum(util_cov_s), 0) * 100.0 AS util_pct,
           max(mem_used_mib) AS mem_used_mib, max(mem_total_mib) AS mem_total_mib,
           sum(sm_active_s) / nullif(sum(prof_cov_s), 0) * 100.0 AS sm_active_pct, others
    FROM placed
    GROUP BY ALL
    ORDER BY others, gpu_id NULLS LAST, ts"""


def job_timeline(
    con: duckdb.DuckDBPyConnection, job_id: str, *, lines: str = "gpu", max_lines: int | None = None
) -> pl.DataFrame:
    """One job's utilization per minute (JOB_TIMELINE_COLUMNS), over the samples attributed to
    it: one line per GPU (``lines="gpu"``), one line per host (``"host"``, ``gpu_id`` = the host, pooled over
    the job's GPUs on it: what a job of hundreds of GPUs can show line by line), or one line (``"job"``,
    ``gpu_id`` = ALL_GPUS), the time-weighted mean over its GPUs (memory: the highest of any GPU).
    ``max_lines``: past that many lines, the ``max_lines - 1`` with the most unused GPU-seconds keep theirs
    and the rest share one (gpu_id NULL, ``others`` = how many), as :func:`group_timeline` pools."""
    if lines not in JOB_LINES:
        raise ValueError(f"unknown lines {lines!r}; use one of {', '.join(JOB_LINES)}")
    keep = _keep(max_lines)
    key = JOB_LINES[lines]
    join = "LEFT JOIN gpus g USING (gpu_id)" if lines == "host" else ""
    sql = f"""
    SELECT l.*, {gpu_label_sql("g", "l.gpu_id") if lines == "gpu" else "l.gpu_id"} AS label
    FROM (
        WITH cells AS MATERIALIZED (
            SELECT {key} AS key, m.minute AS ts, {_LINE_SUMS}
            FROM samples_minute m {join} WHERE m.job_id = ?
            GROUP BY ALL
        ),
        {_pooled_lines(keep)}
    ) l {"LEFT JOIN gpus g USING (gpu_id)" if lines == "gpu" else ""}
    ORDER BY l.others, l.gpu_id NULLS LAST, l.ts
    """
    return frame(con, sql, [job_id])


def gpu_timeline(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = ALL,
    max_points: int = 20_000,
    within: Within | None = None,
    max_gpus: int | None = None,
) -> pl.DataFrame:
    """Utilization per GPU over time (TIMELINE_COLUMNS, and ``others``) for the view, coarsened from minutes
    to hours when the view would exceed ``max_points`` rows (so an uploaded week-long log still plots
    quickly). ``within`` keeps one group's GPUs (at the whole view's time unit, so they line up with the
    group's line); ``max_gpus`` pools the GPUs past the ``max_gpus - 1`` with the most unused GPU-seconds
    into one line (gpu_id NULL, ``others`` = how many; 0 on every other row), as :func:`group_timeline`
    pools groups."""
    keep = _keep(max_gpus)
    where, params = _where(filters)
    unit = _timeline_unit(con, where, params, max_points)
    inside, inside_params = _within(within)
    sql = f"""
    WITH cells AS MATERIALIZED (
        SELECT m.gpu_id AS key, date_trunc('{unit}', m.minute) AS ts, {_LINE_SUMS}
        FROM {_from()}
        WHERE {where} AND {inside}
        GROUP BY ALL
    ),
    {_pooled_lines(keep)}
    """
    return frame(con, sql, [*params, *inside_params])


def _timeline_unit(con: duckdb.DuckDBPyConnection, where: str, params: list[object], max_points: int) -> str:
    """``minute``, or ``hour`` when the view's per-GPU minutes would be more than ``max_points`` rows."""
    n = con.execute(f"SELECT count(*) FROM {_from()} WHERE {where}", params).fetchall()[0][0]
    return "minute" if n <= max_points else "hour"


GROUP_TIMELINE_COLUMNS = {
    "key": "the GPUs' host or cluster (gpus.host / gpus.cluster); NULL when the ledger names none",
    "ts": "UTC minute, or hour when the view is long (as gpu_timeline's)",
    "util_pct": "time-weighted mean utilization over the group's samples (Σ util_s / Σ util_cov_s × 100)",
    "mem_used_mib": "highest memory used by any of the group's GPUs",
    "gpus": "GPUs of the group with telemetry at that time",
    "others": "0 for one group; N for the line pooling the N groups ranked from ``max_groups`` on (key NULL)",
}


def group_timeline(
    con: duckdb.DuckDBPyConnection,
    *,
    by: str,
    filters: Filters = ALL,
    max_points: int = 20_000,
    max_groups: int | None = None,
) -> pl.DataFrame:
    """Utilization over time per host or cluster (``by``; GROUP_TIMELINE_COLUMNS): the line chart of a view
    with more GPUs than lines a reader can tell apart, pooled over each group's GPUs (the sums, not the
    GPUs' means), at the time unit :func:`gpu_timeline` picks for the same view, so a group's GPUs drawn
    next to it line up.

    ``max_groups``: past that many groups, the ``max_groups - 1`` with the most unused GPU-seconds over the
    view keep their lines and the rest share one (key NULL, ``others`` = how many), as
    :func:`group_hour_heatmap` pools its rows."""
    if by not in GROUPS:
        raise ValueError(f"unknown grouping {by!r}; use one of {', '.join(GROUPS)}")
    keep = _keep(max_groups)
    where, params = _where(filters)
    unit = _timeline_unit(con, where, params, max_points)
    sql = f"""
    WITH cells AS MATERIALIZED (
        SELECT {GROUPS[by]} AS key, m.gpu_id, date_trunc('{unit}', m.minute) AS ts, sum(m.util_s) AS util_s,
               sum(m.util_cov_s) AS util_cov_s, max(m.mem_used_max_mib) AS mem_used_mib
        FROM {_from()}
        WHERE {where}
        GROUP BY ALL
    ),
    {_pooling_ctes("cells", keep)}
    SELECT CASE WHEN others > 0 THEN NULL ELSE key END AS key, ts,
           sum(util_s) / nullif(sum(util_cov_s), 0) * 100.0 AS util_pct,
           max(mem_used_mib) AS mem_used_mib, count(DISTINCT gpu_id) AS gpus, others
    FROM placed
    GROUP BY ALL
    ORDER BY others, key NULLS LAST, ts
    """
    return frame(con, sql, params)


def _keep(max_groups: int | None) -> int:
    """How many rows or lines a pooled chart keeps (an int, inlined as a literal); no limit for None."""
    if max_groups is None:
        return 2**62
    if max_groups < 2:
        raise ValueError("max_groups must be at least 2 (one group and the pooled rest)")
    return int(max_groups)


def _pooling_ctes(source: str, keep: int) -> str:
    """``ranked`` and ``placed`` over ``source`` (rows with key, util_s, util_cov_s): each row with
    ``others`` = 0 when its group keeps a row, or the number of groups pooled when it is one of the groups
    past the ``keep - 1`` with the most unused GPU-seconds (Σ util_cov_s − Σ util_s; ties by key; a group
    with no reading at all ranks last, so it is pooled first)."""
    return f"""
    ranked AS (
        SELECT key, row_number() OVER (ORDER BY sum(util_cov_s) - sum(util_s) DESC NULLS LAST, key NULLS LAST) AS r,
               count(*) OVER () AS n
        FROM {source} GROUP BY key
    ),
    placed AS (
        SELECT c.*, CASE WHEN r.n > {keep} AND r.r >= {keep} THEN r.n - {keep} + 1 ELSE 0 END AS others
        FROM {source} c JOIN ranked r ON r.key IS NOT DISTINCT FROM c.key
    )"""


def gpu_groups(con: duckdb.DuckDBPyConnection, *, by: str) -> pl.DataFrame:
    """Every GPU of the ledger (``gpu_id``) and its host or cluster (``key``, NULL when unnamed): which GPUs
    a group of :func:`group_timeline` stands for."""
    if by not in GROUPS:
        raise ValueError(f"unknown grouping {by!r}; use one of {', '.join(GROUPS)}")
    return frame(con, f"SELECT g.gpu_id, {GROUPS[by]} AS key FROM gpus g ORDER BY g.gpu_id")
