"""Number and text formatting shared by every report format: $ with separators, one percent format, "n/a"
for a missing figure, never "-0.00" or "-0.0 %", and the escaping of user strings for Markdown."""

from __future__ import annotations

import math
import re

from analytics.money import signed_usd
from analytics.money import usd as money_usd
from gpuledger.ledger.filenames import safe_component

NA = "n/a"


def _finite(value: float | int | None) -> float | None:
    if value is None:
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def _unsigned_zero(text: str) -> str:
    """'-0.00' → '0.00', '-0.0 %' → '0.0 %': a value that rounds to zero has no sign."""
    return text[1:] if text.startswith("-") and not re.search(r"[1-9]", text) else text


def usd(value: float | None, digits: int = 2) -> str:
    """$1,234.56; '−$3.20' for a negative amount; 'n/a' for a missing or non-finite one (the one money
    format of pages, CLI and reports: analytics.money.usd)."""
    return money_usd(value, digits, na=NA)


def unit_usd(value: float | None) -> str:
    """A unit cost ($ per 1M tokens, per epoch): cents from $1 up, four decimals below ($0.0312), so a
    small figure and its change stay readable."""
    v = _finite(value)
    return usd(v, 2 if v is None or abs(v) >= 1 else 4)


def num(value: float | None, digits: int = 1, unit: str = "") -> str:
    """1,019.1 (thousands separators); unit appended with a space when given ('kWh', '%')."""
    v = _finite(value)
    if v is None:
        return NA
    text = _unsigned_zero(f"{v:,.{digits}f}")
    return f"{text} {unit}" if unit else text


def pct(value: float | None, digits: int = 1) -> str:
    """A percentage already in 0–100: '42.0 %'."""
    return num(value, digits, "%")


def share(part: float | None, whole: float | None, digits: int = 1) -> str:
    """part ÷ whole as a percentage ('n/a' when whole is 0 or missing)."""
    p, w = _finite(part), _finite(whole)
    if p is None or not w:
        return NA
    return pct(100.0 * p / w, digits)


def change(
    now: float | None, before: float | None, *, money: bool = False, digits: int = 1, unit: str = ""
) -> str:
    """'+$120.00 (+12.5 %)' — the change from ``before`` to ``now``; 'n/a (no data the week before)' when the
    previous figure is missing; the percentage is left out when the previous figure is 0."""
    n, b = _finite(now), _finite(before)
    if n is None or b is None:
        return f"{NA} (no figure for the previous period)"
    diff = n - b
    if money:
        body = signed_usd(diff, digits=2 if abs(n) >= 1 or abs(b) >= 1 else 4, na=NA)
    else:
        body = num(diff, digits)
        body = body if body.startswith("-") or not re.search(r"[1-9]", body) else "+" + body
        body = f"{body} {unit}" if unit else body
    if b == 0:
        return body if n != 0 else "no change"
    rel = pct(100.0 * diff / abs(b))
    rel = rel if rel.startswith("-") or not re.search(r"[1-9]", rel) else "+" + rel
    return f"{body} ({rel})"


# ---------------------------------------------------------------- user strings

# Characters with a meaning in some Markdown flavour wherever they stand (emphasis, code, links and images,
# tables, strike-through, Streamlit's $…$ math, e-mail autolinks); '#', '+', '-', '=' and digits only mean
# something at the start of a line, where a user string never stands.
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]!|~$@^])")
_HTML_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def md_escape(text: object) -> str:
    """A user string (team, user, job or file name) made inert in Markdown of any flavour.

    ``& < >`` become HTML entities (no flavour sees a tag: ``<script>`` shows as text); the characters of
    :data:`_MD_SPECIAL` are backslash-escaped (CommonMark allows it for every ASCII punctuation), so
    ``[x](url)``, ``*x*``, table pipes and ``$…$`` stay literal; ``://`` becomes ``\\://`` and ``www.``
    ``www\\.``, so no URL is autolinked (GFM's literal autolinks need those exact characters); a line
    break becomes a space, so a table row stays one row."""
    out = str(text).replace("\r", " ").replace("\n", " ")
    out = "".join(_HTML_ENTITIES.get(ch, ch) for ch in out)
    out = _MD_SPECIAL.sub(r"\\\1", out)
    out = out.replace("://", "\\://")
    return re.sub(r"(?i)\b(www)\.", r"\1\\.", out)


_HEADING_TAG = re.compile(r"<(/?)h([1-5])(?=[\s>/])", re.IGNORECASE)


def demote_headings(html: str) -> str:
    """The HTML report with every heading one level down (``<h1>`` → ``<h2>``, …, ``<h5>`` → ``<h6>``), to
    show it inside a page that has its own title (the dashboard's Reports preview). Headings keep their
    inline style, so they look the same; nothing else changes. User strings in the report are HTML-escaped
    (``&lt;h1&gt;``), so only the report's own tags match."""
    return _HEADING_TAG.sub(lambda m: f"<{m.group(1)}h{int(m.group(2)) + 1}", html)


_CSV_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A string cell that a spreadsheet would run as a formula (starts with = + - @, tab or CR) is prefixed
    with an apostrophe; numbers pass through unchanged."""
    if isinstance(value, str) and value.startswith(_CSV_TRIGGERS):
        return "'" + value
    return value


def slug(text: str) -> str:
    """A file-name-safe form of a team name: letters, digits, '-' and '_' only ('(none)' → 'none'), held to
    the one rule for names that become paths (gpuledger/ledger/filenames.py: no Windows device names)."""
    s = re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-")
    return safe_component(s[:60], fallback="team")
