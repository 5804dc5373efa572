"""SQL text parsers build their staging from: "no value" tokens, times to naive UTC, file paths as literals, and
the JSON readers' object size."""

from __future__ import annotations

from pathlib import Path

NULL_TOKENS = ("", "[N/A]", "N/A", "[Not Supported]", "Not Supported", "NaN", "nan", "null", "NULL", "None")
_NULL_SQL = ", ".join("'" + t.replace("'", "''") + "'" for t in NULL_TOKENS)


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
            THEN {epoch_ts(f"TRY_CAST({v} AS DOUBLE)")}
        ELSE TRY_CAST(replace({v}, '/', '-') AS TIMESTAMPTZ) AT TIME ZONE 'UTC' END)"""


# Epoch seconds beyond this (about the year 5138) are no time a source meant: they become 'infinity', which
# the plausibility check names with its line, instead of an overflow error deep in DuckDB.
MAX_EPOCH_S = 1e11


def epoch_ts(seconds_sql: str, base_sql: str | None = None) -> str:
    """DOUBLE seconds (since the epoch, or since ``base_sql``, a TIMESTAMP) → naive UTC TIMESTAMP; NULL stays
    NULL; NaN, ±inf and absurd magnitudes become ``'infinity'`` for collectors/validate.py to reject."""
    v = seconds_sql
    at = (
        f"{base_sql} + to_microseconds(CAST({v} * 1e6 AS BIGINT))"
        if base_sql
        else f"to_timestamp({v}) AT TIME ZONE 'UTC'"
    )
    return (
        f"(CASE WHEN {v} IS NULL THEN NULL::TIMESTAMP WHEN abs({v}) < {MAX_EPOCH_S} THEN ({at})::TIMESTAMP "
        f"ELSE 'infinity'::TIMESTAMP END)"
    )


def json_object_limit(path: Path) -> int:
    """``maximum_object_size`` for DuckDB's JSON readers: the file's own size (a whole-file JSON document is
    one object), at least the 16 MiB default. DuckDB allocates this buffer up front, so a fixed 2 GiB limit
    fails under a writer's memory limit (gpuledger.ledger.db.WRITER_MEMORY_LIMIT). A ``.gz`` file is measured
    by what it inflates to: its trailer's ISIZE (the length mod 4 GiB; collectors/source_file.py has already
    refused a bomb), not its compressed bytes."""
    size = path.stat().st_size
    if path.suffix.lower() == ".gz" and size >= 18:
        with path.open("rb") as f:
            f.seek(-4, 2)
            size = max(size, int.from_bytes(f.read(4), "little"))
    return max(size + 1024, 16 * 1024 * 1024)


def sql_path(path: str | Path) -> str:
    """``path`` as a SQL string literal for DuckDB's readers, read as itself.

    DuckDB's readers expand ``*``, ``?`` and ``[...]`` as globs, so a file literally named ``jobs*.csv``
    would also read ``jobsA.csv``. Each of those characters becomes a one-character class (``[*]``, ``[?]``,
    ``[[]``), which matches only itself.
    """
    text = str(path)
    escaped = "".join(f"[{ch}]" if ch in "*?[" else ch for ch in text)
    return "'" + escaped.replace("'", "''") + "'"
