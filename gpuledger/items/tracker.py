"""The items as of a time: status from the history, the reopens the waste calls for, the measured saving, and
the week's groups (docs/recommendations.md, "Items across weeks").

- an item exists from the first week its problem was **listed** (gpuledger/items/scan.py) or it was
  recorded; ``first_seen`` is that week's Monday;
- its **status** is the latest change that took effect by ``as_of`` (none: ``open``); a snooze whose last
  day has passed is ``open`` again; a dismissed item stays dismissed whatever later weeks list;
- a **done** item **reopens** at the end of the first week after the change whose targeted waste came back
  (gpuledger/items/measure.py ``returned``): a change by ``gpuledger`` with the week and the dollars in its
  note. On a writable connection :func:`record` stores it in the history; on a read-only one it is worked
  out the same way, so every reader agrees;
- the week's groups (:func:`groups`): **new** (first listed that week and not dismissed), **still open**
  (open or acknowledged, first listed before; with the weeks open and the targeted waste since first seen),
  **done** (done during the week), and the quarter's measured savings.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import duckdb

from analytics.money import cents
from analytics.recommend import KIND_LABELS
from gpuledger.items import store
from gpuledger.items.key import ItemKey, item_id
from gpuledger.items.measure import WEEK, Measurement, measure
from gpuledger.items.scan import Listed, WeekScan, scan
from gpuledger.items.store import SYSTEM, Change
from gpuledger.ledger.settings import Settings

OPEN = ("open", "acknowledged")


def iso_week(monday: dt.date) -> str:
    year, week, _ = monday.isocalendar()
    return f"{year}-W{week:02d}"


def _start(week: dt.date) -> dt.datetime:
    return dt.datetime.combine(week, dt.time())


@dataclass(frozen=True)
class Timeline:
    """An item's changes with the reopens the waste calls for, and its latest done period's measurement."""

    changes: tuple[Change, ...]
    derived: tuple[Change, ...]  # the reopens not stored yet
    measurement: Measurement | None
    done_at: dt.datetime | None


def timeline(
    sc: WeekScan,
    key: str,
    stored: list[Change],
    first_seen: dt.date,
    as_of: dt.datetime,
    predicted: float | None,
    changes_by: dt.datetime | None = None,
) -> Timeline:
    """Walk ``stored`` (in effect order) up to ``changes_by`` (default ``as_of``) over the weeks ending by
    ``as_of``; each done period ends at the next change, or at a reopen at the end of the first week its
    waste came back."""
    weeks = [w for w in sc.weeks if _start(w) + WEEK <= as_of]
    changes = [c for c in stored if c.at <= (changes_by or as_of)]
    derived: list[Change] = []
    last: Measurement | None = None
    done_at: dt.datetime | None = None
    status, since = "open", first_seen  # the baseline starts where the problem was last not done

    def waste(w: dt.date) -> float:
        return sc.waste_of(key, w)

    i = 0
    while i < len(changes):
        c = changes[i]
        if c.status == "done" and status != "done":  # a done period starts (a second "done" continues it)
            j = i + 1
            while j < len(changes) and changes[j].status == "done":
                j += 1
            nxt = changes[j].at if j < len(changes) else None
            kw = {"first_seen": since, "done_at": c.at, "predicted_usd_per_week": predicted}
            m = measure(weeks, waste, until=nxt, **kw)
            back = m.returned_week
            if back is not None and (nxt is None or _start(back) + WEEK < nxt):
                base = m.before_usd_per_week if m.before_usd_per_week is not None else predicted
                note = (
                    f"reopened: the waste came back in {iso_week(back)} (${waste(back):,.2f}"
                    + (f" against ${base:,.2f}/week before the change" if base is not None else "")
                    + ")"
                )
                reopen = Change(c.item_id, _start(back) + WEEK, "open", SYSTEM, note)
                derived.append(reopen)
                # in effect order: after the changes up to it (a second "done" before it continues the period)
                at = next((k for k in range(i + 1, len(changes)) if changes[k].at > reopen.at), len(changes))
                changes.insert(at, reopen)
                m = measure(weeks, waste, until=reopen.at, **kw)
            last, done_at = m, c.at
        elif c.status != "done" and status == "done":  # the period ended: a later baseline starts after it
            day = c.at.date()
            since = (
                day
                if c.at == _start(day) and day.isoweekday() == 1
                else day - dt.timedelta(days=day.weekday()) + WEEK
            )
        status = c.status
        i += 1
    return Timeline(tuple(changes), tuple(derived), last, done_at)


def _status(changes: tuple[Change, ...], as_of: dt.datetime) -> tuple[str, dt.date | None, str | None]:
    """(status, snoozed until, owner) from the changes in effect by ``as_of``."""
    status, until, owner = "open", None, None
    for c in changes:
        status, until = c.status, c.until
        owner = c.owner or owner
    if status == "snoozed" and until is not None and until < as_of.date():
        status, until = "open", None
    return status, until, owner


def items(
    con: duckdb.DuckDBPyConnection,
    *,
    settings: Settings | None = None,
    as_of: dt.datetime | None = None,
    week_scan: WeekScan | None = None,
) -> list[dict[str, Any]]:
    """Every item as of ``as_of``, as the ``actions --json`` list: the largest predicted $/week first.

    ``as_of`` None: now. The weeks are the complete weeks scanned, and every change recorded up to now is in
    effect (a change made today on a ledger whose data end last month counts). A past ``as_of`` (a report's
    week end) takes the weeks and the changes up to then."""
    sc = week_scan or scan(con, settings=settings)
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    changes_by = as_of or now
    if as_of is None:
        as_of = _start(sc.weeks[-1]) + WEEK if sc.weeks else now
    changes_by = max(changes_by, as_of)
    known = store.recorded(con)
    hist = store.history(con)
    seen: dict[str, list[tuple[dt.date, Listed]]] = {}
    for w in sc.weeks:
        if _start(w) >= as_of:
            continue
        for k, row in sc.listed[w].items():
            seen.setdefault(k, []).append((w, row))
    keys = {k: ItemKey(*k.split(":", 2)) for k in seen}
    for rec in known.values():
        keys.setdefault(rec["item_key"], ItemKey(rec["kind"], rec["target_type"], rec["target"]))
    out = []
    for k, ik in keys.items():
        iid = item_id(k)
        weeks_listed = seen.get(k, [])
        rec = known.get(iid)
        firsts = [w for w, _ in weeks_listed[:1]] + ([rec["first_seen"]] if rec else [])
        first_seen = min(firsts)
        latest = weeks_listed[-1][1] if weeks_listed else None
        stored = hist.get(iid, [])
        done_changes = [c for c in stored if c.status == "done" and c.at <= changes_by]
        # the prediction the change was made on: the last week listed before the latest done, else the latest
        cut = done_changes[-1].at if done_changes else changes_by
        before_cut = [row for w, row in weeks_listed if _start(w) < cut] or [row for _, row in weeks_listed]
        predicted = before_cut[-1].usd_per_week if before_cut else None
        tl = timeline(sc, k, stored, first_seen, as_of, predicted, changes_by)
        status, until, owner = _status(tl.changes, changes_by)
        m = tl.measurement
        team = latest.team if latest else (rec["team"] if rec else None)
        open_weeks = [w for w in sc.weeks if first_seen <= w and _start(w) + WEEK <= as_of]
        out.append(
            {
                "id": iid,
                "key": k,
                "kind": ik.kind,
                "kind_label": KIND_LABELS.get(ik.kind, ik.kind),
                "target_type": ik.target_type,
                "target": ik.target,
                "team": team,
                "owner": owner or (latest.owner if latest else None) or team,
                "status": status,
                "snoozed_until": until.isoformat() if until else None,
                "reopened": bool(tl.changes) and tl.changes[-1].by == SYSTEM and status == "open",
                "history": [c.row() for c in tl.changes],
                "first_seen": first_seen.isoformat(),
                "last_seen": weeks_listed[-1][0].isoformat() if weeks_listed else None,
                "weeks_listed": len(weeks_listed),
                "weeks_open": len(open_weeks),
                "cost_since_first_seen_usd": cents(sum(sc.waste_of(k, w) for w in open_weeks)),
                "action": latest.action if latest else None,
                "evidence": latest.evidence if latest else None,
                "predicted_usd_per_week": cents(predicted),
                "done_at": tl.done_at.isoformat(sep=" ") if tl.done_at else None,
                "measured_usd_per_week": cents(m.usd_per_week) if m else None,
                "measured_weeks": len(m.after) if m and m.usd_per_week is not None else 0,
                "baseline_weeks": len(m.before) if m and m.usd_per_week is not None else 0,
                "before_usd_per_week": cents(m.before_usd_per_week) if m else None,
                "after_usd_per_week": cents(m.after_usd_per_week) if m else None,
                "held": m.held if m else None,
                "did_not_hold": bool(m and m.held is False),
                "_derived": tl.derived,
                "_measurement": m,
            }
        )
    out.sort(key=lambda it: (-(it["predicted_usd_per_week"] or 0.0), it["key"]))
    return out


def public(item: dict[str, Any]) -> dict[str, Any]:
    """An item without the private fields (``_derived``, ``_measurement``), for JSON."""
    return {k: v for k, v in item.items() if not k.startswith("_")}


def record(con: duckdb.DuckDBPyConnection, its: list[dict[str, Any]]) -> int:
    """On a writable connection: record the items and append the reopens worked out (returns how many)."""
    store.record_items(con, its)
    n = 0
    for it in its:
        for c in it["_derived"]:
            store.append(con, c)
            n += 1
    return n


def groups(its: list[dict[str, Any]], week: dt.date, week_scan: WeekScan) -> dict[str, Any]:
    """The week's groups (module docstring) for the week starting Monday ``week``; ``its`` as of its end.

    ``quarter_measured_usd``: dollars saved in the quarter of ``week`` up to its end, Σ over done items of
    (before mean − that week's waste) for their after weeks in it (gpuledger/items/measure.py)."""
    end = _start(week) + WEEK
    q0 = dt.date(week.year, 3 * ((week.month - 1) // 3) + 1, 1)
    new = [it for it in its if it["first_seen"] == week.isoformat() and it["status"] != "dismissed"]
    still = [it for it in its if it["status"] in OPEN and it["first_seen"] < week.isoformat()]
    done = [
        it
        for it in its
        if it["status"] == "done"
        and it["done_at"]
        and _start(week) <= dt.datetime.fromisoformat(it["done_at"]) < end
    ]
    quarter = 0.0
    for it in its:
        m: Measurement | None = it["_measurement"]
        if m is not None:
            quarter += m.saved_in(lambda w, k=it["key"]: week_scan.waste_of(k, w), q0, week + WEEK)
    measured = [it for it in its if it["measured_usd_per_week"] is not None]
    return {
        "week": iso_week(week),
        "new": [public(it) for it in new],
        "still_open": [public(it) for it in sorted(still, key=lambda it: -it["cost_since_first_seen_usd"])],
        "done": [public(it) for it in done],
        "reopened": [public(it) for it in its if it["reopened"]],
        "measured": [public(it) for it in measured],
        "quarter": f"{q0.year}-Q{(q0.month - 1) // 3 + 1}",
        "quarter_measured_usd": cents(quarter),
        "measured_usd_per_week": cents(
            sum(it["measured_usd_per_week"] for it in measured if it["status"] == "done")
        ),
    }
