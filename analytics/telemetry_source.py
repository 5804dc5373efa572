"""Where the telemetry figures are read from: the rollups, the one production path (docs/metrics.md, "Fast path").

Idle stretches, under-used time, coverage and every per-job sum over samples are computed once, at ingest, into
the rollups (gpuledger/ledger/rollup.py: ``samples_minute`` → ``samples_day``, ``idle_runs``,
``samples_util_hist``); the analytics read them through :class:`Rollups`. What each method returns is the
:class:`TelemetrySource` contract; the plain-SQL oracle over raw samples that the rollups are checked against
implements the same contract in tests/analytics/oracle.py (product code never imports it).

The rollups hold the figures for the thresholds they were built with. Every entry point syncs the ledger first
(gpuledger.ledger.db.sync_reference rebuilds them for the settings), so a read under other thresholds is a
caller's mistake: :class:`Rollups` raises :class:`~gpuledger.ledger.errors.RollupMismatch`, never answers from a
second path.

Idle runs are keyed by the samples' own job id (``samples.job_id``), so a stretch never crosses a change of
it, also on a telemetry-only card whose samples carry several job ids; the card's pseudo-job still owns the
seconds (and the money).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Protocol

import duckdb

from analytics.cost import job_costs_sql, telemetry_only_gpus_sql
from analytics.filters import Filters
from analytics.shared import memo
from gpuledger.ledger.errors import RollupMismatch
from gpuledger.ledger.rollup_thresholds import rollup_matches, stored_thresholds, thresholds
from gpuledger.ledger.sample_time import sample_end_sql
from gpuledger.ledger.settings import Settings
from gpuledger.ledger.shares import fan_out_sql, has_shares
from gpuledger.ledger.sql import pseudo_job_sql

SqlParams = tuple[str, list[object]]
# SQL of rows (week VARCHAR, w_lo TIMESTAMP, w_hi TIMESTAMP), midnights, and its params
Buckets = tuple[str, list[object]]

# The calendar keys of utilization_by's sample-level groupings (a sample's day and ISO week are UTC).
CALENDAR_FORMATS = {"day": "%Y-%m-%d", "week": "%G-W%V"}
CALENDAR_BY = ("gpu", *CALENDAR_FORMATS)


def view_bounds(filters: Filters) -> tuple[dt.datetime, dt.datetime]:
    return filters.lo or dt.datetime(1970, 1, 1), filters.hi or dt.datetime(9999, 1, 1)


class TelemetrySource(Protocol):
    """The SQL every telemetry figure is built from. Each method returns (SQL, params); the column contracts:

    - :meth:`job_totals_sql`: analytics.utilization.TOTAL_COLUMNS per job of the view (with ``buckets``: per
      (job, ``week``), the samples cut by the buckets' [w_lo, w_hi));
    - :meth:`percentiles_sql`: ``job_id, p50_util_pct, p95_util_pct`` (time-weighted: the smallest reading whose
      cumulative seconds, readings ascending, reach the share);
    - :meth:`calendar_sql`: per ``key`` (a GPU id, a day ``%Y-%m-%d`` or an ISO week ``%G-W%V`` of the samples'
      time): ``covered_gpu_h, mean_util_pct, effective_gpu_h, idle_gpu_h, peak_mem_frac, mean_mem_frac,
      sm_active_pct, tensor_active_pct``, each sample weighted by its card share;
    - :meth:`stretches_sql`: one row per idle stretch: ``job_id, gpu_id, start_ts, end_ts, idle_s``;
    - :meth:`signal_ctes`: CTEs ``per_gpu`` (job_id, gpu_id, gpu_util), ``pairs`` (job_id, n_pairs, n_swings)
      and ``agg`` (analytics.job_signals' per-job aggregates), after a CTE ``vj`` the caller defines;
    - :meth:`window_samples_sql`: the samples inside the view of the jobs of a CTE ``w`` (job_id, lost_from,
      restart_to) the caller defines, for which ``in_window(alias)`` holds: ``job_id, ts, interval_s,
      util_pct, in_idle``.
    """

    def job_totals_sql(
        self,
        con: duckdb.DuckDBPyConnection,
        filters: Filters,
        settings: Settings,
        as_of: dt.datetime | None,
        buckets: Buckets | None = None,
    ) -> SqlParams: ...

    def percentiles_sql(
        self, con: duckdb.DuckDBPyConnection, filters: Filters, settings: Settings, as_of: dt.datetime | None
    ) -> SqlParams: ...

    def calendar_sql(
        self,
        con: duckdb.DuckDBPyConnection,
        by: str,
        filters: Filters,
        settings: Settings,
        as_of: dt.datetime | None,
    ) -> SqlParams: ...

    def stretches_sql(
        self, con: duckdb.DuckDBPyConnection, filters: Filters, settings: Settings, as_of: dt.datetime | None
    ) -> SqlParams: ...

    def signal_ctes(
        self, con: duckdb.DuckDBPyConnection, filters: Filters, settings: Settings, as_of: dt.datetime | None
    ) -> SqlParams: ...

    def window_samples_sql(
        self,
        con: duckdb.DuckDBPyConnection,
        filters: Filters,
        settings: Settings,
        as_of: dt.datetime | None,
        in_window: Callable[[str], str],
    ) -> SqlParams: ...


def require_rollup(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    """Raise :class:`RollupMismatch` unless the rollups were built with ``settings``' thresholds (or the ledger
    has no samples). Asked once per sharing block (analytics/shared.py: every per-job function of a page asks)."""
    th = thresholds(settings.idle_util_pct, settings.idle_min_minutes, settings.target_util_pct)
    if memo(con, ("rollup_matches", th), lambda: rollup_matches(con, th)):
        return
    raise RollupMismatch(
        f"the rollups were built for thresholds (idle %, idle minutes, target %) {stored_thresholds(con)}, "
        f"these settings ask for {th}: sync the ledger first (gpuledger.ledger.db.sync_reference)"
    )


def minute_view_sql(filters: Filters, as_of: dt.datetime | None) -> SqlParams:
    """CTEs ``mvj`` (job ids of the view) and ``mm``: the day rollup rows of the view's jobs inside the view, with
    telemetry-only cards' rows under their pseudo-job (``own_job_id``: the rows' own job id) with their weights
    ``card_u`` / ``card_per`` (sum them with :func:`fast_totals`), and ``card_mib`` (the GPU's memory, else the
    catalog's) for samples that did not report mem_total. Views start and end at midnight, so days cut them
    exactly."""
    jobs_sql, jobs_params = job_costs_sql(filters, as_of)
    lo, hi = view_bounds(filters)
    sql = f"""
    mvj AS (SELECT job_id FROM ({jobs_sql})),
    mtele AS ({telemetry_only_gpus_sql()}),
    mv AS (
        SELECT m.* REPLACE ({pseudo_job_sql("t", "m.job_id")} AS job_id), m.job_id AS own_job_id,
               coalesce(t.card_units, 1.0) AS card_u, coalesce(t.card_slices, 1.0) AS card_per,
               coalesce(g.memory_total_mib, c.memory_mib) AS card_mib
        FROM samples_day m LEFT JOIN mtele t ON t.gpu_id = m.gpu_id LEFT JOIN gpus g ON g.gpu_id = m.gpu_id
             LEFT JOIN gpu_catalog c ON c.model = g.model
        WHERE m.day >= ?::DATE AND m.day < ?::DATE
    ),
    mm AS (SELECT * FROM mv WHERE job_id IN (SELECT job_id FROM mvj))"""
    return sql, [*jobs_params, lo, hi]


def _both(a: str, b: str) -> str:
    """a + b where NULL + x = x and NULL + NULL = NULL (sums over two disjoint sets of samples)."""
    return f"CASE WHEN {a} IS NULL AND {b} IS NULL THEN NULL ELSE coalesce({a}, 0) + coalesce({b}, 0) END"


def fast_totals(*, per_row: bool = False) -> str:
    """TOTAL_COLUMNS (after the key) as aggregates over ``mm`` rows, each sum over time weighted by the
    rows' slices (``card_u``) and divided once by the card's (``card_per``, the same for every row of a job,
    or of a GPU). ``per_row``: divide row by row instead, for groups that mix jobs (a day, a week)."""
    w, d = ("card_u / card_per", "") if per_row else ("card_u", " / max(card_per)")
    return f"""
           sum(n)::BIGINT AS n_samples,
           sum(covered_s * {w}){d} AS sampled_s,
           coalesce(sum(util_cov_s * {w}){d}, 0) AS util_cov_s,
           sum(util_s * {w}){d} AS util_s,
           coalesce(sum(idle_run_s * {w}){d}, 0) AS idle_s,
           coalesce(sum(underused_s * {w}){d}, 0) AS underused_s,
           max(util_max)::DOUBLE AS util_max_pct,
           max(mem_used_max_mib)::DOUBLE AS mem_used_max_mib,
           greatest(max(memk_frac_max), max(memu_max_mib / card_mib)) AS mem_frac_max,
           {_both(f"sum(memk_frac_s * {w})", f"sum(memu_s * {w} / card_mib)")}{d} AS mem_frac_s,
           {_both(f"sum(memk_cov_s * {w})", f"sum(memu_cov_s * {w}) FILTER (WHERE card_mib > 0)")}{d} AS mem_cov_s,
           sum(sm_active_s * {w}){d} AS sm_active_s,
           sum(sm_cov_s * {w}){d} AS sm_cov_s,
           sum(tensor_active_s * {w}){d} AS tensor_active_s,
           sum(tensor_cov_s * {w}){d} AS tensor_cov_s,
           sum(energy_j * {w}){d} AS energy_j,
           sum(energy_cov_s * {w}){d} AS energy_cov_s"""


FAST_TOTALS = fast_totals()  # per job, or per (job, bucket)

# The rollup day's key for each calendar grouping (a sample's day and week are its rollup day's).
_ROLLUP_CALENDAR_KEYS = {
    "gpu": "gpu_id",
    **{by: f"strftime(day, '{fmt}')" for by, fmt in CALENDAR_FORMATS.items()},
}


class Rollups:
    """:class:`TelemetrySource` over the rollups; every method first checks they hold the settings'
    thresholds (:func:`require_rollup`)."""

    def job_totals_sql(
        self,
        con: duckdb.DuckDBPyConnection,
        filters: Filters,
        settings: Settings,
        as_of: dt.datetime | None,
        buckets: Buckets | None = None,
    ) -> SqlParams:
        require_rollup(con, settings)
        ctes, params = minute_view_sql(filters, as_of)
        if buckets is None:
            return f"WITH {ctes} SELECT job_id, {FAST_TOTALS} FROM mm GROUP BY 1", params
        sql = f"""
        WITH {ctes}
        SELECT mm.job_id, wk.week, {FAST_TOTALS}
        FROM mm JOIN ({buckets[0]}) wk ON mm.day >= wk.w_lo::DATE AND mm.day < wk.w_hi::DATE
        GROUP BY ALL
        """
        return sql, [*params, *buckets[1]]

    def percentiles_sql(
        self, con: duckdb.DuckDBPyConnection, filters: Filters, settings: Settings, as_of: dt.datetime | None
    ) -> SqlParams:
        """p50/p95 per job from ``samples_util_hist`` (seconds per day, GPU, job and reading)."""
        require_rollup(con, settings)
        jobs_sql, jobs_params = job_costs_sql(filters, as_of)
        lo, hi = view_bounds(filters)
        sql = f"""
        WITH vj AS (SELECT job_id FROM ({jobs_sql})), tele AS ({telemetry_only_gpus_sql()}),
        hv AS (
            SELECT {pseudo_job_sql("t", "h.job_id")} AS job_id,
                   h.util_pct, h.seconds * coalesce(t.card_units, 1.0) AS seconds
            FROM samples_util_hist h LEFT JOIN tele t ON t.gpu_id = h.gpu_id
            WHERE h.day >= ?::DATE AND h.day < ?::DATE
        ),
        hj AS (SELECT job_id, util_pct, sum(seconds) AS s FROM hv WHERE job_id IN (SELECT job_id FROM vj) GROUP BY ALL)
        SELECT job_id,
               min(util_pct) FILTER (WHERE cum_s >= 0.5 * tot_s)::DOUBLE AS p50_util_pct,
               min(util_pct) FILTER (WHERE cum_s >= 0.95 * tot_s)::DOUBLE AS p95_util_pct
        FROM (SELECT job_id, util_pct,
                     sum(s) OVER (PARTITION BY job_id ORDER BY util_pct ROWS UNBOUNDED PRECEDING) AS cum_s,
                     sum(s) OVER (PARTITION BY job_id) AS tot_s
              FROM hj)
        GROUP BY job_id
        """
        return sql, [*jobs_params, lo, hi]

    def calendar_sql(
        self,
        con: duckdb.DuckDBPyConnection,
        by: str,
        filters: Filters,
        settings: Settings,
        as_of: dt.datetime | None,
    ) -> SqlParams:
        require_rollup(con, settings)
        ctes, params = minute_view_sql(filters, as_of)
        sql = f"""
        WITH {ctes},
        tt AS (SELECT {_ROLLUP_CALENDAR_KEYS[by]} AS key, {fast_totals(per_row=True)} FROM mm GROUP BY 1)
        SELECT key, nullif(util_cov_s, 0) / 3600.0 AS covered_gpu_h,
               util_s / nullif(util_cov_s, 0) * 100.0 AS mean_util_pct,
               util_s / 3600.0 AS effective_gpu_h,
               idle_s / 3600.0 AS idle_gpu_h,
               mem_frac_max AS peak_mem_frac,
               mem_frac_s / nullif(mem_cov_s, 0) AS mean_mem_frac,
               100.0 * sm_active_s / nullif(sm_cov_s, 0) AS sm_active_pct,
               100.0 * tensor_active_s / nullif(tensor_cov_s, 0) AS tensor_active_pct
        FROM tt
        """
        return sql, params

    def stretches_sql(
        self, con: duckdb.DuckDBPyConnection, filters: Filters, settings: Settings, as_of: dt.datetime | None
    ) -> SqlParams:
        """Runs of ``idle_runs`` of at least idle_min_minutes, their day pieces inside the view summed (the
        view's days hold exactly the view's samples); a run's key is (GPU, own job id, first sample)."""
        require_rollup(con, settings)
        jobs_sql, jobs_params = job_costs_sql(filters, as_of)
        lo, hi = view_bounds(filters)
        min_s = float(settings.idle_min_minutes) * 60.0
        # a shared card's runs (found on its own sequence) count for each holder by its share: their samples,
        # fanned out (gpuledger/ledger/shares.py), as the oracle's flagged samples are
        shared_part, shared_params = "", []
        if has_shares(con):
            shared_part = f"""AND r.gpu_id NOT IN (SELECT gpu_id FROM gpu_shares)
            UNION ALL
            SELECT job_id, own_job_id, gpu_id, run_start, ts, {sample_end_sql("ts", "interval_s")},
                   interval_s * share_w, 1.0, 1.0
            FROM ({fan_out_sql(_shared_runs_sql(settings))})"""
            shared_params = [lo, hi]
        sql = f"""
        WITH vj AS (SELECT job_id FROM ({jobs_sql})), tele AS ({telemetry_only_gpus_sql()}),
        p AS (
            SELECT {pseudo_job_sql("t", "r.job_id")} AS job_id, r.job_id AS own_job_id,
                   r.gpu_id, r.run_start, r.first_ts, r.end_ts, r.idle_s,
                   coalesce(t.card_units, 1.0) AS card_u, coalesce(t.card_slices, 1.0) AS card_per
            FROM idle_runs r LEFT JOIN tele t ON t.gpu_id = r.gpu_id
            WHERE r.run_s >= {min_s} AND r.day >= ?::DATE AND r.day < ?::DATE
            {shared_part}
        )
        SELECT job_id, gpu_id, min(first_ts) AS start_ts, max(end_ts) AS end_ts,
               sum(idle_s * card_u) / max(card_per) AS idle_s
        FROM p WHERE job_id IN (SELECT job_id FROM vj)
        GROUP BY job_id, gpu_id, own_job_id, run_start
        """
        return sql, [*jobs_params, lo, hi, *shared_params]

    def signal_ctes(
        self, con: duckdb.DuckDBPyConnection, filters: Filters, settings: Settings, as_of: dt.datetime | None
    ) -> SqlParams:
        """From the day rollup, whose rows of the view's days hold exactly the view's samples. A pair is two
        consecutive samples of one GPU within one own job id; a view loses the pair of each (GPU, own job)'s
        first sample in it (``first_pair`` of its first day), as a view-cut lag would."""
        require_rollup(con, settings)
        ctes, params = minute_view_sql(filters, as_of)
        sql = f"""
        {ctes},
        per_gpu AS (
            SELECT job_id, gpu_id, sum(util_s) * 100.0 / sum(util_cov_s) AS gpu_util FROM mm GROUP BY ALL
        ),
        pairs AS (
            SELECT job_id, sum(np)::BIGINT AS n_pairs, sum(ns)::BIGINT AS n_swings
            FROM (SELECT job_id, gpu_id, own_job_id, sum(pairs_n) - arg_min(first_pair, day) AS np,
                         sum(swings_n) - arg_min(first_swing, day) AS ns
                  FROM mm GROUP BY ALL)
            GROUP BY job_id
        ),
        agg AS (
            SELECT job_id,
                   sum(covered_s * card_u) / max(card_per) AS covered_gpu_s,
                   sum(n)::BIGINT AS n_samples,
                   count(DISTINCT gpu_id) AS gpus_seen,
                   sum(util_s * card_u) * 100.0 / sum(util_cov_s * card_u) AS mean_util_pct,
                   max(mem_used_max_mib)::DOUBLE AS peak_mem_mib,
                   greatest(max(mem_total_mib), max(card_mib) FILTER (WHERE n_no_total > 0)) AS mem_total_mib,
                   sum(sm_active_s * card_u) * 100.0 / sum(sm_cov_s * card_u) AS sm_active_pct,
                   sum(tensor_active_s * card_u) * 100.0 / sum(tensor_cov_s * card_u) AS tensor_active_pct,
                   sum(throttled_n) / nullif(sum(throttle_n), 0) AS throttled_share,
                   sum(hot_n) / nullif(sum(temp_n), 0) AS hot_share,
                   max(temp_max_c)::FLOAT AS max_temp_c,
                   sum(dip_n) / nullif(sum(util_n), 0) AS dip_share,
                   sum(burst_n) / nullif(sum(util_n), 0) AS burst_share
            FROM mm GROUP BY job_id
        )"""
        return sql, params

    def window_samples_sql(
        self,
        con: duckdb.DuckDBPyConnection,
        filters: Filters,
        settings: Settings,
        as_of: dt.datetime | None,
        in_window: Callable[[str], str],
    ) -> SqlParams:
        """The samples themselves (a window cuts a day anywhere), each flagged by the ``idle_runs`` row that
        holds it. (A telemetry-only card's samples carry no job id of the ledger's: one that did would claim
        the card, analytics.cost; so none of them meets a window.)"""
        require_rollup(con, settings)
        lo, hi = view_bounds(filters)
        idle = float(settings.idle_util_pct)
        min_s = float(settings.idle_min_minutes) * 60.0
        in_idle = f"""coalesce(s.util_pct <= {idle} AND EXISTS (
                   SELECT 1 FROM idle_runs r
                   WHERE r.gpu_id = s.gpu_id AND r.job_id = s.job_id AND r.day = s.ts::DATE
                     AND s.ts >= r.first_ts AND s.ts <= r.last_ts AND r.run_s >= {min_s}), false)"""
        if not has_shares(con):
            sql = f"""
            SELECT s.job_id, s.ts, s.interval_s, s.util_pct, {in_idle} AS in_idle, 1.0 AS share_w
            FROM (
                SELECT s.ts, s.gpu_id, s.job_id, s.interval_s::DOUBLE AS interval_s, s.util_pct::DOUBLE AS util_pct
                FROM samples s JOIN w USING (job_id)
                WHERE s.ts >= ?::TIMESTAMP AND s.ts < ?::TIMESTAMP AND {in_window("s")}
            ) s
            """
            return sql, [lo, hi]
        # a shared card's samples count for each holder (gpuledger/ledger/shares.py): idle-stretch membership
        # on the card's own sequence (the sample's own job) first, then fanned out to the holders' windows
        rows = f"""(
            SELECT s.*, {in_idle} AS in_idle
            FROM (
                SELECT s.ts, s.gpu_id, s.job_id, s.interval_s::DOUBLE AS interval_s, s.util_pct::DOUBLE AS util_pct
                FROM samples s LEFT JOIN w ON w.job_id = s.job_id
                WHERE s.ts >= ?::TIMESTAMP AND s.ts < ?::TIMESTAMP
                  AND ((w.job_id IS NOT NULL AND {in_window("s")}) OR s.gpu_id IN (SELECT gpu_id FROM gpu_shares))
            ) s)"""
        sql = f"""
        SELECT f.job_id, f.ts, f.interval_s, f.util_pct, f.in_idle, f.share_w
        FROM ({fan_out_sql(rows)}) f JOIN w USING (job_id) WHERE {in_window("f")}
        """
        return sql, [lo, hi]


def _shared_runs_sql(settings: Settings) -> str:
    """The samples of the idle runs (of at least idle_min_minutes) on shared cards whose day piece lies in
    [?, ?): gpu_id, job_id and own_job_id (the run's own job: the card's own sequence), run_start, ts,
    interval_s."""
    return f"""(
        SELECT r.gpu_id, r.job_id, r.job_id AS own_job_id, r.run_start, s.ts, s.interval_s::DOUBLE AS interval_s
        FROM idle_runs r JOIN samples s
          ON s.gpu_id = r.gpu_id AND s.job_id = r.job_id AND s.ts >= r.first_ts AND s.ts <= r.last_ts
        WHERE r.gpu_id IN (SELECT gpu_id FROM gpu_shares) AND r.run_s >= {float(settings.idle_min_minutes) * 60.0}
          AND r.day >= ?::DATE AND r.day < ?::DATE AND s.ts::DATE = r.day
          AND s.util_pct <= {float(settings.idle_util_pct)})"""


ROLLUPS = Rollups()  # the production source: every analytics function's default
