"""What a telemetry sample's seconds count as: covered (it has a utilization reading) and under-used.

Here, in the ledger layer, because the rollups compute them for every sample at ingest
(gpuledger/ledger/rollup_columns.py) and badput (analytics/badput.py) computes them again for the samples inside
a job's badput windows, which cut a day anywhere: one rule for both (docs/metrics.md, "Utilization" and "Waste
taxonomy"). Idle stretches have their own home, the rollup's ``idle_runs``.
"""

from __future__ import annotations


def covered_s_sql(util: str, interval_s: str) -> str:
    """A sample's covered seconds: its interval when it reads a utilization, else NULL (unknown time)."""
    return f"CASE WHEN {util} IS NOT NULL THEN {interval_s} END"


def underused_s_sql(util: str, interval_s: str, in_idle: str, target: float) -> str:
    """A sample's under-used seconds: ``interval × (target − util) / target`` below the target utilization,
    outside idle stretches (those seconds are idle), else NULL."""
    return f"CASE WHEN {util} < {target} AND NOT {in_idle} THEN {interval_s} * ({target} - {util}) / {target} END"
