"""What the guard did (``guard_actions``, written by ``gpuledger guard run --enforce``): the steps it took and
what its cancels saved, for the Guard page, ``guard actions`` and the weekly report's line.

Saved by a live cancel (docs/metrics.md, "Guard"): the job's GPUs × the time from the cancel to the end its
scheduler had planned for it (``planned_end_ts``: Slurm's start + time limit, read just before the cancel), at
the prices in force (each moment at the price in force then, gpuledger/ledger/prices.py PriceBook.usd). It is an upper bound: the owner might have
ended the job sooner. A cancel with no planned end (a pod, a job without a time limit) counts as a cancel and
saves 0 here. Only cancels the scheduler accepted count.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import duckdb
import polars as pl

from gpuledger.ledger.prices import price_book

ACTION_COLUMNS = {
    "acted_ts": "when the guard took the step (UTC)",
    "job_id": "jobs.job_id",
    "policy": "[[guard.policy]] name",
    "step": "warn | warn_again | signal | cancel",
    "idle_gpu_hours": "GPU-hours idle in the run at the step",
    "idle_usd": "those at the price in force (USD; None: no price)",
    "mail_id": "Message-ID of the owner's mail (None: not mailed)",
    "answer": "the scheduler's answer to a signal or cancel",
    "accepted": "the scheduler accepted it (None: a warning)",
    "planned_end_ts": "a cancelled job's planned end (UTC)",
}


def _window(since: dt.date | None, until: dt.date | None) -> tuple[dt.datetime, dt.datetime]:
    lo = dt.datetime.combine(since, dt.time()) if since else dt.datetime(1, 1, 1)
    hi = dt.datetime.combine(until + dt.timedelta(days=1), dt.time()) if until else dt.datetime(9999, 12, 31)
    return lo, hi


# the jobs a view may see: every job when teams / clusters are empty
_JOB_SCOPE = """(cardinality($teams::VARCHAR[]) = 0 OR j.team IN (SELECT unnest($teams::VARCHAR[])))
    AND (cardinality($clusters::VARCHAR[]) = 0 OR j.cluster IN (SELECT unnest($clusters::VARCHAR[])))"""


def guard_actions(
    con: duckdb.DuckDBPyConnection,
    *,
    since: dt.date | None = None,
    until: dt.date | None = None,
    teams: tuple[str, ...] = (),
    clusters: tuple[str, ...] = (),
) -> pl.DataFrame:
    """The steps taken in ``[since, until + 1 day)`` on jobs of ``teams`` and ``clusters`` (all when empty), in
    order (columns: :data:`ACTION_COLUMNS`)."""
    lo, hi = _window(since, until)
    cols = ", ".join(f"a.{c}" for c in ACTION_COLUMNS)
    rel = con.execute(
        f"""SELECT {cols} FROM guard_actions a LEFT JOIN jobs j USING (job_id)
            WHERE a.acted_ts >= $lo AND a.acted_ts < $hi AND {_JOB_SCOPE} ORDER BY a.action_id""",
        {"lo": lo, "hi": hi, "teams": list(teams), "clusters": list(clusters)},
    )
    return pl.from_arrow(rel.to_arrow_table())  # type: ignore[return-value]


def guard_saved(
    con: duckdb.DuckDBPyConnection,
    *,
    since: dt.date | None = None,
    until: dt.date | None = None,
    teams: tuple[str, ...] = (),
    clusters: tuple[str, ...] = (),
) -> dict[str, Any]:
    """``{"jobs_cancelled", "saved_gpu_hours", "saved_usd", "jobs_warned"}`` for cancels (and warnings) taken
    in the window. A job is counted once (its first cancel); ``saved_usd`` None when a model has no price."""
    lo, hi = _window(since, until)
    params = {"lo": lo, "hi": hi, "teams": list(teams), "clusters": list(clusters)}
    rows = con.execute(
        """SELECT a.job_id, arg_min(a.acted_ts, a.action_id) AS at, arg_min(a.gpu_count, a.action_id),
                  arg_min(a.planned_end_ts, a.action_id), any_value(j.gpu_model), any_value(j.pricing_tier),
                  any_value(j.cluster)
           FROM guard_actions a LEFT JOIN jobs j USING (job_id)
           WHERE a.step = 'cancel' AND a.accepted AND a.acted_ts >= $lo AND a.acted_ts < $hi AND """
        + _JOB_SCOPE
        + """
           GROUP BY a.job_id ORDER BY a.job_id""",
        params,
    ).fetchall()
    warned = con.execute(
        """SELECT count(DISTINCT a.job_id) FROM guard_actions a LEFT JOIN jobs j USING (job_id)
           WHERE a.step LIKE 'warn%' AND a.acted_ts >= $lo AND a.acted_ts < $hi AND """
        + _JOB_SCOPE,
        params,
    ).fetchall()[0][0]
    book = price_book(con)
    hours = 0.0
    usd: float | None = 0.0
    for _job, at, gpus, end, model, tier, cluster in rows:
        h = (gpus or 0.0) * max((end - at).total_seconds(), 0.0) / 3600.0 if end else 0.0
        hours += h
        one = book.usd(model, tier or "on_demand", cluster, at, end) if end and end > at else 0.0
        money = None if one is None else (gpus or 0.0) * one
        usd = None if usd is None or money is None else usd + money
    return {"jobs_cancelled": len(rows), "saved_gpu_hours": hours, "saved_usd": usd, "jobs_warned": warned}


def _jobs(n: int) -> str:
    return f"{n:,} job{'' if n == 1 else 's'}"


def saved_line(saved: dict[str, Any]) -> str:
    """The guard's one sentence for :func:`guard_saved`'s totals, as the CLI, the Guard page and the weekly
    report print it: ``1 job cancelled, 3.0 GPU-hours, $12.00 saved (to each job's planned end); 2 jobs
    warned.``"""
    from analytics.money import usd

    money = usd(saved.get("saved_usd"), na="n/a (a model without a price)")
    return (
        f"{_jobs(int(saved.get('jobs_cancelled') or 0))} cancelled, {float(saved.get('saved_gpu_hours') or 0.0):,.1f} "
        f"GPU-hours, {money} saved (to each job's planned end); {_jobs(int(saved.get('jobs_warned') or 0))} warned."
    )
