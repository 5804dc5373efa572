"""The gpuledger dashboard: a router and the shared sidebar filters, nothing else.

Run with ``gpuledger dashboard`` (or ``streamlit run app.py`` with ``GPULEDGER_DB`` set). Each page is one
file under pages/; every number a page shows comes from the same analytics function the CLI's ``--json``
uses, through the cached calls in pages/_data.py. The filters (date range, cluster, team) are bound to the
URL query string, so a copied link reproduces the view: ``?since=2026-11-01&until=2026-11-07&team=nlp``.
"""

from __future__ import annotations

import streamlit as st

from pages import _data, _ui

st.set_page_config(page_title="gpuledger", page_icon=":material/paid:", layout="wide")

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
    st.Page("pages/training.py", title="Training", icon=":material/model_training:", url_path="training"),
    st.Page("pages/upload.py", title="Upload", icon=":material/upload_file:", url_path="upload"),
    st.Page("pages/reports.py", title="Reports", icon=":material/summarize:", url_path="reports"),
]

page = st.navigation(PAGES)

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
    st.multiselect("Team", choices.teams, key="team", bind="query-params", placeholder="all teams")
    st.caption(_data.ledger_caption())

with _ui.routed():
    page.run()
