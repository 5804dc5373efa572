"""Recommendations: what to change, grouped by kind and ranked by dollars per week, each with its evidence
and one action (analytics/recommend.py, the list ``gpuledger recommend --json`` prints), the share of the
view's waste they address (``recommend --total --json``'s coverage), and the diagnoses behind them."""

from __future__ import annotations

import polars as pl
import streamlit as st

from analytics.savings import savings_total
from gpuledger.ledger.palette import is_team
from pages import _data, _ui, _view
from pages._ui import diagnosis_label, md, no_rows, pct, usd

CARDS_PER_KIND = 3  # the top items of each kind as cards; the rest of the kind in one table

filters = _view.open_page("Recommendations")
recs = _data.recommendations(filters)
total_view = _data.savings(filters)


def owner(r: dict) -> str:
    """Who acts: the user, else the team; capacity items belong to whoever runs the cluster."""
    if r.get("user_name"):
        return str(r["user_name"])
    if r.get("team") and is_team(r["team"]):
        return f"team {r['team']}"
    return "cluster owner"


if recs.is_empty():
    no_rows("Nothing to recommend in this view.")
else:
    recs = recs.with_columns(
        pl.Series("owner", [owner(r) for r in recs.select("user_name", "team").iter_rows(named=True)])
    )
    labels = dict(zip(recs["kind"], recs["kind_label"], strict=True))
    left, right = st.columns(2)
    chosen = left.multiselect(
        "Kind",
        sorted(labels, key=labels.get),
        format_func=labels.get,
        key="rec_kinds",
        placeholder="all kinds",
    )
    owners = right.multiselect("Owner", sorted(set(recs["owner"])), key="rec_owners", placeholder="everyone")
    shown = recs
    if chosen:
        shown = shown.filter(pl.col("kind").is_in(chosen))
    if owners:
        shown = shown.filter(pl.col("owner").is_in(owners))
    total = savings_total(shown, whole=not (chosen or owners))  # a part of the list is counted by itself
    cov = total_view.get("coverage") or {}
    cols = st.columns(3)
    cols[0].metric(
        "Possible savings",
        f"{usd(total['total_usd_per_week'])} / week",
        help="Recurring items, each dollar counted once: items can overlap (one idle notebook under two kinds; "
        "a smaller GPU and a MIG slice are alternatives), so this is less than the plain sum "
        f"({usd(total['listed_usd_per_week'])}). docs/recommendations.md explains the rule.",
    )
    cols[1].metric(
        "Waste addressed",
        pct(cov.get("addressed_pct")) if cov.get("addressed_pct") is not None else "n/a (no waste in view)",
        help=f"Of this view's waste ({usd(cov.get('waste_usd'))}), the dollars at least one recommendation "
        f"acts on ({usd(cov.get('addressed_usd'))}): recommend --total's coverage, over the whole list.",
    )
    cols[2].metric(
        "One-off savings",
        usd(total["one_off_saved_usd"]),
        help="What the one-off items (finished jobs) would have saved in this view: not a weekly figure",
    )
    st.caption(
        f"{shown.height:,} of {recs.height:,} recommendations, grouped by kind, each kind ranked by dollars per "
        "week (the saving over the view, scaled to 7 days)."
    )
    by_kind = (
        shown.group_by("kind", "kind_label")
        .agg(pl.len().alias("n"), pl.col("counted_usd_per_week").sum(), pl.col("saving_usd").sum())
        .sort("counted_usd_per_week", "saving_usd", descending=True, nulls_last=True)
    )
    for g in by_kind.iter_rows(named=True):
        items = shown.filter(pl.col("kind") == g["kind"])
        money = (
            f"{usd(g['counted_usd_per_week'])} / week"
            if g["counted_usd_per_week"]
            else f"one-off: {usd(g['saving_usd'])}"
        )
        with st.expander(
            f"**{g['kind_label']}** · {g['n']:,} item{'s' if g['n'] != 1 else ''} · {money}", expanded=True
        ):
            for r in items.head(CARDS_PER_KIND).iter_rows(named=True):
                # one markdown a card (not a header row of two columns and three paragraphs): a warm
                # reload of the page draws ~125 fewer elements (demo: 1.40-1.48 -> 1.18-1.23 s)
                with st.container(border=True):
                    saving = (
                        f"{usd(r['usd_per_week'])} / week"
                        if r["usd_per_week"] is not None
                        else f"one-off: {usd(r['saving_usd'])}"
                    )
                    st.markdown(
                        f"**{md(r['target'])}** · owner: {md(r['owner'])} · **{saving}**\n\n"
                        f"{md(r['evidence'])}\n\n"
                        f"**Action:** {md(r['action'])} · {md(r['confidence'])} confidence"
                    )
            if items.height > CARDS_PER_KIND:
                rest = items.slice(CARDS_PER_KIND).select(
                    "target", "owner", "usd_per_week", "saving_usd", "confidence", "action"
                )
                _ui.dataframe(
                    rest,
                    {"action": st.column_config.TextColumn("action", width="large")},
                    height=min(400, 38 + 35 * rest.height),
                )

st.subheader("Diagnoses")
diags = _data.diagnoses(filters)
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
    _ui.dataframe(table, {"evidence": st.column_config.TextColumn("evidence", width="large")})
    st.caption("Open a job on the Jobs page (`/jobs?job=ID`) to see its timeline beside its diagnosis.")
