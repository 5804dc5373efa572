"""Neutral text: what a name read from a file may hold when it is stored, shown or echoed.

A team, user or job name comes from someone else's file. Printed raw it could clear a terminal
(``ESC [2J``), retitle it (an OSC sequence), split a row or forge a mail header (CR/LF) or reverse what
follows it on screen (a bidi override). :func:`neutral` is the one rule: each C0/C1 control character
(tab, CR and LF included) becomes a space and each bidi embedding, override or isolate is dropped; the
landing applies it to every stored name (:func:`neutral_sql`, the same rule in SQL) and every text output
applies it again, so a ledger written by an older version shows clean too.

:func:`clip` is the one rule for a value echoed in a message: at most :data:`ECHO_CHARS` characters,
neutral, with a count of what was cut, so one 20 MB cell never makes a 20 MB error line.
"""

from __future__ import annotations

from typing import Any

# C0 controls (U+0000-001F), DEL and the C1 controls (U+007F-009F) become a space
_CONTROLS = "".join(chr(c) for c in (*range(0x00, 0x20), *range(0x7F, 0xA0)))
# bidi embeddings and overrides (U+202A-202E), isolates (U+2066-2069) and the two marks that can reorder a
# neighbouring run (U+200E, U+200F, U+061C) are dropped
_BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
_TABLE = {ord(c): " " for c in _CONTROLS} | {ord(c): None for c in _BIDI}

ECHO_CHARS = 80


def neutral(text: object) -> str:
    """``text`` with every control character as a space and every bidi control dropped (one linear pass)."""
    return str(text).translate(_TABLE)


def is_neutral(text: str) -> bool:
    """Whether :func:`neutral` leaves ``text`` as it is."""
    return text == neutral(text)


_SQL_SPACES = "[" + "".join(f"\\x{ord(c):02X}" for c in _CONTROLS) + "]"
_SQL_BIDI = "[" + "".join(f"\\x{{{ord(c):04X}}}" for c in _BIDI) + "]"


def neutral_sql(expr: str) -> str:
    """DuckDB SQL for :func:`neutral` of a VARCHAR ``expr`` (NULL stays NULL): the landing's rule."""
    # RE2 character classes: linear in the text
    return f"regexp_replace(regexp_replace({expr}, '{_SQL_BIDI}', '', 'g'), '{_SQL_SPACES}', ' ', 'g')"


def unneutral_sql(expr: str) -> str:
    """DuckDB SQL: true where :func:`neutral` would change the VARCHAR ``expr``."""
    return f"(regexp_matches({expr}, '{_SQL_SPACES}') OR regexp_matches({expr}, '{_SQL_BIDI}'))"


def clip(value: object, limit: int = ECHO_CHARS) -> str:
    """``value`` as a message echoes it: neutral, at most ``limit`` characters, and the count of the
    characters cut (``AAAA… (149,920 more characters)``)."""
    text = str(value)
    if len(text) <= limit:
        return neutral(text)
    return f"{neutral(text[:limit])}… ({len(text) - limit:,} more characters)"


# the rule for a whole text output (a report, a mail body, a table): its own line ends (LF, and CR only
# as part of CRLF, which CSV writes) and tabs stay; every other control character and bidi control goes
_LINES_TABLE = {k: v for k, v in _TABLE.items() if k not in (0x09, 0x0A, 0x0D)}


def neutral_lines(text: str) -> str:
    """A whole output text made neutral, keeping its own line structure (LF, CRLF, tabs): the last pass of
    every text output, after each name in it went through :func:`neutral` (a name's CR/LF is a space)."""
    out = text.translate(_LINES_TABLE)
    if "\r" in out:
        out = out.replace("\r\n", "\n\x00").replace("\r", " ").replace("\n\x00", "\r\n")
    return out


def neutral_frame(frame: Any) -> Any:
    """A polars DataFrame with :func:`neutral` applied to every text column (a report's tables of names)."""
    import polars as pl

    strings = [c for c, t in frame.schema.items() if t == pl.Utf8]
    if not strings:
        return frame
    spaces = "[" + "".join(f"\\x{{{ord(c):02X}}}" for c in _CONTROLS) + "]"
    bidi = "[" + "".join(f"\\x{{{ord(c):04X}}}" for c in _BIDI) + "]"
    return frame.with_columns(
        pl.col(c).str.replace_all(bidi, "").str.replace_all(spaces, " ") for c in strings
    )
