"""Badput: the GPU-time a disruption threw away, per Google Cloud's ML Goodput (docs/metrics.md, "Badput").

The one home of which time of a job is badput; analytics/waste.py prices it first and classifies only the rest
(idle, under-used, productive, unmeasured), so no second of a job sits in two parts.

- A job **disrupted** (its state in :data:`DISRUPTED_STATES`: it failed, ran out of memory or time, lost its
  node, was preempted, or the attempt was requeued) whose kind is in :data:`FAILURE_KINDS` loses the work since
  that attempt's last checkpoint: its time from ``last_checkpoint_ts`` (the job's start when none is known)
  to its end. A notebook or an inference service has no progress to lose; CANCELLED is a person's decision,
  not a disruption, and its time is classified by telemetry like a completed job's.
- A **retry** (an attempt after the first of a requeued job: ``jobs.attempt`` > 1) also loses its restart
  overhead: from its start to the first step its training log timed inside it (``train_log.ts``, logged for
  the job or for the scheduler job it is an attempt of). Without a timed step no overhead is counted.

Both windows are wall time inside the job's span; a job's badput GPU-seconds are its held GPU-seconds in
them (what it declared there less its cut of shared cards there, :func:`lost_held_s_sql`). The samples inside them are taken out of the job's telemetry sums (:func:`badput_sums_sql`) so that
idle, under-used and productive time come only from the rest. A sample counts where its ``ts`` falls (a
sample straddling a checkpoint belongs to the side it starts on).
"""

from __future__ import annotations

import datetime as dt

import duckdb

from analytics.cost import shared_cut_sql
from analytics.filters import Filters
from analytics.telemetry_source import ROLLUPS, Buckets, TelemetrySource
from gpuledger.ledger.job_states import DISRUPTED_STATES
from gpuledger.ledger.sample_use import covered_s_sql, underused_s_sql
from gpuledger.ledger.settings import Settings
from gpuledger.ledger.sql import sql_list

FAILURE_KINDS = ("training", "fine-tune", "other")  # kinds whose progress a disruption loses


def disrupted_sql(alias: str) -> str:
    """True for a row (with ``state`` and ``kind``) of a disrupted job whose progress counts."""
    return (
        f"({alias}.state IN ({sql_list(DISRUPTED_STATES)}) AND {alias}.kind IN ({sql_list(FAILURE_KINDS)}))"
    )


def windows_sql() -> str:
    """One row per job with badput: ``job_id``, ``lost_from`` (disrupted: its last checkpoint, else its
    start; NULL otherwise) and ``restart_to`` (a retry: its first timed step; NULL otherwise, or when no step
    was timed). The restart window ends no later than ``lost_from`` (the two never overlap)."""
    return f"""
    SELECT job_id, lost_from,
           -- (least() skips NULLs: a job with no restart overhead keeps a NULL restart_to)
           CASE WHEN restart_to IS NOT NULL AND lost_from IS NOT NULL THEN least(restart_to, lost_from)
                ELSE restart_to END AS restart_to
    FROM (
        SELECT j.job_id,
               CASE WHEN {disrupted_sql("j")} THEN greatest(coalesce(j.last_checkpoint_ts, j.start_ts), j.start_ts)
               END AS lost_from,
               CASE WHEN coalesce(j.attempt, 1) > 1 THEN (
                   SELECT min(t.ts) FROM train_log t
                   WHERE t.job_id IN (j.job_id, j.attempt_of) AND t.step IS NOT NULL AND t.ts >= j.start_ts
                     AND t.ts < coalesce(j.end_ts, TIMESTAMP '9999-12-31'))
               END AS restart_to
        FROM jobs j WHERE j.start_ts IS NOT NULL
    ) w
    WHERE lost_from IS NOT NULL OR restart_to IS NOT NULL
    """


def lost_held_s_sql(alias: str) -> str:
    """GPU-seconds the row ``alias`` (job_id, gpu_count, span_start, span_end, lost_from, restart_to) held
    inside its badput windows: what it declared there less its cut of shared GPUs there
    (analytics.cost.shared_cut_sql; reads the CTE ``shared``).

    Taken where the windows lie, never as their share of the span's wall time: a job whose share of a
    time-sliced card changes over its span (a third job joins before midnight) held its card unevenly, and a
    wall-time proportion of its held seconds put a different number of them in the window for the whole view
    than for its days (10.06 vs 9.97 GPU-h on bench/money_properties' seed-1 shape)."""
    a = alias
    lost_lo = f"greatest(coalesce({a}.lost_from, {a}.span_end), {a}.span_start)"
    restart_hi = f"least(coalesce({a}.restart_to, {a}.span_start), {a}.span_end)"
    declared = f"""{a}.gpu_count * (greatest(0, epoch({a}.span_end - {lost_lo}))
                                     + greatest(0, epoch({restart_hi} - {a}.span_start)))"""
    cut = (
        f"{shared_cut_sql(a, lost_lo, f'{a}.span_end')} + {shared_cut_sql(a, f'{a}.span_start', restart_hi)}"
    )
    return f"greatest(0, {declared} - ({cut}))"


def _in_window(alias: str) -> str:
    return f"(({alias}.ts >= w.lost_from) OR ({alias}.ts < w.restart_to))"


def badput_sums_sql(
    con: duckdb.DuckDBPyConnection,
    filters: Filters,
    settings: Settings,
    as_of: dt.datetime | None,
    source: TelemetrySource = ROLLUPS,
    buckets: Buckets | None = None,
) -> tuple[str, list[object]]:
    """Per job (and ``week`` with ``buckets``): ``bad_cov_s``, ``bad_idle_s``, ``bad_under_s``, the covered,
    idle-stretch and under-used seconds of the job's samples inside the view that fall in its badput windows:
    the same sums as analytics/utilization.py's, over those samples only. Idle-stretch membership is the
    whole run's, as there (``source``'s :meth:`window_samples_sql`); a shared card's sample counts for each
    holder by its share (``share_w``, gpuledger/ledger/shares.py)."""
    target = float(settings.target_util_pct)
    week = ", wk.week" if buckets else ""
    bjoin = " JOIN wk ON x.ts >= wk.w_lo AND x.ts < wk.w_hi" if buckets else ""
    bcte = f", wk AS ({buckets[0]})" if buckets else ""
    bparams = list(buckets[1]) if buckets else []
    x_sql, x_params = source.window_samples_sql(con, filters, settings, as_of, _in_window)
    sql = f"""
    WITH w AS ({windows_sql()}){bcte},
    x AS ({x_sql})
    SELECT x.job_id{week},
           coalesce(sum({covered_s_sql("x.util_pct", "x.interval_s * x.share_w")}), 0) AS bad_cov_s,
           coalesce(sum(x.interval_s * x.share_w) FILTER (WHERE x.in_idle), 0) AS bad_idle_s,
           coalesce(sum({underused_s_sql("x.util_pct", "x.interval_s * x.share_w", "x.in_idle", target)}), 0)
               AS bad_under_s
    FROM x{bjoin} GROUP BY ALL
    """
    return sql, [*bparams, *x_params]
