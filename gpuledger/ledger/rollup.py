"""The rollups that fleet views and the analytics fast path read instead of raw samples.

Three tables, all maintained at ingest inside the ingest's transaction (docs/metrics.md, "Fast path"):

- ``samples_minute``: one row per (minute, gpu_id, job_id) with sums, not means, so any coarser roll-up (hour,
  day, job, team) is an exact re-aggregation: mean utilization = sum(util_s) / sum(util_cov_s). Besides the
  plain sums it stores what the raw-sample analytics derive with window functions: seconds inside idle
  stretches, under-used seconds, per-sample energy, the counts behind job_signals' shares and the
  sample-pair (swing) counts;
- ``samples_day``: the same columns per (day, gpu_id, job_id), re-aggregated from ``samples_minute``; views
  start and end at midnight, so per-job figures read this one (tens of thousands of rows, not millions);
- ``samples_hour``: the same per (UTC hour, gpu_id, job_id), re-aggregated from ``samples_minute`` like the
  days; the hourly heatmaps read it;
- ``idle_runs``: every maximal run of consecutive idle samples (util ≤ idle_util_pct, no gap) of one GPU
  within one job, of any length, split at UTC midnight; a run crosses minutes, chunks and ingests, so an
  ingest re-computes exactly the runs that touch what it changed (see :func:`refresh_windows`);
- ``samples_util_hist``: seconds per (day, GPU, job, utilization reading), for exact time-weighted
  percentiles.

The idle and under-used columns depend on the thresholds (idle_util_pct, idle_min_minutes,
target_util_pct); the ones the rollup was built with are stored in ``schema_meta`` under
``rollup_thresholds``. Analytics read the rollup only when they equal the current settings
(:func:`rollup_matches`); ``sync_reference`` rebuilds it when the settings change (:func:`ensure_rollup`).

How a refresh stays cheap (the 28-day demo's 4.5 M samples are all one ingest): GPUs are re-rolled in batches
of ~BATCH_SAMPLES samples, so each batch sorts and aggregates within the writer's memory limit; a batch's
samples are sorted once, by (gpu_id, ts) (:func:`_sequence`), and that one order gives the GPU's next sample
(energy) and, with a small fix-up where jobs alternate, each sample's previous sample of the same job (pairs,
swings, idle runs); runs are computed from the idle samples only; a sample's idle-stretch flag is an
equi-join on (GPU, job, day) against the long runs; day rows re-aggregate minute rows.

Here: the refresh (windows, batches, idle runs, minute/day/hour rows). What a minute row holds, as SQL, and
how days and hours re-aggregate it: gpuledger/ledger/rollup_columns.py; the order a batch is read in:
gpuledger/ledger/rollup_sequence.py; which thresholds the rollup was built with:
gpuledger/ledger/rollup_thresholds.py.
"""

from __future__ import annotations

import duckdb

from gpuledger.ledger.observed import refresh_observed
from gpuledger.ledger.rollup_columns import DAY_AGGREGATES, HOUR_AGGREGATES, _minute_sql
from gpuledger.ledger.rollup_sequence import _bounds, _drop_seq_view, _sequence
from gpuledger.ledger.rollup_thresholds import (
    DEFAULT_THRESHOLDS,
    Thresholds,
    _store,
    stored_thresholds,
    thresholds,
)
from gpuledger.ledger.rollup_thresholds import (
    rollup_matches as rollup_matches,
)
from gpuledger.ledger.sample_time import (
    GAP_TOLERANCE,
    contiguous_sql,
    reach_sql,
    reach_us_sql,
    sample_end_sql,
)
from gpuledger.ledger.shares import fan_out_sql, has_shares, refresh_shares

# No sample stands for more than this (collectors/validate.py rejects interval_s above a day), so none
# further back than twice its reach can touch a window (_minute_windows reads no further).
MAX_INTERVAL_S = 86_400.0
_NEAR = f"INTERVAL {int(2 * (GAP_TOLERANCE * MAX_INTERVAL_S + 1) + 120)} SECOND"
# GPUs are re-rolled in batches of about this many samples, so that one batch's sort and minute aggregation
# stay near the writer's memory limit: a batch that spills costs more than the extra scans of more batches.
# The 28-day demo (4.5 M samples at 60 s, its 400 MB limit), whole build: 5 M per batch 45.1 s, 1.5 M 41.4 s,
# 1 M 35.4 s, 700 k 34.7 s.
BATCH_SAMPLES = 1_000_000
# ... except an ingest of whole polls, read without a sort in one batch up to this many samples (_one_poll_batch).
# The read streams, so the batch needs no sort's memory: 10 M samples (64 GPUs at 1 s) in one batch, rollup
# 4.1 s at a peak RSS of 436 MiB, against 15.8 s and 454 MiB in ten sorted 1 M batches (the limit was 4 M).
POLL_BATCH_SAMPLES = 20_000_000


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
            FROM (SELECT rw.gpu_id, max({reach_sql("s.ts", "s.interval_s::DOUBLE")}) AS reach
                  FROM rw JOIN samples s ON s.gpu_id = rw.gpu_id AND s.ts >= rw.lo AND s.ts <= rw.hi
                  WHERE s.ts BETWEEN ? AND ?
                  GROUP BY rw.gpu_id) x
            WHERE x.gpu_id = rw.gpu_id
            """,
            _bounds(con, "SELECT min(lo), max(hi) FROM rw"),
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


def _mostly_alone(con: duckdb.DuckDBPyConnection, bounds: list[object]) -> bool:
    """Are there fewer than 1.5 samples per GPU-minute in ``rollup_m``'s windows (a cadence near a minute
    or longer)? Then most minute rows hold one sample, and :func:`_refresh_minutes` writes those without
    a GROUP BY (:func:`_minute_sql`). A hash table with a group per sample and 44 aggregates is the
    costliest step of a rollup: 64 GPUs × 28 days at 60 s, 2.6 M samples, took 18 s under the writer's
    memory limit. Either answer gives the same rows; a wrong guess costs one more pass or a slower one."""
    samples, minutes = con.execute(
        """SELECT (SELECT count(*) FROM samples s
                   JOIN rollup_m w ON s.gpu_id = w.gpu_id AND s.ts >= w.m_lo AND s.ts < w.m_hi_end
                   WHERE s.ts >= ? AND s.ts < ?),
                  (SELECT sum(epoch(m_hi_end - m_lo)) / 60 FROM rollup_m)""",
        bounds,
    ).fetchall()[0]
    return bool(minutes) and samples < 1.5 * minutes


def _refresh_runs(con: duckdb.DuckDBPyConnection, idle: float) -> None:
    """Replace the idle runs that start in each GPU's window [lo, hi] with those of its samples now.

    Only idle samples are read (from ``rollup_seq``); a sample starts a run unless its previous sample of
    the same job, inside the window, was idle and contiguous. A run's start is then the latest start up to
    each sample within (gpu_id, job), so the per-day rows are one GROUP BY and the run totals a window over
    those few rows."""
    bounds = _bounds(con, "SELECT min(lo), max(hi) FROM rw")
    con.execute(
        """DELETE FROM idle_runs USING rw
           WHERE idle_runs.gpu_id = rw.gpu_id AND idle_runs.run_start BETWEEN rw.lo AND rw.hi
             AND idle_runs.run_start BETWEEN ? AND ?""",
        bounds,
    )
    con.execute(
        f"""
        INSERT INTO idle_runs
        WITH idle AS (
            SELECT q.gpu_id, q.job_id, q.jkey, q.ts, q.iv,
                   NOT coalesce(q.pj_util <= {idle} AND q.pj_ts >= rw.lo
                                AND {contiguous_sql("epoch(q.ts - q.pj_ts)", "q.pj_iv")}, false) AS new_run
            FROM rollup_seq q JOIN rw ON q.gpu_id = rw.gpu_id AND q.ts >= rw.lo AND q.ts <= rw.hi
            WHERE q.util <= {idle} AND q.ts BETWEEN ? AND ?
        ),
        started AS (
            SELECT *, max(CASE WHEN new_run THEN ts END)
                          OVER (PARTITION BY gpu_id, jkey ORDER BY ts ROWS UNBOUNDED PRECEDING) AS run_start
            FROM idle
        ),
        days AS (
            SELECT gpu_id, job_id, run_start, ts::DATE AS day, min(ts) AS first_ts, max(ts) AS last_ts,
                   max({sample_end_sql("ts", "iv")}) AS end_ts, sum(iv) AS idle_s,
                   max({reach_sql("ts", "iv")}) AS reach_ts
            FROM started GROUP BY gpu_id, job_id, run_start, ts::DATE
        )
        SELECT gpu_id, job_id, run_start, sum(idle_s) OVER r, max(reach_ts) OVER r, day, first_ts, last_ts,
               end_ts, idle_s
        FROM days WINDOW r AS (PARTITION BY gpu_id, job_id, run_start)
        ORDER BY gpu_id, run_start
        """,
        bounds,
    )


def _minute_windows(con: duckdb.DuckDBPyConnection) -> None:
    """``rollup_m``: per GPU the minutes to re-roll (the runs' window, plus the sample before it whose
    energy reads the next sample, plus the samples after it whose predecessor changed) and how far to read
    around them so the window functions see each sample's true neighbours.

    The sample before is re-rolled only when it has an energy counter: its minute row reads its next
    sample for nothing else (``e_j``; ``alone`` picks the form, not the values). Without one, a day onto
    the day before it re-rolls none of that day's minutes, nor then its day row and observed runs.

    Only samples near the windows are read: the look is 1.5 × the largest interval among the samples
    from ``_NEAR`` before a window to its end (a sample further back can reach neither the window nor a
    sample that does, since no interval exceeds MAX_INTERVAL_S), so one more day onto a year of history
    reads a few days of it, not the year; literal bounds let zone maps skip the rest."""
    lo, hi = _bounds(
        con, f"SELECT min(lo) - {_NEAR}, max(greatest(hi, reach_hi)) + INTERVAL 2 MINUTE FROM rw"
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE rollup_m AS
        WITH mx AS (
            SELECT s.gpu_id, {reach_us_sql("max(s.interval_s::DOUBLE)")} AS look
            FROM samples s JOIN rw ON s.gpu_id = rw.gpu_id
             AND s.ts >= rw.lo - {_NEAR} AND s.ts <= greatest(rw.hi, rw.reach_hi) + INTERVAL 2 MINUTE
            WHERE s.ts >= $lo AND s.ts <= $hi
            GROUP BY s.gpu_id
        ),
        before AS (  -- a sample before the window whose energy now reads a new next sample
            SELECT rw.gpu_id, min(s.ts) AS ts
            FROM rw JOIN mx USING (gpu_id) JOIN samples s
              ON s.gpu_id = rw.gpu_id AND s.ts < rw.lo AND s.ts >= rw.lo - mx.look
             AND {reach_sql("s.ts", "s.interval_s::DOUBLE")} >= rw.lo AND s.energy_j IS NOT NULL
            WHERE s.ts >= $lo AND s.ts <= $hi
            GROUP BY rw.gpu_id
        ),
        w AS (
            SELECT rw.gpu_id, mx.look,
                   date_trunc('minute', least(rw.lo, b.ts)) AS m_lo,
                   date_trunc('minute', greatest(rw.hi, rw.reach_hi)) + INTERVAL 1 MINUTE AS m_hi_end
            FROM rw LEFT JOIN mx USING (gpu_id)  -- a GPU whose samples were all removed has no mx row
            LEFT JOIN before b USING (gpu_id)
        )
        SELECT gpu_id, m_lo, m_hi_end, m_lo - coalesce(look, INTERVAL 0 SECOND) AS look_lo,
               m_hi_end + coalesce(look, INTERVAL 0 SECOND) AS look_hi
        FROM w
        """,
        {"lo": lo, "hi": hi},
    )


def _refresh_minutes(con: duckdb.DuckDBPyConnection, th: Thresholds) -> None:
    """Re-roll the minutes of ``rollup_m`` from ``rollup_seq``, then their whole days (a re-aggregation of
    the day's minute rows, old and new) and their utilization histogram. Deletes join on gpu_id with a
    range test (no correlated EXISTS), bounded by literal times; inserts go in time order."""
    m_lo, m_hi = _bounds(con, "SELECT min(m_lo), max(m_hi_end) FROM rollup_m")
    con.execute(
        """DELETE FROM samples_minute USING rollup_m w
           WHERE samples_minute.gpu_id = w.gpu_id
             AND samples_minute.minute >= w.m_lo AND samples_minute.minute < w.m_hi_end
             AND samples_minute.minute >= ? AND samples_minute.minute < ?""",
        [m_lo, m_hi],
    )
    # a shared card's samples count for each holder (gpuledger/ledger/shares.py): one sample then gives
    # rows of several jobs in its minute, so the batch takes the grouped form
    shared = has_shares(con, "SELECT gpu_id FROM rollup_m")
    if shared:
        con.execute(f"INSERT INTO samples_minute BY NAME ({_minute_sql(th, shared=True)})", [m_lo, m_hi])
    elif _mostly_alone(con, [m_lo, m_hi]):
        con.execute(f"INSERT INTO samples_minute BY NAME ({_minute_sql(th, True)})", [m_lo, m_hi])
        con.execute(f"INSERT INTO samples_minute BY NAME ({_minute_sql(th, False)})", [m_lo, m_hi])
    else:
        con.execute(f"INSERT INTO samples_minute BY NAME ({_minute_sql(th)})", [m_lo, m_hi])
    # whole days: [first day, last day] per GPU, and overall
    con.execute(
        """CREATE OR REPLACE TEMP TABLE rollup_d AS
           SELECT gpu_id, m_lo::DATE AS d_lo, (m_hi_end - INTERVAL 1 MINUTE)::DATE AS d_hi FROM rollup_m"""
    )
    d_lo, d_hi = _bounds(con, "SELECT min(d_lo), max(d_hi) FROM rollup_d")
    for table in ("samples_day", "samples_util_hist"):
        con.execute(
            f"""DELETE FROM {table} USING rollup_d w
                WHERE {table}.gpu_id = w.gpu_id AND {table}.day BETWEEN w.d_lo AND w.d_hi
                  AND {table}.day BETWEEN ? AND ?""",
            [d_lo, d_hi],
        )
    con.execute(
        f"""
        INSERT INTO samples_day BY NAME
        SELECT m.minute::DATE AS day, m.gpu_id, m.job_id, {DAY_AGGREGATES}
        FROM samples_minute m JOIN rollup_d w
          ON m.gpu_id = w.gpu_id AND m.minute >= w.d_lo AND m.minute < w.d_hi + INTERVAL 1 DAY
        WHERE m.minute >= ? AND m.minute < ?::DATE + INTERVAL 1 DAY
        GROUP BY ALL
        ORDER BY day, m.gpu_id
        """,
        [d_lo, d_hi],
    )
    _refresh_hours(con)
    if shared:
        # a shared card's reading counts for each holder, its seconds weighted by the holder's share
        rows = """(SELECT s.ts, s.gpu_id, s.job_id, s.util_pct, s.interval_s::DOUBLE AS iv
                   FROM samples s JOIN rollup_d w
                     ON s.gpu_id = w.gpu_id AND s.ts >= w.d_lo AND s.ts < w.d_hi + INTERVAL 1 DAY
                   WHERE s.util_pct IS NOT NULL AND s.ts >= ? AND s.ts < ?::DATE + INTERVAL 1 DAY)"""
        hist = f"""SELECT ts::DATE AS day, gpu_id, job_id, util_pct, sum(iv * share_w)
                   FROM ({fan_out_sql(rows)}) GROUP BY ALL ORDER BY day, gpu_id"""
    else:
        hist = """
        SELECT s.ts::DATE AS day, s.gpu_id, s.job_id, s.util_pct, sum(s.interval_s::DOUBLE)
        FROM samples s JOIN rollup_d w
          ON s.gpu_id = w.gpu_id AND s.ts >= w.d_lo AND s.ts < w.d_hi + INTERVAL 1 DAY
        WHERE s.util_pct IS NOT NULL AND s.ts >= ? AND s.ts < ?::DATE + INTERVAL 1 DAY
        GROUP BY ALL
        ORDER BY day, s.gpu_id
        """
    con.execute(f"INSERT INTO samples_util_hist {hist}", [d_lo, d_hi])
    con.execute("DROP TABLE temp.rollup_d")


def _refresh_hours(con: duckdb.DuckDBPyConnection) -> None:
    """Re-aggregate the whole hours the re-rolled minutes of ``rollup_m`` touch into ``samples_hour``, as
    days are: the hourly heatmaps then read one row per GPU-hour (and job), not sixty (a 1,232-GPU month:
    1.4 s over the minutes)."""
    con.execute(
        """CREATE OR REPLACE TEMP TABLE rollup_h AS
           SELECT gpu_id, date_trunc('hour', m_lo) AS h_lo,
                  date_trunc('hour', m_hi_end - INTERVAL 1 MINUTE) AS h_hi FROM rollup_m"""
    )
    h_lo, h_hi = _bounds(con, "SELECT min(h_lo), max(h_hi) FROM rollup_h")
    con.execute(
        """DELETE FROM samples_hour USING rollup_h w
           WHERE samples_hour.gpu_id = w.gpu_id AND samples_hour.hour BETWEEN w.h_lo AND w.h_hi
             AND samples_hour.hour BETWEEN ? AND ?""",
        [h_lo, h_hi],
    )
    con.execute(
        f"""
        INSERT INTO samples_hour BY NAME
        SELECT date_trunc('hour', m.minute) AS hour, m.gpu_id, m.job_id, {HOUR_AGGREGATES}
        FROM samples_minute m JOIN rollup_h w
          ON m.gpu_id = w.gpu_id AND m.minute >= w.h_lo AND m.minute < w.h_hi + INTERVAL 1 HOUR
        WHERE m.minute >= ? AND m.minute < ?::TIMESTAMP + INTERVAL 1 HOUR
        GROUP BY ALL
        ORDER BY hour, m.gpu_id
        """,
        [h_lo, h_hi],
    )
    con.execute("DROP TABLE temp.rollup_h")


def refresh_windows(
    con: duckdb.DuckDBPyConnection, windows_sql: str, params: list[object], th: Thresholds
) -> None:
    """Bring the rollups up to date after the samples of some GPUs changed between two times.

    ``windows_sql`` gives (gpu_id, lo, hi): sample times (inclusive) where samples were added, removed or
    re-attributed, already in the ledger's new state. The split of shared cards is brought up to date first
    (gpuledger/ledger/shares.py) and the card-times whose split changed are re-rolled too. When the rollup
    was built with other thresholds it is rebuilt whole instead.
    """
    if stored_thresholds(con) != th:
        # never built (a fresh ledger: the rebuild reads the same samples the windows would) or built
        # with other thresholds
        rebuild_rollup(con, idle_util_pct=th[0], idle_min_minutes=th[1], target_util_pct=th[2])
        return
    refresh_shares(con)
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE rw AS
            SELECT gpu_id, min(lo) AS lo, max(hi) AS hi, max(hi) AS reach_hi
            FROM ({windows_sql} UNION ALL SELECT gpu_id, lo, hi FROM temp.share_windows)
            WHERE gpu_id IS NOT NULL AND lo IS NOT NULL AND hi IS NOT NULL
            GROUP BY gpu_id""",
        params,
    )
    con.execute("DROP TABLE temp.share_windows")
    _run_refresh(con, th)


def _batches(con: duckdb.DuckDBPyConnection) -> int:
    """Number the GPUs of ``rollup_m_all`` into batches of about BATCH_SAMPLES samples (TEMP ``rollup_b``);
    returns the number of batches. Every step of the refresh is per GPU, so a batch is refreshed alone."""
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE rollup_b AS
        WITH n AS (
            SELECT w.gpu_id, count(s.ts) AS n
            FROM rollup_m_all w LEFT JOIN samples s
              ON s.gpu_id = w.gpu_id AND s.ts >= w.look_lo AND s.ts < w.look_hi
             AND s.ts >= ? AND s.ts < ?
            GROUP BY w.gpu_id
        )
        SELECT gpu_id, (sum(n) OVER (ORDER BY gpu_id ROWS UNBOUNDED PRECEDING) - n) // {BATCH_SAMPLES} AS batch
        FROM n
        """,
        _bounds(con, "SELECT min(look_lo), max(look_hi) FROM rollup_m_all"),
    )
    if _one_poll_batch(con):
        con.execute("UPDATE rollup_b SET batch = 0")
    # batch numbers may skip (one GPU bigger than a batch): renumber densely
    con.execute(
        """CREATE OR REPLACE TEMP TABLE rollup_b AS
           SELECT gpu_id, dense_rank() OVER (ORDER BY batch) - 1 AS batch FROM rollup_b"""
    )
    return int(con.execute("SELECT coalesce(max(batch) + 1, 0) FROM rollup_b").fetchall()[0][0])


def _one_poll_batch(con: duckdb.DuckDBPyConnection) -> bool:
    """Refresh all GPUs in one batch when they are exactly the GPUs of an ingest landed as whole polls
    (TEMP ``stage_landed_polls``) and there are at most POLL_BATCH_SAMPLES samples: the unsorted read of
    :func:`_sequence_polls` needs every GPU of the polls at once (a subset would need a filter, which costs
    it its speed), and streams rather than sorts, so the batch limit is there for the sort."""
    if not con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = 'stage_landed_polls'"
    ).fetchall()[0][0]:
        return False
    differ, n = con.execute(
        """SELECT (SELECT count(*) FROM (SELECT gpu_id FROM rollup_b EXCEPT SELECT gpu_id FROM stage_landed_polls))
                + (SELECT count(*) FROM (SELECT gpu_id FROM stage_landed_polls EXCEPT SELECT gpu_id FROM rollup_b)),
                  (SELECT count(*) FROM samples WHERE ingest_id = (SELECT any_value(ingest_id) FROM stage_landed_polls))"""
    ).fetchall()[0]
    return not differ and n <= POLL_BATCH_SAMPLES


def _run_refresh(con: duckdb.DuckDBPyConnection, th: Thresholds) -> None:
    """Refresh the windows in ``rw``: widen them to whole idle runs, then re-roll them batch by batch of
    GPUs, so each batch's sort and aggregation stay inside the writer's memory limit (no spilling)."""
    if con.execute("SELECT count(*) FROM rw").fetchall()[0][0]:
        _widen(con)
        _minute_windows(con)
        con.execute("ALTER TABLE rw RENAME TO rw_all")
        con.execute("ALTER TABLE rollup_m RENAME TO rollup_m_all")
        for batch in range(_batches(con)):
            for table in ("rw", "rollup_m"):
                con.execute(
                    f"""CREATE OR REPLACE TEMP TABLE {table} AS SELECT t.* FROM {table}_all t
                        JOIN rollup_b b ON b.gpu_id = t.gpu_id AND b.batch = ?""",
                    [batch],
                )
            _sequence(con)
            _refresh_runs(con, th[0])
            _refresh_minutes(con, th)
        refresh_observed(con, "temp.rollup_m_all")  # gpuledger/ledger/observed.py
        _drop_seq_view(con)
        for table in ("rollup_seq", "rollup_prior", "rollup_m", "rollup_m_all", "rw_all", "rollup_b"):
            con.execute(f"DROP TABLE IF EXISTS temp.{table}")
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


# The tables rebuild_rollup recomputes from the samples (observed_runs has its own build: observed.py).
ROLLUP_TABLES = ("samples_minute", "samples_day", "samples_hour", "idle_runs", "samples_util_hist")


def rebuild_rollup(
    con: duckdb.DuckDBPyConnection,
    *,
    idle_util_pct: float,
    idle_min_minutes: float = DEFAULT_THRESHOLDS[1],
    target_util_pct: float = DEFAULT_THRESHOLDS[2],
) -> None:
    """Recompute all rollups from the samples (a threshold change); the caller owns the transaction."""
    th = thresholds(idle_util_pct, idle_min_minutes, target_util_pct)
    refresh_shares(con)
    con.execute("DROP TABLE temp.share_windows")  # every GPU is re-rolled
    for table in ROLLUP_TABLES:
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
