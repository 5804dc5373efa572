"""Recommendations: what to change, ranked by dollars per week, each with its evidence and one action
(analytics/recommend.py, the list ``gpuledger recommend --json`` prints), and the diagnoses behind them."""

from __future__ import annotations

import polars as pl
import streamlit as st

from analytics.savings import savings_total
from pages import _data
from pages._ui import column_config, md, no_rows, not_ready, usd

CARDS = 25  # the top items as cards with their evidence; the rest in one table (quicker to read and draw)
KIND_LABELS = {
    "reclaim_idle": "Reclaim idle GPUs",
    "stop_idle_notebooks": "Stop idle notebooks",
    "right_size_gpu": "Right-size the GPU",
    "fewer_gpus": "Use fewer GPUs",
    "larger_batch": "Use a larger batch",
    "use_spot": "Run on spot",
    "mig_slice": "Use a MIG slice",
}

filters = _data.open_page("Recommendations")
try:
    recs = _data.recommendations(filters)
except _data.NotReady as exc:
    not_ready(exc)

if recs.is_empty():
    no_rows("Nothing to recommend in this view.")
else:
    kinds = sorted(recs["kind"].unique().to_list())
    chosen = st.multiselect(
        "Kinds", kinds, format_func=lambda k: KIND_LABELS.get(k, k), key="rec_kinds", placeholder="all kinds"
    )
    shown = recs.filter(recs["kind"].is_in(chosen)) if chosen else recs
    total = savings_total(shown)
    st.metric(
        "Possible savings",
        f"{usd(total['total_usd_per_week'])} / week",
        help="Each dollar counted once: items can overlap (one idle notebook under two kinds; a smaller GPU "
        "and a MIG slice are alternatives), so this is less than the plain sum of the list "
        f"({usd(total['listed_usd_per_week'])}). docs/recommendations.md explains the rule.",
    )
    st.caption(
        f"{shown.height:,} recommendations, ranked by dollars per week (the saving over the view, scaled to 7 "
        f"days). The plain sum of the list is {usd(total['listed_usd_per_week'])} / week; "
        f"{usd(total['overlap_usd_per_week'])} of it overlaps, so the total counts each dollar once."
    )
    for i, r in enumerate(shown.head(CARDS).iter_rows(named=True), start=1):
        with st.container(border=True):
            head, money = st.columns([4, 1])
            head.markdown(f"**{i}. {KIND_LABELS.get(r['kind'], r['kind'])}** · {md(r['target'])}")
            money.markdown(f"**{usd(r['usd_per_week'])} / week**  \n{r['confidence']} confidence")
            st.markdown(md(r["evidence"]))
            st.markdown(f"**Action:** {md(r['action'])}")
            if r["kind"] == "larger_batch" and r.get("recommended_batch_size") is not None:
                st.caption(
                    f"batch {r.get('current_batch_size')} → {r.get('recommended_batch_size')}; predicted peak "
                    f"{r.get('predicted_peak_mem_mib') or 0:,.0f} of {r.get('card_mem_mib') or 0:,.0f} MiB; "
                    f"throughput +{r.get('predicted_throughput_gain_pct') or 0:.0f} %; {md(r.get('lr_rule') or '')}"
                    + (f"; gentler: batch {r['knee_batch_size']}" if r.get("knee_batch_size") else "")
                )
    if shown.height > CARDS:
        st.subheader(f"The other {shown.height - CARDS:,}")
        rest = shown.slice(CARDS).with_columns(pl.col("kind").replace(KIND_LABELS))
        cols = ["kind", "target", "usd_per_week", "confidence", "action", "evidence"]
        st.dataframe(rest.select(cols), hide_index=True, column_config=column_config(cols), height=360)

st.subheader("Diagnoses")
try:
    diags = _data.diagnoses(filters)
except _data.NotReady as exc:
    not_ready(exc)
if diags.is_empty():
    no_rows("No job in this view raised a diagnosis.")
else:
    st.dataframe(diags.select("diagnosis", "job_id", "name", "team", "evidence"), hide_index=True)
