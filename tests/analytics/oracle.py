"""The plain-SQL oracle the rollups are checked against: every telemetry figure computed again from raw samples.

:data:`ORACLE` implements analytics.telemetry_source.TelemetrySource with window functions over the ``samples``
table itself (no rollup table is read), so passing ``source=ORACLE`` to any analytics function gives the figure
the rollups (``source=ROLLUPS``, the default) must equal (tests/analytics/parity.py). It is written from the
definitions in docs/metrics.md, not from the rollup's SQL:

- a sample counts for the job it is attributed to (``samples.job_id``); a telemetry-only card's samples for
  its ``unattributed:<card>`` pseudo-job, weighted by the slices of the card its GPU row stands for
  (``card_u`` / ``card_per``); a shared card's samples for each job holding the card, weighted by its share
  (``gpu_shares``: docs/metrics.md "Cost", shared GPUs);
- an idle stretch is a maximal run of consecutive samples of one GPU with the same own job id
  (``samples.job_id``, even where the pseudo-job owns them), each at ``util_pct ≤ idle_util_pct``, the next
  within the gap tolerance of the previous one's interval, lasting ``≥ idle_min_minutes``; membership is
  decided on the whole run, then the part inside the view counts;
- under-used: ``interval_s × (target − util) / target`` over samples below target outside idle stretches;
- a sample's energy: the counter's rise to the next sample of its GPU when both read it, the next comes
  without a gap and the counter did not reset; else power × interval.

Product code never imports this module.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import duckdb

from analytics.cost import job_costs_sql, telemetry_only_gpus_sql
from analytics.filters import Filters
from analytics.telemetry_source import CALENDAR_FORMATS, Buckets, SqlParams, view_bounds
from gpuledger.ledger.sample_time import contiguous_sql, sample_end_sql
from gpuledger.ledger.settings import Settings
from gpuledger.ledger.shares import fan_out_sql
from gpuledger.ledger.sql import pseudo_job_sql
from gpuledger.ledger.thresholds import DEFAULT as TH


def sample_energy_sql() -> str:
    """Energy a sample stands for, in J (columns energy_j, next_energy_j, next_ts, ts, interval_s, power_w)."""
    return f"""(CASE WHEN energy_j IS NOT NULL AND next_energy_j >= energy_j
                  AND {contiguous_sql("epoch(next_ts - ts)", "interval_s")}
             THEN next_energy_j - energy_j
             ELSE power_w * interval_s END)"""


def flagged_samples_sql(filters: Filters, settings: Settings, as_of: dt.datetime | None) -> SqlParams:
    """Raw samples of the view's jobs inside the view, one row each, with ``own_job_id`` (samples.job_id),
    ``job_id`` (the pseudo-job on a telemetry-only card), ``in_idle``, ``energy_sample_j``, ``mem_total_mib``
    (sample, else GPU, else catalog) and the card weights ``card_u`` / ``card_per``.

    A shared card's sample counts for each job holding it (gpuledger/ledger/shares.py ``fan_out_sql``): one
    row per holder, ``share_w`` its share (1 elsewhere), already folded into ``card_u``; its idle-stretch
    flag is found on the card's own sequence (``own_job_id``) before it is weighted."""
    jobs_sql, jobs_params = job_costs_sql(filters, as_of)
    lo, hi = view_bounds(filters)
    idle = float(settings.idle_util_pct)
    min_s = float(settings.idle_min_minutes) * 60.0
    sql = f"""
    WITH vj AS (SELECT job_id FROM ({jobs_sql})),
    tele AS ({telemetry_only_gpus_sql()}),
    seq AS (
        SELECT s.ts, s.gpu_id, s.interval_s::DOUBLE AS interval_s, s.util_pct::DOUBLE AS util_pct,
               s.mem_used_mib::DOUBLE AS mem_used_mib,
               coalesce(s.mem_total_mib, g.memory_total_mib, c.memory_mib) AS mem_total_mib,
               s.sm_active_pct::DOUBLE AS sm_active_pct, s.tensor_active_pct::DOUBLE AS tensor_active_pct,
               s.power_w::DOUBLE AS power_w, s.energy_j, s.throttle_reasons, s.temp_c,
               {pseudo_job_sql("t", "s.job_id")} AS job_id, s.job_id AS own_job_id,
               coalesce(t.card_units, 1.0) AS card_u, coalesce(t.card_slices, 1.0) AS card_per,
               lead(s.ts) OVER w AS next_ts, lead(s.energy_j) OVER w AS next_energy_j
        FROM samples s LEFT JOIN tele t USING (gpu_id) LEFT JOIN gpus g USING (gpu_id)
             LEFT JOIN gpu_catalog c ON c.model = g.model
        WINDOW w AS (PARTITION BY s.gpu_id ORDER BY s.ts)
    ),
    mine AS (  -- the view's jobs' samples, and every sample of a shared card (counted for its holders below)
        SELECT *, {sample_energy_sql()} AS energy_sample_j FROM seq
        WHERE job_id IN (SELECT job_id FROM vj) OR gpu_id IN (SELECT gpu_id FROM gpu_shares)
    ),
    marked AS (
        SELECT *, coalesce(util_pct <= {idle}, false) AS is_idle,
               CASE WHEN util_pct <= {idle} AND lag(util_pct) OVER w <= {idle}
                         AND {contiguous_sql("epoch(ts - lag(ts) OVER w)", "lag(interval_s) OVER w")}
                    THEN 0 ELSE 1 END AS new_run
        FROM mine WINDOW w AS (PARTITION BY gpu_id, own_job_id ORDER BY ts)
    ),
    runs AS (
        SELECT *, sum(new_run) OVER (PARTITION BY gpu_id, own_job_id ORDER BY ts ROWS UNBOUNDED PRECEDING)
                      AS run_no
        FROM marked
    ),
    flagged AS (
        SELECT * EXCLUDE (new_run, run_no, next_ts, next_energy_j),
               is_idle AND sum(interval_s) OVER (PARTITION BY gpu_id, own_job_id, run_no) >= {min_s} AS in_idle
        FROM runs
    )
    SELECT * REPLACE (card_u * share_w AS card_u) FROM ({fan_out_sql("flagged")})
    WHERE ts >= ?::TIMESTAMP AND ts < ?::TIMESTAMP AND job_id IN (SELECT job_id FROM vj)
    """
    return sql, [*jobs_params, lo, hi]


def _w(per_row: bool) -> tuple[str, str]:
    """The weight of a sample's sums and the per-group divisor (see analytics/telemetry_source.fast_totals)."""
    return ("(card_u / card_per)", "") if per_row else ("card_u", " / max(card_per)")


def _totals(target: float, *, per_row: bool = False) -> str:
    w, d = _w(per_row)
    return f"""
           count(*) AS n_samples,
           sum(interval_s * {w}){d} AS sampled_s,
           coalesce(sum(interval_s * {w}) FILTER (WHERE util_pct IS NOT NULL){d}, 0) AS util_cov_s,
           sum(util_pct / 100.0 * interval_s * {w}){d} AS util_s,
           coalesce(sum(interval_s * {w}) FILTER (WHERE in_idle){d}, 0) AS idle_s,
           coalesce(sum(interval_s * {w} * ({target} - util_pct) / {target})
                    FILTER (WHERE util_pct < {target} AND NOT in_idle){d}, 0) AS underused_s,
           max(util_pct)::DOUBLE AS util_max_pct,
           max(mem_used_mib)::DOUBLE AS mem_used_max_mib,
           max(mem_used_mib / mem_total_mib) AS mem_frac_max,
           sum(mem_used_mib / mem_total_mib * interval_s * {w}){d} AS mem_frac_s,
           sum(interval_s * {w}) FILTER (WHERE mem_used_mib IS NOT NULL AND mem_total_mib > 0){d} AS mem_cov_s,
           sum(sm_active_pct / 100.0 * interval_s * {w}){d} AS sm_active_s,
           sum(interval_s * {w}) FILTER (WHERE sm_active_pct IS NOT NULL){d} AS sm_cov_s,
           sum(tensor_active_pct / 100.0 * interval_s * {w}){d} AS tensor_active_s,
           sum(interval_s * {w}) FILTER (WHERE tensor_active_pct IS NOT NULL){d} AS tensor_cov_s,
           sum(energy_sample_j * {w}){d} AS energy_j,
           sum(interval_s * {w}) FILTER (WHERE energy_sample_j IS NOT NULL){d} AS energy_cov_s"""


class RawSamples:
    """analytics.telemetry_source.TelemetrySource over raw samples (see the module docstring)."""

    def job_totals_sql(
        self,
        con: duckdb.DuckDBPyConnection,
        filters: Filters,
        settings: Settings,
        as_of: dt.datetime | None,
        buckets: Buckets | None = None,
    ) -> SqlParams:
        flagged, params = flagged_samples_sql(filters, settings, as_of)
        if buckets is None:
            src, keys = f"({flagged})", "job_id"
        else:
            src = f"({flagged}) f JOIN ({buckets[0]}) wk ON f.ts >= wk.w_lo AND f.ts < wk.w_hi"
            keys = "job_id, wk.week"
            params = [*params, *buckets[1]]
        return f"SELECT {keys}, {_totals(float(settings.target_util_pct))} FROM {src} GROUP BY ALL", params

    def percentiles_sql(
        self, con: duckdb.DuckDBPyConnection, filters: Filters, settings: Settings, as_of: dt.datetime | None
    ) -> SqlParams:
        """The first sample (by util) whose cumulative time reaches the share."""
        flagged, params = flagged_samples_sql(filters, settings, as_of)
        sql = f"""
        SELECT job_id,
               min(util_pct) FILTER (WHERE cum_s >= 0.5 * tot_s)::DOUBLE AS p50_util_pct,
               min(util_pct) FILTER (WHERE cum_s >= 0.95 * tot_s)::DOUBLE AS p95_util_pct
        FROM (SELECT job_id, util_pct,
                     sum(interval_s * card_u) OVER (PARTITION BY job_id ORDER BY util_pct
                                               ROWS UNBOUNDED PRECEDING) AS cum_s,
                     sum(interval_s * card_u) OVER (PARTITION BY job_id) AS tot_s
              FROM ({flagged}) WHERE util_pct IS NOT NULL)
        GROUP BY job_id
        """
        return sql, params

    def calendar_sql(
        self,
        con: duckdb.DuckDBPyConnection,
        by: str,
        filters: Filters,
        settings: Settings,
        as_of: dt.datetime | None,
    ) -> SqlParams:
        flagged, params = flagged_samples_sql(filters, settings, as_of)
        key = "gpu_id" if by == "gpu" else f"strftime(ts, '{CALENDAR_FORMATS[by]}')"
        w = "(card_u / card_per)"
        cov = f"sum(interval_s * {w}) FILTER (WHERE util_pct IS NOT NULL)"
        sql = f"""
        SELECT {key} AS key,
               {cov} / 3600.0 AS covered_gpu_h,
               sum(util_pct / 100.0 * interval_s * {w}) / nullif({cov}, 0) * 100.0 AS mean_util_pct,
               sum(util_pct / 100.0 * interval_s * {w}) / 3600.0 AS effective_gpu_h,
               coalesce(sum(interval_s * {w}) FILTER (WHERE in_idle), 0) / 3600.0 AS idle_gpu_h,
               max(mem_used_mib / mem_total_mib) AS peak_mem_frac,
               sum(mem_used_mib / mem_total_mib * interval_s * {w})
                   / nullif(sum(interval_s * {w}) FILTER (WHERE mem_used_mib IS NOT NULL AND mem_total_mib > 0), 0)
                   AS mean_mem_frac,
               100.0 * sum(sm_active_pct / 100.0 * interval_s * {w})
                   / nullif(sum(interval_s * {w}) FILTER (WHERE sm_active_pct IS NOT NULL), 0) AS sm_active_pct,
               100.0 * sum(tensor_active_pct / 100.0 * interval_s * {w})
                   / nullif(sum(interval_s * {w}) FILTER (WHERE tensor_active_pct IS NOT NULL), 0)
                   AS tensor_active_pct
        FROM ({flagged}) GROUP BY 1
        """
        return sql, params

    def _linked(self, filters: Filters, settings: Settings, as_of: dt.datetime | None) -> SqlParams:
        """CTEs ``s`` (the view's flagged samples) and ``linked`` (each with its predecessor on the same GPU
        and own job id, and whether it follows it without a gap)."""
        flagged, params = flagged_samples_sql(filters, settings, as_of)
        sql = f"""
        s AS ({flagged}),
        seq AS (
            SELECT *, lag(ts) OVER w AS prev_ts, lag(interval_s) OVER w AS prev_iv,
                   lag(util_pct) OVER w AS prev_util, lag(in_idle) OVER w AS prev_in_idle
            FROM s WINDOW w AS (PARTITION BY job_id, gpu_id, own_job_id ORDER BY ts)
        ),
        linked AS (
            SELECT *, prev_ts IS NOT NULL AND {contiguous_sql("epoch(ts - prev_ts)", "prev_iv")} AS contiguous
            FROM seq
        )"""
        return sql, params

    def stretches_sql(
        self, con: duckdb.DuckDBPyConnection, filters: Filters, settings: Settings, as_of: dt.datetime | None
    ) -> SqlParams:
        ctes, params = self._linked(filters, settings, as_of)
        sql = f"""
        WITH {ctes},
        grouped AS (
            SELECT *, sum(CASE WHEN contiguous AND prev_in_idle THEN 0 ELSE 1 END)
                          OVER (PARTITION BY job_id, gpu_id, own_job_id ORDER BY ts ROWS UNBOUNDED PRECEDING) AS run
            FROM linked
        )
        SELECT job_id, gpu_id, min(ts) AS start_ts, max({sample_end_sql()}) AS end_ts,
               sum(interval_s * card_u) / max(card_per) AS idle_s
        FROM grouped WHERE in_idle
        GROUP BY job_id, gpu_id, own_job_id, run
        """
        return sql, params

    def signal_ctes(
        self, con: duckdb.DuckDBPyConnection, filters: Filters, settings: Settings, as_of: dt.datetime | None
    ) -> SqlParams:
        ctes, params = self._linked(filters, settings, as_of)
        sql = f"""
        {ctes},
        per_gpu AS (
            SELECT job_id, gpu_id,
                   sum(util_pct * interval_s) / sum(CASE WHEN util_pct IS NOT NULL THEN interval_s END) AS gpu_util
            FROM s GROUP BY job_id, gpu_id
        ),
        pairs AS (
            SELECT job_id,
                   count(*) FILTER (WHERE contiguous AND util_pct IS NOT NULL AND prev_util IS NOT NULL) AS n_pairs,
                   count(*) FILTER (WHERE contiguous AND (
                       (util_pct < {TH.dip_util_pct} AND prev_util > {TH.burst_util_pct})
                       OR (util_pct > {TH.burst_util_pct} AND prev_util < {TH.dip_util_pct}))) AS n_swings
            FROM linked GROUP BY job_id
        ),
        agg AS (
            SELECT job_id,
                   sum(interval_s * card_u) / max(card_per) AS covered_gpu_s,
                   count(*) AS n_samples,
                   count(DISTINCT gpu_id) AS gpus_seen,
                   sum(util_pct * interval_s * card_u)
                       / sum(CASE WHEN util_pct IS NOT NULL THEN interval_s * card_u END) AS mean_util_pct,
                   max(mem_used_mib) AS peak_mem_mib,
                   max(mem_total_mib) AS mem_total_mib,
                   sum(sm_active_pct * interval_s * card_u)
                       / sum(CASE WHEN sm_active_pct IS NOT NULL THEN interval_s * card_u END) AS sm_active_pct,
                   sum(tensor_active_pct * interval_s * card_u)
                       / sum(CASE WHEN tensor_active_pct IS NOT NULL THEN interval_s * card_u END)
                       AS tensor_active_pct,
                   avg(CASE WHEN throttle_reasons IS NOT NULL
                            THEN (throttle_reasons & {TH.power_thermal_mask}::UBIGINT <> 0)::INT END)
                       AS throttled_share,
                   avg(CASE WHEN temp_c IS NOT NULL THEN (temp_c >= {TH.hot_temp_c})::INT END) AS hot_share,
                   max(temp_c) AS max_temp_c,
                   avg(CASE WHEN util_pct IS NOT NULL THEN (util_pct < {TH.dip_util_pct})::INT END) AS dip_share,
                   avg(CASE WHEN util_pct IS NOT NULL THEN (util_pct > {TH.burst_util_pct})::INT END) AS burst_share
            FROM s GROUP BY job_id
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
        flagged, params = flagged_samples_sql(filters, settings, as_of)
        sql = f"""
        SELECT f.job_id, f.ts, f.interval_s, f.util_pct, f.in_idle, f.share_w
        FROM ({flagged}) f JOIN w USING (job_id) WHERE {in_window("f")}
        """
        return sql, params


ORACLE = RawSamples()
