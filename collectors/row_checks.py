"""Rules a staged row must keep, checked in SQL: the earliest line that breaks one as a FormatError, or under
``--skip-bad-rows`` every bad row left out and named — one rule for every job-file reader that has row checks
(sacct text and JSON, the generic jobs table, the PAI and openb job traces).

Without ``--skip-bad-rows`` the file is refused with its first bad line (``error: FILE:LINE: reason``, nothing
lands). With it (:func:`screen_rows`), every bad row leaves the stage, each reported with its own line and
reason (the ingest's ``rejected`` list, ``rejected_rows`` in the ledger, ``rejected FILE:LINE: reason`` on the
terminal), and the good rows land: docs/metrics.md, "Plausibility". Before, the readers' own checks refused the
whole file even under the flag, and only the ledger's physical ranges (collectors/validate.py) let the rest
land. A reader names ``group_sql`` where several raw rows make one job (sacct: a job's line and its steps'
lines): a bad row then takes its whole job out with it, never a job without one of its lines.
"""

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


REJECTS = "reader_rejects"  # temp table: the rows the readers left out of this ingest (line, value, reason)


def screen_rows(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    table: str,
    checks: Sequence[Check],
    *,
    skip_bad_rows: bool,
    line_col: str = "line_no",
    where: str = "true",
    group_sql: str | None = None,
    line_label: str | None = None,
) -> int:
    """Hold the rows of ``table`` (a temp table, optionally with an alias: ``sacct_raw r``) to ``checks``.

    Without ``skip_bad_rows``: raise FormatError for the earliest bad line. With it: delete every bad row (and
    the rows of its ``group_sql``), keep each bad row's line and reason in :data:`REJECTS` for the ingest's
    report (:func:`reader_rejections`) and return how many rows left. ``line_label`` ("jobs[] entry"): the
    format has no lines; the row's number goes into the reason instead."""
    if not checks:
        return 0
    if not skip_bad_rows:
        first_violation(con, path, table, checks, line_col=line_col, where=where)
        return 0
    arms = " ".join(f"WHEN {c.bad_sql} THEN {i}" for i, c in enumerate(checks))
    values = " ".join(f"WHEN {c.bad_sql} THEN CAST({c.value_sql} AS VARCHAR)" for c in checks)
    group = group_sql or "NULL"
    alias = table.split()[-1]
    bad = con.execute(
        f"""SELECT {alias}.rowid, {line_col}, CASE {arms} END AS which, CASE {values} END AS val, {group} AS grp
            FROM {table} WHERE ({where}) AND CASE {arms} END IS NOT NULL ORDER BY {line_col}"""
    ).fetchall()
    if not bad:
        return 0
    con.execute(f"CREATE TEMP TABLE IF NOT EXISTS {REJECTS} (line BIGINT, value VARCHAR, reason VARCHAR)")
    rows = []
    for _rid, line, which, val, _grp in bad:
        reason = checks[which].reason.format(value=clip(val))
        if line_label is not None:
            rows.append([None, val, f"{line_label} {line}: {reason}"])
        else:
            rows.append([int(line) if line is not None else None, val, reason])
    con.executemany(f"INSERT INTO {REJECTS} VALUES (?, ?, ?)", rows)
    con.execute("CREATE OR REPLACE TEMP TABLE reader_bad (rid BIGINT, grp VARCHAR)")
    con.executemany("INSERT INTO reader_bad VALUES (?, ?)", [[b[0], b[4]] for b in bad])
    before = con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
    name = table.split()[0]
    con.execute(f"DELETE FROM {name} WHERE rowid IN (SELECT rid FROM reader_bad)")
    if group_sql is not None:
        con.execute(
            f"DELETE FROM {table} WHERE {group} IN (SELECT grp FROM reader_bad WHERE grp IS NOT NULL)"
        )
    con.execute("DROP TABLE temp.reader_bad")
    return int(before - con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0])


def reader_rejections(con: duckdb.DuckDBPyConnection) -> list[tuple[int | None, str | None, str]]:
    """The rows the readers left out since the last call (line, value, reason), in line order; clears them."""
    there = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = ?", [REJECTS]
    ).fetchall()[0][0]
    if not there:  # a query that fails would abort the caller's transaction
        return []
    rows = con.execute(f"SELECT line, value, reason FROM temp.{REJECTS} ORDER BY line").fetchall()
    con.execute(f"DROP TABLE temp.{REJECTS}")
    return [(r[0], r[1], r[2]) for r in rows]
