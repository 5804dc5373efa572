"""Fleet: utilization of every GPU hour by hour (from the per-GPU-minute rollup), the GPUs that sat idle
longest, and utilization by GPU model and cluster (analytics/timeline.py, analytics/utilization.py)."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
import streamlit as st

from pages import _data
from pages._ui import column_config, empty_state, no_rows, not_ready

st.title("Fleet")
if not _data.has_data():
    empty_state()
    st.stop()

filters = _data.current_filters()
st.caption(_data.describe_filters(filters))
try:
    f = _data.fleet(filters)
except _data.NotReady as exc:
    not_ready(exc)

st.subheader("Utilization per GPU per hour")
heat = f["heatmap"]
if heat.is_empty():
    no_rows("No telemetry in this view.")
else:
    labels = heat.with_columns(
        pl.concat_str(pl.col("host").fill_null("?"), pl.lit(" · "), pl.col("gpu_id").str.slice(0, 12)).alias(
            "gpu"
        )
    )
    n_gpus = labels["gpu"].n_unique()
    fig = go.Figure(
        go.Heatmap(
            x=labels["hour"].to_list(),
            y=labels["gpu"].to_list(),
            z=labels["mean_util_pct"].to_list(),
            zmin=0,
            zmax=100,
            colorscale="Viridis",
            colorbar={"title": "util %"},
            hovertemplate="%{y}<br>%{x}<br>%{z:.0f} %<extra></extra>",
        )
    )
    fig.update_layout(
        height=min(1400, 120 + 9 * n_gpus),
        margin={"t": 10, "b": 10},
        yaxis={"autorange": "reversed", "showticklabels": n_gpus <= 60},
        xaxis_title="hour (UTC)",
    )
    st.plotly_chart(fig, key="fleet_heatmap")
    st.caption(
        f"{n_gpus} GPUs. Blank cells: no telemetry. Each cell is the time-weighted mean of the samples in "
        "that hour."
    )

st.subheader("GPUs idle longest")
idle = f["idle"]
if idle.is_empty():
    no_rows("No GPU sat idle in this view.")
else:
    st.dataframe(idle, hide_index=True, column_config=column_config(idle.columns))
    st.caption("Idle: samples at or under the idle threshold (settings `idle_util_pct`), of any length.")

left, right = st.columns(2)
for col, key, title in ((left, "by_model", "By GPU model"), (right, "by_cluster", "By cluster")):
    with col:
        st.subheader(title)
        df = f[key]
        if df.is_empty():
            no_rows("No jobs in this view.")
        else:
            df = df.select("key", "held_gpu_h", "mean_util_pct", "idle_gpu_h", "unknown_share")
            st.dataframe(df, hide_index=True, column_config=column_config(df.columns))
