"""Every figure the pages show, computed by the raw-sample oracle (tests/analytics/oracle.py) and from the
rollups (the production path), must agree (used by the fast path's tests and the MIG billing tests)."""

from __future__ import annotations

import math

import duckdb
import polars as pl
from polars.testing import assert_frame_equal

from analytics.filters import Filters
from analytics.job_signals import idle_stretches, job_signals
from analytics.jobs import jobs_table
from analytics.recommend import recommendations
from analytics.summary import summary
from analytics.utilization import job_totals, job_utilization, utilization_by
from analytics.waste import waste_by, waste_totals
from gpuledger.ledger.settings import Settings
from tests.analytics.oracle import ORACLE


def close(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    return a == b


def same(raw: pl.DataFrame, fast: pl.DataFrame) -> None:
    assert_frame_equal(raw, fast, check_exact=False, rel_tol=1e-9, abs_tol=1e-6)


def raw_equals_fast(con: duckdb.DuckDBPyConnection, f: Filters, settings: Settings) -> None:
    """The oracle (window functions over samples) against the rollups (the default source), one view."""
    kw = {"filters": f, "settings": settings}
    raw, fast = summary(con, source=ORACLE, **kw), summary(con, **kw)
    assert close(raw, fast), (f, raw, fast)
    assert close(waste_totals(con, source=ORACLE, **kw), waste_totals(con, **kw))
    same(job_totals(con, source=ORACLE, **kw), job_totals(con, **kw))
    same(jobs_table(con, source=ORACLE, **kw), jobs_table(con, **kw))
    same(job_utilization(con, source=ORACLE, **kw), job_utilization(con, **kw))
    same(waste_by(con, by="team", source=ORACLE, **kw), waste_by(con, by="team", **kw))
    for by in ("team", "user", "job", "gpu", "day", "week"):
        same(utilization_by(con, by=by, source=ORACLE, **kw), utilization_by(con, by=by, **kw))
    same(idle_stretches(con, source=ORACLE, **kw), idle_stretches(con, **kw))
    same(job_signals(con, source=ORACLE, **kw), job_signals(con, **kw))
    same(
        recommendations(con, source=ORACLE, min_usd_per_week=0.0, **kw),
        recommendations(con, min_usd_per_week=0.0, **kw),
    )
