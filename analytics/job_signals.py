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
consecutive samples of one GPU with the same own job id, each at ``util_pct <= idle_util_pct``, with no sample gap in
between, lasting at least ``idle_min_minutes`` in total. Reading the same rollup rows (``idle_runs``) keeps
reclaim_idle's dollars and the summary's idle_allocated_usd on the same seconds.

Every figure is read through ``source`` (analytics.telemetry_source: the rollups in production, the raw-sample
oracle in tests).
"""

from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from analytics.cost import job_costs_sql
from analytics.filters import Filters, horizon
from analytics.query import frame
from analytics.shared import shared
from analytics.telemetry_source import ROLLUPS, TelemetrySource
from gpuledger.ledger.settings import Settings

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


def idle_stretches(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters | None = None,
    settings: Settings | None = None,
    as_of: dt.datetime | None = None,
    source: TelemetrySource = ROLLUPS,
) -> pl.DataFrame:
    """One row per idle stretch: job_id, gpu_id, start_ts, end_ts (UTC), idle_s (Σ interval_s, seconds; of a
    pseudo-job's MIG instance, × its card share).

    Stretch membership is analytics.utilization's (the waste taxonomy's), so these seconds are the ones
    idle_allocated_usd prices.
    """
    filters = filters or Filters()
    settings = settings or Settings()
    as_of = as_of or horizon(con)
    sql, params = source.stretches_sql(con, filters, settings, as_of)
    return frame(con, f"SELECT * FROM ({sql}) ORDER BY job_id, gpu_id, start_ts", params)


def job_signals(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters | None = None,
    settings: Settings | None = None,
    as_of: dt.datetime | None = None,
    stretches: pl.DataFrame | None = None,
    source: TelemetrySource = ROLLUPS,
) -> pl.DataFrame:
    """One row per job in the view with at least one attributed sample (SIGNAL_COLUMNS).

    ``stretches``: this view's :func:`idle_stretches`, when the caller already has them. The sums come from
    the day rollup, whose rows of the view's days hold exactly the view's samples (pair counts lose the
    first sample's pair per GPU and job, as a view-cut lag would).
    """
    filters = filters or Filters()
    settings = settings or Settings()
    as_of = as_of or horizon(con)
    idle = float(settings.idle_util_pct)
    if stretches is None:
        stretches = idle_stretches(con, filters=filters, settings=settings, as_of=as_of, source=source)
    vj, params = view_jobs_sql(filters, as_of)
    sctes, sparams = source.signal_ctes(con, filters, settings, as_of)
    ctes, params = f"vj AS ({vj}),\n{sctes}", [*params, *sparams]
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
    source: TelemetrySource = ROLLUPS,
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
