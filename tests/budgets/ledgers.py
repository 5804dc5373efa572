"""Hand-built ledgers for the budget, alert and chargeback tests (prices: tests/analytics/build.py, H100
$4.00/GPU-h, T4 $0.50/GPU-h)."""

from __future__ import annotations

import datetime as dt

import duckdb

from tests.analytics.build import T0, ingest, job, set_test_prices


def two_days(con: duckdb.DuckDBPyConnection) -> None:
    """Day 0 = 2025-03-03 (T0), day 1 = 2025-03-04, on cluster c1 with 2 H100 declared from day 0:
    - a (nlp): 1 H100, day 0 20:00 → day 1 04:00: 4 h each day = $16 + $16;
    - b (cv): 1 T4, day 1 00:00 → 10:00: 10 h × $0.50 = $5 (no T4 capacity declared);
    capacity window = the data's (day 0 20:00, first job, → day 1 10:00, the horizon): 2 H100 × 4 h on day 0
    less a's 4 h = 4 GPU-h = $16; 2 × 10 h on day 1 less a's 4 h = 16 GPU-h = $64. Spend $117."""
    set_test_prices(con)
    con.execute("INSERT INTO capacity VALUES ('c1', 'H100-SXM-80GB', 2, ?, NULL, 0)", [T0])
    ingest(
        con,
        jobs=[
            job("a", 20 * 60, 28 * 60, team="nlp"),
            job("b", 24 * 60, 34 * 60, team="cv", user_name="bob", gpu_model="T4"),
        ],
    )


def daily_jobs(con: duckdb.DuckDBPyConnection, weeks: int, per_day: list[float]) -> None:
    """Team nlp runs one job a day, 00:00 → 05:00, for ``weeks`` weeks from T0 (a Monday) on
    ``per_day[week]`` H100s: 5 h × $4 × GPUs a day."""
    set_test_prices(con)
    rows = []
    for d in range(7 * weeks):
        gpus = per_day[d // 7]
        rows.append(job(f"n{d}", d * 1440, d * 1440 + 300, team="nlp", gpu_count=gpus))
    ingest(con, jobs=rows)


def day(n: int) -> dt.date:
    return (T0 + dt.timedelta(days=n)).date()
