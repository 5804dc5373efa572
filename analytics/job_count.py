"""Job counts: a requeued job is one job however many attempts it had.

Each attempt of a requeued job is its own ``jobs`` row, billed to the job (``attempt_of``, collectors/attempts.py),
so the money of every figure sums over rows; a *count* of jobs counts the scheduler jobs the rows belong to
(gpuledger/ledger/sql.py :func:`~gpuledger.ledger.sql.job_count_sql` in SQL, :func:`job_count` on a frame).
"""

from __future__ import annotations

import duckdb
import polars as pl

from analytics.query import frame
from gpuledger.ledger.sql import job_of_sql

JOB_OF = "job_of"  # the column with_job_of adds: the scheduler job a row is billed to


def with_job_of(con: duckdb.DuckDBPyConnection, rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` (with ``job_id``) plus ``job_of``: the job each row is billed to (its own id unless it is an
    attempt of a requeued job; a pseudo-job of unclaimed telemetry is its own)."""
    attempts = frame(
        con, f"SELECT j.job_id, {job_of_sql('j')} AS {JOB_OF} FROM jobs j WHERE j.attempt_of IS NOT NULL"
    )
    return rows.join(attempts, on="job_id", how="left").with_columns(
        pl.coalesce(JOB_OF, "job_id").alias(JOB_OF)
    )


def job_count() -> pl.Expr:
    """The jobs among a frame's rows (after :func:`with_job_of`): distinct ``job_of``."""
    return pl.col(JOB_OF).n_unique()


def jobs_in(rows: pl.DataFrame) -> int:
    """The jobs among rows that carry ``attempt_of`` (analytics/jobs.py ``jobs_table``): a requeued job once."""
    return int(rows.select(pl.coalesce("attempt_of", "job_id").n_unique()).item()) if rows.height else 0
