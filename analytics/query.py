"""Run bound SQL and get polars back (the one place that knows the DuckDB client's result API)."""

from __future__ import annotations

import duckdb
import polars as pl


def frame(con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None) -> pl.DataFrame:
    """Execute ``sql`` with bound ``params`` and return all rows as a polars DataFrame."""
    return con.sql(sql, params=params or None).pl()


def scalar(con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None) -> object:
    """The first column of the first row (None when there is no row)."""
    rows = con.execute(sql, params or []).fetchall()
    return rows[0][0] if rows else None
