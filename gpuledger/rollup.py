"""The rollups that fleet views and the analytics fast path read instead of raw samples.

Three tables, all maintained at ingest inside the ingest's transaction (docs/metrics.md, "Fast path"):

- ``samples_minute``: one row per (minute, gpu_id, job_id) with sums, not means, so any coarser roll-up (hour,
  day, job, team) is an exact re-aggregation: mean utilization = sum(util_s) / sum(util_cov_s). Besides the
  plain sums it stores what the raw-sample analytics derive with window functions: seconds inside idle
  stretches, under-used seconds, per-sample energy, the counts behind job_signals' shares and the
  sample-pair (swing) counts;
- ``samples_day``: the same columns per (day, gpu_id, job_id), re-aggregated from ``samples_minute``; views
  start and end at midnight, so per-job figures read this one (tens of thousands of rows, not millions);
- ``idle_runs``: every maximal run of consecutive idle samples (util ≤ idle_util_pct, no gap) of one GPU
  within one job, of any length, split at UTC midnight; a run crosses minutes, chunks and ingests, so an
  ingest re-computes exactly the runs that touch what it changed (see :func:`refresh_windows`);
- ``samples_util_hist``: seconds per (day, GPU, job, utilization reading), for exact time-weighted
  percentiles.

The idle and under-used columns depend on the thresholds (idle_util_pct, idle_min_minutes,
target_util_pct); the ones the rollup was built with are stored in ``schema_meta`` under
``rollup_thresholds``. Analytics read the rollup only when they equal the current settings
(:func:`rollup_matches`); ``sync_reference`` rebuilds it when the settings change (:func:`ensure_rollup`).
"""

from __future__ import annotations

import duckdb

GAP_TOLERANCE = 1.5  # = analytics.utilization.GAP_TOLERANCE: a later sample beyond 1.5 × interval_s is a gap
# = analytics.job_signals' constants (a test pins them equal)
LOW_UTIL_PCT = 10.0
HIGH_UTIL_PCT = 70.0
POWER_THERMAL_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
HOT_TEMP_C = 85.0

META_KEY = "rollup_thresholds"
DEFAULT_THRESHOLDS = (5.0, 30.0, 60.0)
Thresholds = tuple[float, float, float]  # idle_util_pct, idle_min_minutes, target_util_pct


def thresholds(idle_util_pct: float, idle_min_minutes: float, target_util_pct: float) -> Thresholds:
    return (float(idle_util_pct), float(idle_min_minutes), float(target_util_pct))


def stored_thresholds(con: duckdb.DuckDBPyConnection) -> Thresholds | None:
    """The thresholds the rollup was built with; None when it was never built."""
    rows = con.execute("SELECT value FROM schema_meta WHERE key = ?", [META_KEY]).fetchall()
    if not rows:
        return None
    a, b, c = (float(x) for x in rows[0][0].split("/"))
    return (a, b, c)


def rollup_matches(con: duckdb.DuckDBPyConnection, th: Thresholds) -> bool:
    """True when the rollup can stand in for raw samples under thresholds ``th``: it was built with them,
    or the ledger has no samples at all (then both paths give empty sums)."""
    if stored_thresholds(con) == th:
        return True
    return not con.execute("SELECT count(*) FROM (SELECT 1 FROM samples LIMIT 1)").fetchall()[0][0]


def _store(con: duckdb.DuckDBPyConnection, th: Thresholds) -> None:
    con.execute("INSERT OR REPLACE INTO schema_meta VALUES (?, ?)", [META_KEY, "/".join(repr(x) for x in th)])


def _reach(ts: str, iv: str) -> str:
    """A time no later sample can link to (strictly conservative: 1.5 × interval, rounded up, + 1 s)."""
    return f"({ts} + to_microseconds((ceil({GAP_TOLERANCE} * {iv} * 1e6) + 1000000)::BIGINT))"


def _widen(con: duckdb.DuckDBPyConnection) -> None:
    """Grow each window of ``rw`` until no idle run of its GPU crosses or could link across its ends.

    After the loop: every run starting before ``lo`` ends with a reach before ``lo`` (no sample at or after
    ``lo`` can continue it), and every run starting at or before the window's reach ends inside it, so
    re-computing the runs from the samples in [lo, hi] gives exactly the runs of the whole GPU history.
    """
    for _ in range(100):
        con.execute(
            f"""
            UPDATE rw SET reach_hi = greatest(rw.hi, x.reach)
            FROM (SELECT rw.gpu_id, max({_reach("s.ts", "s.interval_s::DOUBLE")}) AS reach
                  FROM rw JOIN samples s ON s.gpu_id = rw.gpu_id AND s.ts >= rw.lo AND s.ts <= rw.hi
                  GROUP BY rw.gpu_id) x
            WHERE x.gpu_id = rw.gpu_id
            """
        )
        con.execute(
            """
            CREATE OR REPLACE TEMP TABLE rw_next AS
            SELECT rw.gpu_id,
                   least(rw.lo, (SELECT min(r.run_start) FROM idle_runs r
                                 WHERE r.gpu_id = rw.gpu_id AND r.run_start < rw.lo
                                   AND r.run_reach_ts >= rw.lo)) AS lo,
                   greatest(rw.hi, (SELECT max(r.last_ts) FROM idle_runs r
                                    WHERE r.gpu_id = rw.gpu_id AND r.run_start <= rw.reach_hi
                                      AND r.last_ts > rw.hi)) AS hi,
                   rw.reach_hi
            FROM rw
            """
        )
        changed = con.execute(
            "SELECT count(*) FROM rw JOIN temp.rw_next n USING (gpu_id) WHERE n.lo <> rw.lo OR n.hi <> rw.hi"
        ).fetchall()[0][0]
        con.execute("CREATE OR REPLACE TEMP TABLE rw AS SELECT * FROM temp.rw_next")
        con.execute("DROP TABLE temp.rw_next")
        if not changed:
            return
    raise RuntimeError("rollup window did not settle")  # pragma: no cover - runs are finite


def _refresh_runs(con: duckdb.DuckDBPyConnection, idle: float) -> None:
    con.execute(
        """DELETE FROM idle_runs WHERE EXISTS (
               SELECT 1 FROM rw WHERE rw.gpu_id = idle_runs.gpu_id
                                  AND idle_runs.run_start BETWEEN rw.lo AND rw.hi)"""
    )
    con.execute(
        f"""
        INSERT INTO idle_runs
        WITH base AS (
            SELECT s.ts, s.gpu_id, s.job_id, s.interval_s::DOUBLE AS iv, s.util_pct::DOUBLE AS util
            FROM samples s JOIN rw ON s.gpu_id = rw.gpu_id AND s.ts >= rw.lo AND s.ts <= rw.hi
        ),
        marked AS (
            SELECT *, coalesce(util <= {idle}, false) AS is_idle,
                   CASE WHEN util <= {idle} AND lag(util) OVER w <= {idle}
                             AND epoch(ts - lag(ts) OVER w) <= {GAP_TOLERANCE} * lag(iv) OVER w
                        THEN 0 ELSE 1 END AS new_run
            FROM base WINDOW w AS (PARTITION BY gpu_id, job_id ORDER BY ts)
        ),
        numbered AS (
            SELECT *, sum(new_run) OVER (PARTITION BY gpu_id, job_id ORDER BY ts ROWS UNBOUNDED PRECEDING)
                      AS run_no
            FROM marked
        ),
        idle AS (
            SELECT *, min(ts) OVER r AS run_start, sum(iv) OVER r AS run_s,
                   max({_reach("ts", "iv")}) OVER r AS run_reach_ts
            FROM numbered WHERE is_idle
            WINDOW r AS (PARTITION BY gpu_id, job_id, run_no)
        )
        SELECT gpu_id, job_id, run_start, run_s, run_reach_ts, ts::DATE AS day, min(ts), max(ts),
               max(ts + to_microseconds((iv * 1e6)::BIGINT)), sum(iv)
        FROM idle GROUP BY gpu_id, job_id, run_start, run_s, run_reach_ts, ts::DATE
        ORDER BY gpu_id, run_start
        """
    )


def _minute_windows(con: duckdb.DuckDBPyConnection) -> None:
    """``rollup_m``: per GPU the minutes to re-roll (the runs' window, plus the sample before it whose
    energy reads the next sample, plus the samples after it whose predecessor changed) and how far to read
    around them so the window functions see each sample's true neighbours."""
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE rollup_m AS
        WITH mx AS (
            SELECT s.gpu_id, to_microseconds((ceil({GAP_TOLERANCE} * max(s.interval_s::DOUBLE) * 1e6)
                                              + 1000000)::BIGINT) AS look
            FROM samples s WHERE s.gpu_id IN (SELECT gpu_id FROM rw) GROUP BY s.gpu_id
        ),
        w AS (
            SELECT rw.gpu_id, mx.look,
                   date_trunc('minute', least(rw.lo, (
                       SELECT min(s.ts) FROM samples s
                       WHERE s.gpu_id = rw.gpu_id AND s.ts < rw.lo AND s.ts >= rw.lo - coalesce(mx.look, INTERVAL 0 SECOND)
                         AND {_reach("s.ts", "s.interval_s::DOUBLE")} >= rw.lo))) AS m_lo,
                   date_trunc('minute', greatest(rw.hi, rw.reach_hi)) + INTERVAL 1 MINUTE AS m_hi_end
            FROM rw LEFT JOIN mx USING (gpu_id)  -- a GPU whose samples were all removed has no mx row
        )
        SELECT gpu_id, m_lo, m_hi_end, m_lo - coalesce(look, INTERVAL 0 SECOND) AS look_lo,
               m_hi_end + coalesce(look, INTERVAL 0 SECOND) AS look_hi
        FROM w
        """
    )


def _minute_sql(th: Thresholds) -> str:
    idle, min_minutes, target = th
    min_s = min_minutes * 60.0
    return f"""
    WITH base AS (
        SELECT s.ts, s.gpu_id, s.job_id, s.interval_s::DOUBLE AS interval_s, s.util_pct::DOUBLE AS util,
               s.mem_used_mib::DOUBLE AS mem_used, s.mem_total_mib, s.power_w::DOUBLE AS power_w, s.energy_j,
               s.sm_active_pct::DOUBLE AS sm, s.tensor_active_pct::DOUBLE AS tensor, s.temp_c::DOUBLE AS temp_c,
               s.throttle_reasons, w.m_lo, w.m_hi_end
        FROM samples s JOIN rollup_m w ON s.gpu_id = w.gpu_id AND s.ts >= w.look_lo AND s.ts < w.look_hi
    ),
    seq AS (
        SELECT *, lead(ts) OVER g AS next_ts, lead(energy_j) OVER g AS next_energy_j,
               lag(ts) OVER p AS prev_ts, lag(interval_s) OVER p AS prev_iv, lag(util) OVER p AS prev_util
        FROM base
        WINDOW g AS (PARTITION BY gpu_id ORDER BY ts), p AS (PARTITION BY gpu_id, job_id ORDER BY ts)
    ),
    kept AS (
        SELECT *, coalesce(job_id, chr(0)) AS jkey,
               -- = analytics.utilization.sample_energy_sql
               (CASE WHEN energy_j IS NOT NULL AND next_energy_j >= energy_j
                          AND epoch(next_ts - ts) <= {GAP_TOLERANCE} * interval_s
                     THEN next_energy_j - energy_j
                     ELSE power_w * interval_s END) AS e_j,
               prev_ts IS NOT NULL AND epoch(ts - prev_ts) <= {GAP_TOLERANCE} * prev_iv AS contiguous
        FROM seq WHERE ts >= m_lo AND ts < m_hi_end
    ),
    runs AS (
        SELECT r.*, coalesce(r.job_id, chr(0)) AS jkey FROM idle_runs r
        WHERE r.gpu_id IN (SELECT gpu_id FROM rollup_m)
    ),
    f AS (
        SELECT k.*,
               coalesce(k.util <= {idle} AND r.run_s >= {min_s} AND k.ts <= r.last_ts, false) AS in_idle,
               (k.contiguous AND k.util IS NOT NULL AND k.prev_util IS NOT NULL)::INTEGER AS pair,
               (k.contiguous AND ((k.util < {LOW_UTIL_PCT} AND k.prev_util > {HIGH_UTIL_PCT})
                                  OR (k.util > {HIGH_UTIL_PCT} AND k.prev_util < {LOW_UTIL_PCT})))::INTEGER
                   AS swing
        FROM kept k ASOF LEFT JOIN runs r ON k.gpu_id = r.gpu_id AND k.jkey = r.jkey AND k.ts >= r.first_ts
    )
    SELECT date_trunc('minute', ts) AS minute, gpu_id, job_id,
           count(*)::INTEGER AS n,
           sum(interval_s) AS covered_s,
           sum(util / 100.0 * interval_s) AS util_s,
           sum(interval_s) FILTER (WHERE util IS NOT NULL) AS util_cov_s,
           sum(interval_s) FILTER (WHERE util <= {idle}) AS idle_s,
           max(util) AS util_max,
           max(mem_used) AS mem_used_max_mib,
           max(mem_total_mib) AS mem_total_mib,
           sum(power_w * interval_s) AS power_j,
           sum(interval_s) FILTER (WHERE power_w IS NOT NULL) AS power_cov_s,
           sum(sm / 100.0 * interval_s) AS sm_active_s,
           sum(tensor / 100.0 * interval_s) AS tensor_active_s,
           sum(interval_s) FILTER (WHERE sm IS NOT NULL OR tensor IS NOT NULL) AS prof_cov_s,
           min(ts) AS first_ts,
           max(ts) AS last_ts,
           max(ts + to_microseconds((interval_s * 1e6)::BIGINT)) AS max_end_ts,
           sum(interval_s) FILTER (WHERE in_idle) AS idle_run_s,
           sum(interval_s * ({target} - util) / {target}) FILTER (WHERE util < {target} AND NOT in_idle)
               AS underused_s,
           sum(interval_s) FILTER (WHERE sm IS NOT NULL) AS sm_cov_s,
           sum(interval_s) FILTER (WHERE tensor IS NOT NULL) AS tensor_cov_s,
           max(mem_used / mem_total_mib) AS memk_frac_max,
           sum(mem_used / mem_total_mib * interval_s) AS memk_frac_s,
           sum(interval_s) FILTER (WHERE mem_used IS NOT NULL AND mem_total_mib > 0) AS memk_cov_s,
           max(mem_used) FILTER (WHERE mem_total_mib IS NULL) AS memu_max_mib,
           sum(mem_used * interval_s) FILTER (WHERE mem_total_mib IS NULL) AS memu_s,
           sum(interval_s) FILTER (WHERE mem_used IS NOT NULL AND mem_total_mib IS NULL) AS memu_cov_s,
           count(*) FILTER (WHERE mem_total_mib IS NULL)::INTEGER AS n_no_total,
           sum(e_j) AS energy_j,
           sum(interval_s) FILTER (WHERE e_j IS NOT NULL) AS energy_cov_s,
           count(util)::INTEGER AS util_n,
           count(*) FILTER (WHERE util < {LOW_UTIL_PCT})::INTEGER AS dip_n,
           count(*) FILTER (WHERE util > {HIGH_UTIL_PCT})::INTEGER AS burst_n,
           count(throttle_reasons)::INTEGER AS throttle_n,
           count(*) FILTER (WHERE throttle_reasons & {POWER_THERMAL_MASK}::UBIGINT <> 0)::INTEGER AS throttled_n,
           count(temp_c)::INTEGER AS temp_n,
           count(*) FILTER (WHERE temp_c >= {HOT_TEMP_C})::INTEGER AS hot_n,
           max(temp_c) AS temp_max_c,
           sum(pair)::INTEGER AS pairs_n,
           sum(swing)::INTEGER AS swings_n,
           arg_min(pair, ts)::INTEGER AS first_pair,
           arg_min(swing, ts)::INTEGER AS first_swing
    FROM f
    GROUP BY ALL
    ORDER BY minute, gpu_id
    """


_SUMS = [
    "covered_s",
    "util_s",
    "util_cov_s",
    "idle_s",
    "power_j",
    "power_cov_s",
    "sm_active_s",
    "tensor_active_s",
    "prof_cov_s",
    "idle_run_s",
    "underused_s",
    "sm_cov_s",
    "tensor_cov_s",
    "memk_frac_s",
    "memk_cov_s",
    "memu_s",
    "memu_cov_s",
    "energy_j",
    "energy_cov_s",
]
_COUNTS = [
    "n",
    "n_no_total",
    "util_n",
    "dip_n",
    "burst_n",
    "throttle_n",
    "throttled_n",
    "temp_n",
    "hot_n",
    "pairs_n",
    "swings_n",
]
_MAXES = [
    "util_max",
    "mem_used_max_mib",
    "mem_total_mib",
    "last_ts",
    "max_end_ts",
    "memk_frac_max",
    "memu_max_mib",
    "temp_max_c",
]
DAY_AGGREGATES = ", ".join(
    [f"sum(m.{c}) AS {c}" for c in _SUMS]
    + [f"sum(m.{c})::INTEGER AS {c}" for c in _COUNTS]
    + [f"max(m.{c}) AS {c}" for c in _MAXES]
    + [
        "min(m.first_ts) AS first_ts",
        "arg_min(m.first_pair, m.minute) AS first_pair",
        "arg_min(m.first_swing, m.minute) AS first_swing",
    ]
)


def _refresh_minutes(con: duckdb.DuckDBPyConnection, th: Thresholds) -> None:
    con.execute(
        """DELETE FROM samples_minute WHERE EXISTS (
               SELECT 1 FROM rollup_m w WHERE w.gpu_id = samples_minute.gpu_id
                                          AND samples_minute.minute >= w.m_lo
                                          AND samples_minute.minute < w.m_hi_end)"""
    )
    con.execute(f"INSERT INTO samples_minute BY NAME ({_minute_sql(th)})")
    con.execute(
        """DELETE FROM samples_day WHERE EXISTS (
               SELECT 1 FROM rollup_m w WHERE w.gpu_id = samples_day.gpu_id
                                          AND samples_day.day >= w.m_lo::DATE
                                          AND samples_day.day <= (w.m_hi_end - INTERVAL 1 MINUTE)::DATE)"""
    )
    con.execute(
        f"""
        INSERT INTO samples_day BY NAME
        SELECT m.minute::DATE AS day, m.gpu_id, m.job_id, {DAY_AGGREGATES}
        FROM samples_minute m JOIN rollup_m w
          ON m.gpu_id = w.gpu_id AND m.minute >= w.m_lo::DATE
         AND m.minute < (w.m_hi_end - INTERVAL 1 MINUTE)::DATE + INTERVAL 1 DAY
        GROUP BY ALL
        ORDER BY day, m.gpu_id
        """
    )
    con.execute(
        """DELETE FROM samples_util_hist WHERE EXISTS (
               SELECT 1 FROM rollup_m w WHERE w.gpu_id = samples_util_hist.gpu_id
                                          AND samples_util_hist.day >= w.m_lo::DATE
                                          AND samples_util_hist.day <= (w.m_hi_end - INTERVAL 1 MINUTE)::DATE)"""
    )
    con.execute(
        """
        INSERT INTO samples_util_hist
        SELECT s.ts::DATE, s.gpu_id, s.job_id, s.util_pct, sum(s.interval_s::DOUBLE)
        FROM samples s JOIN rollup_m w
          ON s.gpu_id = w.gpu_id AND s.ts >= w.m_lo::DATE
         AND s.ts < (w.m_hi_end - INTERVAL 1 MINUTE)::DATE + INTERVAL 1 DAY
        WHERE s.util_pct IS NOT NULL
        GROUP BY ALL
        """
    )


def refresh_windows(
    con: duckdb.DuckDBPyConnection, windows_sql: str, params: list[object], th: Thresholds
) -> None:
    """Bring the rollups up to date after the samples of some GPUs changed between two times.

    ``windows_sql`` gives (gpu_id, lo, hi): sample times (inclusive) where samples were added, removed or
    re-attributed, already in the ledger's new state. When the rollup was built with other thresholds it
    is rebuilt whole instead.
    """
    if stored_thresholds(con) != th:
        rebuild_rollup(con, idle_util_pct=th[0], idle_min_minutes=th[1], target_util_pct=th[2])
        return
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE rw AS
            SELECT gpu_id, min(lo) AS lo, max(hi) AS hi, max(hi) AS reach_hi
            FROM ({windows_sql}) WHERE gpu_id IS NOT NULL AND lo IS NOT NULL AND hi IS NOT NULL
            GROUP BY gpu_id""",
        params,
    )
    _run_refresh(con, th)


def _run_refresh(con: duckdb.DuckDBPyConnection, th: Thresholds) -> None:
    if con.execute("SELECT count(*) FROM rw").fetchall()[0][0]:
        _widen(con)
        _refresh_runs(con, th[0])
        _minute_windows(con)
        _refresh_minutes(con, th)
        con.execute("DROP TABLE IF EXISTS temp.rollup_m")
    con.execute("DROP TABLE IF EXISTS temp.rw")


def refresh_rollup(
    con: duckdb.DuckDBPyConnection,
    ingest_id: int,
    *,
    idle_util_pct: float,
    idle_min_minutes: float = DEFAULT_THRESHOLDS[1],
    target_util_pct: float = DEFAULT_THRESHOLDS[2],
) -> None:
    """Recompute the rollups for the GPU-times this ingest added samples to or re-attributed."""
    refresh_windows(
        con,
        """
        SELECT gpu_id, min(lo) AS lo, max(hi) AS hi FROM (
            SELECT gpu_id, min(ts) AS lo, max(ts) AS hi FROM samples WHERE ingest_id = ? GROUP BY gpu_id
            UNION ALL
            SELECT a.gpu_id, a.start_ts, coalesce(a.end_ts, (SELECT max(ts) FROM samples)) FROM allocations a
            WHERE a.ingest_id = ? AND a.gpu_id IS NOT NULL
        ) GROUP BY gpu_id
        """,
        [ingest_id, ingest_id],
        thresholds(idle_util_pct, idle_min_minutes, target_util_pct),
    )


def rebuild_rollup(
    con: duckdb.DuckDBPyConnection,
    *,
    idle_util_pct: float,
    idle_min_minutes: float = DEFAULT_THRESHOLDS[1],
    target_util_pct: float = DEFAULT_THRESHOLDS[2],
) -> None:
    """Recompute all rollups from the samples (a threshold change); the caller owns the transaction."""
    th = thresholds(idle_util_pct, idle_min_minutes, target_util_pct)
    for table in ("samples_minute", "samples_day", "idle_runs", "samples_util_hist"):
        con.execute(f"DELETE FROM {table}")
    con.execute(
        """CREATE OR REPLACE TEMP TABLE rw AS
           SELECT gpu_id, min(ts) AS lo, max(ts) AS hi, max(ts) AS reach_hi FROM samples GROUP BY gpu_id"""
    )
    _run_refresh(con, th)
    _store(con, th)


def ensure_rollup(con: duckdb.DuckDBPyConnection, th: Thresholds) -> bool:
    """Rebuild the rollups when they were built with other thresholds than ``th``; True when it did."""
    if stored_thresholds(con) == th:
        return False
    rebuild_rollup(con, idle_util_pct=th[0], idle_min_minutes=th[1], target_util_pct=th[2])
    return True
