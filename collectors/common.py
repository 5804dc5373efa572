"""SQL building blocks shared by parsers: time conversion, validation with line numbers, local time zones."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb

from gpuledger.ledger.errors import FormatError

NULL_TOKENS = ("", "[N/A]", "N/A", "[Not Supported]", "Not Supported", "NaN", "nan", "null", "NULL", "None")
_NULL_SQL = ", ".join("'" + t.replace("'", "''") + "'" for t in NULL_TOKENS)


def local_zone() -> str:
    """This machine's IANA zone (for nvidia-smi's naive local timestamps); UTC when it cannot be told.

    ``$TZ`` is read in every form the C library accepts for a zone file: ``Europe/Paris``, ``:Europe/Paris``,
    ``:/etc/localtime``, ``/usr/share/zoneinfo/Europe/Paris``. A POSIX rule string (``CET-1CEST``) or a name
    zoneinfo does not know falls back to /etc/localtime, then UTC.
    """
    import os

    tz = os.environ.get("TZ", "").strip().lstrip(":")
    if tz:
        name = _zone_from_path(Path(tz)) if tz.startswith("/") else tz
        if name and _known_zone(name):
            return name
    name = _zone_from_path(Path("/etc/localtime"))
    if name and _known_zone(name):
        return name
    utc = dt.datetime.now().astimezone().tzname()
    return utc if utc in ("UTC", "GMT") else "UTC"


def _zone_from_path(path: Path) -> str | None:
    """``/usr/share/zoneinfo/Europe/Paris`` (or a link to it, like /etc/localtime) → ``Europe/Paris``."""
    try:
        parts = path.resolve().parts
    except OSError:
        return None
    if "zoneinfo" in parts:
        return "/".join(parts[parts.index("zoneinfo") + 1 :]) or None
    return None


def _known_zone(name: str) -> bool:
    from zoneinfo import ZoneInfo

    try:
        ZoneInfo(name)
    except (ValueError, OSError, KeyError):  # ZoneInfoNotFoundError is a KeyError
        return False
    return True


@contextmanager
def session_zone(con: duckdb.DuckDBPyConnection, zone: str | None) -> Iterator[None]:
    """Interpret naive timestamps in ``zone`` while staging; the ledger itself always runs in UTC."""
    zone = zone or "UTC"
    try:
        con.execute(f"SET TimeZone = '{zone.replace(chr(39), '')}'")
    except duckdb.Error as exc:
        raise FormatError("--tz", None, f"unknown time zone {zone!r}") from exc
    try:
        yield
    finally:
        con.execute("SET TimeZone = 'UTC'")


def nullif_tokens(expr: str) -> str:
    """NULL for the spellings tools use for "no value" ([N/A], [Not Supported], empty, NaN...)."""
    return f"(CASE WHEN trim({expr}) IN ({_NULL_SQL}) THEN NULL ELSE trim({expr}) END)"


def ts_utc(expr: str) -> str:
    """A VARCHAR time → naive UTC TIMESTAMP, NULL when unreadable.

    Accepts ISO-8601 with or without offset (naive ones are read in the session's zone), nvidia-smi's
    ``YYYY/MM/DD HH:MM:SS.mmm``, and epoch seconds (integers or floats).
    """
    v = nullif_tokens(expr)
    return f"""(CASE
        WHEN regexp_full_match({v}, '-?[0-9]+(\\.[0-9]+)?')
            THEN to_timestamp(TRY_CAST({v} AS DOUBLE)) AT TIME ZONE 'UTC'
        ELSE TRY_CAST(replace({v}, '/', '-') AS TIMESTAMPTZ) AT TIME ZONE 'UTC' END)"""


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
) -> None:
    """Raise FormatError for the earliest line (by ``line_col``) that breaks any check."""
    if not checks:
        return
    arms = " ".join(f"WHEN {c.bad_sql} THEN {i}" for i, c in enumerate(checks))
    values = " ".join(f"WHEN {c.bad_sql} THEN CAST({c.value_sql} AS VARCHAR)" for c in checks)
    rows = con.execute(
        f"""SELECT {line_col}, CASE {arms} END AS which, CASE {values} END AS val
            FROM {table} WHERE CASE {arms} END IS NOT NULL ORDER BY {line_col} LIMIT 1"""
    ).fetchall()
    if rows:
        line, which, val = rows[0]
        raise FormatError(
            path, int(line) if line is not None else None, checks[which].reason.format(value=val)
        )


def json_object_limit(path: Path) -> int:
    """``maximum_object_size`` for DuckDB's JSON readers: the file's own size (a whole-file JSON document is
    one object), at least the 16 MiB default. DuckDB allocates this buffer up front, so a fixed 2 GiB limit
    fails under a writer's memory limit (gpuledger.ledger.db.WRITER_MEMORY_LIMIT)."""
    return max(path.stat().st_size + 1024, 16 * 1024 * 1024)
