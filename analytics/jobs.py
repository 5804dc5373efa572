"""The job table: one row per job of the view with its money, utilization, waste, energy and unit costs.

It only joins what the other analytics compute (waste.py, utilization.py, unit_costs.py), so a number
here equals the same number in the summary, the Jobs page and ``gpuledger jobs --json``.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from analytics.filters import Filters, horizon
from analytics.job_summaries import fill_from_summaries
from analytics.model_mismatch import model_mismatches
from analytics.query import frame
from analytics.slurm_usage import SLURM_BASIS
from analytics.unit_costs import job_unit_costs
from analytics.utilization import ROLLUPS, Source, job_utilization
from analytics.waste import job_waste
from gpuledger.ledger.settings import Settings

ALL_FILTERS = Filters()  # the whole ledger
DEFAULT_SETTINGS = Settings()

JOBS_COLUMNS = {
    "job_id": "",
    "attempt": "1, 2, ... for the attempts of a requeued job (each its own row); NULL: run once",
    "attempt_of": "the job a requeued attempt is billed to (count jobs by it: analytics/job_count.py); NULL: run once",
    "name": "",
    "user_name": "",
    "team": "",
    "cluster": "",
    "kind": "",
    "state": "",
    "gpu_model": "",
    "gpu_count": "",
    "start_ts": "UTC",
    "end_ts": "UTC, NULL while running",
    "gpu_hours": "held GPU-hours inside the view",
    "oversubscribed_gpu_hours": "declared on a shared GPU beyond the job's share (not billed)",
    "cost_usd": "in-view cost (NULL when unpriced)",
    "mean_util_pct": "time-weighted over the GPUs the job held",
    "p95_util_pct": "",
    "unknown_share": "held time without a utilization reading (0–1)",
    "peak_mem_frac": "highest memory used / card (0–1)",
    "idle_gpu_hours": "GPU-hours in idle stretches",
    "productive_usd": "",
    "idle_allocated_usd": "",
    "underused_usd": "",
    "failed_usd": "",
    "unmeasured_usd": "",
    "failed_lost_usd": "failed jobs: cost after the last checkpoint (= failed_usd)",
    "failed_checkpointed_usd": "failed jobs: cost up to the last checkpoint (kept work)",
    "failed_basis": "failed jobs: how the lost part was measured",
    "waste_usd": "idle_allocated + underused + failed",
    "energy_kwh": "",
    "tokens_per_s_per_gpu": "",
    "usd_per_mtok": "",
    "mfu": "0–1",
    "mfu_reason": "why MFU is NULL",
    "mfu_basis": "training | inference FLOPs per token; ', bf16 assumed' when the run logged no precision",
    "attribution": "how telemetry was tied to the job: exact | by_share | none (docs/metrics.md)",
    "util_basis": "where mean_util_pct comes from: telemetry | Prometheus job summaries | from Slurm accounting",
    "observed_gpu_model": "the model its cards report where it differs from gpu_model (priced as booked: "
    "analytics/model_mismatch.py); NULL: they agree or no card of it reports",
}


def jobs_table(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
    sort: str = "cost",
    limit: int | None = None,
    percentiles: bool = True,
    source: Source = ROLLUPS,
) -> pl.DataFrame:
    """One row per job of the view (JOBS_COLUMNS), most expensive (``sort="cost"``) or most wasteful
    (``sort="waste"``) first. Each attempt of a requeued job is its own row (its own hosts, time and parts, so
    the rows' costs sum to spend), with ``attempt`` and ``attempt_of`` naming the job it is billed to: a
    count of jobs counts ``attempt_of`` once (:func:`analytics.job_count.jobs_in`)."""
    as_of = as_of or horizon(con)
    w = job_waste(con, filters=filters, settings=settings, as_of=as_of, source=source)
    u = job_utilization(
        con, filters=filters, settings=settings, as_of=as_of, percentiles=percentiles, source=source
    )
    c = job_unit_costs(con, filters=filters, as_of=as_of)
    out = w.join(
        u.select("job_id", "mean_util_pct", "p95_util_pct", "unknown_share", "peak_mem_frac"),
        on="job_id",
        how="left",
    )
    out = out.join(
        c.select("job_id", "tokens_per_s_per_gpu", "usd_per_mtok", "mfu", "mfu_reason", "mfu_basis"),
        on="job_id",
        how="left",
    )
    out = out.join(
        frame(
            con, "SELECT job_id, attempt, attempt_of, attribution, gpu_util_mean_pct AS _slurm_util FROM jobs"
        ),
        on="job_id",
        how="left",
    )
    # no samples: sacct's own mean (analytics/slurm_usage.py), the figure the money parts were judged from
    slurm = pl.col("util_basis") == SLURM_BASIS
    out = out.with_columns(
        pl.when(slurm).then(pl.col("_slurm_util")).otherwise(pl.col("mean_util_pct")).alias("mean_util_pct"),
        pl.when(slurm).then(0.0).otherwise(pl.col("unknown_share")).alias("unknown_share"),
    ).drop("_slurm_util")
    mismatch = model_mismatches(con).select("job_id", "observed_gpu_model")
    out = out.join(mismatch, on="job_id", how="left")
    has_util = out.select("job_id", "mean_util_pct")
    out = fill_from_summaries(con, out, filters=filters)  # jobs known only from Prometheus summaries
    out = (
        out.join(has_util.rename({"mean_util_pct": "_before"}), on="job_id", how="left")
        .with_columns(
            pl.when(
                pl.col("mean_util_pct").is_not_null()
                & (pl.col("_before").is_null() | (pl.col("_before") != pl.col("mean_util_pct")))
            )
            .then(pl.lit("Prometheus job summaries"))
            .otherwise(pl.col("util_basis"))
            .alias("util_basis")
        )
        .drop("_before")
    )
    key = {"cost": "cost_usd", "waste": "waste_usd"}.get(sort)
    if key is None:
        raise ValueError(f"unknown sort {sort!r}; use cost or waste")
    out = out.sort([key, "job_id"], descending=[True, False], nulls_last=True).select(list(JOBS_COLUMNS))
    return out.head(limit) if limit else out
