"""The gpuledger dashboard: a router and the shared sidebar filters, nothing else.

Run with ``gpuledger dashboard`` (or ``streamlit run app.py`` with ``GPULEDGER_DB`` set). Each page is one
file under pages/; every number a page shows comes from the same analytics function the CLI's ``--json``
uses, through the cached calls in pages/_data.py. The filters (date range, cluster, team) are bound to the
URL query string, so a copied link reproduces the view: ``?since=2026-11-16&until=2026-11-22&team=vision``.

With ``[auth]`` in the settings, nothing but the sign-in page shows until someone signs in (``st.login``);
then pages/_data.py narrows every view to the teams ``[access]`` gives them (gpuledger/ledger/access.py).
An error inside a page shows one ``st.error`` with the next step; its traceback goes to the server log.
"""

from __future__ import annotations

import streamlit as st
from streamlit.errors import StreamlitAuthError, StreamlitMissingAuthlibError
from streamlit.logger import get_logger

from gpuledger.ledger.paths import shipped
from pages import _data, _scope, _ui, _view

LOG = get_logger("gpuledger.dashboard")

# The favicon is a file the package ships, served by this server: a ":material/…" icon or an emoji is
# fetched by the browser from a font CDN, and the dashboard makes no request off this machine (issue 43).
st.set_page_config(page_title="gpuledger", page_icon=str(shipped("data/favicon.png")), layout="wide")
# Safe under a bare `streamlit run app.py` too (gpuledger dashboard passes the same on its command line): no
# exception details in the browser, and no built-in table export, which writes formula cells as they are.
st.set_option("client.showErrorDetails", "none")
st.set_option("client.disableDataExport", True)


def sign_in_page() -> None:
    st.title("gpuledger")
    st.write("GPU spend, utilization and waste of your teams. Sign in to continue.")
    if st.button("Sign in", icon=":material/login:", type="primary", key="sign_in"):
        try:
            st.login()
        except StreamlitMissingAuthlibError:
            st.error(
                "Sign-in is configured, but this server lacks Authlib. Install it with "
                "`pip install 'streamlit[auth]'`, then restart `gpuledger dashboard`.",
                icon=":material/error:",
            )
        except StreamlitAuthError:
            LOG.exception("st.login failed")
            st.error(
                "Sign-in is configured in the settings, but this server was not given the provider's "
                "secrets. Start it with `gpuledger dashboard` (docs/settings.md, [auth]).",
                icon=":material/error:",
            )


def no_team_page() -> None:
    st.title("gpuledger")
    who = _scope.viewer()
    if who is not None and who.email_unverified is not None:
        st.error(
            f"Your sign-in provider did not confirm that {_ui.md(who.who)} is your email (its "
            f"email_verified claim is {_ui.md(who.email_unverified)}, not true), so gpuledger does not "
            "match it to a team. Verify the email with your provider and sign in again, or ask a gpuledger "
            "admin to map you by group (docs/settings.md, [access]).",
            icon=":material/gpp_bad:",
        )
    else:
        st.warning(
            f"You are signed in as {_ui.md(who.who if who else '')}, but no team is mapped to you. Ask a "
            "gpuledger admin to add you under [access] in the settings (docs/settings.md).",
            icon=":material/lock:",
        )
    if st.button("Sign out", icon=":material/logout:", key="sign_out"):
        _scope.sign_out()


viewer = _scope.viewer()
if viewer is not None and not viewer.sees_anything:  # sign-in on: only the sign-in (or no-team) page
    gate = no_team_page if _scope.signed_in() else sign_in_page
    st.navigation([st.Page(gate, title="Sign in", icon=":material/lock:")], position="hidden").run()
    st.stop()

PAGES = [
    st.Page("pages/overview.py", title="Overview", icon=":material/dashboard:", default=True),
    st.Page("pages/waste.py", title="Waste", icon=":material/delete:", url_path="waste"),
    st.Page("pages/jobs.py", title="Jobs", icon=":material/list:", url_path="jobs"),
    st.Page("pages/fleet.py", title="Fleet", icon=":material/grid_on:", url_path="fleet"),
    st.Page(
        "pages/recommendations.py",
        title="Recommendations",
        icon=":material/lightbulb:",
        url_path="recommendations",
    ),
    st.Page("pages/whatif.py", title="What if", icon=":material/science:", url_path="whatif"),
    st.Page("pages/budgets.py", title="Budgets", icon=":material/savings:", url_path="budgets"),
    st.Page("pages/training.py", title="Training", icon=":material/model_training:", url_path="training"),
    st.Page("pages/upload.py", title="Upload", icon=":material/upload_file:", url_path="upload"),
    st.Page("pages/reports.py", title="Reports", icon=":material/summarize:", url_path="reports"),
    st.Page("pages/guard.py", title="Guard", icon=":material/shield:", url_path="guard"),
    st.Page("pages/settings.py", title="Settings", icon=":material/settings:", url_path="settings"),
]

page = st.navigation(PAGES)


def sidebar() -> None:
    """The view's filters (bound to the URL), the ledger, and who is signed in."""
    with st.sidebar:
        st.markdown("**View**")
        choices = _data.filter_choices()
        st.date_input(
            "From (UTC day)",
            value=None,
            min_value=choices.first_day,
            max_value=choices.last_day,
            key="since",
            bind="query-params",
            format="YYYY-MM-DD",
        )
        st.date_input(
            "To (UTC day, included)",
            value=None,
            min_value=choices.first_day,
            max_value=choices.last_day,
            key="until",
            bind="query-params",
            format="YYYY-MM-DD",
        )
        st.multiselect(
            "Cluster", choices.clusters, key="cluster", bind="query-params", placeholder="all clusters"
        )
        everyone = "all teams" if viewer is None or viewer.admin else "all your teams"
        st.multiselect("Team", choices.teams, key="team", bind="query-params", placeholder=everyone)
        st.caption(_view.ledger_caption())
        if viewer is not None:
            seen = "every team" if viewer.admin else ", ".join(_ui.md(t) for t in viewer.teams)
            st.caption(f"Signed in as {_ui.md(viewer.who)}: you see {seen}.")
            if st.button("Sign out", icon=":material/logout:", key="sign_out"):
                _scope.sign_out()


def page_failed() -> None:
    """One sentence with the next step in the browser; the traceback to the server log."""
    LOG.exception("the %s page failed", page.title)
    st.error(
        "This page could not be drawn: an unexpected error, whose details are in the server log (the "
        "terminal running `gpuledger dashboard`). Reload the page; if it fails again, the same figures "
        "from the command line (`gpuledger summary`, `gpuledger jobs`) name the problem in one line.",
        icon=":material/error:",
    )


try:
    with _data.one_connection():
        _view.remember_asked_names()  # before the sidebar's URL-bound filters drop names they do not offer
        _view.open_on_default_period()  # every page opens on the last complete week, in its date fields
        sidebar()
        with _ui.routed():
            page.run()
except Exception:  # st.stop() and st.rerun() are BaseExceptions and pass through
    page_failed()
