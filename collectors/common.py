"""SQL building blocks shared by parsers: time conversion, validation with line numbers, local time zones."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo

import duckdb

from gpuledger.ledger.db import RAISE_MEMORY_LIMIT
from gpuledger.ledger.errors import FormatError, out_of_space
from gpuledger.ledger.text import clip

NULL_TOKENS = ("", "[N/A]", "N/A", "[Not Supported]", "Not Supported", "NaN", "nan", "null", "NULL", "None")
_NULL_SQL = ", ".join("'" + t.replace("'", "''") + "'" for t in NULL_TOKENS)


# Sample columns a second series for the same (gpu_id, ts) never changes (collectors/landing.py _land_samples).
MERGE_KEPT = frozenset({"ts", "gpu_id", "interval_s", "ingest_id"})


def utc_offset(zone: str, at: dt.datetime) -> dt.timedelta:
    """``zone``'s offset from UTC at the naive-UTC instant ``at``."""
    return at.replace(tzinfo=dt.UTC).astimezone(ZoneInfo(zone)).utcoffset() or dt.timedelta(0)


def fall_backs(zone: str, lo: dt.datetime, hi: dt.datetime) -> list[tuple[dt.datetime, dt.timedelta]]:
    """The instants from the day before ``lo`` to ``hi`` (naive UTC) at which ``zone``'s clocks go back (a DST
    end), with how far.

    Each day is compared at its two ends (a zone changes its offset at most once a day; starting the day
    before ``lo`` sees a change at a UTC midnight), and a day whose offset falls is bisected to the second:
    a few hundred zoneinfo calls a year of data."""
    found = []
    day = dt.datetime.combine(lo.date(), dt.time()) - dt.timedelta(days=1)
    while day <= hi:
        a, b = day, day + dt.timedelta(days=1)
        before = utc_offset(zone, a)
        if utc_offset(zone, b) < before:
            while b - a > dt.timedelta(seconds=1):
                mid = a + (b - a) / 2
                a, b = (mid, b) if utc_offset(zone, mid) == before else (a, mid)
            found.append((b.replace(microsecond=0), before - utc_offset(zone, b)))
        day += dt.timedelta(days=1)
    return found


def resolve_fall_back(
    con: duckdb.DuckDBPyConnection, table: str, zone: str, key: str, *, naive: str | None = None
) -> int:
    """Put the rows of ``table`` whose local time fell in the hour the clocks repeat (a DST end) on the
    right pass through it, by file order; returns how many rows fell in such an hour.

    ``ts`` holds naive-UTC times converted from naive local times in ``zone`` by ``timezone(zone, ts)``,
    which reads a repeated local time as one of its two instants (the later in most zones, the earlier in
    some: ICU's choice, not ours), so both passes land in [T - d, T + d) around the fall-back at T. There each
    row's local time is recovered (ts plus the offset of the side it landed on), and for each ``key`` (a GPU),
    in file order (``rowid``), the rows are the first pass until one goes back in time, the second from there
    on: local time less the summer offset, then less the winter one. A window with no row that goes back is
    one pass, read as the first (``fold=0``, Python's reading, which the XML and pmon parsers use). ``naive``:
    a boolean column of ``table``, true for rows whose time carried no offset (the others are left alone)."""
    if zone.upper() in ("UTC", "GMT", "ETC/UTC"):
        return 0
    lo, hi = con.execute(f"SELECT min(ts), max(ts) FROM {table}").fetchall()[0]
    if lo is None:
        return 0
    only = f"AND {naive}" if naive else ""
    placed = 0
    for at, back in fall_backs(zone, lo, hi):
        winter = utc_offset(zone, at)
        summer = winter + back
        to_us = 1_000_000
        con.execute(
            f"""CREATE OR REPLACE TEMP TABLE fall_back_rows AS
                WITH w AS (
                    SELECT rowid AS rid, {key} AS k,
                           ts + to_microseconds(CASE WHEN ts < $at THEN $summer ELSE $winter END) AS lt
                    FROM {table} WHERE ts >= $lo AND ts < $hi {only}
                ),
                stepped AS (
                    SELECT rid, k, lt, coalesce(lt < max(lt) OVER (PARTITION BY k ORDER BY rid
                                                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                                                false) AS went_back
                    FROM w
                )
                SELECT rid, lt - to_microseconds(CASE WHEN bool_or(went_back) OVER (PARTITION BY k ORDER BY rid
                                                           ROWS UNBOUNDED PRECEDING) THEN $winter ELSE $summer END) AS utc
                FROM stepped""",
            {
                "at": at,
                "lo": at - back,
                "hi": at + back,
                "summer": int(summer.total_seconds() * to_us),
                "winter": int(winter.total_seconds() * to_us),
            },
        )
        placed += con.execute("SELECT count(*) FROM fall_back_rows").fetchall()[0][0]
        con.execute(
            f"""UPDATE {table} SET ts = f.utc FROM fall_back_rows f
                WHERE {table}.rowid = f.rid AND {table}.ts IS DISTINCT FROM f.utc"""
        )
        con.execute("DROP TABLE temp.fall_back_rows")
    return int(placed)


class LocalClock:
    """One log's naive local times, met in file order, as naive UTC: :func:`resolve_fall_back`'s rule for
    parsers that read line by line. A time in the hour a DST end repeats is read on its first pass
    (``fold=0``) until the log goes back in time inside that hour, and on its second pass from there on."""

    def __init__(self, zone: ZoneInfo) -> None:
        self.zone = zone
        self._latest: dict[object, dt.datetime] = {}  # each repeated hour met: the latest local time in it
        self._second: set[object] = set()  # repeated hours whose second pass has begun

    def fold(self, local: dt.datetime) -> int:
        first, second = (local.replace(tzinfo=self.zone, fold=f).utcoffset() for f in (0, 1))
        if first is None or second is None or first <= second:  # not repeated (a gap's fold is no pass)
            return 0
        hour = (local.date(), first, second)
        if hour not in self._second:
            latest = self._latest.get(hour)
            if latest is None or local >= latest:
                self._latest[hour] = local
                return 0
            self._second.add(hour)
        return 1

    def utc(self, local: dt.datetime) -> dt.datetime:
        aware = local.replace(tzinfo=self.zone, fold=self.fold(local))
        return aware.astimezone(dt.UTC).replace(tzinfo=None)


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


# DuckDB/Arrow/Python reader messages → the sentence a user reads. First match wins; ``{0}``… are the groups,
# clipped (gpuledger.ledger.text.clip). A message may echo a cell of any length: every pattern starts at a
# fixed phrase and reaches at most a bounded distance past it, so matching stays linear in the message.
_SENTENCES: tuple[tuple[str, str], ...] = (
    (
        r"Expected Number of Columns: (\d+) Found: (\d+)",
        "expected {0} values, found {1} (a truncated or mixed file?)",
    ),
    (
        r"[Ii]nvalid unicode|invalid UTF-?8|byte sequence mismatch|valid UTF-8|codec can't decode",
        "a byte that is not UTF-8 text (save the file as UTF-8)",
    ),
    (r"Error when sniffing file", "not a CSV file a reader can lay out (a broken header or mixed lines)"),
    (
        r"state machine reached an invalid state|Unterminated quote|unterminated quote|quote[^\n]{0,80}not terminated",
        "not well-formed CSV (a stray quote or a broken line)",
    ),
    (r"Map keys must be unique", "a name appears twice in one record (duplicate labels or keys)"),
    (
        r'Duplicate named argument "([^"\n]*+)"',
        'the name "{0}" appears twice (duplicate column names or keys)',
    ),
    (
        r'[Dd]uplicate (?:column|key)(?: name)?[: ]{1,8}"?([^"\s]{0,500})"?',
        'the name "{0}" appears twice (duplicate column names or keys)',
    ),
    (
        r"(?:date|timestamp|time) field value out of range[^\"\n]{0,80}\"?([^\"\n]{0,500})\"?",
        "an impossible time: {0}",
    ),
    (
        r"(?:INT\d{0,3}|HUGEINT|UBIGINT|BIGINT|INTEGER|DECIMAL)[^\n]{0,200}out of range|Overflow|(?<!File )too large|"
        r"out of range for",
        "a number too large to store",
    ),
    (r'Could not convert string "([^"\n]*+)" to \'?(\w{1,40})', "a value is not a {1}: {0!r}"),
    (
        r"Malformed JSON[^:\n]{0,200}: (unexpected [a-z ]{1,80})",
        "not valid JSON ({0}: a truncated or damaged file?)",
    ),
    (
        r"Malformed JSON|malformed JSON|unexpected character|unexpected end of|Expecting value|not valid JSON",
        "not valid JSON",
    ),
    (
        r"maximum_object_size|exceeds the maximum object size",
        "a JSON object larger than the file itself (truncated?)",
    ),
    (
        r"Out of Memory|could not allocate|failed to allocate",
        f"too large to read within the writer's memory limit: {RAISE_MEMORY_LIMIT}",
    ),
)


def _line_of(exc: BaseException, text: str) -> int | None:
    import re

    for attr in ("lineno",):  # json.JSONDecodeError
        v = getattr(exc, attr, None)
        if isinstance(v, int):
            return v
    pos = getattr(exc, "position", None)  # xml.etree ParseError: (line, column)
    if isinstance(pos, tuple) and pos and isinstance(pos[0], int):
        return pos[0]
    m = re.search(r"\bLine: (\d+)|\bline (\d+)|\bat line (\d+)|\bLine (\d+)", text)
    if m:
        return int(next(g for g in m.groups() if g))
    return None


def line_at_byte(path: str | Path, offset: int) -> int | None:
    """The 1-based line holding byte ``offset`` of a file (DuckDB's JSON errors give a byte, not a line)."""
    try:
        with Path(path).open("rb") as fh:
            line, left = 1, offset
            while left > 0:
                chunk = fh.read(min(left, 1 << 20))
                if not chunk:
                    break
                line += chunk.count(b"\n")
                left -= len(chunk)
            return line
    except OSError:
        return None


# group 1: the string is a key. The closing quote is optional and the loop possessive, so an unterminated string
# is one token to the end of the data: scanning each of its quotes again would be quadratic (`"\"\"\"…`).
_JSON_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*+(?:"(\s*:)?)?|[\[\]{},]', re.S)
_NON_SPACE = re.compile(rb"\S")
JSON_LINES_MAX_BYTES = 256 * 2**20  # past this, entries keep their index label (a scan would be slow)


@dataclass(frozen=True)
class JsonLines:
    """Where things sit in a JSON document, by 1-based line: ``keys`` (top-level key → the line of the key),
    ``items`` (each element of the array under one top-level key: the line it starts on, and the line of
    each of its own keys)."""

    keys: dict[str, int]
    items: list[tuple[int, dict[str, int]]]


def json_lines(path: str | Path, array_key: str) -> JsonLines | None:
    """Lines of a whole-file JSON document's top-level keys and of the entries of its ``array_key`` list
    (``log_history`` of a trainer_state.json), for messages: DuckDB's JSON functions say which entry broke a
    rule, never on which line it is. A lexical scan (strings, keys, brackets, commas), so a value DuckDB
    read but Python's json would refuse (``NaN``) does not stop it. None when the file cannot be read or is
    larger than :data:`JSON_LINES_MAX_BYTES`; the caller checks ``len(items)`` against the entries it has."""
    import bisect

    try:
        p = Path(path)
        if p.stat().st_size > JSON_LINES_MAX_BYTES:
            return None
        data = p.read_bytes()
    except OSError:
        return None
    newlines = [m.start() for m in re.finditer(rb"\n", data)]

    def line(offset: int) -> int:
        return bisect.bisect_left(newlines, offset) + 1

    keys: dict[str, int] = {}
    items: list[tuple[int, dict[str, int]]] = []
    stack: list[int] = []  # b"{" or b"[" of each open container
    target = 0  # the stack depth inside the array, while in it
    done = False
    pending_key = False  # the top-level key array_key was just read: its value comes next
    wanted = array_key.encode()

    def element_after(pos: int) -> None:
        m = _NON_SPACE.search(data, pos)
        if m and data[m.start()] != 93:  # "]": an empty list or a trailing comma
            items.append((line(m.start()), {}))

    for m in _JSON_TOKEN.finditer(data):
        start = m.start()
        tok = data[start]
        key, pending_key = pending_key, False
        if tok == 34:  # a string
            if m.group(1) is None:
                continue
            depth = len(stack)
            if depth == 1 and stack[0] == 123:
                name = data[start + 1 : m.start(1) - 1]
                keys.setdefault(name.decode("utf-8", "replace"), line(start))
                pending_key = name == wanted
            elif target and depth == target + 1 and stack[-1] == 123 and items:
                name = data[start + 1 : m.start(1) - 1]
                items[-1][1].setdefault(name.decode("utf-8", "replace"), line(start))
        elif tok == 91 or tok == 123:  # [ {
            stack.append(tok)
            if key and tok == 91 and not done and len(stack) == 2:
                target = 2
                element_after(m.end())
        elif tok == 44:  # ,
            if target and len(stack) == target:
                element_after(m.end())
        else:  # ] }
            if stack:
                stack.pop()
            if target and len(stack) < target:
                target, done = 0, True
    return JsonLines(keys, items)


def csv_layout_problem(path: str | Path, delimiter: str = ",") -> tuple[int, str] | None:
    """The first line that breaks a CSV file's layout, as (line, sentence), for a reader that only says it
    could not lay the file out (DuckDB's sniffer): an empty line or a stray carriage return inside the
    table, a quote that is never closed, or a record with more or fewer values than the header. None when
    no line does (then the file as a whole is the problem). Blank lines at the end are not a problem."""
    import csv

    try:
        text = Path(path).read_bytes().decode("utf-8", "replace").removeprefix("\ufeff")
    except OSError:
        return None
    lines = text.split("\n")
    while lines and lines[-1].strip("\r") == "":
        lines.pop()
    header: int | None = None
    i = 0
    while i < len(lines):
        start = i + 1
        record = lines[i].removesuffix("\r")
        while record.count('"') % 2 and i + 1 < len(lines):  # a quoted field goes on on the next line
            i += 1
            record += "\n" + lines[i].removesuffix("\r")
        i += 1
        if record.count('"') % 2:
            return start, 'a quote (") that is never closed'
        if "\r" in record and '"' not in record:  # inside quotes a CR is part of a value
            return start, "a stray carriage return (\\r) inside the line"
        if record == "":
            return start, "an empty line inside the table (a blank or broken line)"
        try:
            values = next(csv.reader([record], delimiter=delimiter, strict=True), [])
        except csv.Error:
            return start, "not well-formed CSV (a stray quote or a broken line)"
        if header is None:
            header = len(values)
        elif len(values) != header:
            return start, f"{len(values)} values where the header has {header} (a truncated or mixed line?)"
    return None


def describe_failure(path: str | Path, exc: BaseException, *, landing: bool = False) -> FormatError:
    """Any exception a reader raised inside a parser (DuckDB, polars, pyarrow, json, xml, yaml, tarfile, the
    standard library) → ``FormatError(path, line when the message says it, one sentence)``."""
    import re

    text = str(exc)
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    line = _line_of(exc, text)
    if (full := out_of_space(exc)) is not None:
        sentence = full
    elif isinstance(exc, RecursionError):
        sentence = "nested too deeply to read"
    elif isinstance(exc, UnicodeError):
        sentence = "a byte that is not UTF-8 text (save the file as UTF-8)"
    elif isinstance(exc, OverflowError):
        sentence = "a number too large to store"
    elif isinstance(exc, MemoryError):
        sentence = "too large to read within the available memory"
    elif isinstance(exc, OSError) and not isinstance(exc, duckdb.Error) and exc.strerror:
        sentence = f"cannot be read: {exc.strerror.lower()}"
    elif _is_archive_error(exc):
        sentence = f"a damaged or truncated archive ({first[:120]})"
    elif type(exc).__name__ == "ParseError" and "xml" in type(exc).__module__:
        detail = re.sub(r": line \d+, column \d+", "", first)
        sentence = f"not well-formed XML ({detail[:120]})"
    else:
        sentence = ""
        for pattern, words in _SENTENCES:
            m = re.search(pattern, text)
            if m:
                sentence = words.format(*(clip(g or "") for g in m.groups()))
                break
        if not sentence:
            detail = re.sub(r"^[A-Za-z ]*(Error|Exception): ", "", first)
            sentence = f"could not be read ({detail[:160]})"
    if line is None and "UTF-8" in sentence:
        line = first_non_utf8_line(path)
    at_byte = re.search(r"at byte (\d+)", text)
    if line is None and at_byte:
        line = line_at_byte(path, max(int(at_byte.group(1)) - 1, 0))
    if landing:
        sentence = f"could not be landed: {sentence}"
    return FormatError(path, line, sentence)


def first_non_utf8_line(path: str | Path, limit: int = 256 * 2**20) -> int | None:
    """The 1-based line of the first byte that is not UTF-8 (readers that do not say where), else None."""
    import codecs

    try:
        decoder = codecs.getincrementaldecoder("utf-8")()
        line = 1
        with Path(path).open("rb") as fh:
            read = 0
            while read < limit:
                chunk = fh.read(1 << 20)
                if not chunk:
                    return None
                read += len(chunk)
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError as exc:
                    return line + chunk[: exc.start].count(b"\n")
                line += chunk.count(b"\n")
    except OSError:
        return None
    return None


def _is_archive_error(exc: BaseException) -> bool:
    import tarfile
    import zlib

    return isinstance(exc, tarfile.TarError | zlib.error | EOFError) or type(exc).__name__ == "BadGzipFile"


class Restage(Exception):
    """Raised by a parser's ``stage`` when what made its reader fail means the file has to be staged again
    with other options (``changes``): DuckDB aborts a transaction at a failed statement, so
    :func:`collectors.ingest.ingest_file` rolls it back and runs it once more with the options changed."""

    def __init__(self, **changes: object) -> None:
        super().__init__(changes)
        self.changes = changes


@contextmanager
def reading(path: str | Path, *, landing: bool = False) -> Iterator[None]:
    """Inside: whatever a parser or the landing raises reaches the caller as a FormatError naming ``path``.

    Our own typed errors pass unchanged; KeyboardInterrupt and SystemExit are not errors of the file.
    """
    from gpuledger.ledger.errors import LedgerError

    try:
        yield
    except FormatError as exc:
        plain = _plain(exc)
        if plain is exc:
            raise
        raise plain from exc.__context__
    except (LedgerError, Restage):
        raise
    except Exception as exc:  # every reader's error type, by design: no traceback
        raise describe_failure(path, exc, landing=landing) from exc


# A reader's raw text that a parser passed on: the error types DuckDB names ("Invalid Input Error: ") and
# a few phrases of its CSV reader and of Python's codecs. Found with str.find and a bounded look back, never
# a regex over the whole reason: the reason may echo a 150,000-letter cell, and the pattern this replaces
# ([A-Z][A-Za-z]*(?: [A-Z][A-Za-z]*)* Error: ) took time growing with the square of its length (30 s at 60 K).
_RAW_PHRASES = ("CSV Error on Line", "struct_pack", "state machine", "codec can't decode")
_ERROR_TYPE = re.compile(r"[A-Z][A-Za-z]*+(?: [A-Z][A-Za-z]*+)*+$")  # run on at most 64 characters
_CODEC_NAME = re.compile(r"'[-\w]++' $")


def _raw_start(reason: str) -> int | None:
    """Where a reader's raw text starts in ``reason``, else None (linear in its length)."""
    found = []
    at = reason.find(" Error: ")
    while at > 0:
        lo = max(at - 64, 0)
        m = _ERROR_TYPE.search(reason, lo, at)
        if m:
            found.append(m.start())
            break
        at = reason.find(" Error: ", at + 1)
    for phrase in _RAW_PHRASES:
        i = reason.find(phrase)
        if i >= 0:
            if phrase.startswith("codec") and (m := _CODEC_NAME.search(reason, max(i - 64, 0), i)):
                i = m.start()
            found.append(i)
    return min(found) if found else None


def _plain(exc: FormatError) -> FormatError:
    """A parser's FormatError that passed a reader's raw text on (``not valid JSON (Invalid Input Error:
    ...)``) gets the sentence :func:`describe_failure` gives that reader error; any other stays as it is."""
    raw = exc.__context__
    start = _raw_start(exc.reason)
    if start is None or raw is None or isinstance(raw, FormatError):
        return exc
    better = describe_failure(exc.path, raw)
    if better.reason.startswith("could not be read"):
        return exc
    prefix = exc.reason[:start].rstrip(" :(")
    reason = f"{prefix}: {better.reason}" if prefix else better.reason
    return FormatError(exc.path, exc.line if exc.line is not None else better.line, reason)
