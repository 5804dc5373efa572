"""The landing: the one write path every source (a file, the demo fleet, a live collector) goes through.

A parser stages (collectors/contract.py); :func:`land` then merges the stage into the ledger with the same
rules for every source:

- samples: one row per (gpu_id, ts); a sample already in the ledger is not a second row, so overlapping
  files never double count, but it fills that row's NULL columns (a second series for the same GPU and
  times adds its columns); ``interval_s`` is derived when the parser leaves it NULL;
- gpus: upserted, keeping known fields and widening first/last seen; every GPU a sample names exists;
- jobs and training runs: upserted by ``job_id`` (a newer record of the same job replaces the older one);
  a record of a requeued job's other attempt (another start) lands beside it, each attempt billed to the
  job (collectors/attempts.py);
  a job's allocations and train log are replaced with the job's newer ones;
- samples are attributed to the job that held their GPU at that time, once, here;
- the per-GPU-minute rollup is refreshed for the span the ingest touched.

The caller owns the transaction (:func:`run_in_transaction`: any error rolls the whole source back and the
stage is dropped either way). A sample or job found already in the ledger is held by this ingest too
(``held_rows``; collectors/provenance.py hands such rows over when their owner is removed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import duckdb

from collectors.array_tasks import unify_array_tasks
from collectors.attempts import match_attempts, renumber_attempts
from collectors.interleave import extend_merged, settle_interleaved
from collectors.lone_samples import settle_lone_samples
from collectors.names import neutralize_names
from collectors.provenance import record_ingest
from collectors.validate import MERGE_KEPT
from gpuledger.ledger.job_states import OPEN_STATES, PENDING, REQUEUE_STATES
from gpuledger.ledger.sample_time import cadence_sql, interval_sql
from gpuledger.ledger.sql import quote, sql_list

if TYPE_CHECKING:
    from collectors.contract import IngestOptions, IngestReport

# staged rows per UPDATE of their intervals (_land_samples, rows already in time order)
LAND_CHUNK = 1_000_000
_CADENCE = cadence_sql()


def _temp_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE temporary AND table_name LIKE 'stage_%'"
    ).fetchall()
    return {r[0] for r in rows}


def _columns(con: duckdb.DuckDBPyConnection, table: str, *, temp: bool = False) -> list[str]:
    """The columns of a ledger table (or, with ``temp``, of a stage table), in order. Read from the relation,
    not from ``duckdb_columns()``, which lists every column of every table: 0.5 ms a call against 1.7 ms, and
    an ingest asks about twenty times."""
    return list(con.table(f"{'temp' if temp else 'main'}.{table}").columns)


def drop_stage(con: duckdb.DuckDBPyConnection) -> None:
    for t in _temp_tables(con):
        con.execute(f"DROP TABLE IF EXISTS temp.{t}")


def _count(con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None) -> int:
    return int(con.execute(sql, params or []).fetchall()[0][0])


def _insert_from_stage(
    con: duckdb.DuckDBPyConnection, table: str, ingest_id: int, defaults: dict[str, str] | None = None
) -> list[str]:
    """INSERT the stage's columns into ``table``; absent columns take ``defaults`` (SQL) or NULL."""
    target = _columns(con, table)
    staged = set(_columns(con, f"stage_{table}", temp=True))
    defaults = defaults or {}
    exprs = []
    for col in target:
        if col == "ingest_id":
            exprs.append(str(ingest_id))
        elif col in staged and col in defaults:
            exprs.append(f"coalesce(s.{col}, {defaults[col]})")
        elif col in staged:
            exprs.append(f"s.{col}")
        else:
            exprs.append(defaults.get(col, "NULL"))
    return exprs


def _tier_case(opts: IngestOptions) -> str:
    arms = " ".join(f"WHEN {quote(cluster)} THEN {quote(tier)}" for cluster, tier in opts.cluster_tiers)
    default = quote(opts.default_tier)
    return f"(CASE s.cluster {arms} ELSE {default} END)" if arms else default


def land(con: duckdb.DuckDBPyConnection, ingest_id: int, opts: IngestOptions) -> dict[str, int]:
    """Merge the ``stage_*`` tables into the ledger; the caller owns the transaction. Returns rows written."""
    staged = _temp_tables(con)
    neutralize_names(con, staged)  # no control or bidi character in a stored name (collectors/names.py)
    rows: dict[str, int] = {}
    if "stage_samples" in staged:
        rows.update(_land_samples(con, ingest_id))
        if inside := settle_interleaved(con, ingest_id):  # another series of the same GPUs' times
            rows["samples"] -= inside
            rows["samples_interleaved"] = inside
        rows["samples"] += extend_merged(con, ingest_id)
        settle_lone_samples(con, ingest_id)  # a file's only sample of a GPU: timed by the ledger's series
    if "stage_gpus" in staged or "stage_samples" in staged:
        rows["gpus"] = _land_gpus(con, staged)
    if "stage_samples" in staged:
        # landed: give its memory (~2 GB for 10 M rows) to attribution and the rollup, which run next
        con.execute("DROP TABLE temp.stage_samples")
    if "stage_jobs" in staged:
        rows["jobs"] = _land_jobs(con, ingest_id, opts)
        # records _land_jobs kept out as older than the ledger's: their jobs keep the allocations they have
        if "stage_allocations" in staged:
            con.execute(
                """DELETE FROM stage_allocations WHERE job_id IN (SELECT job_id FROM older_job_records)
                     AND job_id NOT IN (SELECT job_id FROM stage_jobs)"""
            )
        if older := _count(con, "SELECT count(*) FROM older_job_records"):
            rows["jobs_older"] = older  # a note of the report (SAMPLE_NOTES), not rows written
        con.execute("DROP TABLE temp.older_job_records")
    if "stage_allocations" in staged:
        con.execute("DELETE FROM allocations WHERE job_id IN (SELECT DISTINCT job_id FROM stage_allocations)")
        exprs = _insert_from_stage(con, "allocations", ingest_id, {"gpu_count": "1"})
        con.execute(f"INSERT INTO allocations SELECT {', '.join(exprs)} FROM stage_allocations s")
        rows["allocations"] = _count(con, "SELECT count(*) FROM stage_allocations")
    if "stage_training_runs" in staged:
        con.execute("DELETE FROM training_runs WHERE job_id IN (SELECT job_id FROM stage_training_runs)")
        exprs = _insert_from_stage(con, "training_runs", ingest_id, {"source": "'unknown'"})
        con.execute(f"INSERT INTO training_runs SELECT {', '.join(exprs)} FROM stage_training_runs s")
        rows["training_runs"] = _count(con, "SELECT count(*) FROM stage_training_runs")
    if "stage_train_log" in staged:
        con.execute("DELETE FROM train_log WHERE job_id IN (SELECT DISTINCT job_id FROM stage_train_log)")
        exprs = _insert_from_stage(con, "train_log", ingest_id)
        con.execute(f"INSERT INTO train_log SELECT {', '.join(exprs)} FROM stage_train_log s")
        rows["train_log"] = _count(con, "SELECT count(*) FROM stage_train_log")
    if "stage_prices" in staged:
        # A source that declares its own price (an on-prem amortized rate) brings dated rows like the sheet's;
        # they belong to this ingest (removed with it) and rank between the sheet and the user's settings.
        exprs = _insert_from_stage(con, "prices", ingest_id, {"origin": "'ingest'"})
        con.execute(f"INSERT INTO prices SELECT {', '.join(exprs)} FROM stage_prices s")
        rows["prices"] = _count(con, "SELECT count(*) FROM stage_prices")
    for table in ("processes", "gpu_events", "capacity"):
        if f"stage_{table}" in staged:
            exprs = _insert_from_stage(con, table, ingest_id)
            con.execute(f"INSERT INTO {table} SELECT {', '.join(exprs)} FROM stage_{table} s")
            rows[table] = _count(con, f"SELECT count(*) FROM stage_{table}")
    renumber_attempts(con, ingest_id)  # a requeued job's attempts, by start (collectors/attempts.py)
    attribute_samples(con, ingest_id)
    from gpuledger.ledger.rollup import refresh_rollup

    refresh_rollup(
        con,
        ingest_id,
        idle_util_pct=opts.idle_util_pct,
        idle_min_minutes=opts.idle_min_minutes,
        target_util_pct=opts.target_util_pct,
    )
    _refresh_merged(con, opts)
    return rows


def _refresh_merged(con: duckdb.DuckDBPyConnection, opts: IngestOptions) -> None:
    """Re-roll the GPU-times whose ledger samples got values from this ingest's overlapping samples.

    Those rows keep their earlier ingest_id, so the ingest's own refresh window does not name them.
    """
    if not con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = 'merged_windows'"
    ).fetchall()[0][0]:
        return
    from gpuledger.ledger.rollup import refresh_windows, thresholds

    refresh_windows(
        con,
        "SELECT * FROM merged_windows",
        [],
        thresholds(opts.idle_util_pct, opts.idle_min_minutes, opts.target_util_pct),
    )
    con.execute("DROP TABLE temp.merged_windows")


def _land_samples(con: duckdb.DuckDBPyConnection, ingest_id: int) -> dict[str, int]:
    """Insert the staged samples: one per (gpu_id, ts), interval_s derived; merge those already there.

    Cadence per GPU = median spacing in this batch; a sample stands for the time to the next one, capped at
    GAP_FACTOR × cadence (the last one, and one before a longer silence, get the cadence). Built for speed
    on tens of millions of rows: the window runs over a narrow (rowid, gpu_id, ts) projection joined back
    by rowid, and duplicates (a zero gap) are removed, and the gaps recomputed, only when there are some.

    A staged sample whose (gpu_id, ts) is already in the ledger is never a second row (that would double
    count its interval): it fills the ledger row's NULL columns instead (``coalesce(old, new)``, column by
    column; ``interval_s`` and ``ingest_id`` stay), so a second series for the same GPU and times — GenAI
    duty cycle then memory, or dcgm then nvidia-smi — adds its columns. Returns rows written
    (``samples``), staged samples that filled something (``samples_merged``, only when some did; their
    (gpu_id, min ts, max ts) left in TEMP ``merged_windows`` for the rollup) and the rest
    (``samples_duplicate``: exact repeats, samples with nothing to add, a (gpu_id, ts) twice in the batch).
    """
    staged_cols = set(_columns(con, "stage_samples", temp=True))
    if "interval_s" not in staged_cols:
        con.execute("ALTER TABLE stage_samples ADD COLUMN interval_s FLOAT")
    if "job_id" not in staged_cols:
        con.execute("ALTER TABLE stage_samples ADD COLUMN job_id VARCHAR")
    total, lo, hi, n_gpus = con.execute(
        "SELECT count(*), min(ts), max(ts), count(DISTINCT gpu_id) FROM stage_samples"
    ).fetchall()[0]
    # whole polls hold n_gpus rows each: any other count (a GPU missing from a poll) needs no check
    if total and total % n_gpus == 0 and _polls_in_order(con, n_gpus, total):
        return _land_polls(con, ingest_id, n_gpus, total, lo, hi)
    source = "stage_samples"
    gaps_sql = """CREATE OR REPLACE TEMP TABLE stage_gaps AS
        SELECT rowid AS rid, gpu_id, epoch(lead(ts) OVER (PARTITION BY gpu_id ORDER BY ts) - ts) AS gap_s
        FROM {source}"""
    con.execute(gaps_sql.format(source=source))
    if _count(con, "SELECT count(*) FROM stage_gaps WHERE gap_s = 0"):
        # a (gpu_id, ts) occurs twice: keep its first row in stage order, then space the rest again
        con.execute(
            """CREATE TEMP TABLE stage_samples_uniq AS SELECT * FROM stage_samples
               QUALIFY row_number() OVER (PARTITION BY gpu_id, ts ORDER BY rowid) = 1"""
        )
        source = "stage_samples_uniq"
        con.execute(gaps_sql.format(source=source))
    overlap, merged = _merge_overlap(con, source, lo, hi, ingest_id)
    # only samples not in the ledger are inserted; without overlap there is nothing to exclude
    fresh_only = "WHERE NOT EXISTS (SELECT 1 FROM stage_overlap v WHERE v.rid = sp.rowid)" if overlap else ""
    exprs = _insert_from_stage(con, "samples", ingest_id)
    if not overlap and _in_time_order(con, source):
        # already in time order (polls with a GPU missing from some, like the demo's exporter outage): the
        # intervals go into the stage and the rows land as they are, with no sort of every column (the
        # 28-day demo, 4.5 M samples: 6.2 s for the sorted INSERT). One UPDATE per LAND_CHUNK rows, so the
        # join's build side stays a chunk's (10 M rows in one UPDATE overran the writer's memory limit).
        con.execute(
            f"CREATE TEMP TABLE stage_cad AS SELECT gpu_id, {_CADENCE} AS cad_s FROM stage_gaps GROUP BY gpu_id"
        )
        first, last = con.execute(f"SELECT min(rowid), max(rowid) FROM {source}").fetchall()[0]
        for a in range(first, last + 1, LAND_CHUNK) if first is not None else ():  # no rows: nothing to time
            b = a + LAND_CHUNK
            con.execute(
                f"""UPDATE {source} SET interval_s =
                        {interval_sql("g.gap_s", "g.cad_s")}
                    FROM (SELECT g.rid, g.gap_s, c.cad_s FROM stage_gaps g JOIN stage_cad c ON c.gpu_id = g.gpu_id
                          WHERE g.rid >= {a} AND g.rid < {b}) g
                    WHERE g.rid = {source}.rowid AND {source}.rowid >= {a} AND {source}.rowid < {b}
                      AND {source}.interval_s IS NULL"""
            )
        written = _count(con, f"INSERT INTO samples SELECT {', '.join(exprs)} FROM {source} s")
        for t in ("stage_gaps", "stage_cad", "stage_samples_uniq"):
            con.execute(f"DROP TABLE IF EXISTS temp.{t}")
        return {"samples": written, "samples_duplicate": total - written}
    written = _count(
        con,
        f"""
        INSERT INTO samples
        WITH cadence AS (
            SELECT gpu_id, {_CADENCE} AS cad_s FROM stage_gaps GROUP BY gpu_id
        ),
        fresh AS (
            SELECT sp.* REPLACE (
                coalesce(sp.interval_s,
                         {interval_sql("g.gap_s", "c.cad_s")}) AS interval_s)
            FROM {source} sp JOIN stage_gaps g ON g.rid = sp.rowid JOIN cadence c ON c.gpu_id = g.gpu_id
            {fresh_only}
        )
        SELECT {", ".join(exprs)} FROM fresh s ORDER BY s.ts, s.gpu_id
        """,
    )
    for t in ("stage_gaps", "stage_samples_uniq", "stage_overlap"):
        con.execute(f"DROP TABLE IF EXISTS temp.{t}")
    counts = {"samples": written, "samples_duplicate": total - written - merged}
    return counts | ({"samples_merged": merged} if merged else {})


def _in_time_order(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Are the rows of ``table`` in time order as stored (one streaming pass, no sort)?"""
    return not _count(
        con, f"SELECT count(*) FILTER (ts < prev) FROM (SELECT ts, lag(ts) OVER () AS prev FROM {table})"
    )


def _polls_in_order(con: duckdb.DuckDBPyConnection, n_gpus: int, total: int) -> bool:
    """Is the stage a sequence of polls that each list the same ``n_gpus`` GPUs in the same order, in time
    order (what ``nvidia-smi -l``, a dcgm scrape loop or the demo write)? Then each sample's next sample of
    its GPU is the row ``n_gpus`` further on, and the gaps need no sort: one streaming pass over the stage
    (``lead(ts, n_gpus) OVER ()``) checks it and leaves TEMP ``stage_cadence`` (pos: the GPU's place in a
    poll, gpu_id, cad_s: the median gap) for :func:`_land_polls`. A GPU missing from a poll, a sample out
    of order or a (gpu_id, ts) twice answers False, and the general path sorts.

    The check groups by place in the poll (rowid % n_gpus, an integer) rather than by GPU id: each place
    must hold one GPU, every GPU one place, and the rowids must be ``total`` consecutive numbers (no row
    removed), so the row ``n_gpus`` on is the same GPU's next poll."""
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE stage_cadence AS
            SELECT pos, min(gpu_id) AS gpu_id, {_CADENCE} AS cad_s,
                   count(*) FILTER (gap_s <= 0) + (min(gpu_id) IS DISTINCT FROM max(gpu_id))::INTEGER AS off,
                   min(rid) AS first_rid, max(rid) AS last_rid
            FROM (SELECT rowid AS rid, rowid % {n_gpus} AS pos, gpu_id,
                         epoch(lead(ts, {n_gpus}) OVER () - ts) AS gap_s
                  FROM stage_samples)
            GROUP BY pos"""
    )
    off, places, gpus, span = con.execute(
        "SELECT coalesce(sum(off), 0), count(*), count(DISTINCT gpu_id), max(last_rid) - min(first_rid) + 1 "
        "FROM stage_cadence"
    ).fetchall()[0]
    if off or places != n_gpus or gpus != n_gpus or span != total:
        con.execute("DROP TABLE temp.stage_cadence")
        return False
    return True


def _land_polls(
    con: duckdb.DuckDBPyConnection, ingest_id: int, n_gpus: int, total: int, lo: object, hi: object
) -> dict[str, int]:
    """:func:`_land_samples` for a stage of whole polls in order (:func:`_polls_in_order`): the same
    interval_s, overlap and merge rules, in two streaming statements that keep the stage's (time) order."""
    overlap, merged = _merge_overlap(con, "stage_samples", lo, hi, ingest_id)
    fresh_only = "WHERE NOT EXISTS (SELECT 1 FROM stage_overlap v WHERE v.rid = s.rid)" if overlap else ""
    exprs = _insert_from_stage(con, "samples", ingest_id)
    # Only the columns that land pass through the window, which runs on one thread and copies every column
    # it is given (the stage's name, index and line number too, with ``sp.*``); the GPU id, one per place in
    # the poll, comes from stage_cadence (a join after the window keeps its order; before it, or in the
    # INSERT, a join would not).
    landed = [c for c in _columns(con, "samples") if c != "gpu_id"]
    carried = ", ".join(f"sp.{c}" for c in _columns(con, "stage_samples", temp=True) if c in landed)
    # The window (and the join after it) run on one thread; the landed rows are first written in that
    # order into a TEMP table in memory, then copied into the ledger by a plain scan, which DuckDB writes
    # on every thread and in order (a batch insert). 2 M rows: 1.17 s for the INSERT with the window in
    # it (most of it compressing the ledger's columns on one thread), 0.44 + 0.53 s so.
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE stage_landing AS
        WITH seq AS (
            SELECT {carried}, sp.rowid AS rid, epoch(lead(sp.ts, {n_gpus}) OVER () - sp.ts) AS gap_s
            FROM stage_samples sp
        )
        SELECT s.* EXCLUDE (gap_s) REPLACE (
                   coalesce(s.interval_s,
                            {interval_sql("s.gap_s", "c.cad_s")}) AS interval_s),
               c.gpu_id
        FROM seq s JOIN stage_cadence c ON c.pos = s.rid % {n_gpus}
        """
    )
    written = _count(
        con,
        f"""
        INSERT INTO samples
        SELECT {", ".join(exprs)} FROM (SELECT * EXCLUDE (rid) FROM stage_landing s {fresh_only}) s
        """,
    )
    con.execute("DROP TABLE temp.stage_landing")
    if not overlap:
        # every staged row landed, in poll order: the rollup can read them back without a sort
        # (gpuledger/ledger/rollup_sequence.py _sequence_polls); dropped with the other stage_* tables
        con.execute(
            "CREATE OR REPLACE TEMP TABLE stage_landed_polls AS SELECT ?::BIGINT AS ingest_id, gpu_id FROM stage_cadence",
            [ingest_id],
        )
    for t in ("stage_cadence", "stage_overlap"):
        con.execute(f"DROP TABLE IF EXISTS temp.{t}")
    counts = {"samples": written, "samples_duplicate": total - written - merged}
    return counts | ({"samples_merged": merged} if merged else {})


def _merge_overlap(
    con: duckdb.DuckDBPyConnection, source: str, lo: object, hi: object, ingest_id: int
) -> tuple[int, int]:
    """Find staged samples already in the ledger and fill the ledger rows' NULLs from them.

    Leaves TEMP ``stage_overlap`` (rid: the staged row, fills: it adds a value) when there is any overlap,
    and ``merged_windows`` (gpu_id, lo, hi) when something was filled. Returns (overlapping, filling)
    sample counts. The join reads only ledger samples inside the batch's time span (zone maps skip the
    rest), so a batch of new times costs one empty probe.

    Each overlapping sample is held by this ingest too: one ``held_rows`` row (samples, gpu_id, ts,
    ingest_id), so that removing the ingest that owns the ledger row hands it to this one
    (collectors/provenance.py :func:`~collectors.provenance.delete_ingests`). A batch with no overlap writes none.
    """
    con.execute("DROP TABLE IF EXISTS temp.merged_windows")
    cols = set(_columns(con, source, temp=True))
    merge = [c for c in _columns(con, "samples") if c in cols and c not in MERGE_KEPT]
    fills = " OR ".join(f"(o.{c} IS NULL AND sp.{c} IS NOT NULL)" for c in merge) or "false"
    con.execute(
        f"""CREATE TEMP TABLE stage_overlap AS
            SELECT sp.rowid AS rid, sp.gpu_id, sp.ts, ({fills}) AS fills
            FROM {source} sp JOIN samples o ON o.gpu_id = sp.gpu_id AND o.ts = sp.ts
            WHERE o.ts BETWEEN ?::TIMESTAMP AND ?::TIMESTAMP""",
        [lo, hi],
    )
    overlap, merged = con.execute("SELECT count(*), count(*) FILTER (fills) FROM stage_overlap").fetchall()[0]
    if overlap:
        con.execute(
            "INSERT INTO held_rows SELECT 'samples', gpu_id, ts, ?::BIGINT FROM stage_overlap", [ingest_id]
        )
    if merged:
        sets = ", ".join(f"{c} = coalesce(samples.{c}, n.{c})" for c in merge)
        con.execute(
            f"""UPDATE samples SET {sets}
                FROM (SELECT sp.* FROM {source} sp JOIN stage_overlap v ON v.rid = sp.rowid WHERE v.fills) n
                WHERE samples.gpu_id = n.gpu_id AND samples.ts = n.ts
                  AND samples.ts BETWEEN ?::TIMESTAMP AND ?::TIMESTAMP""",
            [lo, hi],
        )
        con.execute(
            """CREATE TEMP TABLE merged_windows AS
               SELECT gpu_id, min(ts) AS lo, max(ts) AS hi FROM stage_overlap WHERE fills GROUP BY gpu_id"""
        )
    return int(overlap), int(merged)


def _land_gpus(con: duckdb.DuckDBPyConnection, staged: set[str]) -> int:
    before = _count(con, "SELECT count(*) FROM gpus")
    if "stage_gpus" in staged:
        cols = set(_columns(con, "stage_gpus", temp=True))
        target = _columns(con, "gpus")
        sel = ", ".join(f"s.{c}" if c in cols else f"NULL::{_type(con, 'gpus', c)} AS {c}" for c in target)
        updates = ", ".join(
            f"{c} = coalesce(excluded.{c}, gpus.{c})"
            for c in target
            if c not in ("gpu_id", "first_seen", "last_seen")
        )
        con.execute(
            f"""
            INSERT INTO gpus SELECT {sel} FROM (SELECT * FROM stage_gpus QUALIFY row_number() OVER (PARTITION BY gpu_id) = 1) s
            ON CONFLICT (gpu_id) DO UPDATE SET {updates},
                first_seen = least(excluded.first_seen, gpus.first_seen),
                last_seen = greatest(excluded.last_seen, gpus.last_seen)
            """
        )
    if "stage_samples" in staged:
        con.execute(
            """
            INSERT INTO gpus (gpu_id, first_seen, last_seen)
            SELECT gpu_id, min(ts), max(ts) FROM stage_samples GROUP BY gpu_id
            ON CONFLICT (gpu_id) DO UPDATE SET
                first_seen = least(excluded.first_seen, coalesce(gpus.first_seen, excluded.first_seen)),
                last_seen = greatest(excluded.last_seen, coalesce(gpus.last_seen, excluded.last_seen))
            """
        )
    return _count(con, "SELECT count(*) FROM gpus") - before


def _type(con: duckdb.DuckDBPyConnection, table: str, column: str) -> str:
    """The SQL type of a ledger table's column, as DuckDB spells it (``TIMESTAMP``, ``DOUBLE``)."""
    rel = con.table(f"main.{table}")
    return str(dict(zip(rel.columns, rel.types, strict=True))[column])


def _land_jobs(con: duckdb.DuckDBPyConnection, ingest_id: int, opts: IngestOptions) -> int:
    defaults = {
        "source": "'unknown'",
        "kind": "'other'",
        "state": "'COMPLETED'",
        "gpu_count": "0",
        "pricing_tier": _tier_case(opts),
        "cluster": quote(opts.cluster) if opts.cluster else "NULL",
    }
    staged_cols = set(_columns(con, "stage_jobs", temp=True))
    if "cluster" not in staged_cols:
        con.execute("ALTER TABLE stage_jobs ADD COLUMN cluster VARCHAR")
        if opts.cluster:
            con.execute("UPDATE stage_jobs SET cluster = ?", [opts.cluster])
    unify_array_tasks(con)  # 301 and 300_1 are one array task (collectors/array_tasks.py)
    # a record of a job the ledger holds is one of its attempts, or a new one (collectors/attempts.py)
    match_attempts(con)
    # An older scheduler record never undoes a newer one, whatever order the dumps are ingested in: a record
    # of a job still pending or running (an open state) that started no later than the ledger's record of the
    # same job ended (end_ts and a final state) is what the scheduler said before the job finished. It stays
    # out, and land() keeps the job's stored allocations with it (temp.older_job_records, counted in the
    # report). Records are compared attempt by attempt (match_attempts gave each the id of the attempt it
    # is); a requeued attempt with an end has ended. A record that starts after that end is a new attempt.
    open_states = sql_list(OPEN_STATES)
    unfinished = sql_list(tuple(s for s in OPEN_STATES if s not in REQUEUE_STATES))
    staged_cols = set(_columns(con, "stage_jobs", temp=True))

    def staged(col: str) -> str:
        return f"s.{col}" if col in staged_cols else f"NULL::{_type(con, 'jobs', col)}"

    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE older_job_records AS
            SELECT s.rowid AS rid, s.job_id FROM stage_jobs s JOIN jobs j ON j.job_id = s.job_id
            WHERE j.end_ts IS NOT NULL AND j.state NOT IN ({unfinished}, 'UNKNOWN')
              AND coalesce({staged("state")}, {defaults["state"]}) IN ({open_states})
              AND coalesce({staged("start_ts")}, {staged("submit_ts")}, j.end_ts) <= j.end_ts"""
    )
    con.execute("DELETE FROM stage_jobs WHERE rowid IN (SELECT rid FROM older_job_records)")
    # Both records stay held: this ingest holds a job it sent an older record of, and the ingest whose record
    # a newer one replaces (below) still holds that job, so removing one of them never removes a job the
    # other still lists (delete_ingests hands it over). The row keeps the newest record's values.
    con.execute(
        """INSERT INTO held_rows SELECT DISTINCT 'jobs', job_id, NULL::TIMESTAMP, ?::BIGINT FROM older_job_records""",
        [ingest_id],
    )
    if "state" in staged_cols:
        # A pending job holds no GPU, whatever start its source shows (sacct prints the time the scheduler
        # expects it to start): it lands with no start or end and no allocation, so it costs nothing.
        pending = f"SELECT job_id FROM stage_jobs WHERE state = '{PENDING}'"
        times = [c for c in ("start_ts", "end_ts") if c in staged_cols]
        if times:
            con.execute(
                f"UPDATE stage_jobs SET {', '.join(f'{c} = NULL' for c in times)} WHERE state = '{PENDING}'"
            )
        if "stage_allocations" in _temp_tables(con):
            con.execute(f"DELETE FROM stage_allocations WHERE job_id IN ({pending})")
        con.execute(f"DELETE FROM allocations WHERE job_id IN ({pending})")
    # A newer record of a job that names no checkpoint (the next sacct export or Slurm poll) keeps the one
    # the ledger has (from a jobs table, or placed from a training log, collectors/checkpoints.py): a scheduler
    # never says "no checkpoint", it just does not know. A --replace of that record's own ingest has already
    # removed its row, so nothing is carried from a record that is being withdrawn.
    con.execute(
        """CREATE OR REPLACE TEMP TABLE kept_checkpoints AS
           SELECT job_id, last_checkpoint_ts FROM jobs
           WHERE last_checkpoint_ts IS NOT NULL AND job_id IN (SELECT job_id FROM stage_jobs)"""
    )
    exprs = _insert_from_stage(con, "jobs", ingest_id, defaults)
    con.execute(
        """INSERT INTO held_rows
           SELECT DISTINCT 'jobs', j.job_id, NULL::TIMESTAMP, j.ingest_id FROM jobs j
           WHERE j.job_id IN (SELECT job_id FROM stage_jobs) AND j.ingest_id <> ?
             AND NOT EXISTS (SELECT 1 FROM held_rows h
                             WHERE h.table_name = 'jobs' AND h.row_key = j.job_id AND h.ingest_id = j.ingest_id)""",
        [ingest_id],
    )
    con.execute("DELETE FROM jobs WHERE job_id IN (SELECT job_id FROM stage_jobs)")
    con.execute(
        f"""INSERT INTO jobs SELECT {", ".join(exprs)}
            FROM (SELECT * FROM stage_jobs QUALIFY row_number() OVER (PARTITION BY job_id ORDER BY end_ts DESC NULLS FIRST) = 1) s"""
    )
    con.execute(
        """UPDATE jobs SET last_checkpoint_ts = k.last_checkpoint_ts FROM kept_checkpoints k
           WHERE jobs.job_id = k.job_id AND jobs.ingest_id = ? AND jobs.last_checkpoint_ts IS NULL""",
        [ingest_id],
    )
    con.execute("DROP TABLE temp.kept_checkpoints")
    return _count(con, "SELECT count(*) FROM jobs WHERE ingest_id = ?", [ingest_id])


SAMPLE_NOTES = {
    "samples_merged": "samples merged into existing rows (their empty columns filled)",
    "samples_duplicate": "samples already in the ledger",
    "samples_interleaved": "samples inside the time of another series of the same GPU (counted once)",
    "jobs_older": "older records of jobs that have finished since (pending or running here; kept the finished record)",
}


def split_sample_notes(rows: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """Split :func:`land`'s counts into rows written and the notes about samples it did not add as rows."""
    written = {k: v for k, v in rows.items() if k not in SAMPLE_NOTES}
    notes = {SAMPLE_NOTES[k]: v for k, v in rows.items() if k in SAMPLE_NOTES and v}
    return written, notes


def attribute_samples(con: duckdb.DuckDBPyConnection, ingest_id: int) -> None:
    """Stamp each sample with the job that held its GPU at that time: collectors/attribute.py."""
    from collectors.attribute import attribute_samples as attribute

    attribute(con, ingest_id)


def run_in_transaction(con: duckdb.DuckDBPyConnection, work: Callable[[], IngestReport]) -> IngestReport:
    con.execute("BEGIN TRANSACTION")
    try:
        report = work()
        con.execute("COMMIT")
        return report
    except BaseException:
        con.execute("ROLLBACK")
        raise
    finally:
        drop_stage(con)


def land_and_record(
    con: duckdb.DuckDBPyConnection,
    ingest_id: int,
    opts: IngestOptions,
    *,
    source: str,
    source_key: str,
    sha256: str,
    fmt: str,
    skipped: dict[str, int],
) -> dict[str, int]:
    """A live collector's poll, staged already: land it as ingest ``ingest_id``, add the landing's sample notes
    to ``skipped`` (in place) and record its provenance (``source``: the service polled, not a file). Returns
    the rows landed per table. The one sequence every live collector (the Slurm, Kubernetes and Prometheus
    pollers, the NVML sampler's flush) runs; what a collector notes before landing (rows screened out, the
    NVML sampler's lost GPU reads) comes in ``skipped`` (stored sorted, so the order is no matter)."""
    rows, notes = split_sample_notes(land(con, ingest_id, opts))
    skipped.update(notes)
    record_ingest(
        con, ingest_id, path=source, source_key=source_key, sha256=sha256, fmt=fmt, rows=rows, skipped=skipped
    )
    return rows
