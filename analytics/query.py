"""Run bound SQL and get polars back (the one place that knows the DuckDB client's result API)."""

from __future__ import annotations

import warnings

import duckdb
import polars as pl

# `con.sql(...).pl()` parses and binds every statement twice (once in the client's relation layer to learn the
# schema, once to run it) and tokenizes it in Python: on our 20-25 kB analytics statements that was 40-70 ms of
# a 150 ms query (measured). A DB-API execute binds once; its Arrow result is copied once more, which costs
# nothing at the sizes analytics return, so the client's advice to use the relation instead is silenced here.
warnings.filterwarnings(
    "ignore", message="Arrow output on a DB-API result makes an extra copy", category=UserWarning
)


def frame(con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None) -> pl.DataFrame:
    """Execute ``sql`` with bound ``params`` and return all rows as a polars DataFrame."""
    table = con.execute(sql, params or []).to_arrow_table()
    return pl.from_arrow(table, rechunk=False)  # type: ignore[return-value]


def scalar(con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None) -> object:
    """The first column of the first row (None when there is no row)."""
    rows = con.execute(sql, params or []).fetchall()
    return rows[0][0] if rows else None
