"""Waste: the spend split into productive, idle, under-used, failed, unallocated and unmeasured, by team and
week, and the jobs that wasted the most dollars (analytics/waste.py; definitions in docs/metrics.md)."""

from __future__ import annotations

import plotly.express as px
import polars as pl
import streamlit as st

from pages import _data, _ui
from pages._ui import KPI_WIDTHS, column_config, no_rows, not_ready, num, usd

PART_LABELS = {
    "idle_allocated_usd": "idle (allocated)",
    "underused_usd": "under-used",
    "failed_usd": "failed runs",
    "unallocated_usd": "unallocated capacity",
    "unmeasured_usd": "no telemetry",
    "productive_usd": "productive",
}
COLORS = {
    "idle (allocated)": "#d62728",
    "under-used": "#ff7f0e",
    "failed runs": "#8c564b",
    "unallocated capacity": "#9467bd",
    "no telemetry": "#c7c7c7",
    "productive": "#2ca02c",
}

TOP_COLUMNS = [
    "job_id",
    "team",
    "user_name",
    "name",
    "kind",
    "state",
    "gpu_model",
    "gpu_count",
    "gpu_hours",
    "cost_usd",
    "waste_usd",
    "idle_allocated_usd",
    "underused_usd",
    "failed_usd",
    "failed_lost_usd",
]

filters = _data.open_page("Waste")
try:
    s = _data.summary(filters)
    by_team = _data.waste_by(filters, "team")
    weekly = _data.waste_by_team_week(filters)
    top = _data.top_wasted_jobs(filters)
except _data.NotReady as exc:
    not_ready(exc)

w = s["waste"]
cols = st.columns(KPI_WIDTHS)
cols[0].metric("Waste $", usd(s["waste_usd"]), help="idle + under-used + failed + unallocated")
cols[1].metric("Idle (allocated)", usd(w["idle_allocated_usd"]), help=f"{num(s['idle_gpu_hours'])} GPU-hours")
cols[2].metric("Under-used", usd(w["underused_usd"]))
cols[3].metric("Failed runs", usd(w["failed_usd"]))
cols[4].metric(
    "Unallocated capacity",
    usd(w["unallocated_usd"]),
    help="Declared capacity (e.g. on-prem GPUs paid for used or not) that no job held, at its price",
)
st.caption(
    f"Of {usd(s['spend_usd'])} spend: productive {usd(w['productive_usd'])}, no telemetry "
    f"{usd(w['unmeasured_usd'])} (held time with no utilization reading: unknown, neither idle nor busy)."
)


def _long(df: pl.DataFrame, key: str) -> pl.DataFrame:
    parts = list(PART_LABELS)
    return (
        df.select(key, *parts)
        .unpivot(index=key, on=parts, variable_name="part", value_name="usd")
        .with_columns(pl.col("part").replace_strict(PART_LABELS))
    )


left, right = st.columns(2)
with left:
    st.subheader("By team")
    if by_team.is_empty():
        no_rows("No jobs in this view.")
    else:
        fig = px.bar(
            _long(by_team, "key"),
            y="key",
            x="usd",
            color="part",
            orientation="h",
            color_discrete_map=COLORS,
            labels={"key": "team", "usd": "cost ($)", "part": "part"},
        )
        fig.update_xaxes(tickprefix="$")
        fig.update_traces(hovertemplate="%{y} · %{fullData.name}: $%{x:,.2f}<extra></extra>")
        fig.update_layout(
            barmode="stack", height=360, margin={"t": 10, "b": 10}, yaxis={"autorange": "reversed"}
        )
        _ui.plotly_chart(fig, key="waste_team")
with right:
    st.subheader("By week")
    if weekly.is_empty():
        no_rows("No jobs in this view.")
    else:
        fig = px.bar(
            _long(weekly, "week"),
            x="week",
            y="usd",
            color="part",
            color_discrete_map=COLORS,
            labels={"usd": "cost ($)", "week": "ISO week (UTC)", "part": "part"},
        )
        fig.update_yaxes(tickprefix="$")
        fig.update_traces(hovertemplate="%{x} · %{fullData.name}: $%{y:,.2f}<extra></extra>")
        fig.update_layout(barmode="stack", height=360, margin={"t": 10, "b": 10})
        _ui.plotly_chart(fig, key="waste_week")

st.subheader("Jobs that wasted the most")
if top.is_empty():
    no_rows("No job in this view wasted money.")
else:
    st.dataframe(
        top.select(TOP_COLUMNS),
        hide_index=True,
        column_config=column_config(TOP_COLUMNS),
    )
