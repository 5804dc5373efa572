"""Rules a staged row must keep, checked in SQL, and the earliest line that breaks one as a FormatError."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb

from gpuledger.ledger.errors import FormatError
from gpuledger.ledger.text import clip


@dataclass(frozen=True)
class Check:
    """A rule a staged row must keep: ``bad_sql`` is true for a bad row; ``reason`` may use {value}."""

    bad_sql: str
    reason: str
    value_sql: str = "NULL"


def first_violation(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    table: str,
    checks: Sequence[Check],
    *,
    line_col: str = "line_no",
    where: str = "true",
) -> None:
    """Raise FormatError for the earliest line (by ``line_col``) that breaks any check, among the rows
    ``where`` keeps (rows a reader skips are not checked)."""
    if not checks:
        return
    arms = " ".join(f"WHEN {c.bad_sql} THEN {i}" for i, c in enumerate(checks))
    values = " ".join(f"WHEN {c.bad_sql} THEN CAST({c.value_sql} AS VARCHAR)" for c in checks)
    rows = con.execute(
        f"""SELECT {line_col}, CASE {arms} END AS which, CASE {values} END AS val
            FROM {table} WHERE ({where}) AND CASE {arms} END IS NOT NULL ORDER BY {line_col} LIMIT 1"""
    ).fetchall()
    if rows:
        line, which, val = rows[0]
        raise FormatError(
            path, int(line) if line is not None else None, checks[which].reason.format(value=clip(val))
        )
