"""Overview: what the view cost, how much of it was used, and where it went by team and week."""

from __future__ import annotations

import plotly.express as px
import streamlit as st

from pages import _data, _ui
from pages._ui import KPI_WIDTHS, no_rows, not_ready, num, pct, usd

filters = _data.open_page("Overview", caption=False)
try:
    s = _data.summary(filters)
except _data.NotReady as exc:
    not_ready(exc)
st.caption(f"{_data.describe_filters(filters)} · data up to {s.get('as_of') or 'n/a'}")

cols = st.columns(KPI_WIDTHS)
cols[0].metric("Spend", usd(s["spend_usd"]), help="GPU cost of the jobs in view plus unallocated capacity")
cols[1].metric("GPU-hours", num(s["gpu_hours"], 1))
cols[2].metric(
    "Mean utilization",
    pct(s["mean_util_pct"]),
    help="Time-weighted over telemetry samples attributed to jobs in view; n/a when there is none",
)
cols[3].metric(
    "Idle $", usd(s["idle_usd"]), help=f"{num(s['idle_gpu_hours'], 1)} GPU-hours in idle stretches"
)
cols[4].metric("Waste $", usd(s["waste_usd"]), help="idle + under-used + failed + unallocated")

notes = [f"{s['jobs']:,} {'job' if s['jobs'] == 1 else 'jobs'} in view."]
if s.get("unpriced_gpu_hours"):
    notes.append(
        f"{num(s['unpriced_gpu_hours'], 1)} GPU-hours have no price for their GPU model and are not in the spend "
        "(add a price in the settings file)."
    )
if s.get("mean_util_pct") is None:
    notes.append("No telemetry is attributed to these jobs, so utilization and idle time are unknown (n/a).")
st.caption(" ".join(notes))

st.subheader("Spend per team per week")
weekly = _data.spend_by_team_week(filters)
if weekly.is_empty():
    no_rows("No priced jobs in this view.")
else:
    fig = px.bar(
        weekly,
        x="week",
        y="cost_usd",
        color="team",
        labels={"cost_usd": "spend ($)", "week": "ISO week (UTC)"},
    )
    fig.update_layout(
        barmode="stack", bargap=0.35, margin={"t": 10, "b": 10}, legend_title_text="team", height=380
    )
    fig.update_yaxes(tickprefix="$")
    fig.update_traces(hovertemplate="%{x} · %{fullData.name}: $%{y:,.2f}<extra></extra>")
    _ui.plotly_chart(fig, key="spend_team_week")
    st.caption(
        'Each job\'s cost is split at week boundaries (Monday 00:00 UTC). "unallocated" is declared capacity '
        'no job held; "unattributed" is telemetry of GPUs no job record claims.'
    )

w = s["waste"]
st.subheader("Where the money went")
parts = {
    "productive": w["productive_usd"],
    "idle (allocated)": w["idle_allocated_usd"],
    "under-used": w["underused_usd"],
    "failed runs": w["failed_usd"],
    "unallocated capacity": w["unallocated_usd"],
    "no telemetry": w["unmeasured_usd"],
}
spend = s["spend_usd"]
st.dataframe(
    {
        "part": list(parts),
        "cost": [usd(v) for v in parts.values()],
        "share of spend": [pct(100.0 * v / spend) if spend else "n/a" for v in parts.values()],
    },
    hide_index=True,
    width="content",
)
st.caption("Waste $ = idle (allocated) + under-used + failed runs + unallocated capacity (docs/metrics.md).")
