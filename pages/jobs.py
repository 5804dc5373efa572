"""Jobs: every job in the view with its cost, utilization and waste (analytics/jobs.py, the rows of
``gpuledger jobs --json``), and one job's utilization timeline from the per-GPU-minute rollup."""

from __future__ import annotations

import plotly.express as px
import streamlit as st

from pages import _data, _ui
from pages._ui import column_config, download_csv, md, no_rows, not_ready

MAX_LINES = 8  # above this many GPUs the timeline shows the job's mean by default
SORTS = {
    "cost": "cost_usd",
    "waste": "waste_usd",
    "GPU-hours": "gpu_hours",
    "utilization (lowest first)": "mean_util_pct",
    "start (newest first)": "start_ts",
}

filters = _data.open_page("Jobs")
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
st.caption(f"{table.height:,} of {jobs.height:,} jobs. Click a column header to sort the table itself.")
st.dataframe(table, hide_index=True, column_config=column_config(table.columns), height=420)
download_csv(table, "gpuledger-jobs.csv", key="jobs_csv", label="Download these jobs (CSV)")

st.subheader("One job's utilization")
choices = table["job_id"].head(500).to_list()
job_id = st.selectbox("Job", choices, key="job", index=0 if choices else None)
if job_id:
    row = table.filter(table["job_id"] == job_id).row(0, named=True)
    many = (row.get("gpu_count") or 0) > MAX_LINES
    per_gpu = not many or st.toggle("One line per GPU", value=False, key="job_per_gpu")
    tl = _data.job_timeline(job_id, per_gpu)
    if tl.is_empty():
        st.info(f"Job {md(job_id)} has no telemetry attributed to it: its utilization is unknown (n/a).")
    else:
        fig = px.line(
            tl,
            x="ts",
            y="util_pct",
            color="gpu_id",
            labels={"ts": "time (UTC)", "util_pct": "utilization (%)", "gpu_id": "GPU"},
        )
        fig.update_layout(height=340, margin={"t": 10, "b": 10}, yaxis_range=[0, 105])
        _ui.plotly_chart(fig, key="job_timeline")
        if not per_gpu:
            st.caption(
                f"The job held {row['gpu_count']:g} GPUs: the line is their time-weighted mean per minute."
            )
