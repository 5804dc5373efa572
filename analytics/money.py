"""The one place money is rounded, and the one rule for float residue in what gpuledger prints.

Waste parts are differences of sums (unmeasured = cost − failed − idle − under-used − productive), so a part
that is zero comes out as ±1e-15 or as -0.0, and ``round(-0.001, 2)`` is -0.0 too: a sign that means
nothing, which a JSON reader shows as "-0.0" ("unmeasured_usd": -0.0 for a team and week, issue 37).
"""

from __future__ import annotations

import math

# |x| below this is float residue of sums that cancel, not a measured amount: the smallest figure gpuledger
# states is a fraction of a cent or of a GPU-second, many orders of magnitude above it
RESIDUE = 1e-9


def cents(value: float | None) -> float | None:
    """US$ rounded to the cent, with no sign on zero (None and non-finite stay None)."""
    v = clean_float(value)
    return None if v is None else round(v, 2) + 0.0  # + 0.0 turns -0.0 into 0.0


def clean_float(value: float | None) -> float | None:
    """A float as it is printed: None for NaN/±inf (not a number is unknown), 0.0 for float residue
    (|x| < RESIDUE, -0.0 included), else the value itself."""
    if value is None:
        return None
    v = float(value)
    if not math.isfinite(v):
        return None
    return 0.0 if abs(v) < RESIDUE else v


MINUS = "\u2212"  # "−": the sign of a negative amount, before the "$" (−$3.20), never "$-3.20" nor "-$3.20"


def usd(value: float | None, digits: int = 2, *, na: str = "n/a") -> str:
    """The one money format of pages, CLI and reports: ``$1,234.56``, ``−$3.20`` for a negative amount (the
    minus sign U+2212 before the "$"), ``$0.00`` for float residue and for an amount that rounds to zero
    (no signed zero), ``na`` for a missing or non-finite one. ``digits=0`` gives whole dollars."""
    v = clean_float(value)
    if v is None:
        return na
    text = f"{abs(v):,.{digits}f}"
    negative = v < 0 and any(c in "123456789" for c in text)
    return f"{MINUS}${text}" if negative else f"${text}"


def signed_usd(value: float | None, digits: int = 2, *, na: str = "n/a") -> str:
    """A change of money: ``+$12.00``, ``−$3.20``, ``$0.00`` when it rounds to nothing."""
    text = usd(value, digits, na=na)
    v = clean_float(value)
    if v is None or text.startswith(MINUS) or not any(c in "123456789" for c in text):
        return text
    return "+" + text
