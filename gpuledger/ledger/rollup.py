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
"""

from __future__ import annotations

import duckdb

from gpuledger.ledger.observed import refresh_observed
from gpuledger.ledger.sample_time import (
    GAP_TOLERANCE,
    contiguous_sql,
    reach_sql,
    reach_us_sql,
    sample_end_sql,
)
from gpuledger.ledger.thresholds import DEFAULT

# the signal thresholds counted into the rollup's minutes (dips, bursts, throttling, heat)
TH = DEFAULT

META_KEY = "rollup_thresholds"
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


def _bounds(con: duckdb.DuckDBPyConnection, sql: str) -> list[object]:
    """[lo, hi] over all windows, as literal parameters: a range predicate on them lets DuckDB skip row
    groups by their zone maps before the per-GPU join does the exact cut."""
    return list(con.execute(sql).fetchall()[0])


def _sequence(con: duckdb.DuckDBPyConnection) -> None:
    """TEMP ``rollup_seq``: the samples in the look window of ``rollup_m``, each with its neighbours.

    One sort by (gpu_id, ts) gives the next sample of the GPU (``next_ts``, ``next_energy_j``, for energy)
    and the previous one; ``pj_*`` is the previous sample *of the same job* on that GPU (pairs, swings and
    idle runs link only within a job). Where the GPU's previous sample belongs to another job (a ``head``:
    the first sample of a stretch of one job), that is the last sample (a ``tail``) of the job's previous
    stretch on the GPU, found by an ASOF join of the few heads against the few tails; this equals
    ``lag(...) OVER (PARTITION BY gpu_id, job_id ORDER BY ts)`` without a second sort of every sample.

    When the look window holds only samples one ingest landed as whole polls in order (TEMP
    ``stage_landed_polls``, from collectors/landing.py ``_land_polls``), the neighbours come without the sort:
    :func:`_sequence_polls`.
    """
    bounds = _bounds(con, "SELECT min(look_lo), max(look_hi) FROM rollup_m")
    _drop_seq_view(con)
    polls = _sequence_polls(con, bounds)
    if polls == "view":
        return  # no sample has an earlier sample of another job before it: nothing to fix up
    if polls is None:
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE rollup_seq AS
            SELECT {_SEQ_COLUMNS.format(w="OVER g", n="")}
            FROM samples s JOIN rollup_m w ON s.gpu_id = w.gpu_id AND s.ts >= w.look_lo AND s.ts < w.look_hi
            WHERE s.ts >= ? AND s.ts < ?
            WINDOW g AS (PARTITION BY s.gpu_id ORDER BY s.ts)
            """,
            bounds,
        )
    _fix_heads(con, "rollup_seq")


def _fix_heads(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """Give each ``head`` of ``table`` (a sample whose previous sample is another job's) the previous
    sample of its own job: the last ``tail`` of that job before it on the GPU (ASOF join)."""
    con.execute(
        f"""
        UPDATE {table} SET pj_ts = f.pj_ts, pj_iv = f.pj_iv, pj_util = f.pj_util
        FROM (SELECT h.gpu_id, h.ts, t.ts AS pj_ts, t.iv AS pj_iv, t.util AS pj_util
              FROM (SELECT gpu_id, jkey, ts FROM {table} WHERE head) h
              ASOF LEFT JOIN (SELECT gpu_id, jkey, ts, iv, util FROM {table} WHERE tail) t
                ON h.gpu_id = t.gpu_id AND h.jkey = t.jkey AND h.ts > t.ts) f
        WHERE {table}.head AND {table}.gpu_id = f.gpu_id AND {table}.ts = f.ts
        """
    )


def _drop_seq_view(con: duckdb.DuckDBPyConnection) -> None:
    """Drop ``rollup_seq`` when it is a view (:func:`_sequence_polls`); a table is replaced or dropped as one."""
    if con.execute(
        "SELECT count(*) FROM duckdb_views() WHERE temporary AND view_name = 'rollup_seq'"
    ).fetchall()[0][0]:
        con.execute("DROP VIEW temp.rollup_seq")


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


# rollup_seq's columns; {w} is the window (OVER g, or OVER () in poll order) and {n} the offset (", N").
_SEQ_COLUMNS = """
    s.ts, s.gpu_id, s.job_id, coalesce(s.job_id, chr(0)) AS jkey,
    s.interval_s::DOUBLE AS iv, s.util_pct::DOUBLE AS util, s.mem_used_mib::DOUBLE AS mem_used,
    s.mem_total_mib, s.power_w::DOUBLE AS power_w, s.energy_j, s.sm_active_pct::DOUBLE AS sm,
    s.tensor_active_pct::DOUBLE AS tensor, s.temp_c::DOUBLE AS temp_c, s.throttle_reasons,
    lead(s.ts{n}) {w} AS next_ts, lead(s.energy_j{n}) {w} AS next_energy_j,
    lag(s.ts{n}) {w} AS pj_ts, lag(s.interval_s::DOUBLE{n}) {w} AS pj_iv,
    lag(s.util_pct::DOUBLE{n}) {w} AS pj_util,
    lag(coalesce(s.job_id, chr(0)){n}) {w} IS DISTINCT FROM coalesce(s.job_id, chr(0)) AS head,
    lead(coalesce(s.job_id, chr(0)){n}) {w} IS DISTINCT FROM coalesce(s.job_id, chr(0)) AS tail"""


def _sequence_polls(con: duckdb.DuckDBPyConnection, bounds: list[object]) -> str | None:
    """``rollup_seq`` without a sort, when the batch's look window holds the samples of one ingest that
    landed as whole polls in time order: then, scanned in the order they were written, each sample's
    previous and next sample of its GPU are the rows N before and after it (N = the batch's GPUs), and
    ``lag/lead(…, N) OVER ()`` stream. Checked, not assumed: a row whose neighbours N away are another
    GPU or not earlier/later answers None (and the caller sorts).

    Samples of other ingests in the window are allowed when they all come before this ingest's first
    sample of their GPU (one more day onto a ledger: the previous day's last polls, which the window
    reaches back to). Those few, with each GPU's first sample of this ingest, are sequenced by the sort
    (TEMP ``rollup_prior``); the first samples take their previous sample from there, and the earlier
    samples their next one. Other samples of other ingests (overlap, interleaving) answer None.

    Returns "view" when ``rollup_seq`` is a TEMP VIEW: no sample's previous sample belongs to another job
    (no job fix-up to do), so the consumers (idle runs, minutes) read the streaming windows directly and
    2 M samples are never copied into a temporary table (nor spilled under the writer's memory limit);
    "table" when it is a table the caller fixes up (jobs alternate on a GPU).
    """
    if not con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = 'stage_landed_polls'"
    ).fetchall()[0][0]:
        return None
    ingest_id, n, outside = con.execute(
        """SELECT any_value(p.ingest_id), count(*),
                  count(*) FILTER (p.gpu_id NOT IN (SELECT gpu_id FROM rollup_m)) FROM stage_landed_polls p"""
    ).fetchall()[0]
    if not n or outside:  # the batch must hold every GPU of the polls: the read below has no GPU filter
        return None
    others = con.execute(
        """SELECT count(*) FROM samples s
           JOIN rollup_m w ON s.gpu_id = w.gpu_id AND s.ts >= w.look_lo AND s.ts < w.look_hi
           WHERE s.ts >= ? AND s.ts < ? AND s.ingest_id <> ?""",
        [*bounds, ingest_id],
    ).fetchall()[0][0]
    if others and not _sequence_prior(con, bounds, int(ingest_id)):
        return None
    w, off = "OVER ()", f", {int(n)}"
    lo, hi = (con.execute("SELECT CAST(?::TIMESTAMP AS VARCHAR)", [b]).fetchall()[0][0] for b in bounds)
    # the GPU check compares hashes (a window over 8-byte integers, not over the id strings), each row with
    # the row N before it: that covers every pair of neighbours once (the row N after a row checks it);
    # the bounds are literals, as a view takes no parameters
    raw = f"""
        SELECT {_SEQ_COLUMNS.format(w=w, n=off)}, lag(hash(s.gpu_id){off}) {w} <> hash(s.gpu_id) AS other_gpu
        FROM samples s
        WHERE s.ingest_id = {int(ingest_id)} AND s.ts >= TIMESTAMP '{lo}' AND s.ts < TIMESTAMP '{hi}'
        """
    off_order, to_fix = con.execute(
        f"""SELECT count(*) FILTER (other_gpu OR pj_ts >= ts OR next_ts <= ts),
                   count(*) FILTER (head AND pj_ts IS NOT NULL)
            FROM ({raw})"""
    ).fetchall()[0]
    if off_order:
        con.execute("DROP TABLE IF EXISTS temp.rollup_prior")
        return None
    if others:
        # each GPU's first sample takes its previous sample (of its job: rollup_prior is fixed up) and
        # whether that is another job's from the sorted prior rows; the earlier samples come from there
        raw = f"""
            SELECT * EXCLUDE (src) FROM temp.rollup_prior WHERE src <> {int(ingest_id)}
            UNION ALL BY NAME
            SELECT r.* REPLACE (coalesce(p.pj_ts, r.pj_ts) AS pj_ts, coalesce(p.pj_iv, r.pj_iv) AS pj_iv,
                                coalesce(p.pj_util, r.pj_util) AS pj_util, coalesce(p.head, r.head) AS head)
            FROM ({raw}) r
            LEFT JOIN (SELECT gpu_id, ts, pj_ts, pj_iv, pj_util, head FROM temp.rollup_prior
                       WHERE src = {int(ingest_id)}) p ON p.gpu_id = r.gpu_id AND p.ts = r.ts
            """
    if not to_fix:
        con.execute(f"CREATE TEMP VIEW rollup_seq AS {raw}")
        return "view"
    con.execute(f"CREATE OR REPLACE TEMP TABLE rollup_seq AS {raw}")
    con.execute("DROP TABLE IF EXISTS temp.rollup_prior")
    return "table"


def _sequence_prior(con: duckdb.DuckDBPyConnection, bounds: list[object], ingest_id: int) -> bool:
    """TEMP ``rollup_prior``: the look window's samples of other ingests, all earlier than this ingest's
    first sample of their GPU, plus those first samples, sequenced by the sort (and their job heads fixed
    up), with ``src`` = the sample's ingest. False, and no table, when some other ingest's sample is not
    earlier (overlap, interleaving): then the whole window is sorted."""
    where = {"lo": bounds[0], "hi": bounds[1], "ingest": ingest_id}
    # each GPU's first sample of this ingest, read once (a scan of the ingest's samples) for both statements
    con.execute(
        """CREATE OR REPLACE TEMP TABLE rollup_firsts AS
           SELECT gpu_id, min(ts) AS first_ts FROM samples
           WHERE ingest_id = $ingest AND ts >= $lo AND ts < $hi GROUP BY gpu_id""",
        where,
    )
    late = con.execute(
        """SELECT count(*) FROM samples s
           JOIN rollup_m w ON s.gpu_id = w.gpu_id AND s.ts >= w.look_lo AND s.ts < w.look_hi
           LEFT JOIN temp.rollup_firsts f ON f.gpu_id = s.gpu_id
           WHERE s.ts >= $lo AND s.ts < $hi AND s.ingest_id <> $ingest
             AND (f.first_ts IS NULL OR s.ts >= f.first_ts)""",
        where,
    ).fetchall()[0][0]
    if not late:
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE rollup_prior AS
            SELECT {_SEQ_COLUMNS.format(w="OVER g", n="")}, false AS other_gpu, s.ingest_id AS src
            FROM samples s JOIN rollup_m w ON s.gpu_id = w.gpu_id AND s.ts >= w.look_lo AND s.ts < w.look_hi
            JOIN temp.rollup_firsts f ON f.gpu_id = s.gpu_id
            WHERE s.ts >= $lo AND s.ts < $hi AND s.ts <= f.first_ts
            WINDOW g AS (PARTITION BY s.gpu_id ORDER BY s.ts)
            """,
            {"lo": bounds[0], "hi": bounds[1]},
        )
        _fix_heads(con, "rollup_prior")
    con.execute("DROP TABLE temp.rollup_firsts")
    return not late


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


def _minute_columns(th: Thresholds) -> list[tuple[str, str, str, str]]:
    """A minute row's columns past its key, as (aggregate, expression over ``f``, column, cast): one list
    for both forms of :func:`_minute_sql`. ``first`` is ``arg_min(expression, ts)``."""
    idle, _, target = th
    return [
        ("count", "*", "n", "INTEGER"),
        ("sum", "interval_s", "covered_s", ""),
        ("sum", "util / 100.0 * interval_s", "util_s", ""),
        ("sum", "CASE WHEN util IS NOT NULL THEN interval_s END", "util_cov_s", ""),
        ("sum", f"CASE WHEN util <= {idle} THEN interval_s END", "idle_s", ""),
        ("max", "util", "util_max", ""),
        ("max", "mem_used", "mem_used_max_mib", ""),
        ("max", "mem_total_mib", "mem_total_mib", ""),
        ("sum", "power_w * interval_s", "power_j", ""),
        ("sum", "CASE WHEN power_w IS NOT NULL THEN interval_s END", "power_cov_s", ""),
        ("sum", "sm / 100.0 * interval_s", "sm_active_s", ""),
        ("sum", "tensor / 100.0 * interval_s", "tensor_active_s", ""),
        ("sum", "CASE WHEN sm IS NOT NULL OR tensor IS NOT NULL THEN interval_s END", "prof_cov_s", ""),
        ("min", "ts", "first_ts", ""),
        ("max", "ts", "last_ts", ""),
        ("max", sample_end_sql(), "max_end_ts", ""),
        ("sum", "CASE WHEN in_idle THEN interval_s END", "idle_run_s", ""),
        (
            "sum",
            f"CASE WHEN util < {target} AND NOT in_idle THEN interval_s * ({target} - util) / {target} END",
            "underused_s",
            "",
        ),
        ("sum", "CASE WHEN sm IS NOT NULL THEN interval_s END", "sm_cov_s", ""),
        ("sum", "CASE WHEN tensor IS NOT NULL THEN interval_s END", "tensor_cov_s", ""),
        ("max", "mem_used / mem_total_mib", "memk_frac_max", ""),
        ("sum", "mem_used / mem_total_mib * interval_s", "memk_frac_s", ""),
        ("sum", "CASE WHEN mem_used IS NOT NULL AND mem_total_mib > 0 THEN interval_s END", "memk_cov_s", ""),
        ("max", "CASE WHEN mem_total_mib IS NULL THEN mem_used END", "memu_max_mib", ""),
        ("sum", "CASE WHEN mem_total_mib IS NULL THEN mem_used * interval_s END", "memu_s", ""),
        (
            "sum",
            "CASE WHEN mem_used IS NOT NULL AND mem_total_mib IS NULL THEN interval_s END",
            "memu_cov_s",
            "",
        ),
        ("count", "CASE WHEN mem_total_mib IS NULL THEN 1 END", "n_no_total", "INTEGER"),
        ("sum", "e_j", "energy_j", ""),
        ("sum", "CASE WHEN e_j IS NOT NULL THEN interval_s END", "energy_cov_s", ""),
        ("count", "util", "util_n", "INTEGER"),
        ("count", f"CASE WHEN util < {TH.dip_util_pct} THEN 1 END", "dip_n", "INTEGER"),
        ("count", f"CASE WHEN util > {TH.burst_util_pct} THEN 1 END", "burst_n", "INTEGER"),
        ("count", "throttle_reasons", "throttle_n", "INTEGER"),
        (
            "count",
            f"CASE WHEN throttle_reasons & {TH.power_thermal_mask}::UBIGINT <> 0 THEN 1 END",
            "throttled_n",
            "INTEGER",
        ),
        ("count", "temp_c", "temp_n", "INTEGER"),
        ("count", f"CASE WHEN temp_c >= {TH.hot_temp_c} THEN 1 END", "hot_n", "INTEGER"),
        ("max", "temp_c", "temp_max_c", ""),
        ("sum", "pair", "pairs_n", "INTEGER"),
        ("sum", "swing", "swings_n", "INTEGER"),
        ("first", "pair", "first_pair", "INTEGER"),
        ("first", "swing", "first_swing", "INTEGER"),
    ]


def _of_one(aggregate: str, expr: str) -> str:
    """An aggregate over one row, as a plain expression: the value itself, or for a count 1 or 0."""
    if aggregate != "count":
        return f"({expr})"
    return "1" if expr == "*" else f"(({expr}) IS NOT NULL)"


def _minute_sql(th: Thresholds, alone: bool | None = None) -> str:
    """The minute rows of the samples in ``rollup_seq`` inside each GPU's [m_lo, m_hi_end); parameters:
    the overall [min m_lo, max m_hi_end). A sample is inside an idle stretch when it is idle and lies in a
    run (``idle_runs``, already refreshed) of at least idle_min_minutes: an equi-join on (GPU, job, day)
    with a range test, against the long runs only.

    ``alone``: None rolls up every sample with one GROUP BY. True takes only the samples ``alone`` in their
    minute (no earlier sample of the same job and no later sample of the GPU in it: a cadence of a minute
    or more), whose minute row is the sample's own values, with no hash table; False rolls up the rest.
    True and False together give the same rows as None: ``alone`` says of a sample that its (minute,
    gpu_id, job_id) holds no other, so the two never split a group. ``pj_ts`` is the previous sample of
    the same job (:func:`_sequence`) and ``next_ts`` the GPU's next one, of any job, so a sample of
    another job in the minute can only make ``alone`` false, never true wrongly.

    The one-row form comes out as read, unsorted: in time order from a streaming view (_sequence_polls),
    by GPU then time from a sorted batch. Sorting it cost more than the rest of the step (the 7-day demo
    at 60 s: 4.3 s against 1.7 s); zone maps on those rows then prune by GPU, not by minute.
    """
    idle, min_minutes, _ = th
    min_s = min_minutes * 60.0
    if alone:
        select = ", ".join(
            f"{_of_one(a, e)}{f'::{c}' if c else ''} AS {col}" for a, e, col, c in _minute_columns(th)
        )
        tail = "WHERE alone"
    else:
        select = ", ".join(
            f"{'arg_min' if a == 'first' else a}({e}{', ts' if a == 'first' else ''}){f'::{c}' if c else ''} AS {col}"
            for a, e, col, c in _minute_columns(th)
        )
        tail = f"{'WHERE NOT alone' if alone is False else ''} GROUP BY minute, gpu_id, job_id"
    return f"""
    WITH kept AS (
        SELECT q.*,
               -- = analytics.utilization.sample_energy_sql
               (CASE WHEN q.energy_j IS NOT NULL AND q.next_energy_j >= q.energy_j
                          AND {contiguous_sql("epoch(q.next_ts - q.ts)", "q.iv")}
                     THEN q.next_energy_j - q.energy_j
                     ELSE q.power_w * q.iv END) AS e_j,
               q.pj_ts IS NOT NULL AND {contiguous_sql("epoch(q.ts - q.pj_ts)", "q.pj_iv")} AS contiguous,
               coalesce(date_trunc('minute', q.pj_ts) < date_trunc('minute', q.ts), true)
                   AND coalesce(date_trunc('minute', q.next_ts) > date_trunc('minute', q.ts), true) AS alone
        FROM rollup_seq q JOIN rollup_m w ON q.gpu_id = w.gpu_id AND q.ts >= w.m_lo AND q.ts < w.m_hi_end
        WHERE q.ts >= ? AND q.ts < ?
    ),
    runs AS (
        SELECT r.gpu_id, coalesce(r.job_id, chr(0)) AS jkey, r.day, r.first_ts, r.last_ts FROM idle_runs r
        WHERE r.run_s >= {min_s} AND r.gpu_id IN (SELECT gpu_id FROM rollup_m)
    ),
    f AS (
        SELECT k.ts, k.gpu_id, k.job_id, k.iv AS interval_s, k.util, k.mem_used, k.mem_total_mib, k.power_w,
               k.sm, k.tensor, k.temp_c, k.throttle_reasons, k.e_j, k.alone,
               r.gpu_id IS NOT NULL AS in_idle,
               (k.contiguous AND k.util IS NOT NULL AND k.pj_util IS NOT NULL)::INTEGER AS pair,
               (k.contiguous AND ((k.util < {TH.dip_util_pct} AND k.pj_util > {TH.burst_util_pct})
                                  OR (k.util > {TH.burst_util_pct} AND k.pj_util < {TH.dip_util_pct})))::INTEGER
                   AS swing
        FROM kept k LEFT JOIN runs r
          ON k.util <= {idle} AND k.gpu_id = r.gpu_id AND k.jkey = r.jkey AND k.ts::DATE = r.day
         AND k.ts >= r.first_ts AND k.ts <= r.last_ts
    )
    SELECT date_trunc('minute', ts) AS minute, gpu_id, job_id, {select}
    FROM f
    {tail}
    {"" if alone else "ORDER BY minute, gpu_id"}
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


# The hours' sums are compensated (DuckDB's fsum, Kahan-Babuska): an hour re-aggregated by an incremental
# refresh reads its minute rows in another order than a rebuild does, and a plain sum then differed in the
# last bits (1457.9999999999973 against 1458.0 for one GPU-hour of util_s).
HOUR_AGGREGATES = DAY_AGGREGATES.replace(
    ", ".join(f"sum(m.{c}) AS {c}" for c in _SUMS), ", ".join(f"fsum(m.{c}) AS {c}" for c in _SUMS), 1
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
    if _mostly_alone(con, [m_lo, m_hi]):
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
    con.execute(
        """
        INSERT INTO samples_util_hist
        SELECT s.ts::DATE AS day, s.gpu_id, s.job_id, s.util_pct, sum(s.interval_s::DOUBLE)
        FROM samples s JOIN rollup_d w
          ON s.gpu_id = w.gpu_id AND s.ts >= w.d_lo AND s.ts < w.d_hi + INTERVAL 1 DAY
        WHERE s.util_pct IS NOT NULL AND s.ts >= ? AND s.ts < ?::DATE + INTERVAL 1 DAY
        GROUP BY ALL
        ORDER BY day, s.gpu_id
        """,
        [d_lo, d_hi],
    )
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
    re-attributed, already in the ledger's new state. When the rollup was built with other thresholds it
    is rebuilt whole instead.
    """
    if stored_thresholds(con) != th:
        # never built (a fresh ledger: the rebuild reads the same samples the windows would) or built
        # with other thresholds
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
