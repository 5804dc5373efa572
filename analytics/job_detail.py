"""One job's page in one read: its row of ``gpuledger jobs --json`` and what the view of its own days says
about it (idle stretches, diagnoses, the recommendations that name it), its training run and logged curve."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb
import polars as pl

from analytics import diagnoses, jobs, recommend, unit_costs
from analytics.filters import Filters
from analytics.job_signals import idle_stretches
from analytics.query import frame
from gpuledger.ledger.settings import Settings


@dataclass(frozen=True)
class JobDetail:
    """One job's page: its row of ``gpuledger jobs --json`` (with its timeline's marks and a serving job's unit
    costs), idle stretches, diagnoses and recommendations of the view of its own days that name it, its
    training run (or None) and its logged training curve."""

    row: dict[str, Any]
    stretches: pl.DataFrame
    diagnoses: pl.DataFrame
    recommendations: pl.DataFrame
    training_run: dict[str, Any] | None
    train_log: pl.DataFrame


def job_detail(con: duckdb.DuckDBPyConnection, job_id: str, *, settings: Settings) -> JobDetail | None:
    """``job_id``'s :class:`JobDetail`, computed over the view of its own days and team (None: no such job)."""
    row = con.execute(
        "SELECT start_ts::DATE, coalesce(end_ts, start_ts)::DATE, team FROM jobs WHERE job_id = ?", [job_id]
    ).fetchone()
    if row is None:
        return None
    f = Filters(since=row[0], until=row[1], teams=(row[2],) if row[2] else ())
    table = jobs.jobs_table(con, filters=f, settings=settings).filter(pl.col("job_id") == job_id)
    if table.is_empty():
        return None
    run = frame(con, "SELECT * FROM training_runs WHERE job_id = ?", [job_id])
    # what its timeline marks (end state's reason, last checkpoint) and a serving job's unit costs
    marks = frame(con, "SELECT last_checkpoint_ts, exit_reason FROM jobs WHERE job_id = ?", [job_id])
    units = unit_costs.job_unit_costs(con, filters=f).filter(pl.col("job_id") == job_id)
    serving = units.select("usd_per_mtok_generated", "usd_per_krequests")
    return JobDetail(
        row=table.row(0, named=True)
        | marks.row(0, named=True)
        | (serving.row(0, named=True) if units.height else {}),
        stretches=idle_stretches(con, filters=f, settings=settings).filter(pl.col("job_id") == job_id),
        diagnoses=diagnoses.diagnoses(con, filters=f, settings=settings).filter(pl.col("job_id") == job_id),
        recommendations=recommend.recommendations(con, filters=f, settings=settings).filter(
            pl.col("job_ids").list.contains(job_id)
        ),
        training_run=run.row(0, named=True) if run.height else None,
        train_log=frame(
            con,
            "SELECT step, ts, loss, eval_loss, learning_rate FROM train_log WHERE job_id = ? ORDER BY step, ts",
            [job_id],
        ),
    )
