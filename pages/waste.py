"""Waste: the spend split into productive, idle, under-used, failed, unallocated and unmeasured, by team and
week, and the jobs that wasted the most dollars (analytics/waste.py; definitions in docs/metrics.md)."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
import streamlit as st

from analytics.waste_jobs import HEADLINE_WORDS
from gpuledger.ledger.palette import NOT_A_TEAM_LABELS, PART_COLOURS, SPEND_COLOUR
from gpuledger.ledger.palette import PART_LABELS as PALETTE_LABELS
from pages import _data, _ui, _view
from pages._ui import KPI_WIDTHS, delta, no_rows, num, pct, usd

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

previous, p = _view.previous_summary(filters)
if p is not None and not (p["jobs"] or abs(p["spend_usd"]) >= 0.005):
    p = None  # the period before holds no data: no change to draw (as on the Overview)


def change(key: str, part: bool = False) -> dict[str, object]:
    """st.metric's delta against the period of equal length before (the Overview's rule); none without it."""
    if p is None:
        return {}
    now, before = (s["waste"][key], p["waste"][key]) if part else (s[key], p[key])
    d = delta(now, before)
    return {} if d is None else {"delta": d, "delta_color": "inverse"}


w = s["waste"]
cols = st.columns(KPI_WIDTHS)
cols[0].metric(
    HEADLINE_WORDS["team_waste_usd"],
    usd(s["team_waste_usd"]),
    **change("team_waste_usd"),
    help="Idle while allocated + under-used + failed runs (badput): time the teams' own jobs held.",
)
cols[1].metric(
    PALETTE_LABELS["idle_allocated_usd"].capitalize(),
    usd(w["idle_allocated_usd"]),
    **change("idle_allocated_usd", part=True),
    help=f"{num(s['idle_gpu_hours'])} GPU-hours",
)
cols[2].metric("Under-used", usd(w["underused_usd"]), **change("underused_usd", part=True))
cols[3].metric("Failed runs (badput)", usd(w["failed_usd"]), **change("failed_usd", part=True))
cols[4].metric(
    HEADLINE_WORDS["unheld_capacity_usd"],
    usd(s["unheld_capacity_usd"]),
    **change("unheld_capacity_usd"),
    help="Declared capacity (e.g. on-prem GPUs paid for used or not) that no job held, at its price: the "
    "platform's to release or fill, not a team's waste.",
)
st.caption(
    f"Of {usd(s['spend_usd'])} spend: productive {usd(w['productive_usd'])}, "
    f"{HEADLINE_WORDS['unmeasured_usd'].lower()} {usd(s['unmeasured_usd'])} (held time with no utilization "
    "reading: unknown, neither idle nor busy)."
    + (
        f" Changes vs {previous.since} – {previous.until}."
        if p is not None and previous is not None
        else " No data in the period before: no changes to show."
        if previous is not None
        else ""
    )
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
    "Each bar after the first takes its part out of the spend; what is left is productive spend. Unmeasured (no "
    "telemetry): held time with no utilization reading (unknown, neither idle nor busy). Percentages are of the spend."
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

st.subheader("Users by the waste teams control")
users = _data.user_waste(filters)
if users.is_empty():
    no_rows("No user's jobs wasted money in this view.")
else:
    _ui.dataframe(
        users.select(
            "user_name",
            "team_waste_usd",
            "idle_allocated_usd",
            "underused_usd",
            "failed_usd",
            "spend_usd",
            "top_job_id",
            "top_job_name",
            "top_job_waste_usd",
        )
    )
    st.caption(
        "Largest first: each user's jobs' idle while allocated + under-used + failed runs (badput), and the one "
        "job with the most of it (the report's table)."
    )

st.subheader("Jobs that wasted the most")
if top.is_empty():
    no_rows("No job in this view wasted money.")
else:
    _ui.dataframe(top.select(TOP_COLUMNS))
    st.caption("Open a job on the Jobs page (`/jobs?job=ID`) for its timeline and idle stretches.")
