"""Fleet: utilization of every GPU hour by hour (from the per-GPU-minute rollup), the GPUs that sat idle
longest, and utilization by GPU model and cluster (analytics/timeline.py, analytics/utilization.py)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import polars as pl
import streamlit as st

from analytics import timeline
from gpuledger.ledger.palette import HEATMAP_STATE_COLOURS, HEATMAP_STATE_LABELS, UTIL_SCALE
from pages import _data, _scope, _ui, _view
from pages._ui import no_rows

filters = _view.open_page("Fleet")
f = _data.fleet(filters)
_s = _scope.settings()
IDLE = f"at or under {_s.idle_util_pct:g} % utilization"
# the words each label of this page stands for: one definition per label (docs/metrics.md)
CELL_HELP = {
    "idle_held": f"a job held the GPU and it sat {IDLE} for at least half of the hour",
    "unallocated": "no job held the GPU for at least half of the hour (capacity nobody held)",
}
STATE_WORDS = {"busy": "held", "idle_held": "idle while held", "unallocated": "unallocated (no job held it)"}


def heatmap(cells: pl.DataFrame, key: str, row: pl.Expr, title: str) -> None:
    """One row per ``row`` value, one column per hour: the cells' mean utilization (already aggregated per
    GPU or group; two GPUs whose labels coincide share a row, weighted by telemetry seconds), with the
    cells whose state (analytics.timeline.cell_state) is idle while held or unallocated drawn in their own
    colours (palette.HEATMAP_STATE_COLOURS) instead of the utilization scale."""
    cells = (
        cells.with_columns(row.alias("row"))
        .group_by("row", "hour", maintain_order=True)
        .agg(
            (
                (pl.col("mean_util_pct") * pl.col("covered_s")).sum()
                / pl.col("covered_s").filter(pl.col("mean_util_pct").is_not_null()).sum()
            ).alias("mean_util_pct"),
            pl.col("covered_s", "held_idle_s", "unallocated_s").sum(),
        )
        .with_columns(timeline.cell_state().alias("state"))
    )
    rows = cells["row"].unique(maintain_order=True)
    hours = pl.datetime_range(cells["hour"].min(), cells["hour"].max(), "1h", eager=True)
    r = cells["row"].replace_strict(rows, pl.int_range(rows.len(), eager=True)).to_numpy()
    c = ((cells["hour"] - hours[0]).dt.total_seconds() // 3600).cast(pl.Int64).to_numpy()
    util = cells["mean_util_pct"].cast(pl.Float64).fill_null(np.nan).fill_nan(np.nan).to_numpy()
    state = cells["state"].to_numpy()
    shape = (rows.len(), hours.len())
    hover = np.full(shape, "", dtype=object)
    hover[r, c] = [
        f"{STATE_WORDS[s_]} · {'no reading' if np.isnan(u) else f'{u:.0f} % utilization'}"
        for s_, u in zip(state, util, strict=True)
    ]

    def layer(which: str | None) -> np.ndarray:
        z = np.full(shape, np.nan)
        keep = state == "busy" if which is None else state == which
        z[r[keep], c[keep]] = util[keep] if which is None else 1.0
        return z

    common = {
        "x": hours.to_numpy(),
        "y": rows.to_list(),
        "text": hover,
        "hoverongaps": False,
        "hovertemplate": "%{y}<br>%{x|%Y-%m-%d %H:00} UTC<br>%{text}<extra></extra>",
    }
    fig = go.Figure(
        go.Heatmap(
            z=layer(None),
            zmin=0,
            zmax=100,
            colorscale=UTIL_SCALE,
            colorbar={"title": "utilization (%)", "len": 0.8},
            name="utilization",
            **common,
        )
    )
    for which, colour in HEATMAP_STATE_COLOURS.items():
        fig.add_trace(
            go.Heatmap(
                z=layer(which),
                zmin=0,
                zmax=1,
                colorscale=[[0.0, colour], [1.0, colour]],
                showscale=False,
                name=HEATMAP_STATE_LABELS[which],
                **common,
            )
        )
        # a legend entry (a heatmap has none): a square of the state's colour
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                marker={"symbol": "square", "size": 13, "color": colour},
                name=HEATMAP_STATE_LABELS[which],
                showlegend=True,
                hoverinfo="skip",
            )
        )
    fig.update_layout(
        height=min(1400, 170 + 22 * rows.len()),
        margin={"t": 30, "b": 10},
        yaxis={"autorange": "reversed", "tickfont": {"size": 12}, "type": "category"},
        xaxis_title="hour (UTC)",
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "left", "x": 0.0},
    )
    _ui.plotly_chart(fig, key=key)
    n = rows.len()
    st.caption(
        f"{n:,} row{'' if n == 1 else 's'} ({title}). Each cell is one hour: blue by mean utilization while "
        f"a job held the GPU; orange: {CELL_HELP['idle_held']}; purple: {CELL_HELP['unallocated']}. Blank "
        "cells: no telemetry. Hover for the exact value."
        + (
            " With a team or user filter only that team's held minutes are drawn, so no cell is unallocated."
            if filters.teams or filters.users
            else ""
        )
    )


# one name for a GPU on every table and chart: host:index (analytics.timeline.gpu_label_sql), with its model
GPU_LABEL = _ui.pooled_name(
    pl.concat_str(pl.col("gpu_label"), pl.lit(" · "), pl.col("gpu_model").fill_null("unknown model")),
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
    heatmap(f.heatmap, "fleet_heatmap", GPU_LABEL, "host:index · model")
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
    idle = idle.with_columns((100.0 * pl.col("idle_share")).alias("idle_pct"))
    table = idle.select(
        "gpu_label",
        "cluster",
        "gpu_model",
        "idle_usd",
        "idle_h",
        "allocated_idle_h",
        "unallocated_idle_h",
        "idle_pct",
        "mean_util_pct",
    )
    NC = st.column_config.NumberColumn
    _ui.dataframe(
        table,
        {
            "gpu_label": st.column_config.TextColumn("GPU", help="host:index", width=135),
            "gpu_model": st.column_config.TextColumn("GPU model"),
            "idle_usd": NC(
                "idle ($)",
                format="dollar",
                help="Idle hours at the price in force on each day for the GPU model on its cluster, at the "
                "cluster's tier (empty: no price for the model).",
            ),
            "idle_h": NC(
                "idle (h)",
                format="%,.1f",
                help=f"Hours {IDLE}, of any length: idle while a job held the GPU + idle while none did.",
            ),
            "allocated_idle_h": NC(
                "idle: held (h)",
                format="%,.1f",
                help=f"Hours {IDLE} while a job held the GPU (any length).",
            ),
            "unallocated_idle_h": NC(
                "idle: unallocated (h)",
                format="%,.1f",
                help=f"Hours {IDLE} while no job held the GPU: capacity nobody held.",
            ),
            "idle_pct": NC(
                "idle (%)", format="%.1f %%", help="Idle hours ÷ the hours the GPU reported telemetry."
            ),
            "mean_util_pct": NC(
                "mean util. (%)",
                format="%.1f %%",
                help="Time-weighted over the telemetry; empty: the GPU reported no utilization (unknown).",
            ),
        },
    )
    st.caption(
        f"Idle: {IDLE}, of any length (hover a header for its definition). The waste figures price only the "
        f"idle while held in stretches of at least {_s.idle_min_minutes:g} min (the tables below)."
    )

for key, title in (("by_model", "By GPU model"), ("by_cluster", "By cluster")):
    st.subheader(title)
    df = getattr(f, key)
    if df.is_empty():
        no_rows("No jobs in this view.")
    else:
        name = "GPU model" if key == "by_model" else "cluster"
        alloc = _data.allocation(filters, "gpu_model" if key == "by_model" else "cluster")
        df = df.join(alloc, on="key", how="left").select(
            pl.col("key").fill_null("unknown").alias(name),
            "held_gpu_h",
            "allocation_pct",
            "mean_util_pct",
            "idle_gpu_h",
            "idle_allocated_usd",
            "unallocated_usd",
            (100.0 * pl.col("unknown_share")).alias("no_telemetry_pct"),
        )
        NC = st.column_config.NumberColumn
        _ui.dataframe(
            df,
            {
                name: st.column_config.TextColumn(name),
                "held_gpu_h": NC("held (GPU-h)", format="%,.1f", help="GPU-hours jobs held in the view."),
                "allocation_pct": NC(
                    "allocation (%)",
                    format="%.1f %%",
                    help="GPU-hours jobs held ÷ the capacity (declared or observed GPUs × hours) × 100; empty: "
                    "no capacity known for it.",
                ),
                "idle_allocated_usd": NC(
                    "idle while allocated ($)",
                    format="dollar",
                    help="The cost of the idle stretches of held GPUs: part of the waste teams control.",
                ),
                "unallocated_usd": NC(
                    "capacity no job held ($)",
                    format="dollar",
                    help="Paid-for capacity no job held, at its price: the platform's, not a team's waste.",
                ),
                "mean_util_pct": NC(
                    "mean utilization (%)",
                    format="%.1f %%",
                    help="Time-weighted over the held GPU-hours with a reading.",
                ),
                "idle_gpu_h": NC(
                    "idle stretches (GPU-h)",
                    format="%,.1f",
                    help=f"GPU-hours jobs held in idle stretches: {IDLE} for at least "
                    f"{_s.idle_min_minutes:g} min in a row (what 'idle while allocated' waste prices). "
                    "Hours no job held are not here: see 'idle: unallocated' above.",
                ),
                "no_telemetry_pct": NC(
                    "no telemetry (%)",
                    format="%.1f %%",
                    help="Share of the held GPU-hours without a utilization reading.",
                ),
            },
        )
