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
from gpuledger.upload import UploadResult
from pages import _data, _scope, _ui
from pages._ui import KPI_WIDTHS, na, num, pct, usd

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

run = result.run
is_training_log = result.training_runs is not None and not result.training_runs.is_empty()
if run is not None and is_training_log:
    st.subheader(f"Run {_ui.md(run.run)}", anchor=False)  # no anchor link built from a user-supplied name
    job_ids = result.jobs["job_id"].to_list() if result.jobs is not None else []
    st.caption(
        f"Named after {_ui.md(run.run_basis)} · model: "
        + (_ui.md(run.model) if run.model else na(run.model_reason or "unknown"))
        + " · output folder: "
        + (_ui.md(run.output_dir) if run.output_dir else na(run.output_reason or "unknown"))
        + (f" · job {_ui.code(job_ids[0])}" if len(job_ids) == 1 else "")
    )

untimed = (
    facts != (None, None)
    and not result.gpu_assumed
    and result.training_runs is not None
    and not result.training_runs.is_empty()
    and "runtime_s" in result.training_runs.columns
    and result.training_runs["runtime_s"].is_null().all()
)
if untimed:  # GPUs given, but the log says for how long nowhere (collectors/gpu_facts.py times a run by it)
    st.warning(
        f"Priced nothing: {_ui.md(', '.join(result.needs_gpu[:3]) or 'this run')} records no runtime (a "
        "checkpoint's `trainer_state.json` has no `train_runtime`; only the final one written at the end of "
        "training does), so gpuledger cannot tell how long the GPUs ran. Upload the run's final "
        "`trainer_state.json`, or a job record with its start and end (`gpuledger ingest` of a jobs CSV or "
        "sacct), to price it.",
        icon=":material/schedule:",
    )
if result.needs_gpu and not result.gpu_assumed:
    with st.form("upload_gpu_form", border=True):
        st.markdown(
            f"**Which GPUs ran it?** {_ui.md(', '.join(result.needs_gpu[:3]))} names no GPU model or count, so "
            "it cannot be priced. Say what ran it (the ingest's `--gpu-model` and `--gpu-count`):"
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
unpriced = bool(result.needs_gpu and not result.gpu_assumed)  # no GPUs known: no cost, not a $0 cost
if s is not None:
    telemetry = s["mean_util_pct"] is not None
    na_ = _ui.NA  # the reasons go in one line under the cards: "n/a (reason)" would be cut off there
    cols = st.columns(KPI_WIDTHS)
    cols[0].metric("Spend", na_ if unpriced else usd(s["spend_usd"]))
    cols[1].metric("GPU-hours", na_ if unpriced else num(s["gpu_hours"], 1))
    cols[2].metric("Mean utilization", pct(s["mean_util_pct"]) if telemetry else na_)
    cols[3].metric("Idle $", usd(s["idle_usd"]) if telemetry else na_)
    cols[4].metric("Waste teams control", usd(s["team_waste_usd"]) if telemetry and not unpriced else na_)
    unknown = []
    if unpriced:
        unknown.append(
            "Spend and GPU-hours are n/a until you say which GPUs ran it (above): the log does not say, so its "
            "cost is unknown, not $0."
        )
    if not telemetry:
        unknown.append(
            "Utilization, idle $ and waste $ are n/a: the file has no utilization samples, so idle and "
            "under-used time are unknown, not zero. Pair a training log with the GPUs' nvidia-smi or DCGM log "
            "(`gpuledger ingest`) for its waste."
        )
    if unknown:
        st.caption(" ".join(unknown))
    if s.get("unpriced_gpu_hours"):
        st.caption(
            f"{num(s['unpriced_gpu_hours'], 1)} GPU-hours have no price for their GPU model and are not in the "
            "spend (add a price in the settings file)."
        )


SMOOTH = 25  # log entries in the loss curve's moving mean


def training_log(result: UploadResult, unpriced: bool) -> None:
    """The run's log drawn: loss (and eval loss) by step, throughput, $ per epoch and MFU."""
    log = result.train_log
    runs = result.training_runs
    if log is None or runs is None or runs.is_empty():
        return
    st.subheader("Training log")
    r = runs.row(0, named=True)
    u = result.unit_costs
    uc = u.filter(pl.col("job_id") == r["job_id"]).row(0, named=True) if u is not None and u.height else {}
    cols = st.columns(4)
    if r.get("tokens_per_s"):
        unit, thr, thr_help = (
            "tokens/s",
            num(r["tokens_per_s"], 1),
            "train_tokens_per_second: the run's average",
        )
    elif r.get("samples_per_s"):
        unit, thr, thr_help = (
            "samples/s",
            num(r["samples_per_s"], 3),
            "train_samples_per_second: the run's average",
        )
    elif r.get("steps") and r.get("runtime_s"):
        unit, thr, thr_help = "steps/h", num(3600 * r["steps"] / r["runtime_s"], 1), "steps ÷ runtime"
    else:
        unit, thr, thr_help = "", _ui.NA, "the log has no runtime"
    cols[0].metric(f"Throughput ({unit})" if unit else "Throughput", thr, help=thr_help)
    runtime = r.get("runtime_s")
    cols[1].metric("Runtime", f"{num(runtime / 3600, 1)} h" if runtime else na("not logged"))
    epoch = uc.get("usd_per_epoch")
    cols[2].metric(
        "$ per epoch",
        usd(epoch)
        if epoch is not None
        else na("not priced yet" if unpriced else ("no epochs logged" if not r.get("epochs") else "no cost")),
        help=f"{num(r['epochs'], 2)} epochs logged" if r.get("epochs") else None,
    )
    mfu = uc.get("mfu")
    cols[3].metric(
        "MFU",
        pct(100.0 * mfu) if mfu is not None else na("GPUs unknown" if unpriced else "see below"),
        help=uc.get("mfu_basis") if mfu is not None else uc.get("mfu_reason"),
    )
    if mfu is not None and "total_flos" in str(uc.get("mfu_basis")):
        st.caption(
            f"MFU from the log's total_flos ({r['total_flos']:.3g} FLOPs, the trainer's own 6·N·tokens count) "
            f"÷ its runtime ÷ the GPUs' dense peak ({num(uc.get('peak_tflops'), 1)} TFLOP/s per GPU): the "
            f"model's size is unknown. Basis: {_ui.md(uc.get('mfu_basis'))}."
        )
    elif mfu is None and uc.get("mfu_reason") and not unpriced:
        st.caption(f"MFU n/a: {_ui.md(uc['mfu_reason'])}.")
    if log.is_empty() or log["loss"].is_null().all():
        st.caption("The log has no loss values to draw.")
        return
    losses = log.filter(pl.col("loss").is_not_null()).sort("step")
    curves = losses.select("step", pl.lit("training loss").alias("curve"), pl.col("loss").alias("value"))
    if losses.height >= 200:  # a noisy curve: its trend beside it, the mean of SMOOTH entries around each
        curves = pl.concat(
            [
                curves,
                losses.select(
                    "step",
                    pl.lit(f"training loss, mean of {SMOOTH}").alias("curve"),
                    pl.col("loss").rolling_mean(SMOOTH, center=True, min_samples=1).alias("value"),
                ),
            ]
        )
    evals = log.filter(pl.col("eval_loss").is_not_null()).select(
        "step", pl.lit("eval loss").alias("curve"), pl.col("eval_loss").alias("value")
    )
    fig = px.line(
        pl.concat([curves, evals]) if evals.height else curves,
        x="step",
        y="value",
        color="curve",
        labels={"step": "optimizer step", "value": "loss", "curve": ""},
        color_discrete_map={
            "training loss": "#6BAED6",
            f"training loss, mean of {SMOOTH}": "#08306B",
            "eval loss": "#D55E00",
        },
    )
    fig.update_layout(
        margin={"t": 30, "b": 10},
        height=340,
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
    )
    for trace in fig.data:
        if trace.name == "training loss" and len(fig.data) > 1:
            trace.opacity = 0.5
    fig.update_xaxes(separatethousands=True)
    _ui.plotly_chart(fig, key="upload_loss")
    timed = log.with_columns(
        pl.coalesce(
            pl.col("elapsed_s"), (pl.col("ts") - pl.col("ts").min()).dt.total_seconds(fractional=True)
        ).alias("t")
    ).filter(pl.col("t").is_not_null())
    if timed.height >= 2:
        rate = (
            timed.sort("step")
            .with_columns(
                (pl.col("step").diff() / (pl.col("t").diff() / 3600.0)).alias("steps_per_h"),
                (pl.col("t") / 3600.0).alias("hours"),
            )
            .filter(pl.col("steps_per_h").is_finite() & (pl.col("steps_per_h") > 0))
        )
        if rate.height:
            fig = px.line(
                rate,
                x="hours",
                y="steps_per_h",
                labels={"hours": "hours since the start", "steps_per_h": "steps per hour"},
            )
            fig.update_layout(margin={"t": 10, "b": 10}, height=260)
            _ui.plotly_chart(fig, key="upload_throughput")
    else:
        st.caption(
            f"{log.height:,} log entries, steps {num(log['step'].min(), 0)}–{num(log['step'].max(), 0)}. The log "
            "times no entry, so throughput is the run's average only."
        )


if result.train_log is not None:
    training_log(result, unpriced)


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
    if "mean_util_pct" in jobs.columns and "waste_usd" in jobs.columns:  # no telemetry: waste unknown, not $0
        jobs = jobs.with_columns(
            pl.when(pl.col("mean_util_pct").is_null() & (pl.col("waste_usd").abs() < 0.005))
            .then(None)
            .otherwise(pl.col("waste_usd"))
            .alias("waste_usd")
        )
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
