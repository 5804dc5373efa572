"""What was sent (table ``alerts_sent``): a crossing whose key is there is not sent again, and a rule and scope
judged less than ``[alerts] cooldown_hours`` after its last sent alert wait."""

from __future__ import annotations

import datetime as dt

import duckdb

from gpuledger.alerts.rules import Alert


def sent_keys(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute("SELECT alert_key FROM alerts_sent").fetchall()}


def last_judged(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], dt.date]:
    """(rule, scope) → the latest day an alert of it was judged at."""
    rows = con.execute("SELECT rule, scope, max(judged_day) FROM alerts_sent GROUP BY ALL").fetchall()
    return {(r, s): d for r, s, d in rows}


def record(
    con: duckdb.DuckDBPyConnection, alert: Alert, judged: dt.date, channels: list[str], now: dt.datetime
) -> None:
    """The alert and the lower crossings it stands for, as sent (one transaction: the caller's)."""
    for key in (alert.key, *alert.covers):
        con.execute(
            "INSERT OR IGNORE INTO alerts_sent VALUES (?, ?, ?, ?, ?, ?, ?)",
            [key, alert.rule, alert.scope, judged, now, ",".join(channels), alert.message],
        )
