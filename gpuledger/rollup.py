"""The per-GPU-minute rollup that fleet views read instead of raw samples.

One row per (minute, gpu_id, job_id) with sums, not means, so any coarser roll-up (hour, day, job, team) is
an exact re-aggregation: mean utilization = sum(util_s) / sum(util_cov_s). It is maintained at ingest for
exactly the GPUs and minutes an ingest touched (``refresh_rollup``), inside the ingest's transaction.
"""

from __future__ import annotations

import duckdb

_AGGREGATE = """
    SELECT date_trunc('minute', ts) AS minute, gpu_id, job_id,
           count(*)::INTEGER AS n,
           sum(interval_s) AS covered_s,
           sum(util_pct / 100.0 * interval_s) AS util_s,
           sum(CASE WHEN util_pct IS NOT NULL THEN interval_s END) AS util_cov_s,
           sum(CASE WHEN util_pct <= $idle THEN interval_s END) AS idle_s,
           max(util_pct) AS util_max,
           max(mem_used_mib) AS mem_used_max_mib,
           max(mem_total_mib) AS mem_total_mib,
           sum(power_w * interval_s) AS power_j,
           sum(CASE WHEN power_w IS NOT NULL THEN interval_s END) AS power_cov_s,
           sum(sm_active_pct / 100.0 * interval_s) AS sm_active_s,
           sum(tensor_active_pct / 100.0 * interval_s) AS tensor_active_s,
           sum(CASE WHEN sm_active_pct IS NOT NULL OR tensor_active_pct IS NOT NULL THEN interval_s END)
               AS prof_cov_s
    FROM samples s
"""


def refresh_windows(
    con: duckdb.DuckDBPyConnection, windows_sql: str, params: list[object], idle: float
) -> None:
    con.execute(f"CREATE OR REPLACE TEMP TABLE rollup_windows AS {windows_sql}", params)
    con.execute(
        """
        DELETE FROM samples_minute WHERE EXISTS (
            SELECT 1 FROM rollup_windows w
            WHERE w.gpu_id = samples_minute.gpu_id AND samples_minute.minute BETWEEN w.lo AND w.hi)
        """
    )
    con.execute(
        f"""
        INSERT INTO samples_minute
        {_AGGREGATE.replace("$idle", repr(float(idle)))}
        WHERE EXISTS (SELECT 1 FROM rollup_windows w
                      WHERE w.gpu_id = s.gpu_id AND s.ts >= w.lo AND s.ts < w.hi + INTERVAL 1 MINUTE)
        GROUP BY ALL
        ORDER BY minute, gpu_id
        """
    )
    con.execute("DROP TABLE IF EXISTS temp.rollup_windows")


def refresh_rollup(con: duckdb.DuckDBPyConnection, ingest_id: int, *, idle_util_pct: float) -> None:
    """Recompute the rollup for the GPU-minutes this ingest added samples to or re-attributed."""
    refresh_windows(
        con,
        """
        SELECT gpu_id, date_trunc('minute', min(lo)) AS lo, date_trunc('minute', max(hi)) AS hi FROM (
            SELECT gpu_id, min(ts) AS lo, max(ts) AS hi FROM samples WHERE ingest_id = ? GROUP BY gpu_id
            UNION ALL
            SELECT a.gpu_id, a.start_ts, coalesce(a.end_ts, (SELECT max(ts) FROM samples)) FROM allocations a
            WHERE a.ingest_id = ? AND a.gpu_id IS NOT NULL
        ) GROUP BY gpu_id
        """,
        [ingest_id, ingest_id],
        idle_util_pct,
    )


def rebuild_rollup(con: duckdb.DuckDBPyConnection, *, idle_util_pct: float) -> None:
    """Recompute the whole rollup (after --replace removed samples, or an idle threshold change)."""
    con.execute("DELETE FROM samples_minute")
    con.execute(
        f"INSERT INTO samples_minute {_AGGREGATE.replace('$idle', repr(float(idle_util_pct)))} GROUP BY ALL ORDER BY minute, gpu_id"
    )
