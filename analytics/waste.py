"""Where the money went: spend split into disjoint parts that sum exactly to spend.

The taxonomy (docs/metrics.md, "Waste"; /work contract shared with the recommender and the dashboard):

- spend = Σ job cost in the view (analytics/cost.py, incl. ``unattributed:<card>`` pseudo-jobs) + unallocated;
- **failed_usd**: of jobs that ended FAILED, CANCELLED, TIMEOUT, OOM, NODE_FAIL, BOOT_FAIL or DEADLINE and
  whose kind is training, fine-tune or other (a notebook or an inference service that is cancelled or times
  out has ended normally), the work lost: the cost of the in-view held time after the job's
  ``last_checkpoint_ts`` (the job record's, or placed by a tied training log: collectors/checkpoints.py), or
  of all of it when no checkpoint is known (``failed_basis`` says which);
- with rate = cost_usd / held_gpu_s (held_gpu_s = gpu_count × in-view seconds), f = min(1, held_gpu_s /
  covered_s) (samples never stand for more time than was held) and kept = 1 − lost_gpu_s / held_gpu_s (1
  for a job that did not fail; a failed job's checkpointed share): **idle_allocated_usd** = rate × f × kept
  × idle-stretch seconds; **underused_usd** = rate × f × kept × Σ interval_s × (target − util)/target over
  the other samples under target; **productive_usd** = rate × f × kept × covered_s − idle − underused;
  **unmeasured_usd** = cost − failed − the three (held time without a utilization reading). A failed job's
  samples are classified over its whole run and scaled to the kept share (the rollups are per day, so a
  checkpoint inside a day is not a cut point);
- **unallocated_usd**: for clusters with declared capacity, capacity GPU-hours minus allocated GPU-hours of
  that cluster and GPU model (≥ 0), at the cluster's tier; it belongs to the team and user "unallocated";
- the three figures every face names apart (``headline_figures``): ``team_waste_usd`` = idle_allocated +
  underused + failed (the waste teams control), ``unheld_capacity_usd`` = unallocated (capacity no job held)
  and ``unmeasured_usd``; no "waste" adds the first two.

Jobs whose GPU model has no price have NULL money everywhere (reported as unpriced GPU-hours, never $0).
"""

from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from analytics.capacity import UNALLOCATED, UNALLOCATED_COLUMNS, unallocated, unallocated_weeks
from analytics.filters import Filters, horizon
from analytics.periods import view_weeks
from analytics.utilization import ROLLUPS, Source
from analytics.waste_jobs import (
    ALL_FILTERS,
    CHECKPOINT_LOG_SOURCES,
    CHECKPOINT_SOURCES,
    DEFAULT_SETTINGS,
    JOB_WASTE_COLUMNS,
    PARTS,
    TEAM_WASTE_PARTS,
    WASTE_PARTS,
    headline_figures,
    job_waste,
    job_waste_sql,
)
from analytics.waste_weeks import WEEK_KEYS, job_waste_by_week, spend_by_week, waste_by_week
from gpuledger.ledger.settings import Settings

# the names callers import from here (the taxonomy's parts live in the modules above)
__all__ = [
    "CHECKPOINT_LOG_SOURCES",
    "CHECKPOINT_SOURCES",
    "JOB_WASTE_COLUMNS",
    "PARTS",
    "TEAM_WASTE_PARTS",
    "UNALLOCATED",
    "UNALLOCATED_COLUMNS",
    "WASTE_PARTS",
    "WEEK_KEYS",
    "headline_figures",
    "job_waste",
    "job_waste_by_week",
    "job_waste_sql",
    "spend_by_week",
    "unallocated",
    "unallocated_weeks",
    "view_weeks",
    "waste_by",
    "waste_by_week",
    "waste_totals",
]


def waste_by(
    con: duckdb.DuckDBPyConnection,
    *,
    by: str = "team",
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
    source: Source = ROLLUPS,
) -> pl.DataFrame:
    """The parts (PARTS, plus spend_usd and team_waste_usd: idle + under-used + failed) summed by ``team``, ``user_name``, ``cluster``,
    ``gpu_model``, ``kind`` or ``week``. Unallocated capacity appears under the key "unallocated" (team,
    user) or its cluster / model; by week it is not split (key "unallocated")."""
    as_of = as_of or horizon(con)
    jobs = job_waste(con, filters=filters, settings=settings, as_of=as_of, source=source)
    sums = [pl.col(p).sum() for p in PARTS if p != "unallocated_usd"]
    out = (
        jobs.with_columns(pl.col(by).fill_null("(none)").alias("key"))
        .group_by("key")
        .agg(*sums, pl.lit(0.0).alias("unallocated_usd"))
    )
    un = unallocated(con, filters=filters, settings=settings, as_of=as_of)
    if un.height:
        key = {"cluster": "cluster", "gpu_model": "gpu_model"}.get(by)
        un_rows = (
            un.with_columns(pl.col(key).alias("key") if key else pl.lit(UNALLOCATED).alias("key"))
            .group_by("key")
            .agg(pl.col("unallocated_usd").sum())
        )
        out = (
            pl.concat([out, un_rows], how="diagonal_relaxed")
            .group_by("key")
            .agg(pl.col(p).sum() for p in PARTS)
        )
    out = out.with_columns(
        pl.sum_horizontal(*PARTS).alias("spend_usd"),
        pl.sum_horizontal(*TEAM_WASTE_PARTS).alias("team_waste_usd"),
    )
    return out.select("key", "spend_usd", *PARTS, "team_waste_usd").sort("spend_usd", descending=True)


def waste_totals(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
    source: Source = ROLLUPS,
) -> dict[str, float]:
    """The view's parts as plain floats (0 where not applicable), plus spend_usd, the three figures of
    ``headline_figures`` (team_waste_usd, unheld_capacity_usd, unmeasured_usd), failed_lost_usd
    (= failed_usd), failed_checkpointed_usd (failed jobs' cost up to their checkpoint, inside the other
    parts), failed_no_checkpoint_usd (the part of failed_usd from jobs with no known checkpoint),
    idle_gpu_hours, unpriced_gpu_hours, oversubscribed_gpu_hours (shared GPUs' time beyond the jobs'
    shares, and held time beyond a cluster's capacity: reported, never billed) and cancelled_usd (the cost
    of cancelled jobs: a person's decision, not waste; inside the other parts)."""
    as_of = as_of or horizon(con)
    sql, params = job_waste_sql(con, filters, settings, as_of, source)
    row = con.execute(
        f"""SELECT {", ".join(f"coalesce(sum({p}), 0)" for p in PARTS if p != "unallocated_usd")},
                   coalesce(sum(failed_lost_usd), 0),
                   coalesce(sum(failed_checkpointed_usd), 0),
                   coalesce(sum(failed_usd) FILTER (WHERE failed_basis LIKE 'no checkpoint%'), 0),
                   coalesce(sum(idle_gpu_hours), 0),
                   coalesce(sum(gpu_hours) FILTER (WHERE cost_usd IS NULL), 0),
                   coalesce(sum(oversubscribed_gpu_hours), 0),
                   coalesce(sum(cancelled_usd), 0)
            FROM ({sql})""",
        params,
    ).fetchall()[0]
    names = [p for p in PARTS if p != "unallocated_usd"]
    out = {n: float(v) for n, v in zip(names, row[: len(names)], strict=True)}
    extra = ["failed_lost_usd", "failed_checkpointed_usd", "failed_no_checkpoint_usd"]
    extra += ["idle_gpu_hours", "unpriced_gpu_hours", "oversubscribed_gpu_hours", "cancelled_usd"]
    out.update({n: float(v) for n, v in zip(extra, row[len(names) :], strict=True)})
    un = unallocated(con, filters=filters, settings=settings, as_of=as_of)
    out["unallocated_usd"] = float(un["unallocated_usd"].fill_null(0).sum()) if un.height else 0.0
    # shared GPUs' time beyond the jobs' shares, plus held time beyond a cluster's capacity: never billed
    out["oversubscribed_gpu_hours"] += (
        float(un["oversubscribed_gpu_hours"].fill_null(0).sum()) if un.height else 0.0
    )
    out["spend_usd"] = sum(out[p] for p in PARTS)
    out.update(headline_figures(out))
    return out
