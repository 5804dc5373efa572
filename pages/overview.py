"""Overview: what the view cost, how much of it was used, the change against the previous period of equal
length, the three actions worth most, and where the money went by team and week."""

from __future__ import annotations

import polars as pl
import streamlit as st

from analytics.whatif import capacity_utilization_pct
from gpuledger.ledger.palette import NOT_A_TEAM_LABELS, PART_COLOURS, PART_LABELS, is_team, team_colours
from pages import _data, _ui, _view
from pages._ui import delta, md, na, no_rows, num, pct, usd

filters = _view.open_page("Overview", caption=False)
# the bars' data first: their per-week capacity statement holds the view's too, which the summary and
# the capacity then read (analytics.waste.unallocated_weeks) instead of computing it again
weekly = _data.spend_by_team_week(filters)
s = _data.summary(filters)
prev_filters, p = _view.previous_summary(filters)
cap = _data.capacity(filters)

period = _view.view_period(filters)
if p is not None and (p["jobs"] or p["spend_usd"]):
    compared = f"change vs {prev_filters.since} – {prev_filters.until}, the {(period.until - period.since).days + 1} days before"
else:
    compared = "no data in the period before this one: changes are n/a"
    p = None
st.caption(f"{_view.describe_filters(filters)} · data up to {s.get('as_of') or 'n/a'} · {compared}")


def capacity_pct(summary: dict, frame: pl.DataFrame) -> float | None:
    if frame.is_empty():
        return None
    return capacity_utilization_pct(
        summary["mean_util_pct"], float(summary["gpu_hours"]), float(frame["unallocated_gpu_hours"].sum())
    )


cap_now = capacity_pct(s, cap)
cap_before = capacity_pct(p, _data.capacity(prev_filters)) if p is not None else None


def change(now: float | None, key: str, kind: str = "usd") -> dict:
    """st.metric's delta arguments: the change, or n/a with its reason (no arrow, no colour)."""
    if p is None:
        return {"delta": na("no data before"), "delta_arrow": "off", "delta_color": "off"}
    then = cap_before if key == "capacity" else p.get(key)
    d = delta(now, then, kind)
    if d is None:
        return {"delta": na("no figure for the period before"), "delta_arrow": "off", "delta_color": "off"}
    return {"delta": d, "delta_color": "off" if kind != "usd" else "inverse"}


top_row = st.columns(3)
top_row[0].metric(
    "Spend",
    usd(s["spend_usd"]),
    **change(s["spend_usd"], "spend_usd"),
    help="GPU cost of the jobs in view plus unallocated capacity",
)
top_row[1].metric(
    "Waste $",
    usd(s["waste_usd"]),
    **change(s["waste_usd"], "waste_usd"),
    help="idle + under-used + failed + unallocated",
)
top_row[2].metric(
    "Idle $",
    usd(s["idle_usd"]),
    **change(s["idle_usd"], "idle_usd"),
    help=f"{num(s['idle_gpu_hours'], 1)} GPU-hours in idle stretches",
)
second = st.columns(3)
second[0].metric("GPU-hours", num(s["gpu_hours"], 1), **change(s["gpu_hours"], "gpu_hours", "n"))
second[1].metric(
    "Held-GPU utilization",
    pct(s["mean_util_pct"]) if s["mean_util_pct"] is not None else na("no telemetry"),
    **change(s["mean_util_pct"], "mean_util_pct", "pct"),
    help="Time-weighted over telemetry samples attributed to the jobs in view: GPUs a job held",
)
second[2].metric(
    "Capacity utilization",
    pct(cap_now) if cap_now is not None else na("no paid-for capacity in view"),
    **change(cap_now, "capacity", "pct"),
    help="Held-GPU utilization × held GPU-hours ÷ (held + unallocated GPU-hours): every paid-for GPU-hour, "
    "the hours no job held counted at 0 %. n/a for a team view (capacity belongs to no team).",
)

notes = [f"{s['jobs']:,} {'job' if s['jobs'] == 1 else 'jobs'} in view."]
if s.get("unpriced_gpu_hours"):
    notes.append(
        f"{num(s['unpriced_gpu_hours'], 1)} GPU-hours have no price for their GPU model and are not in the spend "
        "(add a price on the Settings page)."
    )
if s.get("cancelled_usd"):
    notes.append(
        f"{usd(s['cancelled_usd'])} of the spend is jobs their users cancelled: a person's decision, not waste "
        "(their time is split by telemetry like a completed job's)."
    )
if s.get("mean_util_pct") is None:
    notes.append("No telemetry is attributed to these jobs, so utilization and idle time are unknown (n/a).")
st.caption(" ".join(notes))

# ---------------------------------------------------------------- what to change
st.subheader("What to change first")
recs = _data.recommendations(filters)
total = _data.savings(filters)
link_query = {k: st.query_params.get_all(k) for k in st.query_params}
if recs.is_empty():
    st.caption("Nothing to recommend in this view: nothing measured wastes more than the minimum.")
else:
    top = recs.filter(pl.col("usd_per_week").is_not_null()).head(3)
    for col, r in zip(st.columns(3), top.iter_rows(named=True), strict=False):
        with col.container(border=True):
            st.markdown(f"**{usd(r['usd_per_week'])} / week** · {md(r['kind_label'])}")
            owner = r.get("user_name") or r.get("team")
            owner_text = (
                md(owner) if owner and is_team(owner) else "the cluster's owner (capacity belongs to no team)"
            )
            st.caption(f"{md(r['target'])} · owner: {owner_text}")
            st.markdown(md(r["action"]))
    cov = total.get("coverage") or {}
    cov_text = (
        f"; they address {pct(cov['addressed_pct'])} of this view's waste "
        f"({usd(cov['addressed_usd'])} of {usd(cov['waste_usd'])})"
        if cov.get("addressed_pct") is not None
        else ""
    )
    st.caption(
        f"{total['recurring_items']:,} recurring recommendations save {usd(total['total_usd_per_week'])} / week, "
        f"each dollar counted once{cov_text}."
    )
    st.page_link(
        "pages/recommendations.py",
        label="All recommendations",
        icon=":material/lightbulb:",
        query_params=link_query,
    )

# ---------------------------------------------------------------- spend per team per week
st.subheader("Spend per team per week")
if weekly.is_empty():
    no_rows("No priced jobs in this view.")
else:
    colours = team_colours(weekly["team"].unique().to_list())
    weekly = weekly.with_columns(
        pl.col("team").replace(NOT_A_TEAM_LABELS).alias("drawn"),
    )
    colour_map = {NOT_A_TEAM_LABELS.get(t, t): c for t, c in colours.items()}
    # real teams first (alphabetical), the pseudo-rows last, on top of the stack
    order = sorted(t for t in colours if is_team(t)) + [
        NOT_A_TEAM_LABELS[t] for t in NOT_A_TEAM_LABELS if t in colours
    ]
    fig = _ui.stacked_bars(
        weekly.sort("week"),
        x="week",
        y="cost_usd",
        by="drawn",
        colours=colour_map,
        order=order,
        titles=("ISO week (UTC)", "spend ($)", "team"),
    )
    for trace in fig.data:
        if trace.name in NOT_A_TEAM_LABELS.values():
            trace.marker.pattern = {"shape": "/", "fgcolor": "#FFFFFF", "size": 6, "fillmode": "overlay"}
    fig.update_layout(
        barmode="stack", bargap=0.35, margin={"t": 10, "b": 10}, legend_title_text="team", height=380
    )
    fig.update_yaxes(tickprefix="$", separatethousands=True)
    fig.update_traces(hovertemplate="%{x} · %{fullData.name}: $%{y:,.2f}<extra></extra>")
    _ui.plotly_chart(fig, key="spend_team_week")
    st.caption(
        "Each job's cost is split at week boundaries (Monday 00:00 UTC). Hatched grey is not a team: "
        "unallocated capacity (declared or observed GPUs no job held) and unattributed telemetry (GPUs no job "
        "record claims)."
    )

# ---------------------------------------------------------------- where the money went
w = s["waste"]
st.subheader("Where the money went")
spend = s["spend_usd"]
keys = [
    "productive_usd",
    "idle_allocated_usd",
    "underused_usd",
    "failed_usd",
    "unallocated_usd",
    "unmeasured_usd",
]
parts = pl.DataFrame(
    {
        "part": [PART_LABELS[k] for k in keys],
        "cost_usd": [float(w[k]) for k in keys],
    }
).with_columns(
    (100.0 * pl.col("cost_usd") / spend if spend else pl.lit(None, dtype=pl.Float64)).alias(
        "share_of_spend_pct"
    )
)
left, right = st.columns([2, 3])
with left:
    _ui.dataframe(parts, width="content")
with right:
    fig = _ui.stacked_bars(
        parts,
        x="cost_usd",
        y="part",
        by="part",
        colours={PART_LABELS[k]: PART_COLOURS[k] for k in keys},
        horizontal=True,
        titles=("$", "", ""),
    )
    fig.update_layout(showlegend=False, height=240, margin={"t": 5, "b": 5}, yaxis={"autorange": "reversed"})
    fig.update_xaxes(tickprefix="$", separatethousands=True)
    fig.update_traces(hovertemplate="%{y}: $%{x:,.2f}<extra></extra>")
    _ui.plotly_chart(fig, key="overview_parts")
st.caption(
    "Waste $ = idle while allocated + under-used + failed runs + unallocated capacity (docs/metrics.md)."
)
