"""One job whether an array task is named by its raw id (``301``) or by its task name (``300_1``).

Slurm gives each array task two names: ``JobIDRaw`` (301: what ``SLURM_JOB_ID`` and dcgm's ``hpc_job`` label
carry) and ``JobID`` (``300_1``: the array's id and the task's index). A job source that carries both (sacct
with JobIDRaw and JobID, ``sacct --json`` ``job_id`` and ``array``, the Slurm poller) stores the job by its raw
id and keeps the task name in ``jobs.array_task``; a source that has only the task name (sacct without a
JobIDRaw column) stores it by that name. :func:`unify_array_tasks` makes the two one job at landing, in
whatever order the dumps arrive:

- a staged record with a task name whose job the ledger holds under that name: the ledger's job is renamed
  to the raw id in every table that names it (its samples, allocations, rollups, holders), and the staged
  record then replaces it as any newer record of a job does (collectors/landing.py ``_land_jobs``);
- a staged record named by a task name that a ledger job carries as its ``array_task``: the record is
  renamed to that job's raw id (with its staged allocations and training rows) and lands on it.

Both names are ``<cluster>/`` prefixed as job ids are, so tasks of two clusters never meet.
"""

from __future__ import annotations

import duckdb

# Stage tables that carry a job's id beside stage_jobs (collectors/landing.py land()).
STAGED_WITH_JOB = ("stage_allocations", "stage_training_runs", "stage_train_log")


def _ledger_tables_with_job_id(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [
        r[0]
        for r in con.execute(
            """SELECT table_name FROM duckdb_columns()
               WHERE NOT internal AND schema_name = 'main' AND column_name = 'job_id' AND table_name <> 'jobs'
               ORDER BY table_name"""
        ).fetchall()
    ]


def _staged_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {
        r[0]
        for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE temporary AND table_name LIKE 'stage_%'"
        ).fetchall()
    }


def unify_array_tasks(con: duckdb.DuckDBPyConnection) -> int:
    """Join the staged jobs and the ledger's jobs that are one array task under its two names (module
    docstring). Runs inside the landing's transaction, before the jobs are upserted. Returns the number of
    jobs renamed (ledger jobs plus staged records)."""
    cols = {r[0] for r in con.execute("SELECT column_name FROM (DESCRIBE stage_jobs)").fetchall()}
    if "array_task" not in cols:
        con.execute("ALTER TABLE stage_jobs ADD COLUMN array_task VARCHAR")
    # 1. the ledger holds the task under its task name; the stage names it by raw id
    pairs = con.execute(
        """SELECT DISTINCT j.job_id AS old_id, s.job_id AS new_id FROM stage_jobs s
           JOIN jobs j ON j.job_id = s.array_task WHERE s.array_task IS NOT NULL AND s.array_task <> s.job_id"""
    ).fetchall()
    for old_id, new_id in pairs:
        _rename_ledger_job(con, old_id, new_id)
    # 2. the stage names the task by its task name; the ledger holds it by raw id
    renamed = con.execute(
        """SELECT DISTINCT s.job_id, j.job_id FROM stage_jobs s JOIN jobs j ON j.array_task = s.job_id
           WHERE j.job_id <> s.job_id"""
    ).fetchall()
    staged = _staged_tables(con)
    for task_name, raw_id in renamed:
        con.execute(
            "UPDATE stage_jobs SET job_id = ?, array_task = ? WHERE job_id = ?",
            [raw_id, task_name, task_name],
        )
        for table in STAGED_WITH_JOB:
            if table in staged:
                con.execute(f"UPDATE {table} SET job_id = ? WHERE job_id = ?", [raw_id, task_name])
    return len(pairs) + len(renamed)


def _rename_ledger_job(con: duckdb.DuckDBPyConnection, old_id: str, new_id: str) -> None:
    """Rename ledger job ``old_id`` to ``new_id`` everywhere: its rows become the raw id's. Where the ledger
    has a record under both names, the raw id's is kept (the staged record replaces it next) and the task
    name's other ingest still holds it (``held_rows``), so removing either ingest never drops the job."""
    if con.execute("SELECT count(*) FROM jobs WHERE job_id = ?", [new_id]).fetchall()[0][0]:
        con.execute(
            """INSERT INTO held_rows SELECT 'jobs', ?, NULL::TIMESTAMP, ingest_id FROM jobs WHERE job_id = ?""",
            [new_id, old_id],
        )
        con.execute("DELETE FROM jobs WHERE job_id = ?", [old_id])
    else:
        con.execute("UPDATE jobs SET job_id = ? WHERE job_id = ?", [new_id, old_id])
    for table in _ledger_tables_with_job_id(con):
        con.execute(f"UPDATE {table} SET job_id = ? WHERE job_id = ?", [new_id, old_id])
    con.execute(
        "UPDATE held_rows SET row_key = ? WHERE table_name = 'jobs' AND row_key = ?", [new_id, old_id]
    )
