"""Every figure the pages show, computed from raw samples and from the rollups, must agree (used by the fast
path's tests and the MIG billing tests)."""

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


def close(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    return a == b


def same(raw: pl.DataFrame, fast: pl.DataFrame) -> None:
    assert_frame_equal(raw, fast, check_exact=False, rel_tol=1e-9, abs_tol=1e-6)


def raw_equals_fast(con: duckdb.DuckDBPyConnection, f: Filters, settings: Settings) -> None:
    """``source="raw"`` (window functions over samples) against ``source="auto"`` (the rollups), one view."""
    kw = {"filters": f, "settings": settings}
    raw, fast = summary(con, source="raw", **kw), summary(con, source="auto", **kw)
    assert close(raw, fast), (f, raw, fast)
    assert close(waste_totals(con, source="raw", **kw), waste_totals(con, source="auto", **kw))
    same(job_totals(con, source="raw", **kw), job_totals(con, source="auto", **kw))
    same(jobs_table(con, source="raw", **kw), jobs_table(con, source="auto", **kw))
    same(job_utilization(con, source="raw", **kw), job_utilization(con, source="auto", **kw))
    same(waste_by(con, by="team", source="raw", **kw), waste_by(con, by="team", source="auto", **kw))
    for by in ("team", "user", "job", "gpu", "day", "week"):
        same(utilization_by(con, by=by, source="raw", **kw), utilization_by(con, by=by, source="auto", **kw))
    same(idle_stretches(con, source="raw", **kw), idle_stretches(con, source="auto", **kw))
    same(job_signals(con, source="raw", **kw), job_signals(con, source="auto", **kw))
    same(
        recommendations(con, source="raw", min_usd_per_week=0.0, **kw),
        recommendations(con, source="auto", min_usd_per_week=0.0, **kw),
    )
