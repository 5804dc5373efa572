"""The attempts of a requeued job, whichever dumps list them and in whatever order they arrive.

A scheduler job that is requeued (preempted, its node failed, ``scontrol requeue``) runs again under the same
id. Each run is an **attempt**: its own hosts, GPUs and time, billed to the job. The ledger keeps every
attempt as a row of ``jobs``: the latest (by start) is the job's own row, ``<job_id>``; each earlier one is
``<job_id>#<n>``, n = 1, 2, ... in start order; all of them carry ``attempt`` (their n) and ``attempt_of``
(the job's id), so a job counts once (analytics/job_count.py) and every attempt's GPU-time is the job's.

``sacct -D`` lists every attempt in one dump (collectors/sacct.py numbers them). Plain ``sacct``, a Slurm
poll or a jobs table lists only the attempt current when it ran, so the attempts of one job also arrive in
separate dumps. The landing (collectors/landing.py) applies one rule to every staged record of a
:data:`REQUEUING_SOURCES` source whose job the ledger already holds:

- **same attempt**: the record has the start of a landed attempt of the job; or it has no start or is
  pending (a pending record's start is the scheduler's guess), and the job's row has not ended or ended no
  later than that guess; or the job's row is pending (it had not started) and the record starts. It
  replaces that attempt's row in place, under the landing's usual rules (an older record never undoes a
  finished one);
- **new attempt**: any other record (a start no landed attempt has; a pending record after the job's row
  ended). It lands beside the others, and :func:`renumber_attempts` then renumbers the whole job by start.

An earlier attempt that its record left open (``RUNNING`` when polled) has ended by the time a later attempt
started: it ends at its allocation's end (Start + Elapsed, what the scheduler measured) or the next
attempt's start, whichever comes first, in state ``REQUEUED`` (its badput is counted like any requeued
attempt's, analytics/badput.py). Renumbering renames rows in every table that names the job (samples,
allocations, rollups, holders), so ``--replace`` of either dump, re-ingesting it, or ingesting the dumps in
the other order give the same ledger.
"""

from __future__ import annotations

import duckdb

from collectors.array_tasks import STAGED_WITH_JOB
from gpuledger.ledger.job_states import HELD_STATES, PENDING, WAITING_STATES
from gpuledger.ledger.sql import sql_list

# Sources whose records are a scheduler's view of a job that can be requeued: sacct in every form (-P, -p,
# --json, the Slurm poller: collectors/sacct.py stages them all as 'sacct') and generic jobs tables. Not
# W&B, training logs or Kubernetes pods, whose later records of a run refine its times rather than start it
# again. The names are the formats' (jobs.source); collectors/jobs_table.py is not imported, which would close an
# import circle through the landing.
REQUEUING_SOURCES = ("sacct", "jobs_csv", "jobs_jsonl")

# A provisional id for a new attempt until it is numbered (never left in the ledger).
_NEW = "#new:"
# SQL: the prefix of a job id parked during a rename (:func:`_rename`)
_PARKED = "chr(1)"
_FAMILY = "fam VARCHAR"  # TEMP attempt_families: the jobs whose attempts are numbered again


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    return set(con.table(table).columns)


def _staged_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE temporary AND table_name LIKE 'stage_%'"
    ).fetchall()
    return {r[0] for r in rows}


def match_attempts(con: duckdb.DuckDBPyConnection) -> int:
    """Give each staged record of a job the ledger holds the id of the attempt it is (module docstring), or a
    provisional id when it is a new attempt. Runs in the landing's transaction before the jobs are upserted;
    adds to TEMP ``attempt_families`` (the jobs :func:`renumber_attempts` renumbers after the upsert). Returns
    the number of new attempts (0, adding nothing, when no staged record names a job the ledger holds)."""
    cols = _columns(con, "temp.stage_jobs")
    if "source" not in cols or "start_ts" not in cols:
        return 0
    for col, typ in (
        ("attempt_of", "VARCHAR"),
        ("attempt", "INTEGER"),
        ("state", "VARCHAR"),
        ("end_ts", "TIMESTAMP"),
    ):
        if col not in cols:
            con.execute(f"ALTER TABLE stage_jobs ADD COLUMN {col} {typ}")
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE attempt_stage AS
            SELECT s.rowid AS rid, s.job_id AS staged_id, coalesce(s.attempt_of, s.job_id) AS fam,
                   CASE WHEN s.state IS DISTINCT FROM '{PENDING}' THEN s.start_ts END AS dated_start,
                   s.start_ts AS start_guess
            FROM stage_jobs s
            WHERE s.source IN ({sql_list(REQUEUING_SOURCES)}) AND coalesce(s.attempt_of, s.job_id) IN (
                SELECT coalesce(attempt_of, job_id) FROM jobs)"""
    )
    if not con.execute("SELECT count(*) FROM attempt_stage").fetchall()[0][0]:
        con.execute("DROP TABLE temp.attempt_stage")
        return 0
    # the landed attempts of those jobs, and each job's own row (its latest attempt)
    con.execute(
        """CREATE OR REPLACE TEMP TABLE attempt_landed AS
           SELECT job_id, coalesce(attempt_of, job_id) AS fam, start_ts, end_ts, job_id = coalesce(attempt_of, job_id) AS own
           FROM jobs WHERE coalesce(attempt_of, job_id) IN (SELECT fam FROM attempt_stage)"""
    )
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE attempt_match AS
            SELECT s.rid, s.staged_id, s.fam,
                   coalesce(
                       -- the same start as a landed attempt
                       (SELECT min(l.job_id) FROM attempt_landed l
                        WHERE l.fam = s.fam AND l.start_ts = s.dated_start),
                       -- a dated record on a job whose row is pending (it had not started)
                       (SELECT l.job_id FROM attempt_landed l
                        WHERE s.dated_start IS NOT NULL AND l.fam = s.fam AND l.own AND l.start_ts IS NULL),
                       -- an undated record: the job's row, unless that ended before the record's start
                       (SELECT l.job_id FROM attempt_landed l
                        WHERE s.dated_start IS NULL AND l.fam = s.fam AND l.own
                          AND NOT coalesce(s.start_guess > l.end_ts AND l.start_ts IS NOT NULL, false)),
                       '{_NEW}' || s.fam || '#' || s.rid
                   ) AS job_id
            FROM attempt_stage s"""
    )
    con.execute(
        """UPDATE stage_jobs SET job_id = m.job_id, attempt_of = m.fam
           FROM attempt_match m WHERE stage_jobs.rowid = m.rid"""
    )
    staged = _staged_tables(con)
    for table in STAGED_WITH_JOB:
        if table in staged:
            con.execute(
                f"""UPDATE {table} SET job_id = m.job_id
                    FROM (SELECT staged_id, arg_max(job_id, rid) AS job_id FROM attempt_match GROUP BY staged_id) m
                    WHERE {table}.job_id = m.staged_id"""
            )
    con.execute(f"CREATE TEMP TABLE IF NOT EXISTS attempt_families ({_FAMILY})")
    con.execute("INSERT INTO attempt_families SELECT DISTINCT fam FROM attempt_match")
    (new,) = con.execute(
        "SELECT count(*) FROM attempt_match WHERE starts_with(job_id, ?)", [_NEW]
    ).fetchall()[0]
    for t in ("attempt_stage", "attempt_landed", "attempt_match"):
        con.execute(f"DROP TABLE temp.{t}")
    return int(new)


def note_removed(con: duckdb.DuckDBPyConnection, ingest_ids: list[int]) -> None:
    """Before these ingests' rows are removed (``--replace``, collectors/provenance.py): the requeued jobs they
    hold an attempt of, for :func:`renumber_attempts` to number again once the rows are gone (a job left
    with one attempt is ``<job_id>`` again)."""
    con.execute(f"CREATE TEMP TABLE IF NOT EXISTS attempt_families ({_FAMILY})")
    con.execute(
        """INSERT INTO attempt_families SELECT DISTINCT attempt_of FROM jobs
           WHERE attempt_of IS NOT NULL AND ingest_id IN (SELECT unnest(?::BIGINT[]))""",
        [ingest_ids],
    )


def renumber_attempts(con: duckdb.DuckDBPyConnection, ingest_id: int | None) -> None:
    """Number the attempts of the jobs :func:`match_attempts` touched by start, after the landing upserted
    them: the latest is ``<job_id>``, each earlier one ``<job_id>#<n>``; an earlier attempt left open ends
    (module docstring). Renamed rows are renamed in every table that names the job; samples of an attempt
    that now ends earlier lose it past that end (re-rolled by land() through ``merged_windows``), and the
    ties of its hosts are made again. Nothing when no table was left by :func:`match_attempts`."""
    if not con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = 'attempt_families'"
    ).fetchall()[0][0]:
        return
    con.execute(
        """CREATE OR REPLACE TEMP TABLE attempt_order AS
           SELECT j.job_id AS old_id, f.fam, j.start_ts, j.end_ts, j.state,
                  row_number() OVER w AS k, count(*) OVER (PARTITION BY f.fam) AS n,
                  lead(j.start_ts) OVER w AS next_start,
                  (SELECT max(a.end_ts) FROM allocations a WHERE a.job_id = j.job_id) AS held_until
           FROM jobs j JOIN (SELECT DISTINCT fam FROM attempt_families) f ON f.fam = coalesce(j.attempt_of, j.job_id)
           WINDOW w AS (PARTITION BY f.fam ORDER BY j.start_ts NULLS LAST, j.end_ts NULLS LAST, j.job_id)"""
    )
    open_states = sql_list((*HELD_STATES, *WAITING_STATES))
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE attempt_plan AS
            SELECT old_id,
                   CASE WHEN k = n THEN fam ELSE fam || '#' || k END AS new_id,
                   CASE WHEN n > 1 THEN k END::INTEGER AS attempt,
                   CASE WHEN n > 1 THEN fam END AS attempt_of,
                   -- an earlier attempt left open has ended by the next one's start
                   k < n AND end_ts IS NULL AND start_ts IS NOT NULL AS closes,
                   CASE WHEN k < n AND end_ts IS NULL AND start_ts IS NOT NULL
                        THEN least(coalesce(held_until, next_start), coalesce(next_start, held_until))
                        ELSE end_ts END AS end_ts,
                   CASE WHEN k < n AND end_ts IS NULL AND start_ts IS NOT NULL AND state IN ({open_states})
                        THEN 'REQUEUED' ELSE state END AS state
            FROM attempt_order"""
    )
    con.execute(
        """UPDATE jobs SET attempt = p.attempt, attempt_of = p.attempt_of, end_ts = p.end_ts, state = p.state
           FROM attempt_plan p WHERE jobs.job_id = p.old_id
             AND (jobs.attempt IS DISTINCT FROM p.attempt OR jobs.attempt_of IS DISTINCT FROM p.attempt_of
                  OR jobs.end_ts IS DISTINCT FROM p.end_ts OR jobs.state IS DISTINCT FROM p.state)"""
    )
    con.execute(
        """CREATE OR REPLACE TEMP TABLE attempt_renames AS
           SELECT old_id, new_id FROM attempt_plan WHERE old_id <> new_id"""
    )
    if con.execute("SELECT count(*) FROM attempt_renames").fetchall()[0][0]:
        _rename(con)
    _close(con, ingest_id)
    for t in ("attempt_families", "attempt_order", "attempt_plan", "attempt_renames"):
        con.execute(f"DROP TABLE temp.{t}")


def _rename(con: duckdb.DuckDBPyConnection) -> None:
    """Rename the jobs of TEMP ``attempt_renames`` (old_id, new_id) in ``jobs``, every table with a ``job_id``
    column and the holders of job rows.

    In two steps, through a name no stored id can have (stored names carry no control character,
    collectors/names.py): a job's attempts are a permutation of its ids (``42`` → ``42#1`` while a new row
    becomes ``42``), and DuckDB checks a key per chunk of an UPDATE, so renaming in one step can meet a key
    that is only moved away by a later chunk (it did, for 2,000 jobs)."""
    tables = [
        r[0]
        for r in con.execute(
            """SELECT table_name FROM duckdb_columns()
               WHERE NOT internal AND schema_name = 'main' AND column_name = 'job_id'
               ORDER BY table_name = 'jobs' DESC, table_name"""
        ).fetchall()
    ]
    for table in tables:
        con.execute(
            f"""UPDATE {table} SET job_id = {_PARKED} || r.new_id FROM attempt_renames r
                WHERE {table}.job_id = r.old_id"""
        )
        con.execute(f"UPDATE {table} SET job_id = substr(job_id, 2) WHERE starts_with(job_id, {_PARKED})")
    con.execute(
        """UPDATE held_rows SET row_key = r.new_id FROM attempt_renames r
           WHERE held_rows.table_name = 'jobs' AND held_rows.row_key = r.old_id"""
    )


def _close(con: duckdb.DuckDBPyConnection, ingest_id: int | None) -> None:
    """Attempts that now end (an open record followed by a later attempt): their allocations end there too,
    their samples past it lose the job (re-rolled), and their hosts' ties are made again."""
    con.execute(
        """CREATE OR REPLACE TEMP TABLE attempt_closed AS
           SELECT new_id AS job_id, end_ts FROM attempt_plan WHERE closes AND end_ts IS NOT NULL"""
    )
    if not con.execute("SELECT count(*) FROM attempt_closed").fetchall()[0][0]:
        con.execute("DROP TABLE temp.attempt_closed")
        return
    con.execute(
        """UPDATE allocations SET end_ts = c.end_ts FROM attempt_closed c
           WHERE allocations.job_id = c.job_id AND (allocations.end_ts IS NULL OR allocations.end_ts > c.end_ts)"""
    )
    con.execute("CREATE TEMP TABLE IF NOT EXISTS merged_windows (gpu_id VARCHAR, lo TIMESTAMP, hi TIMESTAMP)")
    con.execute(
        """INSERT INTO merged_windows
           SELECT s.gpu_id, min(s.ts), max(s.ts) FROM samples s JOIN attempt_closed c
             ON s.job_id = c.job_id AND s.ts >= c.end_ts GROUP BY s.gpu_id"""
    )
    con.execute(
        """UPDATE samples SET job_id = NULL FROM attempt_closed c
           WHERE samples.job_id = c.job_id AND samples.ts >= c.end_ts"""
    )
    from collectors.attribute import attribute_hosts, host_key

    hosts = [
        r[0]
        for r in con.execute(
            f"""SELECT DISTINCT {host_key("a.host")} FROM allocations a JOIN attempt_closed c USING (job_id)
                WHERE a.gpu_id IS NULL AND a.host IS NOT NULL ORDER BY 1"""
        ).fetchall()
    ]
    if hosts:
        attribute_hosts(con, hosts, ingest_id)
    con.execute("DROP TABLE temp.attempt_closed")
