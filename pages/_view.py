"""The view a page shows: the sidebar's filters, the page's opening, and the periods around the view."""

from __future__ import annotations

import datetime as dt
from typing import Any

import streamlit as st

from analytics.filters import Filters
from gpuledger.reports.content import previous_period
from pages import _data
from pages._scope import scoped


def open_page(title: str, *, caption: bool = True) -> Filters:
    """How every ledger page starts: the router, the title, an empty state with a next step (then stop), and
    the view the sidebar filters chose, described under the title unless ``caption`` is False."""
    from pages import _ui

    _ui.require_router()
    st.title(title)
    if not _data.has_data():
        _ui.empty_state()
        st.stop()
    filters = current_filters()
    if caption:
        st.caption(describe_filters(filters))
    return filters


def current_filters() -> Filters:
    """The sidebar's filters (bound to the URL query string by app.py), narrowed to the viewer's teams."""
    state = st.session_state
    since, until = state.get("since"), state.get("until")
    if since and until and since > until:
        since, until = until, since
    teams = tuple(sorted(state.get("team") or ()))
    clusters = tuple(sorted(state.get("cluster") or ()))
    return scoped(Filters(since=since, until=until, teams=teams, clusters=clusters))


def describe_filters(filters: Filters) -> str:
    """The view in words, for ``st.caption`` (team and cluster names escaped: they are user data)."""
    from pages._ui import md

    parts = [
        f"{filters.since or 'start'} – {filters.until or 'latest'} (UTC)",
        "clusters: " + (", ".join(md(c) for c in filters.clusters) or "all"),
        "teams: " + (", ".join(md(t) for t in filters.teams) or "all"),
    ]
    return " · ".join(parts)


def weeks_of(filters: Filters) -> list[tuple[str, Filters]]:
    """The ISO weeks of the view, each as (``YYYY-Www``, the view's filters narrowed to that week)."""
    filters = scoped(filters)
    c = _data.filter_choices()
    first, last = filters.since or c.first_day, filters.until or c.last_day
    if first is None or last is None:
        return []
    out = []
    monday = first - dt.timedelta(days=first.isoweekday() - 1)
    while monday <= last:
        y, w, _ = monday.isocalendar()
        since, until = max(first, monday), min(last, monday + dt.timedelta(days=6))
        out.append((f"{y}-W{w:02d}", Filters(since, until, filters.teams, filters.clusters, filters.users)))
        monday += dt.timedelta(days=7)
    return out


def view_period(filters: Filters) -> Filters:
    """The view with its open ends closed at the ledger's first/last day (the period the figures cover)."""
    c = _data.filter_choices()
    since, until = filters.since or c.first_day, filters.until or c.last_day
    return Filters(since, until, filters.teams, filters.clusters, filters.users)


def previous_summary(filters: Filters) -> tuple[Filters | None, dict[str, Any] | None]:
    """The period of equal length just before the view (gpuledger.reports.content.previous_period, what the
    report's change column uses) and ``summary --json`` for it; (None, None) when the view has no dates."""
    prev = previous_period(view_period(filters))
    if prev is None:
        return None, None
    return prev, _data.summary(prev)
