"""Each job's cost split into the waste taxonomy's parts (docs/metrics.md, "Waste"; the whole taxonomy, with
the unallocated capacity beside the jobs, is analytics/waste.py's docstring).

:func:`job_waste_sql` is the one statement behind every per-job figure: the view's job costs
(analytics/cost.py), their telemetry totals (analytics/utilization.py) and badput windows (analytics/badput.py)
joined and split by :func:`parts_sql`; where a price changes inside the view each job is cut at the change
(analytics/periods.py) and each piece priced at its own rate.
"""

from __future__ import annotations

import datetime as dt
import uuid

import duckdb
import polars as pl

from analytics.badput import badput_sums_sql, disrupted_sql, lost_held_s_sql, windows_sql
from analytics.cost import job_costs_sql, shared_segments_sql
from analytics.filters import Filters, horizon
from analytics.periods import buckets_sql, job_bucket_costs_sql, price_pieces
from analytics.query import frame
from analytics.shared import shared
from analytics.slurm_usage import filled_totals_sql
from analytics.utilization import ROLLUPS, Source, job_bucket_totals_sql, job_totals_sql
from gpuledger.ledger.cte import Cte, with_ctes
from gpuledger.ledger.job_states import CANCELLED_STATES
from gpuledger.ledger.settings import Settings
from gpuledger.ledger.sql import sql_list

ALL_FILTERS = Filters()  # the whole ledger
DEFAULT_SETTINGS = Settings()

# Job sources whose records carry a checkpoint field (jobs_table.py's last_checkpoint, the demo;
# collectors/checkpoints.EXPLICIT_SOURCES); another job's last_checkpoint_ts, when its run came from one of the
# training logs that place checkpoints (collectors/checkpoints.py), was placed by that log.
CHECKPOINT_SOURCES = ("jobs_csv", "jobs_jsonl", "demo")
CHECKPOINT_LOG_SOURCES = ("hf_trainer", "llamafactory", "lightning")
PARTS = (
    "productive_usd",
    "idle_allocated_usd",
    "underused_usd",
    "failed_usd",
    "unallocated_usd",
    "unmeasured_usd",
)
WASTE_PARTS = ("idle_allocated_usd", "underused_usd", "failed_usd", "unallocated_usd")
# The three figures every face names apart, with the same words (docs/metrics.md, "Waste: the three figures"):
# the waste teams control (their own jobs' held time), the capacity no job held (the platform's), and the
# held time nobody measured (unknown, neither waste nor productive).
TEAM_WASTE_PARTS = ("idle_allocated_usd", "underused_usd", "failed_usd")
HEADLINE_WORDS = {
    "team_waste_usd": "Waste teams control",
    "unheld_capacity_usd": "Capacity no job held",
    "unmeasured_usd": "Unmeasured (no telemetry)",
}


def headline_figures(parts: dict[str, float]) -> dict[str, float]:
    """The three figures of HEADLINE_WORDS from a view's parts (PARTS → $): team_waste_usd = idle while
    allocated + under-used + failed (badput); unheld_capacity_usd = unallocated; unmeasured_usd = unmeasured.
    Never one "waste" that adds the first two: a team lead controls only the first."""
    return {
        "team_waste_usd": sum(float(parts.get(p) or 0.0) for p in TEAM_WASTE_PARTS),
        "unheld_capacity_usd": float(parts.get("unallocated_usd") or 0.0),
        "unmeasured_usd": float(parts.get("unmeasured_usd") or 0.0),
    }


JOB_WASTE_COLUMNS = {
    "job_id": "",
    "team": "",
    "user_name": "",
    "cluster": "",
    "name": "",
    "kind": "",
    "state": "",
    "gpu_model": "",
    "gpu_count": "",
    "start_ts": "UTC (pseudo-jobs: first sample in the view)",
    "end_ts": "UTC, NULL while running",
    "week": "ISO week of the job's in-view start (YYYY-Www)",
    "pricing_tier": "tier the job asked for",
    "span_start": "start of the job's part inside the view (UTC)",
    "span_end": "end of the job's part inside the view (UTC)",
    "gpu_hours": "held GPU-hours inside the view (a shared GPU's time beyond the job's share excluded)",
    "oversubscribed_gpu_hours": "GPU-hours declared on an oversubscribed shared GPU beyond the job's share",
    "covered_gpu_hours": "GPU-hours with a utilization reading, clamped to held",
    "idle_gpu_hours": "GPU-hours in idle stretches outside the badput windows (clamped like covered): "
    "idle_allocated_usd's time",
    "underused_gpu_hours": "underused_usd's GPU-hours",
    "failed_gpu_hours": "failed_usd's GPU-hours (the badput windows' held time)",
    "productive_gpu_hours": "productive_usd's GPU-hours (unmeasured_usd's are gpu_hours less the four)",
    "cost_usd": "in-view cost; NULL when unpriced",
    "failed": "true when the job was disrupted (its time after the last checkpoint is failed_usd)",
    "cancelled": "true when a person cancelled the job (its time is classified like a completed job's)",
    "productive_usd": "",
    "idle_allocated_usd": "",
    "underused_usd": "",
    "failed_usd": "",
    "unmeasured_usd": "",
    "failed_lost_usd": "failed jobs: cost of the held time after the last checkpoint (= failed_usd; the whole "
    "in-view cost when no checkpoint is known)",
    "failed_checkpointed_usd": "failed jobs: cost of the held time up to the last checkpoint, classified like "
    "any other held time",
    "failed_basis": "failed jobs: 'lost after the last checkpoint' (the job record's) | 'lost after the last "
    "checkpoint found in the training log' | 'no checkpoint known: whole run lost'",
    "cancelled_usd": "cancelled jobs: their in-view cost (inside the other parts, not a part of its own)",
    "waste_usd": "idle_allocated + underused + failed",
    "effective_gpu_hours": "Σ util × interval / 3600 over the job's samples in the view",
    "util_covered_hours": "Σ interval_s / 3600 of samples with a utilization reading (not clamped)",
    "energy_kwh": "Σ per-sample energy / 3.6e6 (NULL without power or energy readings)",
    "util_basis": "telemetry | from Slurm accounting (sacct's mean, no samples) | NULL: no reading",
}


def job_waste_sql(
    con: duckdb.DuckDBPyConnection,
    filters: Filters,
    settings: Settings,
    as_of: dt.datetime | None,
    source: Source = ROLLUPS,
) -> tuple[str, list[object]]:
    """SQL of :func:`job_waste` (JOB_WASTE_COLUMNS), reusable as a sub-query.

    Each part is priced at the price in force when its time was used: where a price changes inside the view
    (prices change at midnights), every job is cut there, each piece's parts are computed at that piece's own
    rate (as the view narrowed to its days would give them), and the pieces are summed. So two disjoint date
    ranges add up to their union in every part, not only in spend (a job across a change at midnight: idle
    over the whole view was rate-averaged, $2.9125 where its two days sum to $2.8283)."""
    pieces = price_pieces(con, filters)
    if len(pieces) > 1:
        sql, params = _pieces_sql(con, filters, settings, as_of, source, pieces)
        return f"SELECT {_PIECES_TO_JOB} FROM ({sql}) GROUP BY job_id", params
    return parts_sql(
        job_costs_sql(filters, as_of),
        job_totals_sql(con, filters, settings, as_of, source),
        badput_sums_sql(con, filters, settings, as_of, source),
        "job_id",
        settings,
    )


def _pieces_sql(
    con: duckdb.DuckDBPyConnection,
    filters: Filters,
    settings: Settings,
    as_of: dt.datetime | None,
    source: Source,
    pieces: list[tuple[str, Filters]],
) -> tuple[str, list[object]]:
    """JOB_WASTE_COLUMNS per (job, piece of ``pieces``), each job cut at the pieces' bounds."""
    buckets = buckets_sql(pieces)
    return parts_sql(
        job_bucket_costs_sql(filters, as_of, buckets),
        job_bucket_totals_sql(con, filters, settings, as_of, buckets, source),
        badput_sums_sql(con, filters, settings, as_of, source, buckets),
        "job_id, week",
        settings,
    )


# JOB_WASTE_COLUMNS of a job from its pieces' rows (one per price period of the view): sums, and the job's
# descriptive columns; the week is that of its first piece
_PIECES_TO_JOB = ", ".join(
    [f"any_value({c}) AS {c}" for c in ("team", "user_name", "cluster", "name", "kind", "state", "gpu_model")]
    + ["job_id", "any_value(gpu_count) AS gpu_count", "any_value(start_ts) AS start_ts",
       "any_value(end_ts) AS end_ts", "min(week) AS week", "any_value(pricing_tier) AS pricing_tier",
       "min(span_start) AS span_start", "max(span_end) AS span_end"]
    + [f"sum({c}) AS {c}" for c in ("gpu_hours", "oversubscribed_gpu_hours", "covered_gpu_hours",
                                     "idle_gpu_hours", "underused_gpu_hours", "failed_gpu_hours",
                                     "productive_gpu_hours", "cost_usd")]
    + ["bool_or(failed) AS failed", "bool_or(cancelled) AS cancelled"]
    + [f"sum({c}) AS {c}" for c in ("productive_usd", "idle_allocated_usd", "underused_usd", "failed_usd",
                                     "unmeasured_usd", "failed_lost_usd", "failed_checkpointed_usd")]
    + ["any_value(failed_basis) AS failed_basis", "sum(cancelled_usd) AS cancelled_usd"]
    + [f"sum({c}) AS {c}" for c in ("waste_usd", "effective_gpu_hours", "util_covered_hours", "energy_kwh")]
    + ["any_value(util_basis) AS util_basis"]
)  # fmt: skip


def parts_sql(
    jobs: tuple[str, list[object]],
    totals: tuple[str, list[object]],
    bad: tuple[str, list[object]],
    key: str,
    settings: Settings,
) -> tuple[str, list[object]]:
    """The taxonomy over ``jobs`` (job_costs columns: one row per ``key``), ``totals`` (TOTAL_COLUMNS per
    ``key``) and ``bad`` (analytics.badput.badput_sums_sql per ``key``), each (SQL, parameters):
    JOB_WASTE_COLUMNS, one row per ``key``. Badput is taken first; idle, under-used and productive come from
    the rest of the time. A job without samples is judged from Slurm's own mean where sacct gave one
    (analytics/slurm_usage.py)."""
    slurm = filled_totals_sql(
        settings,
        held_s="jc.gpu_hours * 3600.0",
        # the whole job's span (not the view's or the week's piece of it): one verdict per job
        span_s="epoch(coalesce(lj.end_ts, jc.span_end) - coalesce(lj.start_ts, jc.span_start))",
    )
    # b .. p: one chain of definitions without parameters of their own
    chain = f"""
    b AS (
        SELECT jc.*, {slurm}, t.energy_j, lj.last_checkpoint_ts,
               lj.source AS record_source, tr.source AS run_source, bw.lost_from, bw.restart_to,
               coalesce(bad.bad_cov_s, 0) AS bad_cov_s, coalesce(bad.bad_idle_s, 0) AS bad_idle_s,
               coalesce(bad.bad_under_s, 0) AS bad_under_s,
               jc.gpu_hours * 3600.0 AS held_s,
               {disrupted_sql("jc")} AS failed,
               jc.state IN ({sql_list(CANCELLED_STATES)}) AS cancelled
        FROM jc LEFT JOIN t USING ({key}) LEFT JOIN bad USING ({key}) LEFT JOIN jobs lj ON lj.job_id = jc.job_id
             LEFT JOIN training_runs tr ON tr.job_id = jc.job_id LEFT JOIN bw ON bw.job_id = jc.job_id
    ),
    r AS (
        SELECT b.*,
               CASE WHEN held_s > 0 THEN cost_usd / held_s ELSE 0 END AS rate,
               -- badput (analytics/badput.py): the held GPU-time in the badput windows (a disrupted job's
               -- time after its last checkpoint, all of it when none is known; a retry's restart overhead)
               least(held_s, {lost_held_s_sql("b")}) AS lost_s,
               -- the samples outside the badput windows: the rest of the job's time is classified on them
               greatest(0, coalesce(util_cov_s, 0) - bad_cov_s) AS k_cov_s,
               greatest(0, coalesce(idle_s, 0) - bad_idle_s) AS k_idle_s,
               greatest(0, coalesce(underused_s, 0) - bad_under_s) AS k_under_s
        FROM b
    ),
    k AS (
        -- samples never stand for more than the kept held time
        SELECT r.*, CASE WHEN k_cov_s > held_s - lost_s THEN greatest(0, held_s - lost_s) / k_cov_s ELSE 1.0 END AS f
        FROM r
    ),
    p AS (
        SELECT k.*,
               rate * lost_s AS failed_usd,
               rate * f * k_idle_s AS idle_allocated_usd,
               rate * f * k_under_s AS underused_usd,
               rate * f * (k_cov_s - k_idle_s - k_under_s) AS productive_usd,
               CASE WHEN failed OR lost_s > 0 THEN rate * lost_s END AS failed_lost_usd,
               CASE WHEN failed OR lost_s > 0 THEN rate * (held_s - lost_s) END AS failed_checkpointed_usd,
               CASE WHEN NOT failed AND lost_s > 0 THEN 'restart overhead: start to the first logged step'
                    WHEN NOT failed THEN NULL
                    WHEN last_checkpoint_ts IS NULL THEN 'no checkpoint known: whole run lost'
                    -- a record without a checkpoint field of its own got it from its tied training log
                    WHEN record_source NOT IN ({sql_list(CHECKPOINT_SOURCES)})
                         AND run_source IN ({sql_list(CHECKPOINT_LOG_SOURCES)})
                        THEN 'lost after the last checkpoint found in the training log'
                    ELSE 'lost after the last checkpoint' END AS failed_basis
        FROM k
    )"""
    select = """
    SELECT job_id, team, user_name, cluster, name, kind, state, gpu_model, gpu_count, start_ts, end_ts,
           strftime(span_start, '%G-W%V') AS week,
           pricing_tier, span_start, span_end,
           held_s / 3600.0 AS gpu_hours, oversubscribed_gpu_hours,
           least(coalesce(util_cov_s, 0), held_s) / 3600.0 AS covered_gpu_hours,
           -- each money part's GPU-hours (the part is rate × them): a what-if reprices them
           f * k_idle_s / 3600.0 AS idle_gpu_hours,
           f * k_under_s / 3600.0 AS underused_gpu_hours,
           lost_s / 3600.0 AS failed_gpu_hours,
           f * (k_cov_s - k_idle_s - k_under_s) / 3600.0 AS productive_gpu_hours,
           cost_usd, failed, cancelled,
           productive_usd, idle_allocated_usd, underused_usd, failed_usd,
           cost_usd - failed_usd - idle_allocated_usd - underused_usd - productive_usd AS unmeasured_usd,
           failed_lost_usd, failed_checkpointed_usd, failed_basis,
           CASE WHEN cancelled THEN cost_usd END AS cancelled_usd,
           idle_allocated_usd + underused_usd + failed_usd AS waste_usd,
           util_s / 3600.0 AS effective_gpu_hours,
           util_cov_s / 3600.0 AS util_covered_hours,
           energy_j / 3.6e6 AS energy_kwh,
           util_basis
    FROM p
    """
    return with_ctes(
        [Cte("jc", jobs[0], tuple(jobs[1])), Cte("t", totals[0], tuple(totals[1])),
         Cte("bad", bad[0], tuple(bad[1])), Cte("bw", windows_sql()), Cte("shared", shared_segments_sql()),
         chain],
        select,
    )  # fmt: skip


@shared  # one computation per view inside a read-only batch (analytics/shared.py)
def job_waste(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
    source: Source = ROLLUPS,
) -> pl.DataFrame:
    """One row per job of the view with its cost split into the taxonomy's parts (JOB_WASTE_COLUMNS). Where a
    price changes inside the view, the sum of :func:`job_waste_pieces`' rows (one statement for both: a what-if
    reads the pieces beside the jobs)."""
    as_of = as_of or horizon(con)
    if len(price_pieces(con, filters)) > 1:
        return summed_pieces(
            con, job_waste_pieces(con, filters=filters, settings=settings, as_of=as_of, source=source)
        )
    sql, params = job_waste_sql(con, filters, settings, as_of, source)
    return frame(con, f"SELECT * FROM ({sql}) ORDER BY job_id", params)


@shared
def job_waste_pieces(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
    source: Source = ROLLUPS,
) -> pl.DataFrame:
    """:func:`job_waste`'s rows before they are summed per job: one per (job, price piece of the view,
    analytics.periods.price_pieces), ``span_start``/``span_end`` the piece's part of the job. Inside a piece
    every price row in force is one rate (the pieces are cut wherever a row takes effect), so a piece's part
    GPU-hours × a rate is what the bill gives for them at that rate: the what-if reprices a job from these
    (analytics/whatif.py). With no price change inside the view, :func:`job_waste` itself."""
    as_of = as_of or horizon(con)
    pieces = price_pieces(con, filters)
    if len(pieces) == 1:
        return job_waste(con, filters=filters, settings=settings, as_of=as_of, source=source)
    sql, params = _pieces_sql(con, filters, settings, as_of, source, pieces)
    return frame(con, f"SELECT * FROM ({sql}) ORDER BY job_id, span_start", params)


def summed_pieces(con: duckdb.DuckDBPyConnection, pieces: pl.DataFrame) -> pl.DataFrame:
    """:func:`job_waste_pieces`' rows summed per job: :func:`job_waste`'s rows (its columns in the order of a
    view cut in pieces)."""
    name = f"job_waste_pieces_{uuid.uuid4().hex}"
    con.register(name, pieces.to_arrow())
    try:
        return frame(con, f"SELECT {_PIECES_TO_JOB} FROM {name} GROUP BY job_id ORDER BY job_id")
    finally:
        con.unregister(name)
