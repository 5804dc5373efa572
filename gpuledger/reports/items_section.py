"""The report's "Actions: new, still open, done" section (gpuledger/items/tracker.py ``groups``): what the
week's list added, what stays open (weeks open, the waste since first seen), what was done, each done item's
measured $/week beside the predicted one, and the quarter's measured savings.

The week is the view's last (the Monday of ``until``; the last complete week scanned when the view has no
end); a team's report (``--per-team``, a team's mail) holds only that team's items. The weeks are scanned
once per ledger state and settings (:func:`_scan`): a per-team run asks for them once per team.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import duckdb

from analytics.filters import Filters, horizon
from gpuledger.items import sidecar, tracker
from gpuledger.items.scan import WeekScan, monday, scan
from gpuledger.ledger.settings import Settings

_CACHE: dict[tuple[Any, ...], WeekScan] = {}


def _scan(con: duckdb.DuckDBPyConnection, settings: Settings) -> WeekScan:
    key = (id(con), sidecar.state_key(con, settings.fingerprint(), horizon(con)))
    if key not in _CACHE:
        _CACHE.clear()  # one ledger state at a time
        _CACHE[key] = scan(con, settings=settings)
    return _CACHE[key]


def items_week(
    con: duckdb.DuckDBPyConnection, *, filters: Filters, settings: Settings
) -> dict[str, Any] | None:
    """The week's groups for the view (module docstring); None when no complete week was scanned."""
    sc = _scan(con, settings)
    if not sc.weeks:
        return None
    week = monday(filters.until) if filters.until else sc.weeks[-1]
    if week not in sc.weeks:
        return None
    end = dt.datetime.combine(week, dt.time()) + dt.timedelta(days=7)
    its = tracker.items(con, week_scan=sc, as_of=end)
    if filters.teams:
        its = [it for it in its if it["team"] in filters.teams]
    return tracker.groups(its, week, sc)


def _money(usd: float | None) -> str:
    return "n/a" if usd is None else f"${usd:,.2f}"


def lines(g: dict[str, Any]) -> dict[str, list[str]]:
    """Each group as sentences (the HTML, Markdown and text renderers escape them)."""
    new = [
        f"{it['kind_label']} · {it['target']} · team {it['team'] or 'operators'} · "
        f"predicted {_money(it['predicted_usd_per_week'])}/week (item {it['id']})"
        for it in g["new"]
    ]
    still = [
        f"{it['kind_label']} · {it['target']} · {it['status']}"
        + (" (reopened: the waste came back)" if it["reopened"] else "")
        + f" · open {it['weeks_open']} week(s), {_money(it['cost_since_first_seen_usd'])} since first seen "
        f"{it['first_seen']} · owner {it['owner'] or 'n/a'} (item {it['id']})"
        for it in g["still_open"]
    ]
    done = [
        f"{it['kind_label']} · {it['target']} · done {it['done_at'][:10]} · predicted "
        f"{_money(it['predicted_usd_per_week'])}/week (item {it['id']})"
        for it in g["done"]
    ]
    measured = [
        f"{it['kind_label']} · {it['target']} · measured {_money(it['measured_usd_per_week'])}/week over "
        f"{it['measured_weeks']} week(s) after against {it['baseline_weeks']} before; predicted "
        f"{_money(it['predicted_usd_per_week'])}/week" + (" · did not hold" if it["did_not_hold"] else "")
        for it in g["measured"]
    ]
    return {"new": new, "still_open": still, "done": done, "measured": measured}
