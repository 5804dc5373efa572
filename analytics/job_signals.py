"""Per-job telemetry signals inside a view, the raw material of diagnoses and recommendations.

Every figure here is computed from the samples attributed to a job (``samples.job_id``) that fall inside the
view (its UTC days), the samples analytics.utilization's totals and the waste taxonomy count: one set of
samples per job, so a job's utilization is one number on every page. A running job's sample at the data
horizon is one of them (its span, ``job_costs``' ``span_start``..``span_end``, ends at the horizon), and so is
a sample a source tied to a job just outside its times; where such samples make a job's covered time exceed
its held time, the dollars are clamped to what the job cost (recommend.py's reclaim_idle, as waste.py does).
The samples of a telemetry-only card (no job) belong to its ``unattributed:<card>`` pseudo-job
(analytics/cost.py), their seconds weighted by the share of the card each GPU row stands for (a MIG
instance's slices: analytics.utilization's ``card_u`` / ``card_per``), as in its utilization and waste; a
single GPU's own figures (``unused_gpus``) are its plain time-weighted mean. Samples with a NULL metric are
left out of that metric's mean (NULL means "not reported", never 0).

Idle stretches are analytics.utilization's (the shared waste contract, docs/metrics.md): maximal runs of
consecutive samples of one GPU within one job, each at ``util_pct <= idle_util_pct``, with no sample gap in
between, lasting at least ``idle_min_minutes`` in total. Reading its flagged samples keeps reclaim_idle's
dollars and the summary's idle_allocated_usd on the same seconds.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from analytics.cost import job_costs_sql, telemetry_only_gpus_sql
from analytics.filters import Filters, horizon
from analytics.query import frame
from analytics.shared import shared
from analytics.utilization import (
    Source,
    flagged_samples_sql,
    minute_view_sql,
    use_rollup,
    view_bounds,
)
from gpuledger.ledger.sample_time import contiguous_sql, sample_end_sql
from gpuledger.ledger.settings import Settings
from gpuledger.ledger.shares import fan_out_sql, has_shares
from gpuledger.ledger.sql import pseudo_job_sql
from gpuledger.ledger.thresholds import DEFAULT

# the signal thresholds (gpuledger/ledger/thresholds.py), the same the rollup counts with
TH = DEFAULT

SIGNAL_COLUMNS = {
    "job_id": "",
    "held_gpu_s": "gpu_count × seconds inside the view",
    "covered_gpu_s": "Σ interval_s of the job's samples in the view (a pseudo-job's MIG instances: × card share)",
    "n_samples": "samples in the view",
    "gpus_seen": "distinct GPUs with samples",
    "mean_util_pct": "time-weighted mean utilization.gpu over samples with util (NULL when none)",
    "peak_mem_mib": "max memory used on any of the job's GPUs (NULL when not reported)",
    "card_mem_mib": "memory of the card (samples' mem_total_mib, else the catalog's)",
    "sm_active_pct": "time-weighted mean SM-active (NULL when not reported)",
    "tensor_active_pct": "time-weighted mean tensor-pipe-active (NULL when not reported)",
    "throttled_share": "share of samples with a power/thermal throttle bit (NULL when not reported)",
    "hot_share": "share of samples at >= 85 °C (NULL when temperature is not reported)",
    "max_temp_c": "",
    "dip_share": "share of samples below 10 % utilization",
    "burst_share": "share of samples above 70 % utilization",
    "swing_rate": "share of consecutive sample pairs (same GPU, no gap) that swing between < 10 % and > 70 %",
    "unused_gpus": "GPUs of the job whose mean utilization is at or under the idle threshold",
    "idle_s": "Σ interval_s inside idle stretches (all GPUs; a pseudo-job's MIG instances: × card share)",
    "idle_s_on_used_gpus": "the same, over GPUs not counted in unused_gpus",
    "idle_stretches": "number of idle stretches",
}


def view_jobs_sql(filters: Filters, as_of: dt.datetime | None) -> tuple[str, list[object]]:
    """``job_costs`` as a sub-query, plus ``held_gpu_s`` (gpu_count × in-view seconds)."""
    sql, params = job_costs_sql(filters, as_of)
    return (
        f"SELECT jc.*, jc.gpu_count * epoch(jc.span_end - jc.span_start) AS held_gpu_s FROM ({sql}) jc",
        params,
    )


def _samples_cte(filters: Filters, settings: Settings, as_of: dt.datetime | None) -> tuple[str, list[object]]:
    """CTEs ``vj`` (jobs of the view), ``s`` (their samples in the view, with analytics.utilization's
    idle-stretch flag ``in_idle``) and ``linked`` (each sample with its predecessor on the same GPU and job)."""
    vj, vparams = view_jobs_sql(filters, as_of)
    flagged, fparams = flagged_samples_sql(filters, settings, as_of)
    sql = f"""
    vj AS ({vj}),
    s AS (
        SELECT f.job_id, f.gpu_id, f.ts, f.interval_s, f.card_u, f.card_per, f.util_pct, f.mem_used_mib,
               f.mem_total_mib,
               f.sm_active_pct, f.tensor_active_pct, f.temp_c, f.throttle_reasons, f.in_idle
        FROM ({flagged}) f JOIN vj ON f.job_id = vj.job_id
    ),
    seq AS (
        SELECT *,
               lag(ts) OVER w AS prev_ts, lag(interval_s) OVER w AS prev_iv, lag(util_pct) OVER w AS prev_util,
               lag(in_idle) OVER w AS prev_in_idle
        FROM s WINDOW w AS (PARTITION BY job_id, gpu_id ORDER BY ts)
    ),
    linked AS (
        SELECT *, prev_ts IS NOT NULL AND {contiguous_sql("epoch(ts - prev_ts)", "prev_iv")} AS contiguous
        FROM seq
    )"""
    return sql, [*vparams, *fparams]


def _fast_stretches(
    con: duckdb.DuckDBPyConnection,
    filters: Filters,
    settings: Settings,
    as_of: dt.datetime | None,
) -> pl.DataFrame:
    """idle_stretches from the ``idle_runs`` rollup: runs of at least idle_min_minutes, their day pieces
    inside the view summed (the view's days hold exactly the samples the raw path reads)."""
    jobs_sql, jobs_params = view_jobs_sql(filters, as_of)
    lo, hi = view_bounds(filters)
    min_s = float(settings.idle_min_minutes) * 60.0
    # a shared card's runs (found on its own sequence) count for each holder by its share: their samples,
    # fanned out (gpuledger/ledger/shares.py), as the raw path's flagged samples are
    shared_part, shared_params = "", []
    if has_shares(con):
        shared_part = f"""AND r.gpu_id NOT IN (SELECT gpu_id FROM gpu_shares)
        UNION ALL
        SELECT job_id, gpu_id, run_start, ts, {sample_end_sql("ts", "interval_s")}, interval_s * share_w, 1.0, 1.0
        FROM ({fan_out_sql(_shared_runs_sql(settings))})"""
        shared_params = [lo, hi]
    sql = f"""
    WITH vj AS (SELECT job_id FROM ({jobs_sql})), tele AS ({telemetry_only_gpus_sql()}),
    p AS (
        SELECT {pseudo_job_sql("t", "r.job_id")} AS job_id,
               r.gpu_id, r.run_start, r.first_ts, r.end_ts, r.idle_s,
               coalesce(t.card_units, 1.0) AS card_u, coalesce(t.card_slices, 1.0) AS card_per
        FROM idle_runs r LEFT JOIN tele t ON t.gpu_id = r.gpu_id
        WHERE r.run_s >= {min_s} AND r.day >= ?::DATE AND r.day < ?::DATE
          {shared_part}
    )
    SELECT job_id, gpu_id, min(first_ts) AS start_ts, max(end_ts) AS end_ts,
           sum(idle_s * card_u) / max(card_per) AS idle_s
    FROM p WHERE job_id IN (SELECT job_id FROM vj)
    GROUP BY job_id, gpu_id, run_start
    """
    return frame(con, sql, [*jobs_params, lo, hi, *shared_params])


def _shared_runs_sql(settings: Settings) -> str:
    """The samples of the idle runs (of at least idle_min_minutes) on shared cards whose day piece lies in
    [?, ?): gpu_id, job_id (the stamped job: the card's own sequence), run_start, ts, interval_s."""
    return f"""(
        SELECT r.gpu_id, r.job_id, r.run_start, s.ts, s.interval_s::DOUBLE AS interval_s
        FROM idle_runs r JOIN samples s
          ON s.gpu_id = r.gpu_id AND s.job_id = r.job_id AND s.ts >= r.first_ts AND s.ts <= r.last_ts
        WHERE r.gpu_id IN (SELECT gpu_id FROM gpu_shares) AND r.run_s >= {float(settings.idle_min_minutes) * 60.0}
          AND r.day >= ?::DATE AND r.day < ?::DATE AND s.ts::DATE = r.day
          AND s.util_pct <= {float(settings.idle_util_pct)})"""


def idle_stretches(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters | None = None,
    settings: Settings | None = None,
    as_of: dt.datetime | None = None,
    source: Source = "auto",
) -> pl.DataFrame:
    """One row per idle stretch: job_id, gpu_id, start_ts, end_ts (UTC), idle_s (Σ interval_s, seconds; of a
    pseudo-job's MIG instance, × its card share).

    Stretch membership is analytics.utilization's (the waste taxonomy's), so these seconds are the ones
    idle_allocated_usd prices. ``source``: as in analytics.utilization (same rows either way).
    """
    filters = filters or Filters()
    settings = settings or Settings()
    as_of = as_of or horizon(con)
    if use_rollup(con, settings, source):
        return _fast_stretches(con, filters, settings, as_of).sort("job_id", "gpu_id", "start_ts")
    return _raw_stretches(con, filters, settings, as_of)


def _raw_stretches(
    con: duckdb.DuckDBPyConnection,
    filters: Filters,
    settings: Settings,
    as_of: dt.datetime | None,
) -> pl.DataFrame:
    ctes, params = _samples_cte(filters, settings, as_of)
    sql = f"""
    WITH {ctes},
    grouped AS (
        SELECT *, sum(CASE WHEN contiguous AND prev_in_idle THEN 0 ELSE 1 END)
                      OVER (PARTITION BY job_id, gpu_id ORDER BY ts ROWS UNBOUNDED PRECEDING) AS run
        FROM linked
    )
    SELECT job_id, gpu_id, min(ts) AS start_ts,
           max({sample_end_sql()}) AS end_ts,
           sum(interval_s * card_u) / max(card_per) AS idle_s
    FROM grouped WHERE in_idle
    GROUP BY job_id, gpu_id, run
    ORDER BY job_id, gpu_id, start_ts
    """
    return frame(con, sql, params)


def job_signals(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters | None = None,
    settings: Settings | None = None,
    as_of: dt.datetime | None = None,
    stretches: pl.DataFrame | None = None,
    source: Source = "auto",
) -> pl.DataFrame:
    """One row per job in the view with at least one attributed sample (SIGNAL_COLUMNS).

    ``stretches``: this view's :func:`idle_stretches`, when the caller already has them. ``source``: as in
    analytics.utilization; the fast path reads the day rollup, whose rows of the view's days hold exactly
    the samples the raw path reads (pair counts lose the first sample's pair per GPU, as a view-cut lag
    would).
    """
    filters = filters or Filters()
    settings = settings or Settings()
    as_of = as_of or horizon(con)
    idle = float(settings.idle_util_pct)
    fast = use_rollup(con, settings, source)
    if stretches is None:
        stretches = idle_stretches(
            con, filters=filters, settings=settings, as_of=as_of, source="auto" if fast else "raw"
        )
    if fast:
        vj, params = view_jobs_sql(filters, as_of)
        mctes, mparams = minute_view_sql(filters, as_of)
        ctes = f"""
        vj AS ({vj}),
        {mctes},
        per_gpu AS (
            SELECT job_id, gpu_id, sum(util_s) * 100.0 / sum(util_cov_s) AS gpu_util FROM mm GROUP BY ALL
        ),
        pairs AS (
            SELECT job_id, sum(np)::BIGINT AS n_pairs, sum(ns)::BIGINT AS n_swings
            FROM (SELECT job_id, gpu_id, sum(pairs_n) - arg_min(first_pair, day) AS np,
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
        params = [*params, *mparams]
    else:
        ctes, params = _samples_cte(filters, settings, as_of)
        ctes += f""",
        per_gpu AS ({_PER_GPU_RAW}),
        pairs AS ({_PAIRS_RAW}),
        agg AS ({_AGG_RAW})"""
    sql = f"""
    WITH {ctes},
    unused AS (
        SELECT job_id, count(*) FILTER (WHERE gpu_util <= {idle}) AS unused_gpus,
               list(gpu_id) FILTER (WHERE gpu_util <= {idle}) AS unused_ids
        FROM per_gpu GROUP BY job_id
    )
    SELECT vj.job_id, vj.held_gpu_s, agg.covered_gpu_s, agg.n_samples, agg.gpus_seen, agg.mean_util_pct,
           agg.peak_mem_mib, coalesce(agg.mem_total_mib, c.memory_mib) AS card_mem_mib,
           agg.sm_active_pct, agg.tensor_active_pct, agg.throttled_share, agg.hot_share, agg.max_temp_c,
           agg.dip_share, agg.burst_share,
           CASE WHEN pairs.n_pairs > 0 THEN pairs.n_swings / pairs.n_pairs END AS swing_rate,
           coalesce(unused.unused_gpus, 0) AS unused_gpus, unused.unused_ids
    FROM vj JOIN agg USING (job_id)
    LEFT JOIN pairs USING (job_id)
    LEFT JOIN unused USING (job_id)
    LEFT JOIN gpu_catalog c ON c.model = vj.gpu_model
    ORDER BY vj.job_id
    """
    return _with_idle(frame(con, sql, params), stretches)


# Signal sums over raw samples (CTEs ``s`` and ``linked`` of _samples_cte).
_PER_GPU_RAW = """
        SELECT job_id, gpu_id,
               sum(util_pct * interval_s) / sum(CASE WHEN util_pct IS NOT NULL THEN interval_s END) AS gpu_util
        FROM s GROUP BY job_id, gpu_id"""
_PAIRS_RAW = f"""
        SELECT job_id,
               count(*) FILTER (WHERE contiguous AND util_pct IS NOT NULL AND prev_util IS NOT NULL) AS n_pairs,
               count(*) FILTER (WHERE contiguous AND (
                   (util_pct < {TH.dip_util_pct} AND prev_util > {TH.burst_util_pct})
                   OR (util_pct > {TH.burst_util_pct} AND prev_util < {TH.dip_util_pct}))) AS n_swings
        FROM linked GROUP BY job_id"""
_AGG_RAW = f"""
        SELECT job_id,
               sum(interval_s * card_u) / max(card_per) AS covered_gpu_s,
               count(*) AS n_samples,
               count(DISTINCT gpu_id) AS gpus_seen,
               sum(util_pct * interval_s * card_u) / sum(CASE WHEN util_pct IS NOT NULL THEN interval_s * card_u END)
                   AS mean_util_pct,
               max(mem_used_mib) AS peak_mem_mib,
               max(mem_total_mib) AS mem_total_mib,
               sum(sm_active_pct * interval_s * card_u)
                   / sum(CASE WHEN sm_active_pct IS NOT NULL THEN interval_s * card_u END) AS sm_active_pct,
               sum(tensor_active_pct * interval_s * card_u)
                   / sum(CASE WHEN tensor_active_pct IS NOT NULL THEN interval_s * card_u END) AS tensor_active_pct,
               avg(CASE WHEN throttle_reasons IS NOT NULL
                        THEN (throttle_reasons & {TH.power_thermal_mask}::UBIGINT <> 0)::INT END) AS throttled_share,
               avg(CASE WHEN temp_c IS NOT NULL THEN (temp_c >= {TH.hot_temp_c})::INT END) AS hot_share,
               max(temp_c) AS max_temp_c,
               avg(CASE WHEN util_pct IS NOT NULL THEN (util_pct < {TH.dip_util_pct})::INT END) AS dip_share,
               avg(CASE WHEN util_pct IS NOT NULL THEN (util_pct > {TH.burst_util_pct})::INT END) AS burst_share
        FROM s GROUP BY job_id"""


def _with_idle(sig: pl.DataFrame, stretches: pl.DataFrame) -> pl.DataFrame:
    """Add idle_s, idle_s_on_used_gpus and idle_stretches from the view's stretches."""
    if sig.is_empty():
        return sig.with_columns(
            pl.lit(0.0).alias("idle_s"),
            pl.lit(0.0).alias("idle_s_on_used_gpus"),
            pl.lit(0).alias("idle_stretches"),
        ).drop("unused_ids")
    unused = (
        sig.select("job_id", "unused_ids")
        .explode("unused_ids")
        .drop_nulls()
        .rename({"unused_ids": "gpu_id"})
        .with_columns(pl.lit(True).alias("unused"))
    )
    per_job = (
        stretches.join(unused, on=["job_id", "gpu_id"], how="left")
        .group_by("job_id")
        .agg(
            pl.col("idle_s").sum().alias("idle_s"),
            pl.col("idle_s").filter(pl.col("unused").is_null()).sum().alias("idle_s_on_used_gpus"),
            pl.len().alias("idle_stretches"),
        )
    )
    return (
        sig.drop("unused_ids")
        .join(per_job, on="job_id", how="left")
        .with_columns(
            pl.col("idle_s").fill_null(0.0),
            pl.col("idle_s_on_used_gpus").fill_null(0.0),
            pl.col("idle_stretches").fill_null(0).cast(pl.Int64),
        )
    )


def with_active(sig: pl.DataFrame) -> pl.DataFrame:
    """``sig`` plus ``active_util_pct`` and ``active_sm_pct``: the job's utilization and SM-active outside
    its idle stretches, the busy share that sizing a GPU or a MIG slice must serve (a notebook idle all
    night and busy at 50 % by day needs a GPU for 50 %, not for its diluted mean).

    Idle-stretch samples are counted as 0 (they are at most ``idle_util_pct``), so both are upper bounds:
    mean × covered ÷ (covered − idle_s), assuming every sample reports the metric; NULL when all the
    measured time is idle or the metric is not reported.
    """
    active = pl.col("covered_gpu_s") - pl.col("idle_s")
    scale = pl.when(active > 0).then(pl.col("covered_gpu_s") / active)
    return sig.with_columns(
        (pl.col("mean_util_pct") * scale).clip(upper_bound=100.0).alias("active_util_pct"),
        (pl.col("sm_active_pct") * scale).clip(upper_bound=100.0).alias("active_sm_pct"),
    )


@shared  # one computation per view inside a read-only batch: a page's recommendations and diagnoses both ask
def view_signals(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters | None = None,
    settings: Settings | None = None,
    as_of: dt.datetime | None = None,
    source: Source = "auto",
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The view's :func:`idle_stretches` and :func:`job_signals`, the second computed from the first.

    The Recommendations page asked for both twice (the recommendations, then the diagnoses), ~0.4 s of its
    2.7 s cold script on the 2-day demo (measured); inside a sharing block they are now computed once.
    """
    filters = filters or Filters()
    settings = settings or Settings()
    as_of = as_of or horizon(con)
    kw = {"filters": filters, "settings": settings, "as_of": as_of, "source": source}
    stretches = idle_stretches(con, **kw)
    return stretches, job_signals(con, stretches=stretches, **kw)
