"""How much of the GPU time a job held was used: per sample → per GPU, job, user, team, cluster, day, week.

Definitions (docs/metrics.md, "Utilization"):
- a sample counts for the job it is attributed to (``samples.job_id``, stamped at ingest), so a job's mean is
  over the GPUs it held, never over its whole host; telemetry-only cards count for their
  ``unattributed:<card>`` pseudo-job (analytics/cost.py), each sample weighted by the share of the card its
  GPU row stands for (1 for a whole card, 3/7 for a 3g MIG instance of an A100), so the instances of one card
  add up to at most that card. The weight is kept as whole slices (``card_u``: 3 of ``card_per`` 7) and
  each job's sums are divided by the slices once, so the rollups and the raw-sample oracle sum the same exact numbers
  (time-weighted percentiles and means need no division at all);
- a sample stands for ``interval_s`` seconds; means are time-weighted: ``Σ util_pct × interval_s / Σ
  interval_s`` over samples with a reading;
- held time with no reading is *unknown*, neither idle nor busy: ``unknown_share`` reports it;
- an *idle stretch* is a maximal run of consecutive samples of one GPU with the same own job id
  (``samples.job_id``, also where a telemetry-only card's pseudo-job owns them), each at
  ``util_pct ≤ idle_util_pct`` with no sample gap in between (the next sample comes within 1.5 ×
  ``interval_s``), lasting ``≥ idle_min_minutes`` in total. Membership is decided on the job's whole run
  of samples, then the part inside the view is counted, so a stretch does not vanish at a day boundary.

The figures are read from the rollups maintained at ingest (docs/metrics.md, "Fast path"; per-minute sums incl.
idle-stretch seconds, and a per-day utilization histogram) through ``source``, an
analytics.telemetry_source.TelemetrySource: :data:`ROLLUPS` in production; the tests pass the plain-SQL oracle
over raw samples (tests/analytics/oracle.py) to check the rollups against it.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from analytics.cost import job_costs_sql
from analytics.filters import Filters, horizon
from analytics.query import frame
from analytics.telemetry_source import (
    CALENDAR_BY,
    CALENDAR_FORMATS,
    ROLLUPS,
    Buckets,
    TelemetrySource,
)
from gpuledger.ledger.settings import Settings

ALL_FILTERS = Filters()  # the whole ledger
DEFAULT_SETTINGS = Settings()

Source = TelemetrySource  # where the figures are read from: ROLLUPS in production, the oracle in tests

# Per-job sums over the job's samples inside the view; every TelemetrySource produces exactly these columns.
TOTAL_COLUMNS = {
    "job_id": "job (or unattributed:<card> pseudo-job)",
    "n_samples": "samples",
    "sampled_s": "Σ interval_s of all samples",
    "util_cov_s": "Σ interval_s of samples with a utilization reading (covered time)",
    "util_s": "Σ util_pct/100 × interval_s (busy GPU-seconds)",
    "idle_s": "Σ interval_s of samples inside idle stretches",
    "underused_s": "Σ interval_s × (target − util)/target over samples below target, outside idle stretches",
    "util_max_pct": "highest sample utilization",
    "mem_used_max_mib": "highest memory used",
    "mem_frac_max": "highest memory used / card memory",
    "mem_frac_s": "Σ mem_used/card × interval_s",
    "mem_cov_s": "Σ interval_s of samples with memory used and a known card size",
    "sm_active_s": "Σ sm_active_pct/100 × interval_s",
    "sm_cov_s": "Σ interval_s of samples with SM-active",
    "tensor_active_s": "Σ tensor_active_pct/100 × interval_s",
    "tensor_cov_s": "Σ interval_s of samples with tensor-active",
    "energy_j": "Σ per-sample energy (counter Δ, else power × interval)",
    "energy_cov_s": "Σ interval_s of samples with an energy figure",
}


def job_totals_sql(
    con: duckdb.DuckDBPyConnection,
    filters: Filters,
    settings: Settings,
    as_of: dt.datetime | None,
    source: Source = ROLLUPS,
) -> tuple[str, list[object]]:
    """SQL giving TOTAL_COLUMNS per job of the view."""
    return source.job_totals_sql(con, filters, settings, as_of)


def job_bucket_totals_sql(
    con: duckdb.DuckDBPyConnection,
    filters: Filters,
    settings: Settings,
    as_of: dt.datetime | None,
    buckets: Buckets,
    source: Source = ROLLUPS,
) -> tuple[str, list[object]]:
    """TOTAL_COLUMNS per (job, bucket): the view's samples cut by the buckets' [w_lo, w_hi) (midnights), with
    a ``week`` column naming the bucket. Each (job, bucket) row equals :func:`job_totals_sql`'s row of that
    job for the view narrowed to the bucket (idle-stretch membership is decided on the job's whole run, so
    cutting does not change it)."""
    return source.job_totals_sql(con, filters, settings, as_of, buckets)


def job_totals(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
    source: Source = ROLLUPS,
) -> pl.DataFrame:
    """Per-job sample sums inside the view (TOTAL_COLUMNS); jobs without samples have no row."""
    as_of = as_of or horizon(con)
    sql, params = job_totals_sql(con, filters, settings, as_of, source)
    return frame(con, sql + " ORDER BY job_id", params)


JOB_UTIL_COLUMNS = {
    "job_id": "",
    "held_gpu_h": "gpu_count × hours held inside the view",
    "covered_gpu_h": "GPU-hours with a utilization reading (clamped to held)",
    "unknown_share": "1 − covered / held: held time without telemetry (0–1; NULL when nothing was held)",
    "mean_util_pct": "time-weighted mean utilization over the held GPUs (NULL without readings)",
    "p50_util_pct": "median sample utilization (time-weighted)",
    "p95_util_pct": "95th percentile sample utilization (time-weighted)",
    "effective_gpu_h": "Σ util × interval / 3600: GPU-hours of actual work",
    "idle_gpu_h": "GPU-hours in idle stretches",
    "peak_mem_frac": "highest memory used / card memory (0–1)",
    "mean_mem_frac": "time-weighted mean memory used / card memory (0–1)",
    "peak_mem_mib": "highest memory used, MiB",
    "sm_active_pct": "time-weighted SM-active (NULL where the source has none)",
    "tensor_active_pct": "time-weighted tensor-pipe-active (NULL where the source has none)",
}


def job_utilization(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
    percentiles: bool = True,
    source: Source = ROLLUPS,
) -> pl.DataFrame:
    """One row per job of the view (JOB_UTIL_COLUMNS). Percentiles come from the per-day utilization
    histogram (``samples_util_hist``); ``percentiles=False`` leaves them NULL."""
    as_of = as_of or horizon(con)
    jobs_sql, jobs_params = job_costs_sql(filters, as_of)
    totals_sql, totals_params = job_totals_sql(con, filters, settings, as_of, source)
    if percentiles:
        pct_sql, fparams = source.percentiles_sql(con, filters, settings, as_of)
    else:
        pct_sql, fparams = (
            "SELECT NULL::VARCHAR AS job_id, NULL::DOUBLE AS p50_util_pct, NULL::DOUBLE AS p95_util_pct",
            [],
        )
    sql = f"""
    WITH jc AS ({jobs_sql}), t AS ({totals_sql}), p AS ({pct_sql}),
    h AS (SELECT jc.job_id, jc.gpu_hours * 3600.0 AS held_s FROM jc)
    SELECT h.job_id,
           h.held_s / 3600.0 AS held_gpu_h,
           least(coalesce(t.util_cov_s, 0), h.held_s) / 3600.0 AS covered_gpu_h,
           CASE WHEN h.held_s > 0 THEN 1 - least(coalesce(t.util_cov_s, 0), h.held_s) / h.held_s END
               AS unknown_share,
           100.0 * t.util_s / nullif(t.util_cov_s, 0) AS mean_util_pct,
           p.p50_util_pct, p.p95_util_pct,
           t.util_s / 3600.0 AS effective_gpu_h,
           t.idle_s / 3600.0 AS idle_gpu_h,
           t.mem_frac_max AS peak_mem_frac,
           t.mem_frac_s / nullif(t.mem_cov_s, 0) AS mean_mem_frac,
           t.mem_used_max_mib AS peak_mem_mib,
           100.0 * t.sm_active_s / nullif(t.sm_cov_s, 0) AS sm_active_pct,
           100.0 * t.tensor_active_s / nullif(t.tensor_cov_s, 0) AS tensor_active_pct
    FROM h LEFT JOIN t USING (job_id) LEFT JOIN p USING (job_id)
    ORDER BY h.job_id
    """
    return frame(con, sql, [*jobs_params, *totals_params, *fparams])


GROUPS = {
    "team": "coalesce(jc.team, '(none)')",
    "user": "coalesce(jc.user_name, '(none)')",
    "cluster": "coalesce(jc.cluster, '(none)')",
    "gpu_model": "coalesce(jc.gpu_model, '(unknown)')",
    "job": "jc.job_id",
}

UTIL_BY_COLUMNS = {
    "key": "the group (team, user, cluster, GPU model, job, GPU id, day or ISO week)",
    "held_gpu_h": "allocated GPU-hours (jobs' gpu_count × hours inside the view)",
    "covered_gpu_h": "GPU-hours with a utilization reading",
    "unknown_share": "1 − covered / held",
    "mean_util_pct": "time-weighted mean utilization",
    "effective_gpu_h": "util-weighted GPU-hours",
    "idle_gpu_h": "GPU-hours in idle stretches",
    "peak_mem_frac": "highest memory used / card",
    "mean_mem_frac": "time-weighted memory used / card",
    "sm_active_pct": "time-weighted SM-active",
    "tensor_active_pct": "time-weighted tensor-active",
}


def utilization_by(
    con: duckdb.DuckDBPyConnection,
    *,
    by: str,
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
    source: Source = ROLLUPS,
) -> pl.DataFrame:
    """Utilization rolled up by ``team``, ``user``, ``cluster``, ``gpu_model``, ``job`` (job-level sums),
    or by ``gpu``, ``day``, ``week`` (sample-level: day/week from the sample time; held GPU-hours are then
    those of the samples' jobs split by the same calendar: a job's held time is cut at day boundaries).
    Columns: UTIL_BY_COLUMNS."""
    as_of = as_of or horizon(con)
    if by in GROUPS:
        jobs_sql, jobs_params = job_costs_sql(filters, as_of)
        totals_sql, totals_params = job_totals_sql(con, filters, settings, as_of, source)
        sql = f"""
        WITH jc AS ({jobs_sql}), t AS ({totals_sql})
        SELECT {GROUPS[by]} AS key,
               sum(jc.gpu_hours) AS held_gpu_h,
               sum(least(coalesce(t.util_cov_s, 0), jc.gpu_hours * 3600.0))
                   / 3600.0 AS covered_gpu_h,
               sum(t.util_s) / nullif(sum(t.util_cov_s), 0) * 100.0 AS mean_util_pct,
               sum(t.util_s) / 3600.0 AS effective_gpu_h,
               sum(t.idle_s) / 3600.0 AS idle_gpu_h,
               max(t.mem_frac_max) AS peak_mem_frac,
               sum(t.mem_frac_s) / nullif(sum(t.mem_cov_s), 0) AS mean_mem_frac,
               100.0 * sum(t.sm_active_s) / nullif(sum(t.sm_cov_s), 0) AS sm_active_pct,
               100.0 * sum(t.tensor_active_s) / nullif(sum(t.tensor_cov_s), 0) AS tensor_active_pct
        FROM jc LEFT JOIN t USING (job_id)
        GROUP BY ALL
        """
        params = [*jobs_params, *totals_params]
    elif by in CALENDAR_BY:
        # Held time per calendar bucket: the jobs' spans cut at bucket boundaries (not the samples).
        held = _held_by_calendar_sql(by, filters, as_of) if by != "gpu" else None
        t_sql, params = source.calendar_sql(con, by, filters, settings, as_of)
        sql = f"WITH t AS ({t_sql})"
        if held is None:
            sql += """
            SELECT key, t.covered_gpu_h AS held_gpu_h, t.covered_gpu_h, t.mean_util_pct, t.effective_gpu_h,
                   t.idle_gpu_h, t.peak_mem_frac, t.mean_mem_frac, t.sm_active_pct, t.tensor_active_pct
            FROM t
            """
        else:
            held_sql, held_params = held
            sql += f"""
            , h AS ({held_sql})
            SELECT key, coalesce(h.held_gpu_h, 0) AS held_gpu_h, coalesce(t.covered_gpu_h, 0) AS covered_gpu_h,
                   t.mean_util_pct, t.effective_gpu_h, t.idle_gpu_h, t.peak_mem_frac, t.mean_mem_frac,
                   t.sm_active_pct, t.tensor_active_pct
            FROM h FULL JOIN t USING (key)
            """
            params = [*params, *held_params]
    else:
        raise ValueError(f"unknown grouping {by!r}; use one of {', '.join([*GROUPS, *CALENDAR_BY])}")
    out = frame(con, f"SELECT * FROM ({sql}) ORDER BY key", params)
    return out.with_columns(
        pl.when(pl.col("held_gpu_h") > 0)
        .then(1 - pl.min_horizontal("covered_gpu_h", "held_gpu_h") / pl.col("held_gpu_h"))
        .otherwise(None)
        .alias("unknown_share")
    ).select(list(UTIL_BY_COLUMNS))


def _held_by_calendar_sql(by: str, filters: Filters, as_of: dt.datetime | None) -> tuple[str, list[object]]:
    """Held GPU-hours of the view's jobs cut at UTC day (or ISO week) boundaries."""
    jobs_sql, params = job_costs_sql(filters, as_of)
    unit, fmt = by, CALENDAR_FORMATS[by]
    sql = f"""
    SELECT strftime(b, '{fmt}') AS key,
           sum(jc.gpu_count * epoch(least(jc.span_end, b + INTERVAL 1 {unit})
                                    - greatest(jc.span_start, b))) / 3600.0 AS held_gpu_h
    FROM ({jobs_sql}) jc,
         LATERAL (SELECT unnest(generate_series(date_trunc('{unit}', jc.span_start),
                                                jc.span_end - INTERVAL 1 MICROSECOND,
                                                INTERVAL 1 {unit})) AS b)
    GROUP BY 1
    """
    return sql, params
