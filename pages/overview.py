"""Overview: a lead's ten-second screen. It opens on the last complete ISO week of the data against the week
before (the sidebar takes any other range): what it cost, the waste teams control apart from the platform's
capacity no job held, held-GPU and capacity utilization, a row per team, and the actions worth most
(analytics/overview.py computes every figure; docs/metrics.md, "Overview", defines them)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl
import streamlit as st

from analytics.filters import Filters
from analytics.overview import Overview
from analytics.problems import OPERATORS, owner_of
from analytics.waste import PARTS
from gpuledger.ledger.palette import NOT_A_TEAM_LABELS, PART_COLOURS, PART_LABELS, is_team, team_colours
from gpuledger.reports.content import previous_period
from pages import _budget_view, _data, _items, _ui, _view
from pages._ui import delta, md, na, no_rows, num, pct, usd

CHART_WEEKS = 8  # the weekly bars of a one-week view show this many weeks up to it

chosen = _view.open_page("Overview", caption=False)
filters, week = _view.opening_period(chosen)
period = _view.view_period(filters)
previous = previous_period(period)
o: Overview = _data.overview(period, previous)
s, p = o.now, o.before
team_view = bool(filters.teams or filters.users)

if o.demo is not None:
    d = o.demo
    st.info(
        f"**This is the demo fleet**: {d.days} days of generated data, {d.first_day} – {d.last_day} (UTC)"
        + (f", seed {d.seed}" if d.seed is not None else "")
        + ". No figure here is real. Load your own files with `gpuledger ingest FILE` (README).",
        icon=":material/science:",
    )


def period_words(f: Filters, name: str | None) -> str:
    return f"week {name} ({f.since} – {f.until})" if name else f"{f.since} – {f.until}"


if previous is not None and p is not None:
    before_name = _view.week_name(previous.since) if week and previous.since else None
    compared = f"changes vs {period_words(previous, before_name)}"
elif previous is not None:
    compared = f"no data in {period_words(previous, None)}, the period before: no changes to show"
else:
    compared = "changes need a closed range"
what = (
    f"**Week {week}** ({period.since} – {period.until}, UTC), the last complete week of the data"
    if week
    else f"**{period.since} – {period.until}** (UTC)"
)
scope = [
    "clusters: " + (", ".join(md(c) for c in filters.clusters) or "all"),
    "teams: " + (", ".join(md(t) for t in filters.teams) or "all"),
]
if filters.users:
    scope.append("users: " + ", ".join(md(u) for u in filters.users))
st.markdown(f"{what} · {compared}")
st.caption(
    " · ".join(scope)
    + f" · data up to {s.get('as_of') or 'n/a'}"
    + (" · choose dates in the sidebar for another range" if week else "")
)


def change(now: float | None, key: str, kind: str = "usd") -> dict[str, Any]:
    """st.metric's delta arguments against the period before; none drawn when there is nothing to compare."""
    if p is None or now is None:
        return {}
    d = delta(now, p.get(key), kind)
    if d is None:
        return {"delta": na("no figure before"), "delta_arrow": "off", "delta_color": "off"}
    colour = {"usd": "off" if key == "spend_usd" else "inverse", "pct": "normal"}.get(kind, "off")
    return {"delta": d, "delta_color": colour}


w = s["waste"]
money = st.columns([1, 1, 1.15])
money[0].metric(
    "Spend",
    usd(s["spend_usd"]),
    **change(s["spend_usd"], "spend_usd"),
    help="GPU cost of the jobs in view plus paid-for capacity no job held",
)
money[1].metric(
    "Waste teams control",
    usd(s["team_waste_usd"]),
    **change(s["team_waste_usd"], "team_waste_usd"),
    help="Idle while allocated + under-used (below target utilization) + badput (a disrupted run's time since "
    "its last checkpoint): time the teams' own jobs held.",
)
with money[2].container(border=True):
    if team_view:
        st.markdown("**Platform**")
        st.caption(
            "Capacity no job held belongs to no team: it is not in a team's view. Clear the team filter to "
            "see it."
        )
    else:
        st.metric(
            "Capacity no job held (platform)",
            usd(s["unheld_capacity_usd"]),
            **change(s["unheld_capacity_usd"], "unheld_capacity_usd"),
            help="Paid-for GPU-hours no job held (unallocated capacity): the cluster operators' to release or "
            f"fill, not a team's waste. {num(s['unallocated_gpu_hours'], 1)} GPU-hours.",
        )

use = st.columns([1, 1, 1.15])
use[0].metric(
    "Held-GPU utilization",
    pct(s["held_util_pct"]) if s["held_util_pct"] is not None else na("no telemetry"),
    **change(s["held_util_pct"], "held_util_pct", "pct"),
    help="Time-weighted over the telemetry of the GPUs the jobs in view held",
)
if team_view:
    jobs_delta = {"delta": f"{s['jobs'] - p['jobs']:+,}", "delta_color": "off"} if p is not None else {}
    use[1].metric("Jobs", f"{s['jobs']:,}", **jobs_delta)
else:
    use[1].metric(
        "Capacity utilization",
        pct(s["capacity_util_pct"]) if s["capacity_util_pct"] is not None else na("no capacity"),
        **change(s["capacity_util_pct"], "capacity_util_pct", "pct"),
        help="Held-GPU utilization × held GPU-hours ÷ (held + unallocated GPU-hours): every paid-for GPU-hour, "
        "the hours no job held counted at 0 %.",
    )
use[2].metric(
    "GPU-hours",
    num(s["gpu_hours"], 1),
    **change(s["gpu_hours"], "gpu_hours", "n"),
    help="GPU-hours the jobs in view held",
)

notes = [
    f"Waste teams control: idle while allocated {usd(w['idle_allocated_usd'])} + under-used "
    f"{usd(w['underused_usd'])} + badput {usd(w['failed_usd'])}"
    + (f", {pct(s['team_waste_pct'])} of the jobs' spend." if s["team_waste_pct"] is not None else ".")
]
if s.get("cancelled_usd"):
    notes.append(
        f"{usd(s['cancelled_usd'])} of the spend is jobs their users cancelled: a person's decision, not waste."
    )
if s.get("unpriced_gpu_hours"):
    notes.append(
        f"{num(s['unpriced_gpu_hours'], 1)} GPU-hours have no price for their GPU model and are not in the spend "
        "(add a price on the Settings page)."
    )
if w["unmeasured_usd"] >= 0.005:
    notes.append(f"{usd(w['unmeasured_usd'])} was held with no telemetry: whether it was used is unknown.")
if s.get("held_util_pct") is None and s["jobs"]:
    notes.append("No telemetry is attributed to these jobs, so utilization and idle time are unknown (n/a).")
st.caption(" ".join(notes))

# ---------------------------------------------------------------- teams
st.subheader("Teams")
teams = o.teams
if teams.is_empty():
    no_rows("No job ran in this period.")
else:
    has_before = p is not None
    rows = []
    for r in teams.iter_rows(named=True):
        team = r["team"]
        capacity = team == "unallocated"  # analytics.overview.team_rows' capacity row
        new = has_before and not r["spend_before_usd"] and r["spend_usd"]
        rows.append(
            {
                "team": NOT_A_TEAM_LABELS.get(team, team),
                "spend": r["spend_usd"],
                "change": ("new" if new else delta(r["spend_usd"], r["spend_before_usd"]))
                if has_before
                else None,
                "waste": r["team_waste_usd"],
                "waste_pct": r["waste_pct"],
                "waste_change": (
                    delta(r["waste_pct"], r["waste_pct"] - r["waste_pct_change_pts"], "pct")
                    if r["waste_pct_change_pts"] is not None
                    else None
                ),
                "util": r["util_pct"],
                "util_change": (
                    delta(r["util_pct"], r["util_pct"] - r["util_change_pts"], "pct")
                    if r["util_change_pts"] is not None
                    else None
                ),
                "jobs": r["jobs"],
                "_capacity": capacity,
            }
        )
    table = pl.DataFrame(rows, infer_schema_length=None)

    def text(values: list[Any], fmt: Any, capacity: list[bool], reason: str) -> list[str]:
        return [
            "—" if cap and v is None else (fmt(v) if v is not None else reason)
            for v, cap in zip(values, capacity, strict=True)
        ]

    cap_rows = table["_capacity"].to_list()
    shown = pl.DataFrame(
        {
            "Team": table["team"],
            "Spend": table["spend"],
            "Spend change": text(table["change"].to_list(), str, cap_rows, "n/a")
            if has_before
            else ["n/a"] * table.height,
            "Team waste": text(table["waste"].to_list(), usd, cap_rows, "n/a"),
            "Waste %": text(table["waste_pct"].to_list(), pct, cap_rows, na("no spend")),
            "Waste % change": text(table["waste_change"].to_list(), str, cap_rows, "n/a"),
            "Utilization": text(table["util"].to_list(), pct, cap_rows, na("no telemetry")),
            "Utilization change": text(table["util_change"].to_list(), str, cap_rows, "n/a"),
            "Jobs": table["jobs"],
        }
    )
    if not has_before:
        shown = shown.drop("Spend change", "Waste % change", "Utilization change")
    config = {
        "Team": st.column_config.TextColumn("Team", width="medium"),
        "Team waste": st.column_config.TextColumn(
            "Team waste", help="Waste teams control: idle while allocated + under-used + badput"
        ),
        "Waste %": st.column_config.TextColumn("Waste %", help="Team waste ÷ the team's spend"),
        "Utilization": st.column_config.TextColumn(
            "Utilization", help="Held-GPU utilization, time-weighted over the team's telemetry"
        ),
        "Spend": st.column_config.NumberColumn("Spend", format="dollar"),
        "Jobs": st.column_config.NumberColumn("Jobs", format="%d"),
    }
    st.dataframe(shown, hide_index=True, column_config=config, width="stretch")
    total = float(teams["spend_usd"].sum())
    st.caption(
        f"The rows add up to the spend ({usd(total)}); the capacity no job held is no team's (—). Waste % = "
        "team waste (idle + under-used + badput) ÷ the team's spend; "
        "held-GPU utilization is time-weighted over the team's telemetry"
        + ("; changes are against the period before (points for percentages)." if has_before else ".")
    )

# ---------------------------------------------------------------- what to change
st.subheader("What to change first")
recs = _data.recommendations(period)
total_saving = _data.savings(period)
link_query = {k: st.query_params.get_all(k) for k in st.query_params}
if recs.is_empty():
    st.caption("Nothing to recommend in this period: nothing measured wastes more than the minimum.")
else:
    # two short lists: what the teams can change (their jobs' waste) and what the platform can (capacity no
    # job held), so a team lead always gets something of their own (analytics.problems.owner_of decides)
    weekly_recs = recs.filter(pl.col("usd_per_week").is_not_null())
    platform = pl.Series(
        [
            owner_of(t, g, None, None)[0] == OPERATORS
            for t, g in zip(weekly_recs["target_type"], weekly_recs["target"], strict=True)
        ],
        dtype=pl.Boolean,
    )
    for col, (title, rows, empty) in zip(
        st.columns(2),
        (
            ("For the teams", weekly_recs.filter(~platform).head(3), "No recurring action for a team."),
            ("For the platform", weekly_recs.filter(platform).head(3), "No recurring action on capacity."),
        ),
        strict=True,
    ):
        with col.container(border=True):
            st.markdown(f"**{title}**")
            if rows.is_empty():
                st.caption(empty)
            for r in rows.iter_rows(named=True):
                owner = r.get("user_name") or r.get("team")
                owner_text = md(owner) if owner and is_team(owner) else "the cluster's operators"
                st.markdown(f"**{usd(r['usd_per_week'])} / week** · {md(r['kind_label'])} · {owner_text}")
                st.caption(md(r["action"]))
    cov = total_saving.get("coverage") or {}
    cov_text = (
        f"; they address {pct(cov['addressed_pct'])} of this view's waste teams control and capacity no job "
        f"held ({usd(cov['addressed_usd'])} of {usd(cov['addressable_usd'])})"
        if cov.get("addressed_pct") is not None
        else ""
    )
    st.caption(
        f"{total_saving['recurring_items']:,} recurring recommendations save "
        f"{usd(total_saving['total_usd_per_week'])} / week, each dollar counted once{cov_text}."
    )
    st.page_link(
        "pages/recommendations.py",
        label="All recommendations",
        icon=":material/lightbulb:",
        query_params=link_query,
    )
_items.overview_line()

# ---------------------------------------------------------------- spend per team per week
st.subheader("Spend per team per week")
chart_view = period
if week and period.until is not None:
    first = _data.filter_choices().first_day or period.since
    start = max(first, period.until - dt.timedelta(days=7 * CHART_WEEKS - 1))
    chart_view = Filters(start, period.until, filters.teams, filters.clusters, filters.users)
weekly = _data.team_weeks(chart_view, parts=False)
if weekly.is_empty():
    no_rows("No priced jobs in this period.")
else:
    # every team of the ledger takes part in the colour choice, so a team keeps its colour under a filter
    present = weekly["team"].unique().to_list()
    colours = {
        t: c for t, c in team_colours([*_data.filter_choices().teams, *present]).items() if t in present
    }
    weekly = weekly.with_columns(pl.col("team").replace(NOT_A_TEAM_LABELS).alias("drawn"))
    colour_map = {NOT_A_TEAM_LABELS.get(t, t): c for t, c in colours.items()}
    # real teams first (alphabetical), the pseudo-rows last, on top of the stack
    order = sorted(t for t in colours if is_team(t)) + [
        NOT_A_TEAM_LABELS[t] for t in NOT_A_TEAM_LABELS if t in colours
    ]
    fig = _ui.stacked_bars(
        weekly.sort("week"),
        x="week",
        y="spend_usd",
        by="drawn",
        colours=colour_map,
        order=order,
        titles=("ISO week (UTC)", "spend ($)", "team"),
    )
    for trace in fig.data:
        if trace.name in NOT_A_TEAM_LABELS.values():
            trace.marker.pattern = {"shape": "/", "fgcolor": "#FFFFFF", "size": 6, "fillmode": "overlay"}
    fig.update_layout(
        barmode="stack", bargap=0.35, margin={"t": 10, "b": 10}, legend_title_text="team", height=340
    )
    fig.update_yaxes(tickprefix="$", separatethousands=True)
    fig.update_traces(hovertemplate="%{x} · %{fullData.name}: $%{y:,.2f}<extra></extra>")
    _ui.plotly_chart(fig, key="spend_team_week")
    st.caption(
        (f"Up to {CHART_WEEKS} weeks of data, ending with week {week}. " if chart_view is not period else "")
        + "Each job's cost is split at week boundaries (Monday 00:00 UTC). Hatched grey is not a team: "
        "capacity no job held, and telemetry no job record claims."
    )

# ---------------------------------------------------------------- where the money went
st.subheader("Where the money went")
spend = s["spend_usd"]
keys = list(PARTS)  # the taxonomy's parts, in its order (analytics/waste_jobs.py)
parts = pl.DataFrame(
    {"part": [PART_LABELS[k] for k in keys], "cost_usd": [float(w[k]) for k in keys]}
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
    "Idle while allocated, under-used and failed runs (badput) are the teams' waste; unallocated capacity is "
    "the platform's (docs/metrics.md)."
)
_budget_view.card(filters)
