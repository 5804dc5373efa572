"""The Recommendations page's items across weeks (gpuledger/items/): each problem with its status, owner, weeks
open, predicted and measured $/week, and a form to record a change. Who may change what is
gpuledger/items/store.py ``may_change``; :func:`apply` asks it again when the form is submitted (``store.change``
raises ``NotAllowed``), so a lead cannot change another team's item from a drawn or forged form."""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl
import streamlit as st

from gpuledger.items import store
from gpuledger.ledger.access import Scope
from gpuledger.ledger.db import writer
from pages import _data, _scope
from pages._ui import md, no_rows, usd

STATUS_CHOICES = {
    "done": "Done",
    "acknowledged": "Acknowledged",
    "dismissed": "Dismissed",
    "snoozed": "Snoozed",
    "open": "Open",
}


def teams_seen() -> tuple[str, ...] | None:
    """The teams whose items the viewer sees (None: all; an admin, or anyone without sign-in)."""
    return _scope.visible_teams()


def overview_line() -> None:
    """The Overview's actions across weeks: the week's groups and the quarter's measured savings."""
    its, week = _data.action_items(teams_seen())
    if week is None or not its:
        return
    still = week["still_open"]
    st.caption(
        f"Actions in {week['week']}: {len(week['new'])} new, {len(still)} still open "
        f"({usd(sum(it['cost_since_first_seen_usd'] for it in still))} of waste since first seen), "
        f"{len(week['done'])} done. Measured savings in {week['quarter']}: {usd(week['quarter_measured_usd'])} "
        f"(done items save {usd(week['measured_usd_per_week'])}/week, measured before and after)."
    )


def changeable(its: list[dict[str, Any]], scope: Scope | None) -> list[dict[str, Any]]:
    """The items the form offers: those ``scope`` may change."""
    return [it for it in its if store.may_change(scope, it["team"])]


def apply(item: dict[str, Any], status: str, *, until: dt.date | None, note: str, owner: str) -> str | None:
    """Record the change as the signed-in person; the error sentence when it is refused or cannot be made."""
    scope = _scope.viewer()
    try:
        with writer(_scope.db()) as con:
            con.execute("BEGIN TRANSACTION")
            try:
                store.change(
                    con,
                    item,
                    status=status,
                    by=(scope.who if scope else "dashboard"),
                    scope=scope,
                    until=until if status == "snoozed" else None,
                    note=note,
                    owner=owner,
                )
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
    except store.ItemError as exc:
        return str(exc)
    return None


def _measured(it: dict[str, Any]) -> str:
    if it["measured_usd_per_week"] is None:
        return "n/a"
    text = f"{usd(it['measured_usd_per_week'])}/week ({it['measured_weeks']} wk)"
    return text + (" · did not hold" if it["did_not_hold"] else "")


def section() -> None:
    """The items, the week's groups and the change form."""
    st.subheader("Actions across weeks")
    its, week = _data.action_items(teams_seen())
    if not its:
        no_rows("No action listed in a complete week yet: items start with the first complete week of data.")
        return
    if week is not None:
        st.caption(
            f"Week {week['week']}: {len(week['new'])} new, {len(week['still_open'])} still open, "
            f"{len(week['done'])} done. Measured savings in {week['quarter']} so far: "
            f"{usd(week['quarter_measured_usd'])}."
        )
    table = pl.DataFrame(
        {
            "Id": [it["id"] for it in its],
            "Status": [it["status"] + (" (reopened)" if it["reopened"] else "") for it in its],
            "Action": [it["kind_label"] for it in its],
            "Target": [it["target"] for it in its],
            "Team": [it["team"] or "operators" for it in its],
            "Owner": [it["owner"] or "" for it in its],
            "First seen": [it["first_seen"] for it in its],
            "Weeks open": [it["weeks_open"] for it in its],
            "Predicted": [
                f"{usd(it['predicted_usd_per_week'])}/week"
                if it["predicted_usd_per_week"] is not None
                else "one-off"
                for it in its
            ],
            "Measured": [_measured(it) for it in its],
        }
    )
    st.dataframe(table, hide_index=True, key="items_table")
    scope = _scope.viewer()
    offered = changeable(its, scope)
    if not offered:
        st.caption("You may view these items; only their team's lead or an admin may change them.")
        return
    by_id = {it["id"]: it for it in offered}
    with st.form("item_change"):
        picked = st.selectbox(
            "Item",
            list(by_id),
            format_func=lambda i: f"{i} · {by_id[i]['kind_label']} · {by_id[i]['target']}",
            key="item_pick",
        )
        status = st.selectbox(
            "Status", list(STATUS_CHOICES), format_func=STATUS_CHOICES.get, key="item_status"
        )
        until = st.date_input("Snoozed until", value=None, key="item_until")
        note = st.text_input("Note (a dismissal's reason)", key="item_note")
        owner = st.text_input("Owner", key="item_owner")
        submitted = st.form_submit_button("Record change")
    if submitted and picked is not None:
        error = apply(by_id[picked], status, until=until, note=note, owner=owner)
        if error:
            st.error(md(error))
        else:
            st.success(f"Recorded: {md(picked)} is now {md(status)}.")
