"""When a job's GPUs were idle under a policy's idle rule, as :class:`~gpuledger.guard.steps.Segment` lists.

A sample is idle when its utilization is at or under ``util_pct`` (the policy's, else the ledger's
``thresholds.idle_util_pct``, gpuledger/ledger/thresholds.py) and, with ``memory_floor_pct``, its GPU holds less
than that share of its memory (memory used ÷ the sample's total, else the GPU's, else the catalog card's; a
sample whose share is unknown is not spared by the floor). A sample without utilization is unknown. A sample
stands from its ``ts`` until its GPU's next sample when that one continues it (gpuledger/ledger/sample_time.py
``contiguous_sql``: within ``GAP_TOLERANCE`` × its interval), else until its own end (``sample_end_sql``); the
time after is unknown. Runs of one state per GPU are collapsed in SQL, so Python sees a few rows per GPU.

The job is idle at a moment when at least ``gpu_fraction`` of its GPUs are idle; busy when so many GPUs are
busy that it cannot be (whatever the unknown ones were doing); unknown otherwise. Its GPUs are those that
reported samples for it, and at least its whole ``gpu_count``: a GPU the job held that never reported is
unknown, so under ``gpu_fraction = 1`` a job with a GPU that never reported is never idle: the safe side.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
from collections import defaultdict

import duckdb

from gpuledger.guard.steps import BUSY, IDLE, UNKNOWN, Segment, merge
from gpuledger.ledger.sample_time import contiguous_sql, sample_end_sql

# one row per run of one state of one GPU of one job; params: job ids, util_pct, memory_floor_pct (NULL: none)
RUNS_SQL = f"""
WITH s AS (
    SELECT s.job_id, s.gpu_id, s.ts, {sample_end_sql("s.ts", "s.interval_s")} AS own_end, s.interval_s,
           CASE WHEN s.util_pct IS NULL THEN NULL
                WHEN s.util_pct <= $util
                     AND NOT coalesce(100.0 * s.mem_used_mib
                                      / nullif(coalesce(s.mem_total_mib, g.memory_total_mib, c.memory_mib), 0)
                                      >= $floor, false)
                THEN true ELSE false END AS idle
    FROM samples s
    LEFT JOIN gpus g ON g.gpu_id = s.gpu_id
    LEFT JOIN gpu_catalog c ON c.model = g.model
    WHERE s.job_id IN (SELECT unnest($jobs::VARCHAR[]))
), n AS (
    SELECT *, lead(ts) OVER w AS next_ts, lag(idle) OVER w AS prev_idle,
           lag(ts) OVER w AS prev_ts, lag(interval_s) OVER w AS prev_iv
    FROM s WINDOW w AS (PARTITION BY job_id, gpu_id ORDER BY ts)
), e AS (
    SELECT job_id, gpu_id, ts, idle,
           CASE WHEN next_ts IS NOT NULL AND {contiguous_sql("epoch(next_ts - ts)", "interval_s")}
                THEN next_ts ELSE own_end END AS stands_to,
           CASE WHEN prev_ts IS NULL OR NOT {contiguous_sql("epoch(ts - prev_ts)", "prev_iv")}
                     OR prev_idle IS DISTINCT FROM idle THEN 1 ELSE 0 END AS new_run
    FROM n
), r AS (
    SELECT *, sum(new_run) OVER (PARTITION BY job_id, gpu_id ORDER BY ts) AS run FROM e
)
SELECT job_id, gpu_id, min(ts) AS t0, max(stands_to) AS t1, any_value(idle) AS idle
FROM r GROUP BY job_id, gpu_id, run ORDER BY job_id, gpu_id, t0
"""


def gpu_runs(
    con: duckdb.DuckDBPyConnection, job_ids: list[str], util_pct: float, memory_floor_pct: float | None
) -> dict[str, dict[str, list[tuple[dt.datetime, dt.datetime, bool | None]]]]:
    """job → GPU → runs ``(start, end, idle)`` (idle None: no utilization reading)."""
    out: dict[str, dict[str, list[tuple[dt.datetime, dt.datetime, bool | None]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    if not job_ids:
        return out
    rows = con.execute(RUNS_SQL, {"jobs": job_ids, "util": util_pct, "floor": memory_floor_pct}).fetchall()
    for job_id, gpu_id, t0, t1, idle in rows:
        out[job_id][gpu_id].append((t0, t1, idle))
    return out


def job_segments(
    runs: dict[str, list[tuple[dt.datetime, dt.datetime, bool | None]]],
    gpu_count: float,
    gpu_fraction: float,
    exempt_until: dt.datetime | None = None,
) -> list[Segment]:
    """The job's segments from its GPUs' runs (see the module docstring); before ``exempt_until`` the job
    counts as unknown (an interactive job's spared hours)."""
    if not runs:
        return []
    n = max(len(runs), math.floor(gpu_count + 1e-9))
    need = gpu_fraction * n - 1e-9
    edges: set[dt.datetime] = set()
    for gpu in runs.values():
        for t0, t1, _ in gpu:
            edges.update((t0, t1))
    if exempt_until is not None:
        edges.add(exempt_until)
    times = sorted(edges)
    # per GPU, a cursor over its runs (sorted, not overlapping)
    cursors = {g: 0 for g in runs}
    segments: list[Segment] = []
    for lo, hi in itertools.pairwise(times):
        idle = busy = 0
        for g, gruns in runs.items():
            i = cursors[g]
            while i < len(gruns) and gruns[i][1] <= lo:
                i += 1
            cursors[g] = i
            if i < len(gruns) and gruns[i][0] <= lo:
                state = gruns[i][2]
                idle += state is True
                busy += state is False
        if exempt_until is not None and lo < exempt_until:
            state = UNKNOWN
        elif idle >= need:
            state = IDLE
        elif busy > n - need:
            state = BUSY
        else:
            state = UNKNOWN
        segments.append(Segment(lo, hi, state))
    return merge(segments)
