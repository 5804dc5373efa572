"""Jobs: every job in the view with its cost and waste first (analytics/jobs.py, the rows of ``gpuledger
jobs --json``); clicking a row opens the job, whose own URL is ``/jobs?job=ID``: its per-GPU utilization and
memory per minute with the idle stretches shaded and priced, its training metrics, diagnoses and
recommendations."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
import streamlit as st
from plotly.subplots import make_subplots

from analytics.slurm_usage import SLURM_BASIS
from gpuledger.ledger.palette import PART_COLOURS
from pages import _data, _ui
from pages._ui import (
    diagnosis_label,
    download_csv,
    md,
    na,
    no_rows,
    not_ready,
    num,
    pct,
    usd,
)

MAX_LINES = 8  # above this many GPUs the timeline shows the job's mean by default
FIRST = [
    "job_id",
    "cost_usd",
    "waste_usd",
    "idle_allocated_usd",
    "underused_usd",
    "failed_usd",
    "name",
    "team",
    "user_name",
    "state",
    "gpu_model",
    "gpu_count",
    "gpu_hours",
    "mean_util_pct",
    "util_basis",
    "start_ts",
    "end_ts",
]
SORTS = {
    "cost": "cost_usd",
    "waste": "waste_usd",
    "GPU-hours": "gpu_hours",
    "utilization (lowest first)": "mean_util_pct",
    "start (newest first)": "start_ts",
}


def merged_stretches(stretches: pl.DataFrame, idle_usd: float) -> list[tuple[object, object, float, int]]:
    """Overlapping idle stretches (of any of the job's GPUs) as one shaded band each: (start, end, its share
    of the job's idle $ by idle seconds, how many GPUs were idle in it)."""
    total_s = float(stretches["idle_s"].sum()) if stretches.height else 0.0
    bands: list[list[object]] = []
    for row in stretches.sort("start_ts").iter_rows(named=True):
        share = idle_usd * row["idle_s"] / total_s if total_s else 0.0
        if bands and row["start_ts"] <= bands[-1][1]:
            band = bands[-1]
            band[1] = max(band[1], row["end_ts"])
            band[2] += share
            band[3].add(row["gpu_id"])
        else:
            bands.append([row["start_ts"], row["end_ts"], share, {row["gpu_id"]}])
    return [(b[0], b[1], b[2], len(b[3])) for b in bands]


def job_view(job_id: str) -> None:
    """One job: figures, timeline with idle stretches, training metrics, diagnoses, recommendations."""
    data = _data.job(job_id)
    st.page_link("pages/jobs.py", label="All jobs", icon=":material/arrow_back:", query_params=filter_query())
    if data is None:
        st.warning(
            f"No job {md(job_id)} in the ledger that you may see. Check the id in the link, or pick a job in "
            "the table.",
            icon=":material/search_off:",
        )
        return
    r = data["row"]
    st.subheader(f"Job {md(job_id)}")
    st.caption(
        " · ".join(
            md(x)
            for x in (
                r.get("name"),
                f"team {r.get('team')}",
                f"user {r.get('user_name')}",
                r.get("state"),
                f"{r.get('gpu_count') or 0:g} × {r.get('gpu_model') or 'unknown GPU'}",
                f"{r.get('start_ts')} – {r.get('end_ts') or 'running'} UTC",
            )
            if x
        )
    )
    cols = st.columns(5)
    cols[0].metric("Cost", usd(r["cost_usd"]) if r["cost_usd"] is not None else na("no price for its GPU"))
    cols[1].metric("Waste $", usd(r["waste_usd"]))
    cols[2].metric(
        "Idle $", usd(r["idle_allocated_usd"]), help=f"{num(r['idle_gpu_hours'], 2)} idle GPU-hours"
    )
    cols[3].metric("GPU-hours", num(r["gpu_hours"], 1))
    slurm = r.get("util_basis") == SLURM_BASIS
    cols[4].metric(
        "Mean utilization" + (f" ({SLURM_BASIS})" if slurm else ""),
        pct(r["mean_util_pct"]) if r["mean_util_pct"] is not None else na("no telemetry"),
        help="sacct's TRESUsageInAve gres/gpuutil of the job's steps: a mean over the whole job, which "
        "cannot show idle stretches inside it (docs/metrics.md)"
        if slurm
        else None,
    )

    st.markdown("**Utilization and memory per minute**")
    gpus = r.get("gpu_count") or 0
    # a line per GPU up to MAX_LINES; past that their mean, split on request: per GPU, or per host past
    # FLEET_GROUP_PAST GPUs (a line each is no chart)
    split_by = "host" if gpus > _data.FLEET_GROUP_PAST else "gpu"
    lines = "gpu"
    if gpus > MAX_LINES:
        split = st.toggle(f"One line per {split_by.replace('gpu', 'GPU')}", value=False, key="job_per_gpu")
        lines = split_by if split else "job"
    tl = _data.job_timeline(job_id, lines)
    stretches = data["stretches"]
    if tl.is_empty():
        st.info(
            f"Job {md(job_id)} has no telemetry attributed to it: "
            + (
                f"its utilization is Slurm's own mean ({SLURM_BASIS}), with no per-minute series."
                if slurm
                else "its utilization is unknown (n/a)."
            )
        )
    else:
        fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.6, 0.4])
        named = tl.with_columns(
            _ui.pooled_name(pl.col("gpu_id"), "host" if lines == "host" else "GPU").alias("line")
        )
        for (name,), part in named.group_by("line", maintain_order=True):
            fig.add_trace(
                go.Scatter(x=part["ts"], y=part["util_pct"], name=name, mode="lines", legendgroup=name), 1, 1
            )
            mem = part.select((pl.col("mem_used_mib") / 1024.0).alias("gib"))["gib"]
            fig.add_trace(
                go.Scatter(x=part["ts"], y=mem, name=name, mode="lines", legendgroup=name, showlegend=False),
                2,
                1,
            )
        for x0, x1, usd_, gpus in merged_stretches(stretches, float(r["idle_allocated_usd"] or 0.0)):
            fig.add_vrect(
                x0=x0,
                x1=x1,
                fillcolor=PART_COLOURS["idle_allocated_usd"],
                opacity=0.18,
                line_width=0,
                layer="below",
                annotation_text=f"idle {usd(usd_)} · {gpus} GPU{'s' if gpus != 1 else ''}",
                annotation_position="top left",
                annotation_font_size=11,
            )
        fig.update_yaxes(title_text="utilization (%)", range=[0, 105], row=1, col=1)
        fig.update_yaxes(title_text="memory used (GiB)", rangemode="tozero", row=2, col=1)
        fig.update_xaxes(title_text="time (UTC)", row=2, col=1)
        fig.update_layout(
            height=460, margin={"t": 10, "b": 10}, legend_title_text="host" if lines == "host" else "GPU"
        )
        _ui.plotly_chart(fig, key="job_timeline")
        pooled = int(tl["others"].max() or 0)
        if lines == "host":
            kept = (
                f" (the {_data.FLEET_GROUP_PAST - 1} hosts with the most unused GPU-hours; the other {pooled:,} "
                "share one line)"
                if pooled
                else ""
            )
            st.caption(
                f"The job held {r['gpu_count']:g} GPUs: one line per host{kept}, the time-weighted mean per "
                "minute of the job's GPUs on it."
            )
        elif pooled:  # per GPU, more GPUs with telemetry than lines (a job that declared fewer)
            st.caption(
                f"{_data.FLEET_GROUP_PAST - 1 + pooled:,} GPUs: the {_data.FLEET_GROUP_PAST - 1} with the most "
                "unused GPU-hours have their own line and the others share one."
            )
        elif lines == "job":
            st.caption(
                f"The job held {r['gpu_count']:g} GPUs: the line is their time-weighted mean per minute."
            )
    if not stretches.is_empty():
        # the job's idle $ (analytics.waste) shared over its stretches by their idle seconds
        total_s = float(stretches["idle_s"].sum())
        idle_usd = float(r["idle_allocated_usd"] or 0.0)
        shown = stretches.select(
            "gpu_id",
            "start_ts",
            "end_ts",
            (pl.col("idle_s") / 3600.0).alias("idle_hours"),
            (pl.col("idle_s") / total_s * idle_usd if total_s else pl.lit(0.0)).alias("idle_usd"),
        )
        st.markdown(f"**Idle stretches** (shaded above): {shown.height:,}, {usd(idle_usd)} in all")
        _ui.dataframe(shown, height=220)
        st.caption(
            "An idle stretch: at or under the idle threshold for at least the minimum length (Settings). Each "
            "stretch's $ is its share of the job's idle seconds times the job's idle $."
        )

    st.markdown("**Training metrics**")
    run = data["training_run"]
    facts = []
    for key, title, fmt in (
        ("tokens_per_s_per_gpu", "tokens/s per GPU", lambda v: num(v, 0)),
        ("usd_per_mtok", "$ per 1M tokens", lambda v: usd(v, cents=True)),
        ("mfu", "MFU", lambda v: pct(100.0 * v)),
    ):
        v = r.get(key)
        facts.append(f"{title}: {fmt(v) if v is not None else na(r.get('mfu_reason') or 'not logged')}")
    if run:
        for key, title in (
            ("model", "model"),
            ("batch_size", "batch"),
            ("precision", "precision"),
            ("steps", "steps"),
        ):
            if run.get(key) is not None:
                v = run[key]
                facts.append(f"{title}: {v:,}" if isinstance(v, int) else f"{title}: {md(v)}")
    st.markdown(" · ".join(facts))
    curve = data["train_log"]
    if curve.height and curve["loss"].drop_nulls().len():
        fig = go.Figure(go.Scatter(x=curve["step"], y=curve["loss"], mode="lines", name="loss"))
        fig.update_layout(height=240, margin={"t": 10, "b": 10}, xaxis_title="step", yaxis_title="loss")
        _ui.plotly_chart(fig, key="job_loss")

    st.markdown("**Diagnoses**")
    diags = data["diagnoses"]
    if diags.is_empty():
        st.caption("No diagnosis: none of the rules (docs/metrics.md) fired for this job.")
    for d in diags.iter_rows(named=True):
        st.markdown(f"- **{diagnosis_label(d['diagnosis'])}**: {md(d['evidence'])}")

    st.markdown("**Recommendations**")
    recs = data["recommendations"]
    if recs.is_empty():
        st.caption("No recommendation names this job.")
    for x in recs.iter_rows(named=True):
        money = (
            f"{usd(x['usd_per_week'])} / week"
            if x["usd_per_week"] is not None
            else f"one-off: {usd(x['saving_usd'])}"
        )
        with st.container(border=True):
            st.markdown(f"**{md(x['kind_label'])}** · {money} · {md(x['confidence'])} confidence")
            st.markdown(md(x["evidence"]))
            st.markdown(f"**Action:** {md(x['action'])}")


def filter_query() -> dict[str, list[str]]:
    """The URL's filters without ``job``: where "All jobs" goes."""
    return {k: st.query_params.get_all(k) for k in st.query_params if k != "job"}


filters = _data.open_page("Jobs")
wanted = st.query_params.get("job")
if wanted:
    job_view(wanted)
    st.stop()

try:
    jobs = _data.jobs_table(filters)
except _data.NotReady as exc:
    not_ready(exc)

if jobs.is_empty():
    no_rows("No jobs in this view.")
    st.stop()

left, right = st.columns([1, 3])
sort_label = left.selectbox("Sort by", [k for k, c in SORTS.items() if c in jobs.columns], key="jobs_sort")
search = right.text_input("Find (job id, name, user)", key="jobs_find", placeholder="e.g. notebook-idle")
column = SORTS[sort_label]
table = jobs.sort(column, descending=not sort_label.startswith("utilization"), nulls_last=True)
if search:
    needle = search.lower()
    mask = None
    for c in ("job_id", "name", "user_name"):
        if c in table.columns:
            m = table[c].cast(str).str.to_lowercase().str.contains(needle, literal=True).fill_null(False)
            mask = m if mask is None else (mask | m)
    if mask is not None:
        table = table.filter(mask)
order = [c for c in FIRST if c in table.columns]
shown = table.select(order)
st.caption(
    f"{table.height:,} of {jobs.height:,} jobs. Click a row to open the job (its page has its own link); click "
    "a column header to sort the table itself. Empty cells: unknown (no telemetry or no price)."
)
event = _ui.dataframe(
    shown,
    height=460,
    on_select="rerun",
    selection_mode="single-row",
    key="jobs_table",
)
rows = event.selection.rows if event is not None else []
if rows:  # the job's own URL, with the view's filters
    st.query_params["job"] = shown["job_id"][rows[0]]
    st.rerun()
download_csv(table, "gpuledger-jobs.csv", key="jobs_csv", label="Download these jobs (CSV, every column)")
