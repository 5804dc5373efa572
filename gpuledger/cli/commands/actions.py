"""``gpuledger actions``: the recommendations as items across weeks, with status, owner, history and the
saving measured after they were done (docs/recommendations.md, "Items across weeks"); ``actions set`` records
a change. The CLI is whoever may open the ledger file for writing: it may change any item (an admin), and
each change is recorded with the OS user as its author."""

from __future__ import annotations

import argparse
import getpass

from analytics.shared import sharing
from gpuledger.cli import times
from gpuledger.cli.commands._common import UsageError, add_db_options, print_json
from gpuledger.items import store, tracker
from gpuledger.items.scan import scan
from gpuledger.ledger.db import sync_reference, writer
from gpuledger.ledger.settings import load_settings
from gpuledger.ledger.text import neutral

STATUS_WORDS = ("done", "ack", "acknowledged", "dismissed", "snoozed", "open")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "actions",
        help="recommendations as items across weeks: status, owner, history, measured saving",
        description="Each problem the recommendations list is an item that keeps its id from week to week "
        "(its key: kind and target). Lists the items with their status (open, acknowledged, done, dismissed, "
        "snoozed), owner, history, first week seen, predicted $/week and, once done, the measured $/week "
        "(mean targeted waste before the change minus after it). `actions set ID --status ...` records a change.",
    )
    p.add_argument("--json", action="store_true", help="print the items as JSON")
    p.add_argument("--status", choices=STATUS_WORDS, help="only items with this status")
    p.add_argument("--team", action="append", default=[], help="only this team's items (repeatable)")
    add_db_options(p)
    p.set_defaults(func=run, action_command=None)
    inner = p.add_subparsers(dest="action_command", metavar="set")
    s = inner.add_parser("set", help="record a change of an item's status, owner or note")
    s.add_argument("item", metavar="ID", help="the item's id (from `gpuledger actions`)")
    s.add_argument(
        "--status", required=True, choices=STATUS_WORDS, help="the new status (ack = acknowledged)"
    )
    s.add_argument(
        "--at", type=times.moment, help="when the change took effect (UTC date or time; default now)"
    )
    s.add_argument("--until", type=times.day, help="snoozed: the last UTC day of the snooze")
    s.add_argument("--note", help="why (required to dismiss)")
    s.add_argument("--owner", help="who owns the item from now on")
    add_db_options(s)
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    sync_reference(args.db, settings)
    with writer(args.db) as con, sharing(con):
        sc = scan(con, settings=settings)
        its = tracker.items(con, week_scan=sc)
        con.execute("BEGIN TRANSACTION")
        tracker.record(con, its)
        if args.action_command == "set":
            found = [it for it in its if it["id"] == args.item]
            if not found:
                con.execute("ROLLBACK")
                raise UsageError(f"no item {args.item!r}; `gpuledger actions` lists the ids")
            try:
                store.change(
                    con,
                    found[0],
                    status=args.status,
                    by=getpass.getuser(),
                    scope=None,
                    at=args.at,
                    until=args.until,
                    note=args.note,
                    owner=args.owner,
                )
            except store.ItemError:
                con.execute("ROLLBACK")
                raise
        con.execute("COMMIT")
        if args.action_command == "set":
            its = tracker.items(con, week_scan=sc)
    if args.action_command == "set":
        item = next(tracker.public(it) for it in its if it["id"] == args.item)
        print(
            f"{item['id']}: {item['status']}"
            + (f" until {item['snoozed_until']}" if item["snoozed_until"] else "")
        )
        return 0
    status = store.ALIASES.get(args.status, args.status) if args.status else None
    shown = [
        tracker.public(it)
        for it in its
        if (status is None or it["status"] == status) and (not args.team or it["team"] in args.team)
    ]
    if args.json:
        print_json(shown)
    else:
        print(render(shown))
    return 0


def render(items: list[dict[str, object]]) -> str:
    if not items:
        return "No items: no recommendation has been listed in a complete week of this ledger."
    lines = []
    for it in items:
        money = (
            f"predicted ${it['predicted_usd_per_week']:,.2f}/week"
            if it["predicted_usd_per_week"] is not None
            else "one-off"
        )
        if it["measured_usd_per_week"] is not None:
            money += (
                f", measured ${it['measured_usd_per_week']:,.2f}/week over {it['measured_weeks']} week(s)"
            )
            if it["did_not_hold"]:
                money += " (did not hold)"
        state = str(it["status"]) + (" (reopened)" if it["reopened"] else "")
        lines.append(
            f"{it['id']}  {state:<14} {it['kind_label']} · {it['target']} · team {it['team'] or 'operators'} · "
            f"owner {it['owner'] or 'n/a'} · first seen {it['first_seen']} · {money}"
        )
    return "\n".join(neutral(line) for line in lines)
