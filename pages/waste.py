"""Waste: the spend split into productive, idle, under-used, failed, unallocated and unmeasured, by team and
week, and the jobs that wasted the most dollars (analytics/waste.py; definitions in docs/metrics.md)."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
import streamlit as st

from gpuledger.ledger.palette import NOT_A_TEAM_LABELS, PART_COLOURS, SPEND_COLOUR
from gpuledger.ledger.palette import PART_LABELS as PALETTE_LABELS
from pages import _data, _ui, _view
from pages._ui import KPI_WIDTHS, no_rows, num, pct, usd

# the waterfall's order: spend, minus each waste part, minus no telemetry, leaves productive
WASTE_ORDER = [
    "idle_allocated_usd",
    "underused_usd",
    "failed_usd",
    "unallocated_usd",
    "unmeasured_usd",
    "productive_usd",
]

PART_LABELS = {k: PALETTE_LABELS[k] for k in WASTE_ORDER}
COLORS = {PALETTE_LABELS[k]: PART_COLOURS[k] for k in WASTE_ORDER}

TOP_COLUMNS = [
    "job_id",
    "waste_usd",
    "cost_usd",
    "idle_allocated_usd",
    "underused_usd",
    "failed_usd",
    "team",
    "user_name",
    "name",
    "state",
    "gpu_model",
    "gpu_count",
    "gpu_hours",
]

filters = _view.open_page("Waste")
# the weeks first: their capacity statement holds the view's too, which the summary then reads
weekly = _data.team_weeks(filters, parts=True)
s = _data.summary(filters)
by_team = _data.waste_by(filters, "team")
top = _data.top_wasted_jobs(filters)

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


st.subheader("From spend to productive spend")
spend = float(s["spend_usd"])
steps = [("spend", spend, 0.0, SPEND_COLOUR)]
level = spend
for k in WASTE_ORDER[:-1]:
    v = float(w[k])
    steps.append((PALETTE_LABELS[k], v, level - v, PART_COLOURS[k]))
    level -= v
steps.append(
    (PALETTE_LABELS["productive_usd"], float(w["productive_usd"]), 0.0, PART_COLOURS["productive_usd"])
)
fig = go.Figure(
    go.Bar(
        x=[name for name, *_ in steps],
        y=[v for _, v, _, _ in steps],
        base=[b for _, _, b, _ in steps],
        marker_color=[c for *_, c in steps],
        text=[
            f"{usd(v, cents=False)} · {pct(100.0 * v / spend) if spend else 'n/a'}" for _, v, _, _ in steps
        ],
        textposition="outside",
        customdata=[usd(v) for _, v, _, _ in steps],
        hovertemplate="%{x}: %{customdata}<extra></extra>",
    )
)
fig.update_yaxes(tickprefix="$", separatethousands=True, rangemode="tozero")
fig.update_layout(height=380, margin={"t": 30, "b": 10}, showlegend=False, bargap=0.3)
_ui.plotly_chart(fig, key="waste_waterfall")
st.caption(
    "Each bar after the first takes its part out of the spend; what is left is productive spend. No telemetry: "
    "held time with no utilization reading (unknown, neither idle nor busy). Percentages are of the spend."
)


def _long(df: pl.DataFrame, key: str) -> pl.DataFrame:
    parts = list(PART_LABELS)
    return (
        df.select(key, *parts)
        .unpivot(index=key, on=parts, variable_name="part", value_name="usd")
        .with_columns(pl.col("part").replace_strict(PART_LABELS), pl.col(key).replace(NOT_A_TEAM_LABELS))
    )


left, right = st.columns(2)
with left:
    st.subheader("By team")
    if by_team.is_empty():
        no_rows("No jobs in this view.")
    else:
        fig = _ui.stacked_bars(
            _long(by_team, "key"),
            y="key",
            x="usd",
            by="part",
            colours=COLORS,
            order=list(COLORS),
            horizontal=True,
            titles=("cost ($)", "team", "part"),
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
        fig = _ui.stacked_bars(
            _long(weekly, "week").sort("week", maintain_order=True),
            x="week",
            y="usd",
            by="part",
            colours=COLORS,
            order=list(COLORS),
            titles=("ISO week (UTC)", "cost ($)", "part"),
        )
        fig.update_yaxes(tickprefix="$")
        fig.update_traces(hovertemplate="%{x} · %{fullData.name}: $%{y:,.2f}<extra></extra>")
        fig.update_layout(barmode="stack", height=360, margin={"t": 10, "b": 10})
        _ui.plotly_chart(fig, key="waste_week")

st.subheader("Jobs that wasted the most")
if top.is_empty():
    no_rows("No job in this view wasted money.")
else:
    _ui.dataframe(top.select(TOP_COLUMNS))
    st.caption("Open a job on the Jobs page (`/jobs?job=ID`) for its timeline and idle stretches.")
