"""Stage tables from Python rows, for parsers that read their document in Python (an XML or JSON snapshot holds
a handful of GPUs and processes: no DuckDB reader is worth it)."""

from __future__ import annotations

import duckdb


def temp_table(
    con: duckdb.DuckDBPyConnection, name: str, columns: dict[str, str], rows: list[tuple[object, ...]]
) -> None:
    """TEMP table ``name`` with ``columns`` (name → SQL type, numbers as DOUBLE) holding ``rows``."""
    con.execute(f"CREATE TEMP TABLE {name} ({', '.join(f'{c} {t}' for c, t in columns.items())})")
    placeholders = ", ".join("?" for _ in columns)
    con.executemany(f"INSERT INTO {name} VALUES ({placeholders})", [list(r) for r in rows])
