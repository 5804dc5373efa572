"""Hosts whose jobs, each fitting the host, together held more GPUs than it reports (docs/metrics.md,
"Unallocated capacity"; collectors/attribute.py rule 7).

Such a job is tied to the cards least held over its span as a time-slicing holder (``host_attribution``
evidence ``shared``), and the shared-GPU rule splits each card-second among the holders, so the host's cards
are billed once. That is a reading of the records, not a fact they state: a scheduler that hands out whole
GPUs (Slurm's gres) never gives two jobs one card, so on such a cluster the same records mean the host has
cards that do not report (then the jobs' extra GPUs would be unseen held time, billed to them as unmeasured).
``gpuledger check`` names each such host and its jobs, so a maintainer can tell which it was.
"""

from __future__ import annotations

import duckdb
import polars as pl

from analytics.query import frame

TIME_SLICED_COLUMNS = {
    "host": "the host (short lower-case name)",
    "jobs": "the jobs tied to its cards as time-slicing holders, by id",
    "cards": "the host's cards they share",
    "shared_gpu_hours": "GPU-hours those jobs held on shared ties (their ties' spans)",
}

TIME_SLICED_SQL = """
    SELECT host, list(DISTINCT job_id ORDER BY job_id) AS jobs, count(DISTINCT gpu_id) AS cards,
           sum(epoch(coalesce(end_ts, start_ts) - start_ts)) / 3600.0 AS shared_gpu_hours
    FROM host_attribution WHERE evidence = 'shared'
    GROUP BY host ORDER BY host
"""


def time_sliced_hosts(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """One row per host with time-slicing ties (TIME_SLICED_COLUMNS)."""
    return frame(con, TIME_SLICED_SQL, [])


def describe(row: dict[str, object]) -> str:
    """One line for ``gpuledger check``."""
    jobs = ", ".join(str(j) for j in row["jobs"])  # type: ignore[attr-defined]
    return (
        f"host {row['host']}: job(s) {jobs} found every card it reports held by other jobs and were billed as "
        f"time-slicing {row['cards']} of them ({float(row['shared_gpu_hours']):,.2f} GPU-h of ties, each "
        "card-second split among its holders); if the host has cards that do not report, that time was on them "
        "and is the job's unmeasured time instead"
    )
