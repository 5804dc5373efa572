"""Fleet: utilization of every GPU hour by hour (from the per-GPU-minute rollup), the GPUs that sat idle
longest, and utilization by GPU model and cluster (analytics/timeline.py, analytics/utilization.py)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import polars as pl
import streamlit as st

from pages import _data, _ui
from pages._ui import column_config, no_rows, not_ready

filters = _data.open_page("Fleet")
try:
    f = _data.fleet(filters)
except _data.NotReady as exc:
    not_ready(exc)

st.subheader("Utilization per GPU per hour")
heat = f["heatmap"]
if heat.is_empty():
    no_rows("No telemetry in this view.")
else:
    # One row per GPU (ordered as the query returns them: by host), one column per hour of the view: a
    # matrix plotly sends as one binary array, instead of 75,000 (x, y, z) triples for 112 GPUs × 28 days.
    gpus = heat.select("gpu_id", "host", "gpu_model").unique(subset="gpu_id", maintain_order=True)
    labels = gpus.select(
        pl.concat_str(
            pl.col("host").fill_null("?"),
            pl.lit(" · "),
            pl.col("gpu_model").fill_null("unknown model"),
            pl.lit(" · "),
            pl.col("gpu_id").str.slice(0, 12),
        )
    ).to_series()
    hours = pl.datetime_range(heat["hour"].min(), heat["hour"].max(), "1h", eager=True)
    row = heat["gpu_id"].replace_strict(gpus["gpu_id"], pl.int_range(gpus.height, eager=True)).to_numpy()
    col = ((heat["hour"] - hours[0]).dt.total_seconds() // 3600).cast(pl.Int64).to_numpy()
    z = np.full((gpus.height, hours.len()), np.nan)
    z[row, col] = heat["mean_util_pct"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    n_gpus = gpus.height
    fig = go.Figure(
        go.Heatmap(
            x=hours.to_numpy(),
            y=labels.to_list(),
            z=z,
            zmin=0,
            zmax=100,
            colorscale="Viridis",
            colorbar={"title": "util %"},
            hovertemplate="%{y}<br>%{x|%Y-%m-%d %H:00} UTC<br>%{z:.0f} %<extra></extra>",
        )
    )
    fig.update_layout(
        height=min(1600, 120 + 11 * n_gpus),
        margin={"t": 10, "b": 10},
        yaxis={"autorange": "reversed", "showticklabels": n_gpus <= 140, "tickfont": {"size": 9}},
        xaxis_title="hour (UTC)",
    )
    _ui.plotly_chart(fig, key="fleet_heatmap")
    st.caption(
        f"{n_gpus} GPUs (host · model · GPU id), grouped by host. Blank cells: no telemetry. Each cell is the "
        "time-weighted mean utilization of the samples in that hour; hover for the exact value."
    )

st.subheader("GPUs idle longest")
idle = f["idle"]
if idle.is_empty():
    no_rows("No GPU sat idle in this view.")
else:
    st.dataframe(idle, hide_index=True, column_config=column_config(idle.columns))
    st.caption(
        "Idle: samples at or under the idle threshold (settings `idle_util_pct`), of any length. Unallocated: "
        "telemetry while no job held the GPU. Mean util is n/a (empty) for a GPU with no utilization reading."
    )

left, right = st.columns(2)
for col, key, title in ((left, "by_model", "By GPU model"), (right, "by_cluster", "By cluster")):
    with col:
        st.subheader(title)
        df = f[key]
        if df.is_empty():
            no_rows("No jobs in this view.")
        else:
            name = "GPU model" if key == "by_model" else "cluster"
            df = df.select(
                pl.col("key").alias(name), "held_gpu_h", "mean_util_pct", "idle_gpu_h", "unknown_share"
            )
            st.dataframe(df, hide_index=True, column_config=column_config(df.columns))
