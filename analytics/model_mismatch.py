"""Jobs booked as one GPU model whose cards report another (docs/metrics.md, "A card booked as another model").

A scheduler books what the job asked for (sacct's ``gres/gpu:a100``, a pod's node label); telemetry says what
the card is. Where the two are of one family the booking is refined at ingest (collectors/attribute.py: a bare
``a100`` on cards reporting A100-80GB takes the card's model). Where they differ — an A100 booked on a V100 —
the job is priced as booked (its cost is what was charged for it), and the card it ran on is capacity once, in
its observed model: the job's held time is taken from that card's free time (analytics/capacity.py), so the
card is never billed twice. The mismatch is flagged here, read by ``gpuledger jobs --json`` (column
``observed_gpu_model``), the Jobs page and ``gpuledger check``.
"""

from __future__ import annotations

import duckdb
import polars as pl

from analytics.query import frame
from gpuledger.ledger.shares import HOLDS_SQL

MISMATCH_COLUMNS = {
    "job_id": "",
    "booked_gpu_model": "the job's own model (jobs.gpu_model; NULL: none booked)",
    "observed_gpu_model": "the model(s) its cards report, ', '-joined in name order",
}

# One row per job holding a GPU row (an allocation naming it, a host tie: gpuledger/ledger/shares.py
# HOLDS_SQL) whose reported model (the row's, else its card's for a MIG instance) differs from the job's.
MISMATCH_SQL = f"""
    SELECT j.job_id, j.gpu_model AS booked_gpu_model,
           string_agg(DISTINCT m.model, ', ' ORDER BY m.model) AS observed_gpu_model
    FROM jobs j
    JOIN (SELECT DISTINCT job_id, gpu_id FROM ({HOLDS_SQL})) h ON h.job_id = j.job_id
    JOIN (SELECT g.gpu_id, coalesce(g.model, p.model) AS model
          FROM gpus g LEFT JOIN gpus p ON p.gpu_id = g.parent_gpu_id) m ON m.gpu_id = h.gpu_id
    WHERE m.model IS NOT NULL AND j.gpu_model IS NOT NULL
    GROUP BY j.job_id, j.gpu_model
    HAVING bool_or(m.model <> j.gpu_model)
    ORDER BY j.job_id
"""


def model_mismatches(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Jobs whose cards report another model than the one booked (MISMATCH_COLUMNS), by job id."""
    return frame(con, MISMATCH_SQL, [])


def describe(row: dict[str, object]) -> str:
    """One line for ``gpuledger check`` and the Jobs page's note."""
    return (
        f"job {row['job_id']} was booked as {row['booked_gpu_model']} but its card reports "
        f"{row['observed_gpu_model']}: priced as booked, the card counted once as {row['observed_gpu_model']}"
    )
