"""Recommendations: one line per problem (action, $/week, confidence) grouped by who acts on it, a team or
the operators of a cluster, with the evidence behind a click on the line; "Mine" keeps the signed-in lead's
teams (without sign-in, the team chosen here). The list is ``gpuledger recommend --json`` (one item per
problem, analytics/problems.py); the possible savings and coverage are ``recommend --total --json``'s."""

from __future__ import annotations

import polars as pl
import streamlit as st

from analytics.advice_common import Recommendation
from analytics.problems import OPERATORS
from analytics.recommend import KIND_LABELS
from analytics.savings import savings_total
from pages import _data, _items, _scope, _ui, _view
from pages._ui import diagnosis_label, md, no_rows, pct, usd

ROWS_SHOWN = 8  # lines a group's table shows before it scrolls (the page stays a few screens on the demo)
ROW_PX, HEAD_PX = 35, 38
ALL, MINE = "Everyone's", "Mine"

filters = _view.open_page("Recommendations")
recs = _data.recommendations(filters)
total_view = _data.savings(filters)


def my_teams(recs: pl.DataFrame) -> tuple[str, ...]:
    """The teams "Mine" keeps: a signed-in lead's own (gpuledger/ledger/access.py); else (sign-in off, or an
    admin) the team picked here, among the teams that own an item: the sidebar's team when it names one, else
    nothing until asked (the first team in the alphabet is nobody's team). ("?",) while none is picked."""
    scope = _scope.viewer()
    if scope is not None and not scope.admin:
        return scope.teams
    teams = sorted(set(recs.filter(pl.col("owner_type") == "team")["owner"].to_list()))
    if not teams:
        return ()
    preset = next((t for t in filters.teams if t in teams), None)  # the sidebar's team, when it names one
    picked = st.session_state.get("rec_team")
    index = teams.index(picked) if picked in teams else teams.index(preset) if preset else None
    chosen = st.selectbox("Your team", teams, index=index, key="rec_team", placeholder="Which team is yours?")
    return (chosen,) if chosen else ("?",)


def saves(it: Recommendation) -> str:
    """$/week for a recurring item, what it would have saved for a one-off."""
    return _ui.saves(it.usd_per_week, it.saving_usd)


def groups(shown: pl.DataFrame) -> list[tuple[str, str, pl.DataFrame]]:
    """(owner_type, owner, its items) with the teams first, then the operators; each by its $/week (each
    dollar once), then its one-off dollars, largest first; the items in the list's order."""
    totals = (
        shown.group_by("owner_type", "owner", maintain_order=True)
        .agg(pl.col("counted_usd_per_week").sum(), pl.col("saving_usd").sum())
        .with_columns((pl.col("owner_type") == OPERATORS).alias("ops"))
        .sort(["ops", "counted_usd_per_week", "saving_usd", "owner"], descending=[False, True, True, False])
    )
    return [
        (t, o, shown.filter((pl.col("owner_type") == t) & (pl.col("owner") == o)))
        for t, o in totals.select("owner_type", "owner").iter_rows()
    ]


def evidence(it: Recommendation) -> None:
    """What the selected line rests on: its evidence, confidence and why, the alternatives not added."""
    lines = [
        f"**{md(KIND_LABELS[it.kind])}** · {md(it.target_type)} {md(it.target)} · **{saves(it)}**",
        md(it.evidence),
        f"**Action:** {md(it.action)}",
        f"**Confidence:** {md(it.confidence)}"
        + (f" ({md(it.confidence_reasons)})" if it.confidence_reasons else ""),
    ]
    if it.alternatives:
        lines.append("**Other actions for the same problem** (not added): " + md("; ".join(it.alternatives)))
    with st.container(border=True):
        st.markdown("\n\n".join(lines))


def group(owner_type: str, owner: str, items: pl.DataFrame) -> None:
    """One owner's lines: a heading with its dollars, one row per item, the evidence of the row clicked."""
    week = items["counted_usd_per_week"].sum()
    once = items.filter(pl.col("usd_per_week").is_null())["saving_usd"].sum()
    money = " · ".join(
        x for x in (f"{usd(week)}/week" if week else "", f"{usd(once)} once" if once else "") if x
    )
    who = "Team" if owner_type == "team" else "Platform"
    n = items.height
    st.markdown(f"**{who}: {md(owner)}** · {n} action{'s' if n != 1 else ''} · {money}")
    lines = [Recommendation.of_row(r) for r in items.to_dicts()]
    table = pl.DataFrame(
        {
            "Action": [it.action for it in lines],
            "Saves": [saves(it) for it in lines],
            "Confidence": [it.confidence for it in lines],
            "Target": [it.target for it in lines],
        }
    )
    event = st.dataframe(
        table,
        hide_index=True,
        height=HEAD_PX + ROW_PX * min(n, ROWS_SHOWN) + 2,
        column_config={
            "Action": st.column_config.TextColumn("Action", width="large"),
            "Saves": st.column_config.TextColumn("Saves", width=120),
            "Confidence": st.column_config.TextColumn("Confidence", width=90),
            "Target": st.column_config.TextColumn("Target", width=200),
        },
        on_select="rerun",
        selection_mode="single-row",
        key=f"rec_rows_{owner_type}_{owner}",
    )
    picked = event.selection.rows if event is not None else []
    if picked:
        evidence(lines[picked[0]])


mine: tuple[str, ...] | None = None  # the teams "Mine" keeps (None: everyone's)
if recs.is_empty():
    no_rows("Nothing to recommend in this view.")
else:
    left, mid, right = st.columns([1, 1, 2])
    show = left.radio("Show", (ALL, MINE), horizontal=True, key="rec_show")
    with mid:
        mine = my_teams(recs) if show == MINE else None
    labels = dict(zip(recs["kind"], recs["kind_label"], strict=True))
    chosen = right.multiselect(
        "Kind",
        sorted(labels, key=labels.get),
        format_func=labels.get,
        key="rec_kinds",
        placeholder="all kinds",
    )
    shown = recs
    if mine is not None:
        shown = shown.filter((pl.col("owner_type") == "team") & pl.col("owner").is_in(list(mine)))
    if chosen:
        shown = shown.filter(pl.col("kind").is_in(chosen))
    part = mine is not None or bool(chosen)
    total = savings_total(shown, whole=not part)  # a part of the list is counted by itself
    cov = total_view.get("coverage") or {}
    cols = st.columns(3)
    cols[0].metric(
        "Possible savings",
        f"{usd(total['total_usd_per_week'])} / week",
        help="Recurring items, each dollar counted once: one line per problem, its other actions not added "
        f"(the plain sum of the lines is {usd(total['listed_usd_per_week'])}). docs/recommendations.md "
        "explains the rule.",
    )
    cols[1].metric(
        "Waste addressed",
        pct(cov.get("addressed_pct")) if cov.get("addressed_pct") is not None else "n/a (no waste in view)",
        help=f"Of this view's waste teams control and capacity no job held ({usd(cov.get('addressable_usd'))}), "
        "the dollars at least one recommendation "
        f"acts on ({usd(cov.get('addressed_usd'))}): recommend --total's coverage, over the whole list.",
    )
    cols[2].metric(
        "One-off savings",
        usd(total["one_off_saved_usd"]),
        help="What the one-off items (finished jobs) would have saved in this view: not a weekly figure",
    )
    if mine is not None and not mine:
        no_rows("No team owns a recommendation in this view.")
    elif mine == ("?",):
        no_rows("Choose your team above to see its recommendations.")
    elif shown.is_empty():
        no_rows("No recommendation for " + (", ".join(md(t) for t in mine) if mine else "these kinds") + ".")
    else:
        st.caption(
            f"{shown.height:,} of {recs.height:,} actions, one per problem, grouped by who acts: a team, or the "
            "operators of a cluster (capacity nobody held). Click a line for its evidence."
        )
        for owner_type, owner, items in groups(shown):
            group(owner_type, owner, items)

_items.section()

st.subheader("Diagnoses")
diags = _data.diagnoses(filters)
if mine is not None:  # a lead's own jobs' diagnoses
    diags = diags.filter(pl.col("team").is_in(list(mine)))
if diags.is_empty():
    no_rows("No job in this view raised a diagnosis.")
else:
    table = diags.select(
        pl.col("diagnosis").map_elements(diagnosis_label, return_dtype=pl.String),
        "job_id",
        "name",
        "team",
        "evidence",
    )
    _ui.dataframe(
        table,
        {"evidence": st.column_config.TextColumn("evidence", width="large")},
        height=HEAD_PX + ROW_PX * min(table.height, ROWS_SHOWN) + 2,
    )
    st.caption("Open a job on the Jobs page (`/jobs?job=ID`) to see its timeline beside its diagnosis.")
