"""``observed_runs``: when each GPU reported telemetry, as a few rows per GPU-day instead of one per minute.

A run is a maximal stretch of consecutive minutes of one GPU with a ``samples_minute`` row, cut at UTC midnight:
its first minute, the first sample in that minute and the latest sample end (ts + interval_s) of the run. The
capacity analytics (analytics/observed_capacity.py, ``RUN_STARTS_SQL``) read these instead of the minute rows: a silence of
at least two minutes always starts a new run, so for a gap setting of two minutes or more the reporting spans
found from the runs are those found from the minutes.

Maintained with the rollups, inside the ingest's transaction (:func:`refresh_observed`, called from
``gpuledger.ledger.rollup``): the GPU-days whose minute rows were re-rolled are recomputed from them. A ledger
whose runs were never built whole (from before this table) has no ``META_KEY`` row; its readers keep to the
minute rows until the next refresh builds the table whole.
"""

from __future__ import annotations

import duckdb

META_KEY = "observed_runs"
META_VALUE = "1"  # the runs' definition; readers use the table only when it was built with this one

# = the SCHEMA_V2 statement (block "observed spans"): a ledger already at schema version 2 gets it here
TABLE_SQL = """
    CREATE TABLE IF NOT EXISTS observed_runs (
        gpu_id       VARCHAR NOT NULL,         -- gpus.gpu_id
        day          DATE NOT NULL,            -- UTC day of the run (runs are cut at midnight)
        first_minute TIMESTAMP NOT NULL,       -- first minute of the run (samples_minute.minute)
        first_ts     TIMESTAMP,                -- first sample in that minute (UTC)
        end_ts       TIMESTAMP                 -- latest ts + interval_s of the run's samples (UTC)
    )
    """

# A run's minutes share ``minute - dense_rank`` within its GPU-day (several jobs' rows in one minute share
# a rank, so no GROUP BY per GPU-minute first: at 60 s that is a group per sample). Its first sample is the
# least first_ts of all its rows: every row's first_ts lies inside its own minute, so the first minute's
# come first.
_RUNS_SQL = """
    SELECT gpu_id, day, min(minute) AS first_minute, min(first_ts) AS first_ts, max(max_end_ts) AS end_ts
    FROM (
        SELECT m.gpu_id, m.minute::DATE AS day, m.minute, m.first_ts, m.max_end_ts,
               m.minute - to_minutes(dense_rank() OVER (PARTITION BY m.gpu_id, m.minute::DATE ORDER BY m.minute))
                   AS run
        FROM samples_minute m {join} {where}
    )
    GROUP BY gpu_id, day, run
"""


def observed_runs_ready(con: duckdb.DuckDBPyConnection) -> bool:
    """True when ``observed_runs`` holds the runs of every minute row (built whole, then kept up to date)."""
    rows = con.execute("SELECT value FROM schema_meta WHERE key = ?", [META_KEY]).fetchall()
    return bool(rows) and rows[0][0] == META_VALUE


def refresh_observed(con: duckdb.DuckDBPyConnection, windows: str | None) -> None:
    """Recompute the runs of the GPU-days the rollup refresh re-rolled: ``windows`` names a table of
    (gpu_id, m_lo, m_hi_end) minute windows (the rollup's ``rollup_m_all``). The first refresh of a ledger
    without the table (or never built whole) builds it from all minute rows. The caller owns the transaction."""
    con.execute(TABLE_SQL)
    if windows is None or not observed_runs_ready(con):
        con.execute("DELETE FROM observed_runs")
        con.execute(f"INSERT INTO observed_runs {_RUNS_SQL.format(join='', where='')}")
        con.execute("INSERT OR REPLACE INTO schema_meta VALUES (?, ?)", [META_KEY, META_VALUE])
        return
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE observed_d AS
            SELECT DISTINCT gpu_id, unnest(range(m_lo::DATE, (m_hi_end - INTERVAL 1 MINUTE)::DATE + INTERVAL 1 DAY,
                                                 INTERVAL 1 DAY))::DATE AS day
            FROM {windows} WHERE m_hi_end > m_lo"""
    )
    con.execute(
        """DELETE FROM observed_runs USING temp.observed_d d
           WHERE observed_runs.gpu_id = d.gpu_id AND observed_runs.day = d.day"""
    )
    # the days' bounds as literals as well: zone maps then skip the minute rows of other days (one more
    # day onto 28: 0.14 s of reading every minute row before)
    lo, hi = con.execute("SELECT min(day)::VARCHAR, (max(day) + 1)::VARCHAR FROM temp.observed_d").fetchall()[
        0
    ]
    join = "JOIN temp.observed_d d ON d.gpu_id = m.gpu_id AND d.day = m.minute::DATE"
    where = f"WHERE m.minute >= TIMESTAMP '{lo}' AND m.minute < TIMESTAMP '{hi}'" if lo is not None else ""
    con.execute(f"INSERT INTO observed_runs {_RUNS_SQL.format(join=join, where=where)}")
    # GPU-days left with no minute rows at all (samples removed outside any window) go too
    con.execute(
        """DELETE FROM observed_runs WHERE NOT EXISTS (
               SELECT 1 FROM samples_day s WHERE s.gpu_id = observed_runs.gpu_id AND s.day = observed_runs.day)"""
    )
    con.execute("DROP TABLE temp.observed_d")
