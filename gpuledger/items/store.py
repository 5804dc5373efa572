"""The items' records in the ledger (``action_items``, ``action_history``; docs/schema.md) and who may
change them.

The history is append-only: :func:`append` is the one writer of a change, and nothing here updates or
deletes one; an item's status is the latest change that took effect (gpuledger/items/tracker.py).

Roles (the dashboard's ``[access]``, gpuledger/ledger/access.py): an **admin** changes any item, a **lead**
the items of the teams mapped to them, anyone else (a viewer) none; an item without a team (an operators'
item: capacity, an idle cluster) only an admin. With sign-in off (``scope`` None) whoever reaches the
dashboard or runs the CLI on the ledger file changes any item, as for the settings
(``access.may_change_settings``). :func:`change` asks :func:`may_change` itself, so no caller (a page's
button, a forged form, the CLI) can skip the check.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import duckdb

from gpuledger.ledger.access import Scope
from gpuledger.ledger.errors import LedgerError

STATUSES = ("open", "acknowledged", "done", "dismissed", "snoozed")
ALIASES = {"ack": "acknowledged"}
SYSTEM = "gpuledger"  # who a reopen is by


class ItemError(LedgerError):
    """A change that cannot be made (unknown item or status, a snooze without a date, a dismissal without a
    reason); the CLI prints it as ``error: ...``."""


class NotAllowed(ItemError):
    """The person may not change this item (:func:`may_change`)."""


@dataclass(frozen=True)
class Change:
    """One entry of an item's history."""

    item_id: str
    at: dt.datetime
    status: str
    by: str
    note: str | None = None
    owner: str | None = None
    until: dt.date | None = None
    change_id: int = 0  # 0: derived, not stored (a reopen worked out on a read-only connection)

    def row(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(sep=" "),
            "status": self.status,
            "by": self.by,
            "note": self.note,
            "owner": self.owner,
            "until": self.until.isoformat() if self.until else None,
        }


def has_tables(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the ledger has the item tables (schema version 10; an older file read read-only has not)."""
    try:
        con.table("action_history")
    except duckdb.CatalogException:
        return False
    return True


def recorded(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, Any]]:
    """item_id → its action_items row."""
    if not has_tables(con):
        return {}
    cur = con.execute(
        "SELECT item_id, item_key, kind, target_type, target, team, first_seen FROM action_items"
    )
    cols = [d[0] for d in cur.description]
    return {r[0]: dict(zip(cols, r, strict=True)) for r in cur.fetchall()}


def history(con: duckdb.DuckDBPyConnection) -> dict[str, list[Change]]:
    """item_id → its changes, in the order they took effect (then recorded)."""
    if not has_tables(con):
        return {}
    rows = con.execute(
        """SELECT item_id, effective_at, status, changed_by, note, owner, until_day, change_id
           FROM action_history ORDER BY effective_at, change_id"""
    ).fetchall()
    out: dict[str, list[Change]] = {}
    for item, at, status, by, note, owner, until, cid in rows:
        out.setdefault(item, []).append(Change(item, at, status, by, note, owner, until, cid))
    return out


def record_items(con: duckdb.DuckDBPyConnection, items: list[dict[str, Any]]) -> int:
    """Insert the items not recorded yet (id, key, kind, target_type, target, team, first_seen); returns how many."""
    known = set(recorded(con))
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    new = [it for it in items if it["id"] not in known]
    for it in new:
        con.execute(
            "INSERT INTO action_items VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                it["id"],
                it["key"],
                it["kind"],
                it["target_type"],
                it["target"],
                it["team"],
                it["first_seen"],
                now,
            ],
        )
    return len(new)


def append(con: duckdb.DuckDBPyConnection, c: Change) -> None:
    """Append one change (the only write of the history)."""
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    con.execute(
        """INSERT INTO action_history
           VALUES (nextval('action_change_seq'), ?, ?, ?, ?, ?, ?, ?, ?)""",
        [c.item_id, c.at, c.status, c.until, c.owner, c.note, c.by, now],
    )


def may_change(scope: Scope | None, team: str | None) -> bool:
    """Whether ``scope`` may change an item of ``team`` (module docstring)."""
    if scope is None or scope.admin:
        return True
    return team is not None and team in scope.teams


def status_of(word: str) -> str:
    """A status as the CLI or a form gives it (``ack`` → ``acknowledged``)."""
    status = ALIASES.get(word, word)
    if status not in STATUSES:
        raise ItemError(f"unknown status {word!r}; use one of done, ack, dismissed, snoozed, open")
    return status


def change(
    con: duckdb.DuckDBPyConnection,
    item: dict[str, Any],
    *,
    status: str,
    by: str,
    scope: Scope | None,
    at: dt.datetime | None = None,
    until: dt.date | None = None,
    note: str | None = None,
    owner: str | None = None,
) -> Change:
    """Check and append one change to ``item`` (a tracker item: ``id``, ``team``). Raises NotAllowed when
    ``scope`` may not change it, ItemError for a change that cannot mean anything."""
    if not may_change(scope, item.get("team")):
        who = scope.who if scope else "?"
        raise NotAllowed(f"{who} may not change item {item['id']} (team {item.get('team') or 'operators'})")
    status = status_of(status)
    note = (note or "").strip() or None
    if status == "snoozed" and until is None:
        raise ItemError("a snooze needs --until DATE (the last day it is snoozed)")
    if status != "snoozed" and until is not None:
        raise ItemError("--until is only for --status snoozed")
    if status == "dismissed" and not note:
        raise ItemError("a dismissal needs a reason: --note TEXT")
    when = at or dt.datetime.now(dt.UTC).replace(tzinfo=None)
    if until is not None and until < when.date():
        raise ItemError(f"--until {until} is before the change takes effect ({when.date()})")
    c = Change(item["id"], when, status, by, note, (owner or "").strip() or None, until)
    record_items(con, [item])
    append(con, c)
    return c
