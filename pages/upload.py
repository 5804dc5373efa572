"""Upload: analyse one job log or telemetry file at once, without touching the fleet's ledger.

The file is ingested (a temp copy, the same parsers and checks as ``gpuledger ingest``) into an in-memory
ledger of its own, and the page shows what landed and the same analyses as the Overview, Jobs and
Recommendations pages. A file gpuledger cannot read shows the CLI's one-line error and what to do next.
"""

from __future__ import annotations

import re

import plotly.express as px
import polars as pl
import streamlit as st

from collectors.registry import PARSERS
from gpuledger.ledger.reference import catalog
from pages import _data, _scope, _ui
from pages._ui import KPI_WIDTHS, num, pct, usd

_ui.require_router()
st.title("Upload a file")
st.write(
    "Drop a job log or a telemetry file to see its cost, utilization and waste at once. It is analysed on "
    "its own, in memory: the fleet's ledger is not changed (use `gpuledger ingest FILE` for that)."
)
with st.expander("Accepted formats"):
    st.markdown("\n".join(f"- `{name}` — {p.description}" for name, p in sorted(PARSERS.items())))

with st.expander("Options"):
    cluster = st.text_input("Cluster name (for files that carry none)", key="upload_cluster")
    tz = st.text_input(
        "Time zone of naive timestamps (IANA, e.g. Europe/Berlin; empty: this server's zone for nvidia-smi, "
        "UTC otherwise)",
        key="upload_tz",
    )

limit_mb = int(_scope.settings().max_upload_mb)
uploaded = st.file_uploader("Job log or telemetry file", key="upload_file", max_upload_size=limit_mb)
if uploaded is None:
    st.stop()
if uploaded.size > limit_mb * 1024 * 1024:  # the server enforces it too (gpuledger dashboard sets it)
    st.error(
        f"{_ui.md(uploaded.name)} is larger than the upload limit of {limit_mb:,} MB. Read it with "
        "`gpuledger ingest FILE`, or raise dashboard.max_upload_mb in the settings.",
        icon=":material/error:",
    )
    st.stop()

gpu_facts = st.session_state.get("upload_gpu") or {}
facts = gpu_facts.get(uploaded.file_id) or (None, None)
result = _data.analyse_upload(uploaded.name, uploaded.getvalue(), cluster, tz, *facts)
if result.error:
    named_line = re.match(r"^.+?:(\d+): ", result.error)
    if result.what_next:  # stopped at a limit: the file may be fine
        what_next = result.what_next
    elif named_line:
        what_next = f"Fix line {int(named_line.group(1)):,} (or choose the right file), then upload it again."
    else:
        what_next = (
            "The file is not in a format gpuledger reads, or it is damaged: choose the right file, then upload "
            "it again."
        )
    formats = (
        ""
        if result.what_next
        else " The accepted formats and their columns are listed above and in the README; `gpuledger ingest "
        "--help` shows them too."
    )
    st.error(f"{_ui.md(result.error)}\n\nNothing was analysed. {what_next}{formats}", icon=":material/error:")
    st.stop()

ingest = result.ingest or {}
rows = ", ".join(f"{n:,} {table}" for table, n in (ingest.get("rows") or {}).items() if n) or "no rows"
st.success(
    f"Read **{_ui.md(result.name)}** as {_ui.code(ingest.get('format'))}: {rows}.",
    icon=":material/check_circle:",
)
for reason, n in (ingest.get("skipped") or {}).items():
    st.caption(f"Skipped {n:,} rows: {_ui.md(reason)}")

if result.needs_gpu and not result.gpu_assumed:
    with st.form("upload_gpu_form", border=True):
        st.markdown(
            f"**Which GPUs ran it?** {_ui.md(', '.join(result.needs_gpu[:3]))} names no GPU model or count, so "
            "it cannot be priced. Say what ran it:"
        )
        c1, c2 = st.columns([3, 1])
        model = c1.selectbox("GPU model", sorted(m.model for m in catalog()), key="upload_gpu_model")
        count = c2.number_input(
            "GPUs", min_value=1, max_value=100_000, value=1, step=1, key="upload_gpu_count"
        )
        if st.form_submit_button("Price the run", icon=":material/paid:"):
            st.session_state["upload_gpu"] = gpu_facts | {uploaded.file_id: (model, int(count))}
            st.rerun()
elif result.gpu_assumed:
    st.info(f"Priced as {_ui.md(result.gpu_assumed)}.", icon=":material/paid:")

s = result.summary
if s is not None:
    cols = st.columns(KPI_WIDTHS)
    cols[0].metric("Spend", usd(s["spend_usd"]))
    cols[1].metric("GPU-hours", num(s["gpu_hours"], 1))
    cols[2].metric(
        "Mean utilization",
        pct(s["mean_util_pct"]) if s["mean_util_pct"] is not None else _ui.na("no telemetry"),
    )
    cols[3].metric("Idle $", usd(s["idle_usd"]))
    cols[4].metric("Waste $", usd(s["waste_usd"]))
    if s.get("unpriced_gpu_hours"):
        st.caption(
            f"{num(s['unpriced_gpu_hours'], 1)} GPU-hours have no price for their GPU model and are not in the "
            "spend (add a price in the settings file)."
        )


def utilization_lines(frame: pl.DataFrame, color: str, key: str, legend: str) -> None:
    fig = px.line(
        frame,
        x="ts",
        y="util_pct",
        color=color,
        labels={"util_pct": "utilization (%)", "ts": "time (UTC)", color: legend},
    )
    fig.update_layout(margin={"t": 10, "b": 10}, height=320, yaxis_range=[0, 100])
    _ui.plotly_chart(fig, key=key)


def gpu_lines(timeline: pl.DataFrame) -> pl.DataFrame:
    """analytics.timeline.gpu_timeline's rows with ``gpu``, the line's name: the GPU, or "N other GPUs" for
    the line that pools the GPUs past the readable number."""
    return timeline.with_columns(_ui.pooled_name(pl.col("gpu_id"), "GPU").alias("gpu"))


if result.timeline is not None and not result.timeline.is_empty():
    st.subheader("Utilization over time")
    if result.timeline_groups is None or result.gpu_groups is None:
        utilization_lines(gpu_lines(result.timeline), "gpu", "upload_timeline", "GPU")
        pooled = int(result.timeline["others"].max() or 0)
        if pooled:
            st.caption(
                f"{_data.FLEET_GROUP_PAST - 1 + pooled:,} GPUs on one host: the {_data.FLEET_GROUP_PAST - 1} "
                "with the most unused GPU-hours have their own line and the others share one."
            )
    else:
        # more GPUs than lines a reader can tell apart: one line per host (past FLEET_GROUP_PAST hosts, those
        # with the most unused GPU-hours and one line for the rest), each host opening onto its GPUs
        by = "host"
        groups = result.timeline_groups
        label = _ui.pooled_name(pl.col("key").fill_null(f"unknown {by}"), by)
        utilization_lines(groups.with_columns(label.alias("key")), "key", "upload_timeline", by)
        pooled = int(groups["others"].max() or 0)
        hosts = groups.filter(pl.col("others") == 0)["key"].n_unique() + pooled  # with telemetry
        count = (
            f"{hosts:,}; the {hosts - pooled:,} with the most unused GPU-hours have their own line and the "
            f"other {pooled:,} share one"
            if pooled
            else f"{hosts:,}"
        )
        st.caption(
            f"One line per {by} ({count}), the time-weighted mean over its GPUs; "
            f"{result.gpu_groups.height:,} GPUs in the file."
        )
        pick = _ui.open_group(result.gpu_groups["key"], by, "upload_drill", f"Open a {by}: one line per GPU")
        if pick is not None:
            many = (result.group_gpus or {}).get(pick[1])
            if many is not None:  # more GPUs than lines: the most unused have a line, the rest share one
                utilization_lines(gpu_lines(many), "gpu", "upload_drill_timeline", "GPU")
                if pooled_gpus := int(many["others"].max() or 0):
                    st.caption(
                        f"{pick[0]}: {pooled_gpus + _data.FLEET_GROUP_PAST - 1:,} GPUs; the "
                        f"{_data.FLEET_GROUP_PAST - 1} with the most unused GPU-hours have their own line and "
                        "the others share one."
                    )
            else:
                ids = result.gpu_groups.filter(pl.col("key").eq_missing(pick[1]))["gpu_id"]
                utilization_lines(
                    gpu_lines(result.timeline.filter(pl.col("gpu_id").is_in(ids.implode()))),
                    "gpu",
                    "upload_drill_timeline",
                    "GPU",
                )

if result.jobs is not None and not result.jobs.is_empty():
    st.subheader("Jobs")
    first = [
        "job_id",
        "cost_usd",
        "waste_usd",
        "name",
        "kind",
        "state",
        "gpu_model",
        "gpu_count",
        "gpu_hours",
    ]
    first += ["mean_util_pct", "usd_per_mtok", "start_ts", "end_ts"]
    jobs = result.jobs.select([c for c in first if c in result.jobs.columns])
    _ui.dataframe(jobs)
    st.caption("Empty cells: unknown (no telemetry, no token count, or no price).")

if result.recommendations is not None and not result.recommendations.is_empty():
    st.subheader("Recommendations")
    for r in result.recommendations.iter_rows(named=True):
        money = (
            f"{usd(r['usd_per_week'])} / week"
            if r["usd_per_week"] is not None
            else f"one-off {usd(r['saving_usd'])}"
        )
        st.markdown(
            f"**{money}** · {_ui.md(r['kind_label'])} · {_ui.md(r['evidence'])} {_ui.md(r['action'])}"
        )
