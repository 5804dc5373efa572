"""A reader's error (DuckDB, polars, pyarrow, json, xml, the standard library) → the one sentence a user reads,
with the file and line: ``reading`` wraps a parser, ``describe_failure`` words one exception."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from collectors.lines import first_non_utf8_line, line_at_byte
from gpuledger.ledger.db import RAISE_MEMORY_LIMIT
from gpuledger.ledger.errors import FormatError, out_of_space
from gpuledger.ledger.text import clip

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
