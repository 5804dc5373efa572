"""Which thresholds the rollup was built with (idle_util_pct, idle_min_minutes, target_util_pct), stored in
``schema_meta`` under ``rollup_thresholds``: analytics read the rollup only when they equal the current
settings (:func:`rollup_matches`), and gpuledger/ledger/rollup.py ``ensure_rollup`` rebuilds it when not.
"""

from __future__ import annotations

import duckdb

META_KEY = "rollup_thresholds"
DEFAULT_THRESHOLDS = (5.0, 30.0, 60.0)
Thresholds = tuple[float, float, float]  # idle_util_pct, idle_min_minutes, target_util_pct


def thresholds(idle_util_pct: float, idle_min_minutes: float, target_util_pct: float) -> Thresholds:
    return (float(idle_util_pct), float(idle_min_minutes), float(target_util_pct))


def stored_thresholds(con: duckdb.DuckDBPyConnection) -> Thresholds | None:
    """The thresholds the rollup was built with; None when it was never built."""
    rows = con.execute("SELECT value FROM schema_meta WHERE key = ?", [META_KEY]).fetchall()
    if not rows:
        return None
    a, b, c = (float(x) for x in rows[0][0].split("/"))
    return (a, b, c)


def rollup_matches(con: duckdb.DuckDBPyConnection, th: Thresholds) -> bool:
    """True when the rollup can stand in for raw samples under thresholds ``th``: it was built with them,
    or the ledger has no samples at all (then both paths give empty sums)."""
    if stored_thresholds(con) == th:
        return True
    return not con.execute("SELECT count(*) FROM (SELECT 1 FROM samples LIMIT 1)").fetchall()[0][0]


def _store(con: duckdb.DuckDBPyConnection, th: Thresholds) -> None:
    con.execute("INSERT OR REPLACE INTO schema_meta VALUES (?, ?)", [META_KEY, "/".join(repr(x) for x in th)])
