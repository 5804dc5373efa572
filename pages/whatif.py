"""What-if: choose recommendations to take, teams to move to spot, or a GPU model to use instead of another,
and see the view's summary before and after, with the assumptions stated (analytics/whatif.py)."""

from __future__ import annotations

import polars as pl
import streamlit as st

from analytics.money import MINUS, signed_usd
from analytics.whatif import what_if
from gpuledger.ledger.palette import PART_LABELS, is_team
from gpuledger.ledger.reference import catalog
from pages import _data, _scope, _view
from pages._ui import md, no_rows, num, pct, usd

NONE = "(no change)"

filters = _view.open_page("What if")
s = _data.summary(filters)
recs = _data.recommendations(filters)
jobs = _data.whatif_jobs(filters)
if jobs.is_empty():
    no_rows("No jobs in this view.")
    st.stop()
settings = _scope.settings()
prices = _data.prices_in_force()

st.write("Pick changes; the figures below show the view as it would have been with them.")
label = {
    r["id"]: f"{r['kind_label']} · {r['target']} · "
    + (
        f"{usd(r['usd_per_week'])} / week"
        if r["usd_per_week"] is not None
        else f"one-off {usd(r['saving_usd'])}"
    )
    for r in recs.iter_rows(named=True)
}
picked = st.multiselect(
    "Take these recommendations",
    list(label),
    format_func=label.get,
    key="whatif_recs",
    placeholder="choose recommendations (ranked by $ / week)",
)
left, mid, right = st.columns(3)
teams = sorted(t for t in jobs["team"].drop_nulls().unique().to_list() if is_team(t))
spot_teams = left.multiselect("Run these teams on spot", teams, key="whatif_spot", placeholder="no team")
models = sorted(jobs["gpu_model"].drop_nulls().unique().to_list())
old = mid.selectbox("Instead of GPU model", [NONE, *models], key="whatif_from")
new = right.selectbox(
    "use GPU model", [NONE, *sorted(m.model for m in catalog())], key="whatif_to", disabled=old == NONE
)

models = ((old, new),) if old != NONE and new != NONE and new != old else ()
try:
    # the same function as `gpuledger whatif`: each change out of the part it touches
    result = what_if(
        s, jobs, recs, prices, settings, spot=tuple(spot_teams), models=models, take=tuple(picked)
    )
except ValueError as exc:  # a recommendation that left the view since it was picked
    st.warning(str(exc))
    st.stop()
changes = result.changes
before_w, after_w = result.before["waste"], result.after["waste"]


def figure(d: dict, key: str) -> float | None:
    return d[key] if key in d else d["waste"].get(key)


rows = [
    ("Spend", "spend_usd", usd),
    ("Waste teams control", "team_waste_usd", usd),
    *(
        (PART_LABELS[k], k, usd)
        for k in ("idle_allocated_usd", "underused_usd", "failed_usd", "unallocated_usd")
    ),
    ("Productive", "productive_usd", usd),
    ("GPU-hours", "gpu_hours", lambda v: num(v, 1)),
    ("Held-GPU utilization", "mean_util_pct", pct),
]
cols = st.columns(3)
for col, (title, key, fmt) in zip(cols, [*rows[:2], rows[-3]], strict=True):
    before, after = figure(result.before, key), figure(result.after, key)
    # nothing chosen, or a change that moves nothing (spot on paid-for capacity): no delta drawn
    d = None if not changes or before is None or after is None else after - before
    if d is not None and abs(d) < 0.005:
        d = None
    col.metric(
        title,
        fmt(after),
        (
            f"{signed_usd(d).replace(MINUS, '-')} vs now"  # st.metric reads a leading '-' as down
            if d is not None and key.endswith("_usd")
            else None
        ),
        delta_color="inverse",
        help=f"now: {fmt(before)}",
    )
table = pl.DataFrame(
    {
        "figure": [t for t, _, _ in rows],
        "now": [fmt(figure(result.before, k)) for _, k, fmt in rows],
        "with the changes": [fmt(figure(result.after, k)) for _, k, fmt in rows],
    }
)
st.dataframe(table, hide_index=True, width="content")

st.subheader("Changes and assumptions")
if not changes:
    st.caption("No change chosen yet: the figures are the view's as they are.")
for c in changes:
    jobs_text = f" ({c.jobs:,} jobs)" if c.jobs else ""
    st.markdown(f"- **{md(c.what)}**{jobs_text}: {usd(c.saving_usd)} out of the spend. {md(c.assumption)}.")
for note in result.notes:
    st.caption(md(note))
st.caption(
    "Each change removes only the time and the part it touches: spot and another GPU model reprice the moved "
    "jobs (each of their parts with their cost; unallocated capacity never moves, and on owned or reserved "
    "capacity spot saves nothing unless capacity is released); a recommendation's saving comes out of the part "
    "its kind names. Utilization and GPU-hours stay as they are: the same work runs. Savings are over this "
    "view's days, not per week."
)
