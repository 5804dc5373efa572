"""Who is looking: the ledger and settings in force, the signed-in person, and the view narrowed to their teams.

pages/_data.py passes every Filters argument of a cached data function through :func:`scoped`, so what a
page asks for is what its viewer may see (gpuledger/ledger/access.py holds the rule).
"""

from __future__ import annotations

import streamlit as st

from analytics.filters import Filters
from gpuledger.ledger.access import Scope, may_change_settings, resolve_scope
from gpuledger.ledger.db import resolve_db
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.paths import choose_settings, user_config_dir
from gpuledger.ledger.settings import Settings, load_settings
from gpuledger.ledger.signouts import record_sign_out, signed_out


def db() -> str:
    """The ledger this server reads: ``$GPULEDGER_DB`` (set by ``gpuledger dashboard``) or the default."""
    return resolve_db(None)


def settings() -> Settings:
    """The user's settings; a broken settings file stops the page with the error sentence."""
    try:
        return load_settings(None)
    except LedgerError as exc:
        st.error(f"{exc}\n\nFix the settings file (docs/settings.md), then reload this page.")
        st.stop()
        raise  # not reached


def viewer() -> Scope | None:
    """None when sign-in is off (everyone who reaches the server sees the fleet). Otherwise the signed-in
    person's Scope from their identity claims (``st.user``) and ``[access]``; a visitor who has not signed
    in gets a Scope that sees nothing."""
    s = settings()
    if s.auth is None:
        return None
    if not signed_in():
        return Scope(who="")
    return resolve_scope(s.access, st.user.to_dict())


def signed_in() -> bool:
    """Whether the browser holds a sign-in this server has not seen signed out (a copied cookie of an
    ended sign-in is no sign-in: gpuledger/ledger/signouts.py)."""
    user = st.user.to_dict()
    return bool(user.get("is_logged_in")) and not signed_out(user)


def sign_out() -> None:
    """End the sign-in on the server (the cookie it rode on is refused from now on), then in the browser."""
    user = st.user.to_dict()
    if user.get("is_logged_in"):
        record_sign_out(user)
    st.logout()


def may_write() -> bool:
    """Whether the viewer may change the server's settings (gpuledger.ledger.access.may_change_settings)."""
    return may_change_settings(viewer())


def scoped(filters: Filters) -> Filters:
    """``filters`` narrowed to what the viewer may see: an admin (or anyone, without sign-in) keeps them;
    a lead's team filter becomes the chosen teams among theirs, or all of theirs when none is chosen (never
    "all teams"); someone who may see nothing is stopped here."""
    seen = visible_teams()
    if seen is None:
        return filters
    teams = tuple(t for t in filters.teams if t in seen) or seen
    if teams == filters.teams:
        return filters
    return Filters(filters.since, filters.until, teams, filters.clusters, filters.users)


def visible_teams() -> tuple[str, ...] | None:
    """The teams whose records the viewer may see; None: every team (an admin, or anyone without sign-in).
    Someone who may see nothing is stopped here."""
    scope = viewer()
    if scope is None or scope.admin:
        return None
    if not scope.sees_anything:
        stop_unscoped()
    return scope.teams


def stop_unscoped() -> None:
    """Someone signed in whom ``[access]`` gives no team: say so and stop the page."""
    st.warning("Sign in with an account that is given a team to see this page.", icon=":material/lock:")
    st.stop()


def settings_file() -> tuple[str, str]:
    """The settings file in use and where that choice came from (gpuledger.ledger.paths.choose_settings);
    with none, the user's ``~/.config/gpuledger/settings.toml`` (created on the first edit)."""
    chosen = choose_settings(None)
    if chosen.path is None:
        return str(user_config_dir() / "settings.toml"), "none yet: the first edit creates the user's file"
    return chosen.path, chosen.origin
