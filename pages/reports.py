"""Reports: the weekly cost report (gpuledger/reports/) for a chosen week and team, previewed as the HTML a
recipient gets (its chart included), and downloadable in every format ``gpuledger report`` writes."""

from __future__ import annotations

import datetime as dt

import streamlit as st

from analytics.filters import Filters
from gpuledger.reports.fmt import demote_headings, slug
from gpuledger.reports.weekly import FORMATS, MIME, last_full_week, week_range
from pages import _data, _view
from pages._ui import code, md

FORMAT_NAMES = {
    "html": "HTML (mail)",
    "md": "Markdown",
    "csv": "CSV",
    "json": "JSON",
    "txt": "plain text",
}
ALL = "all teams"

filters = _view.open_page("Weekly report", caption=False)
weeks = _view.weeks_of(Filters(teams=filters.teams, clusters=filters.clusters))
labels = [w for w, _ in weeks][::-1]
as_of = _data.as_of()  # the data horizon alone: the view's summary is not shown here
default = last_full_week(dt.datetime.fromisoformat(as_of) if as_of else None)  # as `gpuledger report`
left, mid = st.columns([1, 1])
week = left.selectbox(
    "ISO week (Monday to Sunday, UTC)",
    labels,
    index=labels.index(default) if default in labels else 0,
    key="report_week",
)
teams = list(filters.teams) or list(_data.filter_choices().teams)
team = mid.selectbox("Team", [ALL, *teams] if len(teams) != 1 else teams, key="report_team")
chosen = filters.teams if team == ALL else (team,)
since, until = week_range(week)
scope = Filters(since=since, until=until, teams=chosen, clusters=filters.clusters)
command = (
    f"gpuledger report --week {week}"
    + "".join(f" --team {t}" for t in chosen)
    + "".join(f" --cluster {c}" for c in filters.clusters)
    + f" --out report-{week}.html"
)
st.caption(
    f"Teams: {', '.join(md(t) for t in chosen) or 'all'} · "
    f"clusters: {', '.join(md(c) for c in filters.clusters) or 'all'} (clusters from the sidebar). "
    f"The same report from the command line: {code(command)}; `--mail-to` mails it (docs/reports.md)."
)
files = _data.report(scope)

buttons = st.columns(len(FORMATS))
stem = f"gpuledger-report-{week}" + ("" if team == ALL else f"-{slug(team)}")
for col, fmt in zip(buttons, FORMATS, strict=True):
    col.download_button(
        FORMAT_NAMES.get(fmt, fmt),
        data=files[fmt].encode("utf-8"),
        file_name=f"{stem}.{fmt}",
        mime=MIME.get(fmt, "text/plain"),
        icon=":material/download:",
        key=f"report_download_{fmt}",
    )
st.caption("The preview below is the HTML report itself, as a mail client shows it.")
with st.container(border=True, key="report_preview"):
    # one level down: the page's own title stays its only top-level heading (the report's look the same)
    st.html(demote_headings(files["html"]))
