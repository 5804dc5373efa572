"""The order the rollup reads a batch's samples in: by (gpu_id, ts), so one order gives each sample the GPU's
next sample (energy) and, with a small fix-up where jobs alternate, its previous sample of the same job (pairs,
swings, idle runs). :func:`_sequence` sorts once per batch, or, for an ingest of whole polls in time order
(:func:`_sequence_polls`), reads the neighbours a fixed number of rows away without a sort. Used by
gpuledger/ledger/rollup.py for each batch of GPUs.
"""

from __future__ import annotations

import duckdb


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
