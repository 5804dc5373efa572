"""Training: cost per unit of work ($ per 1M tokens, per epoch, per 1k samples), MFU, and the batch-size
recommendations (analytics/unit_costs.py, analytics/recommend.py kind ``larger_batch``)."""

from __future__ import annotations

import plotly.express as px
import polars as pl
import streamlit as st

from analytics.unit_costs import NO_RUN_REASON
from pages import _data, _ui, _view
from pages._ui import no_rows

PER_PARAM = "per billion parameters (any size)"
BY_SIZE = "$ per 1M tokens, by model size"
SIZE_BANDS = ["under 1 B parameters", "1–10 B", "10–100 B", "100 B and more"]


def size_band(params: pl.Expr) -> pl.Expr:
    """A run's model-size band (SIZE_BANDS) from its parameter count."""
    return (
        pl.when(params < 1e9)
        .then(pl.lit(SIZE_BANDS[0]))
        .when(params < 1e10)
        .then(pl.lit(SIZE_BANDS[1]))
        .when(params < 1e11)
        .then(pl.lit(SIZE_BANDS[2]))
        .otherwise(pl.lit(SIZE_BANDS[3]))
    )


RUN_COLUMNS = (
    "name",
    "user_name",
    "team",
    "model",
    "gpu_model",
    "gpu_count",
    "cost_usd",
    "usd_per_mtok",
    "usd_per_epoch",
    "mfu",
    "job_id",
)

filters = _view.open_page("Training")
t = _data.training(filters)

units = t.unit_costs
st.subheader("Runs")
if units.is_empty():
    no_rows("No training or inference runs with logged work (tokens, samples, epochs) in this view.")
else:
    runs = units.filter(pl.col("unit_cost_reason").fill_null("") != NO_RUN_REASON)
    if runs.is_empty():
        no_rows("No job in this view logged training metrics (tokens, samples, epochs).")
    else:
        lead = [c for c in RUN_COLUMNS if c in runs.columns]
        _ui.dataframe(
            runs.select(lead).sort("cost_usd", descending=True, nulls_last=True),
            {
                "name": st.column_config.TextColumn("run"),
                "user_name": st.column_config.TextColumn("user"),
                "cost_usd": st.column_config.NumberColumn("$ per run", format="dollar"),
                "usd_per_mtok": st.column_config.NumberColumn("$ per 1M tokens", format="$%.4f"),
                "usd_per_epoch": st.column_config.NumberColumn("$ per epoch", format="dollar"),
                "mfu": st.column_config.NumberColumn("MFU", format="percent"),
            },
        )
        st.caption(
            "$ per run is the run's cost in this view; $ per 1M tokens and $ per epoch divide it by the run's "
            "work in the view; MFU is model FLOPs utilization (docs/metrics.md, Unit costs and MFU)."
        )
    trend = t.weekly
    st.subheader("$ per 1M tokens by week")
    if trend.is_empty():
        no_rows("No training run with a token count in this view.")
    else:
        fig = px.line(  # ISO weeks as categories: one week's point sits on its label, not on a ms axis
            trend.sort("week").with_columns(pl.col("week").dt.strftime("%G-W%V").alias("iso_week")),
            x="iso_week",
            y="usd_per_mtok",
            color="team",
            markers=True,
            hover_data={"runs": True, "cost_usd": ":$,.2f"},
            color_discrete_sequence=px.colors.qualitative.Safe,
            labels={"iso_week": "week", "usd_per_mtok": "$ per 1M tokens", "cost_usd": "cost"},
        )
        fig.update_layout(height=280, margin={"t": 20, "b": 10})
        fig.update_yaxes(tickprefix="$", rangemode="tozero")
        fig.update_xaxes(type="category")
        _ui.plotly_chart(fig, key="weekly_usd_per_mtok")
        st.caption(
            "Per team, each training run's in-view cost ÷ its in-view tokens, summed over the runs whose "
            "in-view time starts that week. A rising line: the team pays more for the same tokens."
        )
    with st.expander("Detail: runs of any model size compared, and every unit cost"):
        plot = units.filter(
            pl.col("usd_per_mtok").is_not_null() & pl.col("mfu").is_not_null() & (pl.col("params") > 0)
        ).with_columns(
            (pl.col("usd_per_mtok") / (pl.col("params") / 1e9)).alias("usd_per_mtok_per_bparam"),
            size_band(pl.col("params")).alias("size"),
            pl.when(pl.col("mfu_basis").str.starts_with("inference"))
            .then(pl.lit("serving (inference: 2·N FLOPs per token)"))
            .otherwise(pl.lit("training and fine-tuning (6·N FLOPs per token)"))
            .alias("work"),
            pl.format("{} M parameters", (pl.col("params") / 1e6).round(0).cast(pl.Int64)).alias(
                "model size"
            ),
        )
        if not plot.is_empty():
            per_param = (
                st.radio(
                    "Compare runs",
                    [PER_PARAM, BY_SIZE],
                    horizontal=True,
                    key="training_scatter",
                    help="A run's FLOPs per token grow with its model's parameter count N, so a 13 B model's "
                    "tokens cost far more than a 124 M one's at the same MFU.",
                )
                == PER_PARAM
            )
            fig = px.scatter(
                plot.sort("params"),
                x="mfu",
                y="usd_per_mtok_per_bparam" if per_param else "usd_per_mtok",
                color="gpu_model" if per_param else "size",
                symbol="size" if per_param else "gpu_model",
                facet_col="work",
                hover_name="job_id",
                hover_data={"model size": True, "usd_per_mtok": ":$.4f", "work": False},
                log_y=True,
                category_orders={"size": SIZE_BANDS, "work": sorted(plot["work"].unique(), reverse=True)},
                color_discrete_sequence=px.colors.qualitative.Safe,
                labels={
                    "mfu": "MFU (model FLOPs utilization)",
                    "usd_per_mtok": "$ per 1M tokens (log)",
                    "usd_per_mtok_per_bparam": "$ per 1M tokens per billion parameters (log)",
                    "gpu_model": "GPU model",
                    "size": "model size",
                },
            )
            fig.for_each_annotation(lambda a: a.update(text=a.text.split("=")[-1]))
            fig.update_layout(height=380, margin={"t": 30, "b": 10}, legend={"font": {"size": 11}})
            fig.update_xaxes(tickformat=".0%", rangemode="tozero", matches=None)  # serving's MFU is far lower
            fig.update_yaxes(dtick=1, tickprefix="$")  # one label per decade, not the minor ticks
            _ui.plotly_chart(fig, key="unit_costs")
            st.caption(
                (
                    "Each point is one run. Divided by the model's billions of parameters, a run's $ per 1M tokens "
                    "depends only on its GPU's price ÷ peak FLOPs and its MFU, so runs of any size compare: within "
                    "one colour (one GPU model), lower right is better (high MFU, cheap tokens)."
                    if per_param
                    else "Each point is one run, coloured by model size: a bigger model needs more FLOPs per token, so "
                    "compare points of one colour only; within one, lower right is better (high MFU, cheap tokens)."
                )
                + " Serving and training are drawn apart: a served token costs 2·N FLOPs, a trained one 6·N."
            )
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
        config = {
            "mfu": st.column_config.NumberColumn("MFU", format="percent"),
            "tokens_per_s_per_gpu": st.column_config.NumberColumn("tokens/s per GPU", format="%,.0f"),
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
