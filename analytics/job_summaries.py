"""Per-job telemetry figures from ``job_summaries``: what Prometheus computed for a job (``collect prometheus
--jobs``, collectors/prometheus_jobs.py) when the ledger holds no samples of it.

A job's rows (one per GPU and query window) combine exactly where the figure allows: samples, GPU-hours
and idle seconds add; the mean utilization is weighted by each row's samples (the same sample-weighted mean
as over the raw samples); peaks take the maximum. A p90 does not combine: the highest per-GPU p90 is given
(a job's slowest-looking GPU). Memory as a fraction of the card: the peak used over the row's reported total
(FB_USED + FB_FREE), else the GPU's recorded memory, else the catalog's; NULL when none is known.
"""

from __future__ import annotations

import duckdb
import polars as pl

from analytics.filters import Filters
from analytics.query import frame

ALL_FILTERS = Filters()

JOB_SUMMARY_COLUMNS = {
    "job_id": "",
    "gpus": "GPUs with a summary",
    "samples": "utilization samples Prometheus counted",
    "telemetry_gpu_hours": "samples x scrape interval / 3600",
    "mean_util_pct": "sample-weighted over the job's GPUs (%)",
    "max_util_pct": "%",
    "p90_util_pct": "highest per-GPU p90 (%)",
    "peak_mem_mib": "MiB",
    "peak_mem_frac": "peak memory used / card (0-1)",
    "mean_power_w": "sample-weighted (W)",
    "idle_gpu_hours": "GPU-hours inside idle stretches found in PromQL",
    "has_samples": "the ledger also holds samples of this job (then those figures are used)",
}


def job_summary_figures(con: duckdb.DuckDBPyConnection, *, filters: Filters = ALL_FILTERS) -> pl.DataFrame:
    """One row per job with summaries whose window meets the view (JOB_SUMMARY_COLUMNS).

    Team/cluster/user filters select through ``jobs``: with any of them set, a job the ledger has no
    record of is left out (its team is unknown). A ledger without the table (made before it existed and
    opened read-only) has no summaries: an empty frame.
    """
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'job_summaries'"
    ).fetchall()[0][0]
    if not exists:
        return pl.DataFrame(
            schema={c: pl.Float64 for c in JOB_SUMMARY_COLUMNS}
            | {"job_id": pl.String, "has_samples": pl.Boolean}
        )
    where, params = ["true"], []
    if filters.lo is not None:
        where.append("s.window_end > ?")
        params.append(filters.lo)
    if filters.hi is not None:
        where.append("s.window_start < ?")
        params.append(filters.hi)
    if filters.teams or filters.clusters or filters.users:
        job_where, job_params = filters.job_where("j")
        where.append(f"s.job_id IN (SELECT j.job_id FROM jobs j WHERE {job_where})")
        params.extend(job_params)
    return frame(
        con,
        f"""
        SELECT s.job_id,
               count(DISTINCT s.gpu_id) AS gpus,
               sum(s.samples)::BIGINT AS samples,
               sum(s.gpu_hours) AS telemetry_gpu_hours,
               sum(s.util_mean_pct * s.samples) FILTER (WHERE s.util_mean_pct IS NOT NULL)
                   / nullif(sum(s.samples) FILTER (WHERE s.util_mean_pct IS NOT NULL), 0) AS mean_util_pct,
               max(s.util_max_pct) AS max_util_pct,
               max(s.util_p90_pct) AS p90_util_pct,
               max(s.mem_used_max_mib) AS peak_mem_mib,
               max(s.mem_used_max_mib / nullif(coalesce(s.mem_total_mib, g.memory_total_mib, c.memory_mib), 0))
                   AS peak_mem_frac,
               sum(s.power_mean_w * s.samples) FILTER (WHERE s.power_mean_w IS NOT NULL)
                   / nullif(sum(s.samples) FILTER (WHERE s.power_mean_w IS NOT NULL), 0) AS mean_power_w,
               sum(s.idle_s) / 3600.0 AS idle_gpu_hours,
               EXISTS (SELECT 1 FROM samples x WHERE x.job_id = s.job_id) AS has_samples
        FROM job_summaries s
        LEFT JOIN gpus g USING (gpu_id)
        LEFT JOIN gpu_catalog c ON c.model = g.model
        WHERE {" AND ".join(where)}
        GROUP BY s.job_id
        ORDER BY s.job_id
        """,
        params,
    )


def fill_from_summaries(
    con: duckdb.DuckDBPyConnection, table: pl.DataFrame, *, filters: Filters = ALL_FILTERS
) -> pl.DataFrame:
    """``table`` (one row per ``job_id``) with ``mean_util_pct``, ``peak_mem_frac`` and ``idle_gpu_hours``
    taken from the summaries for the jobs the ledger holds no samples of; other rows unchanged. The money
    columns are left alone (waste.py computes them from samples)."""
    figures = job_summary_figures(con, filters=filters).filter(~pl.col("has_samples"))
    if figures.is_empty():
        return table
    cols = ("mean_util_pct", "peak_mem_frac", "idle_gpu_hours")
    fill = figures.select("job_id", *(pl.col(c).alias(f"_summary_{c}") for c in cols))
    out = table.join(fill, on="job_id", how="left")
    return out.with_columns(
        pl.when(pl.col(f"_summary_{c}").is_not_null())
        .then(pl.col(f"_summary_{c}"))
        .otherwise(pl.col(c))
        .alias(c)
        for c in cols
    ).drop([f"_summary_{c}" for c in cols])
