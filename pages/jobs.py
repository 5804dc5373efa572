"""Jobs: every job in the view with its cost and waste first (analytics/jobs.py, the rows of ``gpuledger
jobs --json``); clicking a row opens the job, whose own URL is ``/jobs?job=ID``: its per-GPU utilization and
memory per minute with the idle stretches shaded and priced, its training metrics, diagnoses and
recommendations."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
import streamlit as st
from plotly.subplots import make_subplots

from analytics.filters import Filters
from analytics.job_count import jobs_in
from analytics.slurm_usage import SLURM_BASIS
from gpuledger.ledger.job_states import FAILED_STATES
from gpuledger.ledger.palette import PART_COLOURS, UTIL_SCALE
from gpuledger.ledger.reference import catalog
from pages import _data, _ui, _view
from pages._ui import (
    diagnosis_label,
    download_csv,
    md,
    na,
    no_rows,
    num,
    pct,
    usd,
)

MAX_LINES = 8  # above this many GPUs the timeline shows the job's mean by default
UTIL_COLOUR = UTIL_SCALE[-1][1]  # the Fleet heatmap's "busy" end
MEM_COLOUR = "#7A7A7A"
TABLE_HEIGHT = 38 + 35 * 20  # header + 20 rows: at 1440×900 the table fills the screen below the filters
# cost and waste first, then what names the job, so that the GPU model is on screen at 1440 px; the waste's
# parts and the rest scroll
FIRST = [
    "job_id",
    "cost_usd",
    "waste_usd",
    "name",
    "team",
    "user_name",
    "state",
    "gpu_model",
    "observed_gpu_model",
    "gpu_count",
    "mean_util_pct",
    "idle_allocated_usd",
    "underused_usd",
    "failed_usd",
    "gpu_hours",
    "util_basis",
    "start_ts",
    "end_ts",
]
# The section under the timeline is named for what the job does (jobs.kind): a serving job has no training.
KIND_HEADINGS = {
    "training": "Training metrics",
    "fine-tune": "Fine-tuning metrics",
    "inference": "Serving metrics",
    "interactive": "Session metrics",
    "other": "Work metrics",
}
UNIT_FACTS = {
    "training": (
        ("tokens_per_s_per_gpu", "tokens/s per GPU", lambda v: num(v, 0)),
        ("usd_per_mtok", "$ per 1M tokens", lambda v: usd(v, cents=True)),
        ("mfu", "MFU", lambda v: pct(100.0 * v)),
    ),
    "inference": (
        ("tokens_per_s_per_gpu", "tokens/s per GPU", lambda v: num(v, 0)),
        ("usd_per_mtok_generated", "$ per 1M generated tokens", lambda v: usd(v, cents=True)),
        ("usd_per_krequests", "$ per 1k requests", lambda v: usd(v, cents=True)),
        ("mfu", "MFU", lambda v: pct(100.0 * v)),
    ),
}
SORTS = {
    "cost": "cost_usd",
    "waste": "waste_usd",
    "GPU-hours": "gpu_hours",
    "utilization (lowest first)": "mean_util_pct",
    "start (newest first)": "start_ts",
}


def unique_labels(label: pl.Expr, gpu_id: pl.Expr) -> pl.Expr:
    """A line's short label (analytics.timeline.gpu_label_sql: host:index), or its id where two lines'
    labels coincide (a ledger that names one host:index twice), so no two lines share a name."""
    return pl.when(gpu_id.n_unique().over(label) > 1).then(gpu_id).otherwise(label)


def catalog_memory(model: str | None) -> float | None:
    """The catalog's card memory (MiB) of ``model``: a line's memory share when its samples report no total."""
    return next((float(m.memory_mib) for m in catalog() if m.model == model), None)


def mem_share(part: pl.DataFrame, card_mib: float | None) -> pl.Series:
    """Memory used as % of the card: the samples' own total, else the catalog's (``card_mib``)."""
    total = pl.col("mem_total_mib").cast(pl.Float64)
    if card_mib is not None:
        total = total.fill_null(card_mib)
    return part.select((100.0 * pl.col("mem_used_mib") / total).alias("mem_pct"))["mem_pct"]


def natural(name: str) -> tuple[str, int, str]:
    """A line's sort key: host, then the GPU index as a number (atlas-n00:2 before atlas-n00:10)."""
    host, _, index = name.rpartition(":")
    return (host, int(index), "") if host and index.isdigit() else (name, -1, name)


def line_order(named: pl.DataFrame) -> list[str]:
    """The lines in reading order: by host, then GPU index; the line that pools the rest last."""
    kept = named.filter(pl.col("others") == 0)["line"].unique().to_list()
    pooled = named.filter(pl.col("others") > 0)["line"].unique().to_list()
    return sorted(kept, key=natural) + pooled


def panels(named: pl.DataFrame, card_mib: float | None, stretches: pl.DataFrame) -> go.Figure:
    """Small multiples: one panel per line (GPU, host or the job's mean; two columns past four), utilization
    and memory on one 0–100 % axis, so no GPU's line hides another's; each GPU's idle stretches shaded in
    its own panel."""
    names = line_order(named)
    n = len(names)
    cols = 2 if n > 4 else 1
    rows = -(-n // cols)
    panel_h, gap = (105 if n > 1 else 200), 34  # px
    height = 70 + rows * panel_h + (rows - 1) * gap
    fig = make_subplots(
        rows=rows,
        cols=cols,
        shared_xaxes=True,
        vertical_spacing=gap / (height - 70) if rows > 1 else 0.0,
        horizontal_spacing=0.06,
        subplot_titles=names,
    )
    where: dict[str, tuple[int, int]] = {}
    parts = dict(named.group_by("line").__iter__())
    for i, name in enumerate(names):
        part = parts[(name,)].sort("ts")
        row, col = i // cols + 1, i % cols + 1
        where.update({g: (row, col) for g in part["gpu_id"].drop_nulls().unique().to_list()})
        gib = part["mem_used_mib"].cast(pl.Float64) / 1024.0
        fig.add_trace(
            go.Scatter(
                x=part["ts"],
                y=mem_share(part, card_mib),
                customdata=gib,
                name="memory used (% of card)",
                mode="lines",
                line={"color": MEM_COLOUR, "width": 1.0},
                hovertemplate=f"{name}<br>%{{x|%Y-%m-%d %H:%M}} UTC<br>memory %{{customdata:,.1f}} GiB "
                "(%{y:.0f} % of card)<extra></extra>",
            ),
            row,
            col,
        )
        fig.add_trace(
            go.Scatter(
                x=part["ts"],
                y=part["util_pct"],
                name="utilization (%)",
                mode="lines",
                line={"color": UTIL_COLOUR, "width": 1.5},
                hovertemplate=f"{name}<br>%{{x|%Y-%m-%d %H:%M}} UTC<br>%{{y:.0f}} % utilization<extra></extra>",
            ),
            row,
            col,
        )
        fig.update_yaxes(range=[0, 105], tickvals=[0, 50, 100], row=row, col=col)
    for st_ in stretches.iter_rows(named=True):
        spot = where.get(st_["gpu_id"]) or ((1, 1) if n == 1 else None)  # the job's mean: every stretch
        if spot is not None:
            fig.add_vrect(
                x0=st_["start_ts"],
                x1=st_["end_ts"],
                fillcolor=PART_COLOURS["idle_allocated_usd"],
                opacity=0.3,
                line_width=0,
                layer="below",
                row=spot[0],
                col=spot[1],
            )
    for a in fig.layout.annotations:  # the panel titles: at the left, over their panel
        a.update(
            x=a.x - (0.5 / cols) + 0.005 if cols > 1 or n > 1 else 0.0, xanchor="left", font={"size": 12}
        )
    for col in range(1, cols + 1):
        fig.update_xaxes(title_text="time (UTC)", title_font={"size": 12}, row=rows, col=col)
    fig.update_layout(height=height + 20, margin={"t": 40, "b": 10}, showlegend=False)
    return fig


def heat_strip(named: pl.DataFrame, card_mib: float | None) -> go.Figure:
    """Past MAX_LINES lines: a row per GPU (or host), one strip of utilization and one of memory (% of the
    card), coloured as the Fleet heatmap (palette.UTIL_SCALE)."""
    names = line_order(named)
    mem = named.with_columns(mem_share(named, card_mib).alias("mem_pct"))
    wide = {
        col: mem.pivot(on="ts", index="line", values=col, sort_columns=True)
        .join(pl.DataFrame({"line": names}), on="line", how="right")
        .select(pl.exclude("line"))
        for col in ("util_pct", "mem_pct")
    }
    ts = wide["util_pct"].columns
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=["utilization (%)", "memory used (% of card)"],
    )
    for i, col in enumerate(("util_pct", "mem_pct"), start=1):
        fig.add_trace(
            go.Heatmap(
                x=pl.Series(ts).str.to_datetime().to_list(),
                y=names,
                z=wide[col].to_numpy(),
                zmin=0,
                zmax=100,
                colorscale=UTIL_SCALE,
                showscale=i == 1,
                colorbar={"title": "%", "len": 0.45, "y": 0.78},
                hovertemplate="%{y}<br>%{x|%Y-%m-%d %H:%M} UTC<br>%{z:.0f} %<extra></extra>",
            ),
            i,
            1,
        )
        fig.update_yaxes(autorange="reversed", type="category", tickfont={"size": 11}, row=i, col=1)
    for a in fig.layout.annotations:
        a.update(x=0, xanchor="left", font={"size": 12})
    fig.update_xaxes(title_text="time (UTC)", row=2, col=1)
    fig.update_layout(height=min(1400, 160 + 2 * 16 * len(names)), margin={"t": 40, "b": 10})
    return fig


def job_marks(fig: go.Figure, r: dict[str, object], first: object, last: object) -> list[str]:
    """The job's end when it failed (a FAILED_STATES state: a red line labelled with the state and reason)
    and its last checkpoint (a dashed line), over every panel, the work lost between them shaded; the time
    axis from the job's start to its end (``first``/``last``: its telemetry's, when wider). Returns the
    caption's sentences for what was drawn."""
    said: list[str] = []
    end, ck, state = r.get("end_ts"), r.get("last_checkpoint_ts"), r.get("state")
    start = min(x for x in (r.get("start_ts"), first) if x is not None)
    stop = max(x for x in (end, last, ck) if x is not None)
    pad = (stop - start) * 0.01
    fig.update_xaxes(range=[start - pad, stop + pad])
    failed = state in FAILED_STATES and end is not None
    red = PART_COLOURS["failed_usd"]
    second = getattr(fig.layout, "xaxis2", None)
    columns = ["x", "x2"] if second is not None and (second.domain or (0, 1))[0] > 0 else ["x"]
    if failed and ck is not None and ck < end:
        fig.add_vrect(
            x0=ck, x1=end, fillcolor=red, opacity=0.10, line_width=0, layer="below", row="all", col="all"
        )
    if ck is not None:
        fig.add_vline(x=ck, line={"color": "#444444", "dash": "dash", "width": 1.5}, row="all", col="all")
        said.append(f"Dashed line: the last checkpoint ({ck:%Y-%m-%d %H:%M} UTC).")
    if failed:
        fig.add_vline(x=end, line={"color": red, "width": 2.5}, row="all", col="all")
        lost = r.get("failed_lost_usd")
        since = "since the last checkpoint" if ck is not None else "no checkpoint known: the whole run"
        said.append(
            f"Red line: the job ended {state} at {end:%Y-%m-%d %H:%M} UTC; work lost ({since}): "
            f"{usd(lost) if lost is not None else na('unpriced')}."
        )
    for xref in columns:  # one label per column of panels, over the top panel
        if ck is not None:
            fig.add_annotation(
                x=ck,
                y=0.0,
                xref=xref,
                yref="paper",
                yanchor="bottom",
                xanchor="right",
                showarrow=False,
                text="last checkpoint",
                font={"size": 11, "color": "#444444"},
                bgcolor="rgba(255,255,255,0.8)",
            )
        if failed:
            reason = r.get("exit_reason")
            fig.add_annotation(
                x=end,
                y=1.0,
                xref=xref,
                yref="paper",
                yanchor="bottom",
                xanchor="right",
                showarrow=False,
                text=f"✕ {state}" + (f": {reason}" if reason else ""),
                font={"size": 12, "color": red},
            )
    return said


def job_view(job_id: str, filters: Filters) -> None:
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
    r = data.row
    st.subheader(f"Job {md(job_id)}", anchor=False)  # no anchor link built from a user-supplied name
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
    # a panel per GPU up to MAX_LINES; past that their mean, split on request into a heat strip: a row per
    # GPU, or per host past FLEET_GROUP_PAST GPUs
    split_by = "host" if gpus > _data.FLEET_GROUP_PAST else "gpu"
    lines = "gpu"
    if gpus > MAX_LINES:
        split = st.toggle(f"One row per {split_by.replace('gpu', 'GPU')}", value=False, key="job_per_gpu")
        lines = split_by if split else "job"
    tl = _data.job_timeline(job_id, lines)
    stretches = data.stretches
    labels: dict[str, str] = {}  # GPU id -> host:index, for the idle stretches' table
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
        named = tl.with_columns(
            _ui.pooled_name(
                unique_labels(pl.col("label"), pl.col("gpu_id")), "host" if lines == "host" else "GPU"
            ).alias("line")
        )
        if lines == "gpu":
            pairs = named.filter(pl.col("others") == 0).select("gpu_id", "line").unique()
            labels = dict(zip(pairs["gpu_id"], pairs["line"], strict=True))
        card_mib = catalog_memory(r.get("gpu_model"))
        n_lines = named["line"].n_unique()
        small = n_lines <= MAX_LINES
        fig = panels(named, card_mib, stretches) if small else heat_strip(named, card_mib)
        marks = job_marks(fig, r, tl["ts"].min(), tl["ts"].max())
        _ui.plotly_chart(fig, key="job_timeline")
        pooled = int(tl["others"].max() or 0)
        if lines == "host":
            kept = (
                f" (the {_data.FLEET_GROUP_PAST - 1} hosts with the most unused GPU-hours; the other {pooled:,} "
                "share one row)"
                if pooled
                else ""
            )
            st.caption(
                f"The job held {r['gpu_count']:,g} GPUs: one row per host{kept}, the time-weighted mean per "
                "minute of the job's GPUs on it."
            )
        elif pooled:  # per GPU, more GPUs with telemetry than rows (a job that declared fewer)
            st.caption(
                f"{_data.FLEET_GROUP_PAST - 1 + pooled:,} GPUs: the {_data.FLEET_GROUP_PAST - 1} with the most "
                "unused GPU-hours have their own row and the others share one."
            )
        elif lines == "job":
            st.caption(
                f"The job held {r['gpu_count']:,g} GPUs: the line is their time-weighted mean per minute."
            )
        each = {
            "gpu": "One panel per GPU (host:index)",
            "host": "One panel per host",
            "job": "The job's mean",
        }
        what = (
            f"{each[lines]}: utilization (blue line) and memory used as % of the card (grey line); idle "
            "stretches shaded orange."
            if small
            else "Utilization per minute, one row per "
            + ("host" if lines == "host" else "GPU (host:index)")
            + "; memory used (% of the card) below."
        )
        st.caption(" ".join([what, *marks]))
    if not stretches.is_empty():
        # the job's idle $ (analytics.waste) shared over its stretches by their idle seconds
        total_s = float(stretches["idle_s"].sum())
        idle_usd = float(r["idle_allocated_usd"] or 0.0)
        shown = stretches.with_columns(pl.col("gpu_id").replace(labels).alias("gpu_id")).select(
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

    kind = r.get("kind") or "other"
    st.markdown(f"**{KIND_HEADINGS.get(kind, KIND_HEADINGS['other'])}**")
    run = data.training_run
    facts = []
    for key, title, fmt in UNIT_FACTS["inference" if kind == "inference" else "training"]:
        v = r.get(key)
        text = fmt(v) if v is not None else na(r.get("mfu_reason") or "not logged")
        if key == "mfu" and v is not None and r.get("mfu_basis"):
            text += f" ({r['mfu_basis']})"  # e.g. "training, bf16 assumed"
        facts.append(f"{title}: {text}")
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
    if kind == "interactive" and not run:
        st.caption(
            "A notebook or shell session: it logs no work (tokens, samples), so there is no unit cost."
        )
    else:
        st.markdown(" · ".join(facts))
    curve = data.train_log
    if curve.height and curve["loss"].drop_nulls().len():
        fig = go.Figure(go.Scatter(x=curve["step"], y=curve["loss"], mode="lines", name="loss"))
        fig.update_layout(height=240, margin={"t": 10, "b": 10}, xaxis_title="step", yaxis_title="loss")
        _ui.plotly_chart(fig, key="job_loss")

    st.markdown("**Diagnoses**")
    diags = data.diagnoses
    if diags.is_empty():
        st.caption("No diagnosis: none of the rules (docs/metrics.md) fired for this job.")
    for d in diags.iter_rows(named=True):
        st.markdown(f"- **{diagnosis_label(d['diagnosis'])}**: {md(d['evidence'])}")

    st.markdown("**Recommendations**")
    # one number per action: the items of the Recommendations page's own list (the same view, the same
    # cached call) that name this job; a job outside the view gets those of its own days, as one-time $
    # (a job's own days made a weekly rate about 7× the list's: $1,506.96/week against $215.60/week)
    recs = _data.recommendations(filters).filter(pl.col("job_ids").list.contains(job_id))
    own_days = recs.is_empty() and not data.recommendations.is_empty()
    if own_days:
        recs = data.recommendations.with_columns(pl.lit(None, pl.Float64).alias("usd_per_week"))
        st.caption(
            "This job is outside the view's dates: what each action would have saved over the job's own days, "
            "once."
        )
    elif recs.height:
        st.caption(f"As on the Recommendations page for this view ({_view.describe_filters(filters)}).")
    if recs.is_empty():
        st.caption("No recommendation names this job.")
    for x in recs.iter_rows(named=True):
        money = _ui.saves(x["usd_per_week"], x["saving_usd"])
        with st.container(border=True):
            st.markdown(f"**{md(x['kind_label'])}** · {money} · {md(x['confidence'])} confidence")
            st.markdown(md(x["evidence"]))
            st.markdown(f"**Action:** {md(x['action'])}")


def filter_query() -> dict[str, list[str]]:
    """The URL's filters without ``job``: where "All jobs" goes."""
    return {k: st.query_params.get_all(k) for k in st.query_params if k != "job"}


filters = _view.open_page("Jobs")
wanted = st.query_params.get("job")
if wanted:
    job_view(wanted, filters)
    st.stop()

jobs = _data.jobs_table(filters)

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
# a requeued job has a row per attempt (analytics/jobs.py): the count is of jobs, the rows are said apart
rows_note = (
    f" in {table.height:,} rows (a requeued job has one per attempt)"
    if table.height != jobs_in(table)
    else ""
)
st.caption(
    f"{jobs_in(table):,} of {jobs_in(jobs):,} jobs{rows_note}. Click a row to open the job (its page has its own "
    "link); click a column header to sort the table itself. Empty cells: unknown (no telemetry or no price)."
)
booked_as_other = (
    table.filter(pl.col("observed_gpu_model").is_not_null())
    if "observed_gpu_model" in table.columns
    else table.head(0)
)
if booked_as_other.height:  # analytics/model_mismatch.py: priced as booked, the card counted once
    st.caption(
        f"{booked_as_other.height:,} job(s) booked as another GPU model than their cards report (column "
        "'reported model'): priced as booked; the card is capacity once, as the model it reports."
    )
TEXT = st.column_config.TextColumn
event = _ui.dataframe(
    shown,
    {
        "job_id": TEXT("job", width=115, pinned=True),
        "name": TEXT("name", width=190),
        "gpu_model": TEXT("GPU model", width=135),
        "observed_gpu_model": TEXT(
            "reported model", width=135, help="the model its cards report, where it differs"
        ),
        "state": TEXT("state", width=100),
    },
    height=TABLE_HEIGHT,
    on_select="rerun",
    selection_mode="single-row",
    key="jobs_table",
)
rows = event.selection.rows if event is not None else []
if rows:  # the job's own URL, with the view's filters
    st.query_params["job"] = shown["job_id"][rows[0]]
    st.rerun()
download_csv(table, "gpuledger-jobs.csv", key="jobs_csv", label="Download these jobs (CSV, every column)")
