"""Reports: the weekly cost report (gpuledger/reports/weekly.py), as a file to download and mail on."""

from __future__ import annotations

import datetime as dt

import streamlit as st

from analytics.filters import Filters
from gpuledger.reports.weekly import last_full_week, week_range
from pages import _data
from pages._ui import code, md, not_ready

filters = _data.open_page("Weekly report", caption=False)
weeks = _data.weeks_of(Filters(teams=filters.teams, clusters=filters.clusters))
labels = [w for w, _ in weeks][::-1]
try:
    as_of = _data.summary(filters).get("as_of")
except _data.NotReady as exc:
    not_ready(exc)
default = last_full_week(dt.datetime.fromisoformat(as_of) if as_of else None)  # as `gpuledger report`
left, mid, right = st.columns([2, 1, 1])
week = left.selectbox(
    "ISO week (Monday to Sunday, UTC)",
    labels,
    index=labels.index(default) if default in labels else 0,
    key="report_week",
)
fmt = mid.radio(
    "Format",
    ["html", "md"],
    format_func={"html": "HTML", "md": "Markdown"}.get,
    key="report_fmt",
    horizontal=True,
)
since, until = week_range(week)
scope = Filters(since=since, until=until, teams=filters.teams, clusters=filters.clusters)
command = (
    f"gpuledger report --week {week}"
    + "".join(f" --team {t}" for t in filters.teams)
    + "".join(f" --cluster {c}" for c in filters.clusters)
    + f" --out report-{week}.{fmt}"
)
st.caption(
    f"Teams: {', '.join(md(t) for t in filters.teams) or 'all'} · "
    f"clusters: {', '.join(md(c) for c in filters.clusters) or 'all'} "
    f"(from the sidebar). The same report from the command line: {code(command)}"
)
try:
    files = _data.report(scope)
except _data.NotReady as exc:
    not_ready(exc)
text = files[fmt]
preview = files["md"].replace("\n## ", "\n#### ").replace("# ", "### ", 1)  # smaller headings on the page

right.download_button(
    "Download",
    data=text.encode("utf-8"),
    file_name=f"gpuledger-report-{week}.{fmt}",
    mime="text/html" if fmt == "html" else "text/markdown",
    icon=":material/download:",
    key="report_download",
)
with st.container(border=True):
    st.markdown(preview)
