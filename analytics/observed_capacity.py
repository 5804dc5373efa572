"""Observed capacity: the spans in which each physical GPU reported telemetry, per capacity window.

A cluster's capacity at a moment is at least the GPUs reporting then (analytics/capacity.py takes the larger of
these and the declared ones). The spans come from the per-minute rollup, or, where they are equal, from the
runs of consecutive minutes (gpuledger/ledger/observed.py): a few rows per GPU-day instead of one per minute.
"""

from __future__ import annotations

import datetime as dt

import duckdb

from analytics.cost import telemetry_only_gpus_sql
from gpuledger.ledger.cte import Cte
from gpuledger.ledger.observed import observed_runs_ready


def observed_gpus_sql() -> str:
    """The physical GPUs whose telemetry counts as observed capacity (gpu_id, phys, gpu_model, cluster).

    Every GPU with samples except those of the telemetry-only cards (their capacity is their
    unattributed:<card> pseudo-job's span, added beside the held time in analytics/capacity.py, so such a card
    is capacity exactly as long as it is held). A MIG instance counts as its parent card, so a card whose
    instances a job holds only in part is capacity as a whole: its other instances' time is unallocated. The
    cluster is the GPU's own, else that of a job whose allocation names the GPU or its host (a node's
    nvidia-smi log ingested without --cluster, its jobs from sacct), else that of another GPU row of its card
    (a MIG instance no job names, on a card one of whose instances a job holds). Built when a statement is
    (never at import): inside a sharing block the telemetry-only GPUs are that block's temp table, gone once
    the block ends."""
    return f"""
    SELECT gpu_id, phys, gpu_model, coalesce(cluster, min(cluster) OVER (PARTITION BY phys)) AS cluster
    FROM (
        SELECT g.gpu_id, coalesce(g.parent_gpu_id, g.gpu_id) AS phys, g.model AS gpu_model,
               coalesce(g.cluster,
                        (SELECT min(j.cluster) FROM allocations a JOIN jobs j ON j.job_id = a.job_id
                         WHERE a.gpu_id = g.gpu_id
                            OR (a.gpu_id IS NULL
                                AND lower(split_part(a.host, '.', 1)) = lower(split_part(g.host, '.', 1)))))
                   AS cluster
        FROM gpus g
        WHERE g.gpu_id NOT IN (SELECT gpu_id FROM ({telemetry_only_gpus_sql()}))
    )
"""


# GPU-minutes inside each window of ``uw`` (w_id, lo, hi): first sample and max(ts + interval_s) of each
# GPU-minute. Parameters: the windows' overall lo and hi (a plain range the scan can skip by).
MINUTES_SQL = """
        SELECT w.w_id, og.phys, any_value(og.cluster) AS cluster, any_value(og.gpu_model) AS gpu_model, m.minute,
               min(m.first_ts) AS f, max(m.max_end_ts) AS e
        FROM samples_minute m JOIN og ON og.gpu_id = m.gpu_id
             JOIN uw w ON m.minute >= date_trunc('minute', w.lo) AND m.minute < w.hi
        WHERE m.minute >= date_trunc('minute', ?::TIMESTAMP) AND m.minute < ?::TIMESTAMP
        GROUP BY w.w_id, og.phys, m.minute"""

# The same from ``observed_runs`` (runs of consecutive minutes of one GPU, cut at midnight): one row per run
# start instead of one per minute. Gives the spans of MINUTES_SQL when the gap is at least two minutes (a
# minute whose previous minute has a row is never more than 120 s after it, so only a run's first minute can
# start a span; every earlier run ends before that minute or covers the one before it) and every run lies
# wholly inside or outside each window's minutes (lo and hi are midnights, or lie outside the data:
# :func:`observed_from_runs`). Same parameters.
RUN_STARTS_SQL = """
        SELECT w.w_id, og.phys, any_value(og.cluster) AS cluster, any_value(og.gpu_model) AS gpu_model,
               r.first_minute AS minute, min(r.first_ts) AS f, max(r.end_ts) AS e
        FROM observed_runs r JOIN og ON og.gpu_id = r.gpu_id
             JOIN uw w ON r.first_minute >= date_trunc('minute', w.lo) AND r.first_minute < w.hi
        WHERE r.first_minute >= date_trunc('minute', ?::TIMESTAMP) AND r.first_minute < ?::TIMESTAMP
        GROUP BY w.w_id, og.phys, r.first_minute"""

# a silence longer than the gap (parameter: seconds) starts a new island
ISLANDS_SQL = """
        SELECT *, sum(CASE WHEN epoch(f - prev_e) > ? THEN 1 ELSE 0 END)
                      OVER (PARTITION BY w_id, phys ORDER BY minute ROWS UNBOUNDED PRECEDING) AS island
        FROM (SELECT om.*, max(e) OVER (PARTITION BY w_id, phys ORDER BY minute
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_e FROM om)"""

SPANS_SQL = """
        SELECT w_id, phys, any_value(cluster) AS cluster, any_value(gpu_model) AS gpu_model,
               min(f) AS t_from, max(e) AS t_to
        FROM oi GROUP BY w_id, phys, island"""


def observed_spans_ctes(*, from_runs: bool, lo: dt.datetime, hi: dt.datetime, gap_s: float) -> list[Cte]:
    """CTEs og, om, oi and ``obs`` (w_id, phys, cluster, gpu_model, t_from, t_to): the reporting spans of each
    physical GPU inside each window of the CTE ``uw`` (w_id, lo, hi), [lo, hi) the windows' overall bounds.
    A silence longer than ``gap_s`` starts a new span; every gap of at least a minute lies between minute
    rows, so the spans are those of the raw samples. Each window is on its own (a span never reaches across a
    window's bounds). ``from_runs``: read the runs (:data:`RUN_STARTS_SQL`), where
    :func:`observed_from_runs` says they give the same spans."""
    return [
        Cte("og", observed_gpus_sql()),
        Cte("om", RUN_STARTS_SQL if from_runs else MINUTES_SQL, (lo, hi)),
        Cte("oi", ISLANDS_SQL, (gap_s,)),
        Cte("obs", SPANS_SQL, materialized=True),
    ]


def observed_from_runs(
    con: duckdb.DuckDBPyConnection,
    lo: dt.datetime,
    hi: dt.datetime,
    start: dt.datetime,
    end: dt.datetime,
    gap_s: float,
) -> bool:
    """True when :data:`RUN_STARTS_SQL` gives the spans of :data:`MINUTES_SQL` for [lo, hi): the runs were
    built whole, the gap is at least two minutes, and no run is cut by the window (lo is a midnight or the
    data's start; hi a midnight or the data's end, after every sample's end)."""
    midnight = dt.time()
    return (
        gap_s >= 120.0
        and (lo.time() == midnight or lo == start)
        and (hi.time() == midnight or hi == end)
        and observed_runs_ready(con)
    )
