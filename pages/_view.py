"""The view a page shows: the sidebar's filters, the page's opening, and the periods around the view."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import streamlit as st

from analytics.filters import Filters
from gpuledger.reports.content import last_full_week, previous_period, week_range
from pages import _data
from pages._scope import db, scoped, viewer

OPENED = "_gpuledger_opened"  # session key: the default period was put in the URL once
ASKED = "_gpuledger_asked"  # session key: the URL's team/cluster values the sidebar could not offer
BOUND = (("team", "teams"), ("cluster", "clusters"))  # the sidebar's filters bound to the URL, as in Filters


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
    warn_unknown_names(filters)
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
    users = tuple(sorted(dict.fromkeys(st.query_params.get_all("user"))))  # no widget: the URL alone
    return scoped(Filters(since=since, until=until, teams=teams, clusters=clusters, users=users))


def ledger_caption() -> str:
    """The sidebar's ledger line; a lead sees the file's name only (the fleet's totals are not theirs)."""
    name = f"Ledger `{os.path.basename(db())}`"
    scope = viewer()
    if scope is not None and not scope.admin:
        return f"{name}."
    jobs_n, samples, ingests = _data.ledger_counts()
    return f"{name}: {_count(jobs_n, 'job')}, {_count(samples, 'sample')} from {_count(ingests, 'ingest')}."


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")  # 1 ingest, 3,555 jobs


def remember_asked_names() -> None:
    """Keep the URL's team and cluster values that the sidebar cannot offer, before it drops them.

    app.py calls this before drawing the sidebar: Streamlit's URL-bound multiselects remove a value that is
    not among their options from the URL on the first run (``?team=nlp`` on a ledger without nlp), and the
    page would then show the whole fleet as if it were nlp's. :func:`warn_unknown_names` says so instead.
    The values stay remembered while the sidebar keeps the selection it had then."""
    if not any(k in st.query_params for k, _ in BOUND):
        return
    choices = _data.filter_choices()
    offered = {"team": set(choices.teams), "cluster": set(choices.clusters)}
    dropped = {
        k: tuple(v for v in dict.fromkeys(st.query_params.get_all(k)) if v not in offered[k])
        for k, _ in BOUND
    }
    if any(dropped.values()):
        kept = {k: tuple(sorted(v for v in st.query_params.get_all(k) if v in offered[k])) for k, _ in BOUND}
        st.session_state[ASKED] = {"dropped": dropped, "kept": kept}


def unknown_names(filters: Filters) -> list[str]:
    """What the view names that the ledger does not hold, each in a sentence with the names the viewer can
    choose: the URL's team and cluster values the sidebar dropped, and the ``?user=`` values
    (analytics.filters.unknown_names). For a lead, a name outside their teams (another team, a user or
    cluster only other teams' jobs have) is answered exactly as a name the ledger lacks, with only the names
    of their own teams listed: what they are told never says what exists elsewhere (issue 43)."""
    pending = st.session_state.get(ASKED)
    dropped: dict[str, tuple[str, ...]] = {"team": (), "cluster": ()}
    if pending is not None:
        now = {k: tuple(sorted(st.session_state.get(k) or ())) for k, _ in BOUND}
        if now != pending["kept"]:  # the sidebar's selection changed since: that is the view asked for now
            del st.session_state[ASKED]
        else:
            dropped = pending["dropped"]
    if not (any(dropped.values()) or filters.users):
        return []
    # a lead: a name outside their teams is answered exactly as one the ledger lacks, listing only theirs
    return [
        u.message for u in _data.unknown_names(dropped["team"], dropped["cluster"], filters.users, _within())
    ]


def _within() -> tuple[str, ...] | None:
    """The viewer's teams when they are a lead (the scope every name is checked in); None for an admin."""
    scope = viewer()
    return None if scope is None or scope.admin else scope.teams


def warn_unknown_names(filters: Filters) -> None:
    """A view that names a team, cluster or user the ledger does not hold selects nothing: say which, with
    the names that exist, and stop (the CLI exits 2 on the same view) instead of showing another view's
    figures. A button clears the unknown names and shows the view without them."""
    unknown = unknown_names(filters)
    if not unknown:
        return
    lines = "\n".join(f"- {_md(u)}" for u in unknown)
    st.warning(
        f"This link asks for names the ledger does not have, so nothing would match:\n\n{lines}\n\n"
        "Choose from the sidebar, or show the view without them.",
        icon=":material/warning:",
    )
    if st.button("Show the view without them", icon=":material/filter_alt_off:", key="drop_unknown"):
        st.session_state.pop(ASKED, None)
        if filters.users:
            gone = {u.value for u in _data.unknown_names((), (), filters.users, _within())}
            if keep := [v for v in filters.users if v not in gone]:
                st.query_params["user"] = keep
            else:
                del st.query_params["user"]
        st.rerun()
    st.stop()


def _md(text: str) -> str:
    from pages._ui import md

    return md(text)


def describe_filters(filters: Filters) -> str:
    """The view in words, for ``st.caption`` (team and cluster names escaped: they are user data)."""
    from pages._ui import md

    parts = [
        f"{filters.since or 'start'} – {filters.until or 'latest'} (UTC)",
        "clusters: " + (", ".join(md(c) for c in filters.clusters) or "all"),
        "teams: " + (", ".join(md(t) for t in filters.teams) or "all"),
    ]
    if filters.users:
        parts.append("users: " + ", ".join(md(u) for u in filters.users))
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


def default_week() -> tuple[str, dt.date, dt.date] | None:
    """The period every page opens on: the last complete ISO week of the ledger's data (the weekly report's
    default week, gpuledger.reports.content.last_full_week) as (name, Monday, Sunday); None when no
    complete week holds data (a ledger whose data all lie in the week still in progress)."""
    as_of = _data.as_of()
    first = _data.filter_choices().first_day
    if as_of is None or first is None:
        return None
    week = last_full_week(dt.datetime.fromisoformat(as_of))
    since, until = week_range(week)
    if until < first:
        return None
    return week, since, until


def open_on_default_period() -> None:
    """Once a session, before the sidebar's URL-bound date fields are drawn: a URL without dates gets the
    default week's (:func:`default_week`), so every page opens on the same period, shows it in its date
    fields, and the URL carries it to the next page and into a copied link. Clearing the fields afterwards
    shows all the data (the session does not put the week back)."""
    if st.session_state.get(OPENED):
        return
    st.session_state[OPENED] = True
    if "since" in st.query_params or "until" in st.query_params or not _data.has_data():
        return
    found = default_week()
    if found is not None:
        _, since, until = found
        st.session_state["since"], st.session_state["until"] = since, until  # the date fields
        st.query_params["since"], st.query_params["until"] = since.isoformat(), until.isoformat()  # the link


def opening_period(filters: Filters) -> tuple[Filters, str | None]:
    """The period the Overview opens on: the sidebar's dates when any is chosen (or the URL's), else the last
    complete ISO week of the ledger's data (gpuledger.reports.content.last_full_week, the weekly report's
    default week), returned with its name (``2026-W47``). A ledger whose data all lie in the week still in
    progress has no complete week: then its whole span (name None)."""
    if filters.since or filters.until:
        found = default_week()
        if found is not None and (filters.since, filters.until) == found[1:]:
            return filters, found[0]  # the default week, from the URL: still named
        return filters, None
    found = default_week()
    if found is None:  # no complete week holds data
        return filters, None
    week, since, until = found
    return Filters(since, until, filters.teams, filters.clusters, filters.users), week


def week_name(day: dt.date) -> str:
    """``2026-W47`` for the ISO week holding ``day``."""
    y, w, _ = day.isocalendar()
    return f"{y}-W{w:02d}"
