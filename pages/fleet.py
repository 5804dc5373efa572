"""Fleet: utilization of every GPU hour by hour (from the per-GPU-minute rollup), the GPUs that sat idle
longest, and utilization by GPU model and cluster (analytics/timeline.py, analytics/utilization.py)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import polars as pl
import streamlit as st

from pages import _data, _scope, _ui, _view
from pages._ui import no_rows

filters = _view.open_page("Fleet")
f = _data.fleet(filters)


def heatmap(cells: pl.DataFrame, key: str, row: pl.Expr, title: str) -> None:
    """One row per ``row`` value, one column per hour: the cells' mean utilization (already aggregated per
    GPU or group; two GPUs whose labels coincide share a row, weighted by telemetry seconds)."""
    cells = (
        cells.with_columns(row.alias("row"))
        .group_by("row", "hour", maintain_order=True)
        .agg(
            (
                (pl.col("mean_util_pct") * pl.col("covered_s")).sum()
                / pl.col("covered_s").filter(pl.col("mean_util_pct").is_not_null()).sum()
            ).alias("mean_util_pct")
        )
    )
    rows = cells["row"].unique(maintain_order=True)
    hours = pl.datetime_range(cells["hour"].min(), cells["hour"].max(), "1h", eager=True)
    r = cells["row"].replace_strict(rows, pl.int_range(rows.len(), eager=True)).to_numpy()
    c = ((cells["hour"] - hours[0]).dt.total_seconds() // 3600).cast(pl.Int64).to_numpy()
    z = np.full((rows.len(), hours.len()), np.nan)
    z[r, c] = cells["mean_util_pct"].cast(pl.Float64).fill_null(np.nan).fill_nan(np.nan).to_numpy()
    fig = go.Figure(
        go.Heatmap(
            x=hours.to_numpy(),
            y=rows.to_list(),
            z=z,
            zmin=0,
            zmax=100,
            colorscale="Viridis",
            colorbar={"title": "util %"},
            hovertemplate="%{y}<br>%{x|%Y-%m-%d %H:00} UTC<br>%{z:.0f} %<extra></extra>",
        )
    )
    fig.update_layout(
        height=min(1400, 140 + 22 * rows.len()),
        margin={"t": 10, "b": 10},
        yaxis={"autorange": "reversed", "tickfont": {"size": 12}, "type": "category"},
        xaxis_title="hour (UTC)",
    )
    _ui.plotly_chart(fig, key=key)
    n = rows.len()
    st.caption(
        f"{n:,} row{'' if n == 1 else 's'} ({title}). Blank cells: no telemetry. Hover for the exact value."
    )


GPU_LABEL = _ui.pooled_name(
    pl.concat_str(
        pl.col("host").fill_null("unknown host"),
        pl.lit(" · "),
        pl.col("gpu_model").fill_null("unknown model"),
        pl.lit(" · "),
        # the id's first 12 characters (GPU-xxxxxxxx) when they tell it apart, else the whole id
        # (host:index ids of a long host name, MIG instances of one GPU)
        pl.when(pl.col("gpu_id").n_unique().over(pl.col("gpu_id").str.slice(0, 12)) == 1)
        .then(pl.col("gpu_id").str.slice(0, 12))
        .otherwise(pl.col("gpu_id")),
    ),
    "GPU",
)


def group_label(by: str) -> pl.Expr:
    """A grouped heatmap row's name: the group's, "unknown host" for GPUs whose ledger names none, and
    "N other hosts" for the row that pools the groups past the readable number (group_hour_heatmap)."""
    return _ui.pooled_name(pl.col("key").fill_null(f"unknown {by}"), by)


def grouped_title(by: str, sizes: pl.DataFrame, n_gpus: int, what: str | None = None) -> str:
    """The caption of a grouped heatmap: what a row is and, when some were pooled, which were kept."""
    n = sizes.height
    what = what or f"one per {by}"
    pooled = (
        f"; {n:,} {by}s, so the {_data.FLEET_GROUP_PAST - 1} with the most unused GPU-hours have a row "
        f"and the other {n - _data.FLEET_GROUP_PAST + 1:,} share the last one"
        if n > _data.FLEET_GROUP_PAST
        else ""
    )
    return f"{what}, the mean over its GPUs; {n_gpus:,} GPUs in the view{pooled}"


def drill_gpus(by: str, name: str, value: str | None, *outer: tuple[str, str | None]) -> None:
    drill = _data.fleet_drill(filters, (*outer, (by, value)))
    if drill.is_empty():
        no_rows(f"No telemetry from {by} {name} in this view.")
    else:
        pooled = int(drill["others"].max() or 0)
        kept = (
            f"; {_data.FLEET_GROUP_PAST - 1 + pooled:,} GPUs, so the {_data.FLEET_GROUP_PAST - 1} with the most "
            f"unused GPU-hours have a row and the other {pooled:,} share the last one"
            if pooled
            else ""
        )
        heatmap(drill, "fleet_drill_heatmap", GPU_LABEL, f"the GPUs of {by} {name}{kept}")


st.subheader("Utilization per hour")
n_gpus = f.n_gpus
if n_gpus == 0:
    no_rows("No telemetry in this view.")
elif f.heatmap is not None:  # up to _data.FLEET_GROUP_PAST GPUs: one row per GPU
    heatmap(f.heatmap, "fleet_heatmap", GPU_LABEL, "host · model · GPU id")
else:
    # One row per host, unless the view's hosts would be too many rows themselves: then one per cluster, a
    # cluster opening onto its hosts when it has more GPUs than a per-GPU heatmap shows, and a host onto its
    # GPUs. The default only: the choice is the user's.
    by = st.radio(
        "One row per",
        ["host", "cluster"],
        index=0 if f.n_hosts <= _data.FLEET_GROUP_PAST else 1,
        horizontal=True,
        key="fleet_group",
    )
    groups, sizes = _data.fleet_groups(filters, by)  # aggregated in DuckDB over every GPU of the view
    heatmap(groups, "fleet_heatmap", group_label(by), grouped_title(by, sizes, n_gpus))
    big = by == "cluster" and (sizes["gpus"].max() or 0) > _data.FLEET_GROUP_PAST
    label = f"Open a {by}: " + ("its hosts, or its GPUs when it has few" if big else "one row per GPU")
    pick = _ui.open_group(sizes["key"], by, "fleet_drill", label)
    if pick is not None:
        name, value = pick
        gpus = sizes.filter(pl.col("key").eq_missing(value))["gpus"].max() or 0
        if by == "cluster" and gpus > _data.FLEET_GROUP_PAST:
            hosts, host_sizes = _data.fleet_groups(filters, "host", within=("cluster", value))
            heatmap(
                hosts,
                "fleet_cluster_hosts",
                group_label("host"),
                grouped_title("host", host_sizes, gpus, f"the hosts of cluster {name}"),
            )
            host = _ui.open_group(
                host_sizes["key"], "host", "fleet_drill_host", "Open a host: one row per GPU"
            )
            if host is not None:
                drill_gpus("host", *host, ("cluster", value))
        else:
            drill_gpus(by, name, value)

st.subheader("GPUs idle longest")
idle = f.idle
if idle.is_empty():
    no_rows("No GPU sat idle in this view.")
else:
    s = _scope.settings()
    prices = _data.prices_in_force()

    def price(model: str | None, cluster: str | None) -> float | None:
        if model is None:
            return None
        c = s.clusters.get(cluster or "")
        # the rate unallocated hours are priced at (analytics/waste.py): the cluster's tier, else on_demand
        return prices.rate(model, (c.tier if c and c.tier else s.default_tier), cluster)

    idle = idle.with_columns(
        pl.Series(
            "price",
            [price(m, c) for m, c in zip(idle["gpu_model"], idle["cluster"], strict=True)],
            dtype=pl.Float64,
        )
    ).with_columns(
        (pl.col("idle_h") * pl.col("price")).alias("idle_usd"),
        (100.0 * pl.col("idle_share")).alias("idle_pct"),
    )
    table = idle.select(
        "gpu_id",
        "host",
        "cluster",
        "gpu_model",
        "idle_usd",
        "idle_h",
        "telemetry_h",
        "idle_pct",
        "allocated_idle_h",
        "unallocated_h",
        "mean_util_pct",
    )
    _ui.dataframe(
        table,
        {
            "idle_h": st.column_config.NumberColumn("idle (h)", format="%.1f"),
            "telemetry_h": st.column_config.NumberColumn("with telemetry (h)", format="%.1f"),
            "idle_pct": st.column_config.NumberColumn("idle (% of telemetry)", format="%.1f %%"),
            "allocated_idle_h": st.column_config.NumberColumn("idle while a job held it (h)", format="%.1f"),
            "unallocated_h": st.column_config.NumberColumn("held by no job (h)", format="%.1f"),
            "mean_util_pct": st.column_config.NumberColumn("mean utilization (%)", format="%.1f %%"),
        },
    )
    st.caption(
        "Idle: samples at or under the idle threshold (Settings), of any length. Idle $: idle hours at the price "
        "in force for the GPU model and its cluster's tier (empty: no price for the model). A GPU with no "
        "utilization reading has an empty mean utilization (unknown)."
    )

left, right = st.columns(2)
for col, key, title in ((left, "by_model", "By GPU model"), (right, "by_cluster", "By cluster")):
    with col:
        st.subheader(title)
        df = getattr(f, key)
        if df.is_empty():
            no_rows("No jobs in this view.")
        else:
            name = "GPU model" if key == "by_model" else "cluster"
            df = df.select(
                pl.col("key").fill_null("unknown").alias(name),
                "held_gpu_h",
                "mean_util_pct",
                "idle_gpu_h",
                (100.0 * pl.col("unknown_share")).alias("no_telemetry_pct"),
            )
            _ui.dataframe(
                df,
                {
                    "held_gpu_h": st.column_config.NumberColumn("held (GPU-h)", format="%.1f"),
                    "idle_gpu_h": st.column_config.NumberColumn("idle (GPU-h)", format="%.1f"),
                    "no_telemetry_pct": st.column_config.NumberColumn(
                        "held with no telemetry (%)", format="%.1f %%"
                    ),
                },
            )
