"""A statement built from named common table expressions, each carrying the values of its own parameters.

Analytics statements are long chains of CTEs, some of them sub-queries from other modules with their own
bound values. Written as one f-string with one parameter list beside it, the list had to be kept in the
order of the ``?`` marks by hand (``# uw``, ``# hj`` comments), and a variant of a CTE was made by editing
the SQL text with ``.replace()``. Here each CTE is a value (:class:`Cte`) built by a function that takes what
varies as arguments, and :func:`with_ctes` writes the statement and its parameter list from the same
sequence, so the values follow their marks by construction.

The marks stay positional (``?``): DuckDB does not mix named (``$name``) and positional parameters in one
statement ("Mixing named and positional parameters is not supported yet", DuckDB 2.0), and the job costs and
filters these statements embed (analytics/cost.py, analytics/filters.py) bind positionally. A statement
wholly written in one place binds by name instead (e.g. analytics/periods.py ``price_pieces``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Cte:
    """``name AS [MATERIALIZED] (sql)``; ``params``: the values of the ``?`` marks in ``sql``, in order."""

    name: str
    sql: str
    params: tuple[object, ...] = ()
    materialized: bool = False

    def text(self) -> str:
        return f"{self.name} AS {'MATERIALIZED ' if self.materialized else ''}({self.sql})"


def with_ctes(
    ctes: Sequence[Cte | str], select: str, params: Sequence[object] = ()
) -> tuple[str, list[object]]:
    """``WITH <ctes> <select>`` and its parameters: each CTE's in the order written, then ``params`` (the
    values of ``select``'s own marks). A ``str`` is one or more complete definitions without parameters
    (``gpuledger.ledger.prices.PRICE_PERIODS_CTE``)."""
    parts = [c if isinstance(c, str) else c.text() for c in ctes]
    values = [v for c in ctes if isinstance(c, Cte) for v in c.params]
    return "WITH " + ",\n".join(p.strip() for p in parts) + "\n" + select, [*values, *params]
