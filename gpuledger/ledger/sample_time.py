"""Sample time: how long a telemetry sample stands for, where it ends, when two samples are one stretch, and
how far back a sample can reach a later time.

Here, in the ledger layer, because the parsers (collectors/: the interval a sample lands with), the rollups
(gpuledger/ledger/rollup.py), the landing's checks (collectors/landing.py, ``gpuledger check``) and the analytics
(cost, utilization, job signals, attribution) must all read the same rule. Before, the gap tolerance was written
three times, the 1.5 twice more as a literal, the NVML sampler had its own interval rule and a sample's end was
written three ways.

Two different factors, on purpose:

- **GAP_FACTOR (2.5)**, at ingest: a sample stands for the time until its GPU's next sample unless that gap is
  longer than 2.5 × the series' cadence (then it stands for the cadence; the rest is a gap, unknown time).
- **GAP_TOLERANCE (1.5)**, when reading: two consecutive samples of a GPU are one contiguous stretch (an idle
  stretch continues, a swing counts) when the later one comes within 1.5 × the earlier one's interval.
"""

from __future__ import annotations

# A telemetry sample stands for the time until the next sample of its GPU, but never more than this many
# times the GPU's typical cadence: a longer silence is a gap (unknown), not busy or idle time.
GAP_FACTOR = 2.5
# The longest interval a sample is given when it is derived from the gaps (collectors/validate.py's range for
# interval_s). A GPU's median gap above it is no cadence (two readings years apart, a wrong clock): its samples
# then stand for 1 s each, as a lone sample does, and no gap longer than this is ever one sample's interval.
MAX_DERIVED_INTERVAL_S = 86_400.0
# No sample stands for more than a day (collectors/validate.py): none further back reaches a later time.
MAX_REACH = "INTERVAL 1 DAY"
# The interval of a sample with no cadence to read (its file's only sample of its GPU, or a median gap over a
# day): collectors/lone_samples.py derives such a lone sample again once its GPU's neighbours are in the ledger.
NO_CADENCE_S = 1.0
# A next sample later than GAP_TOLERANCE × the earlier sample's interval_s means a gap between them.
GAP_TOLERANCE = 1.5


def cadence_sql(gap: str = "gap_s", default_s: float = NO_CADENCE_S) -> str:
    """SQL aggregate: a series' cadence, the median of its gaps ``gap``; ``default_s`` when there is none or it
    is over a day (no cadence)."""
    return (
        f"CASE WHEN median({gap}) IS NULL OR median({gap}) > {MAX_DERIVED_INTERVAL_S} THEN {default_s} "
        f"ELSE median({gap}) END"
    )


def interval_sql(gap: str, cad: str) -> str:
    """SQL: the time a sample stands for, from the gap to its series' next sample and the series' cadence:
    the gap, or the cadence for the last sample and past GAP_FACTOR × the cadence or a day."""
    return (
        f"CASE WHEN {gap} IS NULL OR {gap} > least({GAP_FACTOR} * {cad}, {MAX_DERIVED_INTERVAL_S}) "
        f"THEN {cad} ELSE {gap} END"
    )


def sample_end_sql(ts: str = "ts", iv: str = "interval_s") -> str:
    """SQL: the end of the sample at ``ts`` standing for ``iv`` seconds, to the microsecond (rounded half away
    from zero, as the cost path always did)."""
    return f"({ts} + to_microseconds(CAST(round({iv} * 1e6) AS BIGINT)))"


def contiguous_sql(gap_s: str, iv: str) -> str:
    """SQL: does a sample ``gap_s`` seconds after one of interval ``iv`` continue it (no gap between them)?"""
    return f"{gap_s} <= {GAP_TOLERANCE} * {iv}"


def reach_us_sql(iv: str) -> str:
    """SQL: how far past its ``ts`` a sample of interval ``iv`` can link to a later one, as an INTERVAL:
    GAP_TOLERANCE × interval rounded up to the microsecond, + 1 s (strictly conservative)."""
    return f"to_microseconds((ceil({GAP_TOLERANCE} * {iv} * 1e6) + 1000000)::BIGINT)"


def reach_sql(ts: str, iv: str) -> str:
    """SQL: a time no later sample can link to (:func:`reach_us_sql` after ``ts``)."""
    return f"({ts} + {reach_us_sql(iv)})"
