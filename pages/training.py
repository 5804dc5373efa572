"""Training: cost per unit of work ($ per 1M tokens, per epoch, per 1k samples), MFU, and the batch-size
recommendations (analytics/unit_costs.py, analytics/recommend.py kind ``larger_batch``)."""

from __future__ import annotations

import plotly.express as px
import polars as pl
import streamlit as st

from pages import _data, _ui, _view
from pages._ui import column_config, no_rows

filters = _view.open_page("Training")
t = _data.training(filters)

units = t.unit_costs
st.subheader("Cost per unit of work")
if units.is_empty():
    no_rows("No training or inference runs with logged work (tokens, samples, epochs) in this view.")
else:
    plot = units.filter(pl.col("usd_per_mtok").is_not_null() & pl.col("mfu").is_not_null())
    if not plot.is_empty():
        fig = px.scatter(
            plot,
            x="mfu",
            y="usd_per_mtok",
            color="gpu_model",
            hover_name="job_id",
            log_y=True,
            labels={
                "mfu": "MFU (model FLOPs utilization)",
                "usd_per_mtok": "$ per 1M tokens (log)",
                "gpu_model": "GPU model",
            },
        )
        fig.update_layout(height=340, margin={"t": 10, "b": 10}, xaxis_tickformat=".0%")
        fig.update_yaxes(dtick=1, tickprefix="$")  # one label per decade, not the minor ticks
        _ui.plotly_chart(fig, key="unit_costs")
        st.caption("Lower right is good: high MFU, cheap tokens. Each point is one run.")
    shown = [
        c
        for c in (
            "job_id",
            "kind",
            "gpu_model",
            "gpu_count",
            "cost_usd",
            "tokens_per_s_per_gpu",
            "usd_per_mtok",
            "usd_per_epoch",
            "usd_per_ksamples",
            "usd_per_mtok_generated",
            "usd_per_krequests",
            "mfu",
            "mfu_basis",
            "mfu_reason",
            "unit_cost_reason",
        )
        if c in units.columns
    ]
    config = column_config(shown) | {
        "mfu": st.column_config.NumberColumn("MFU", format="percent"),
        "tokens_per_s_per_gpu": st.column_config.NumberColumn("tokens/s per GPU", format="%.0f"),
    }
    _ui.dataframe(units.select(shown).sort("cost_usd", descending=True, nulls_last=True), config)
    st.caption("n/a: an input is missing (the reason columns say which); no figure is guessed.")

st.subheader("Batch size")
batch = t.batch
if batch.is_empty():
    no_rows("No job in this view would gain from a larger batch.")
else:
    cols = [
        c
        for c in (
            "target",
            "current_batch_size",
            "recommended_batch_size",
            "knee_batch_size",
            "predicted_peak_mem_mib",
            "card_mem_mib",
            "predicted_throughput_gain_pct",
            "usd_per_week",
            "confidence",
            "lr_rule",
            "evidence",
        )
        if c in batch.columns
    ]
    _ui.dataframe(batch.select(cols))
