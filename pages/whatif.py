"""What-if: choose recommendations to take, teams to move to spot, or a GPU model to use instead of another
(at a speed-up, by default the catalog's), and see the view's summary before and after, with the assumptions
stated (analytics/whatif.py). One unit: the view's totals, each change with its $/week beside it."""

from __future__ import annotations

import polars as pl
import streamlit as st

from analytics.money import signed_usd
from analytics.whatif import default_speedup, per_week, what_if
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
days = _data.whatif_days(filters)


def weekly(value: float | None) -> str:
    """A period total as $/week (analytics.whatif.per_week: ÷ the view's days × 7)."""
    return f"{usd(per_week(value, days))}/week"


st.write(
    "Pick changes; the figures below show the view as it would have been with them: totals over the view's "
    + (f"{days:,.1f} days" if days else "days")
    + ", each change with its $/week beside it (the total ÷ the days × 7)."
)
label = {
    r["id"]: f"{r['kind_label']} · {r['target']} · {usd(r['saving_usd'])} "
    + (f"({usd(r['usd_per_week'])}/week)" if r["usd_per_week"] is not None else "once")
    for r in recs.iter_rows(named=True)
}
every = st.checkbox(f"Take all {len(label):,} recommendations", key="whatif_all", disabled=not label)
picked = st.multiselect(
    "Take these recommendations",
    list(label),
    format_func=label.get,
    key="whatif_recs",
    placeholder="choose recommendations (ranked by $ / week)",
    select_all=False,  # "take all" is the checkbox above: 86 chips filled the screen
    wrap=False,
    disabled=every,
)
taken = list(label) if every else picked
if taken:
    chosen = recs.filter(pl.col("id").is_in(taken))
    st.caption(
        f"{len(taken):,} of {len(label):,} recommendations taken; they list "
        f"{usd(float(chosen['saving_usd'].sum()))} over the view (each dollar is counted once below)."
    )
left, mid, right, speed = st.columns([3, 2, 2, 1.4])
teams = sorted(t for t in jobs["team"].drop_nulls().unique().to_list() if is_team(t))
spot_teams = left.multiselect("Run these teams on spot", teams, key="whatif_spot", placeholder="no team")
models = sorted(jobs["gpu_model"].drop_nulls().unique().to_list())
old = mid.selectbox("Instead of GPU model", [NONE, *models], key="whatif_from")
new = right.selectbox(
    "use GPU model", [NONE, *sorted(m.model for m in catalog())], key="whatif_to", disabled=old == NONE
)
swap = old != NONE and new != NONE and new != old
factor, basis = default_speedup(jobs, old, new) if swap else (1.0, "")
speedup = speed.number_input(
    "Speed-up",
    min_value=0.01,
    max_value=100.0,
    value=round(factor, 2),
    step=0.05,
    format="%.2f",
    key=f"whatif_speedup:{old}:{new}",  # a new pair starts from its own catalog default
    disabled=not swap,
    help="The moved jobs' GPU-hours are divided by this before pricing (2 = twice as fast). Default: "
    + (basis if swap else "the new model's catalog peak ÷ the old one's at the jobs' precision"),
)
if swap:
    speed.caption(f"catalog: {factor:,.2f}×", help=basis)

chosen_models = ((old, new, float(speedup)),) if swap else ()
try:
    # the same function as `gpuledger whatif`: each change out of the part it touches
    result = what_if(
        s, jobs, recs, prices, settings, spot=tuple(spot_teams), models=chosen_models, take=tuple(taken)
    )
except ValueError as exc:  # a recommendation that left the view since it was picked
    st.warning(str(exc))
    st.stop()
changes = result.changes


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
            f"{signed_usd(d)} vs now ({signed_usd(per_week(d, days))}/week)"
            if d is not None and key.endswith("_usd")
            else None
        ),
        # st.metric reads only a leading '-' as down: the −$ keeps its sign, the arrow and colour are set here
        # (less money is good for spend and waste: green down; productive up is red like any rise in spend)
        delta_color="off" if d is None else ("green" if d < 0 else "red"),
        delta_arrow="off" if d is None else ("down" if d < 0 else "up"),
        help=f"over the view's days; now: {fmt(before)} ({weekly(before)})"
        if key.endswith("_usd")
        else f"now: {fmt(before)}",
    )


def change(key: str, *, week: bool = False) -> str:
    """The change with the chosen changes: $ (or $/week) for money, GPU-hours for GPU-hours, else blank."""
    a, b = figure(result.before, key), figure(result.after, key)
    if a is None or b is None or not changes:
        return ""
    if not key.endswith("_usd"):
        return ("+" if b - a >= 0.05 else "") + num(b - a, 1) if key == "gpu_hours" else ""
    return signed_usd(per_week(b - a, days) if week else b - a)


table = pl.DataFrame(
    {
        "figure": [t for t, _, _ in rows],
        "now": [fmt(figure(result.before, k)) for _, k, fmt in rows],
        "with the changes": [fmt(figure(result.after, k)) for _, k, fmt in rows],
        "change": [change(k) for _, k, fmt in rows],
        "change $/week": [change(k, week=True) if k.endswith("_usd") else "" for _, k, fmt in rows],
    }
)
st.dataframe(table, hide_index=True, width="content")

st.subheader("Changes and assumptions")
if not changes:
    st.caption("No change chosen yet: the figures are the view's as they are.")
for c in changes:
    jobs_text = f" ({c.jobs:,} jobs)" if c.jobs else ""
    st.markdown(
        f"- **{md(c.what)}**{jobs_text}: {usd(c.saving_usd)} out of the spend over the view "
        f"({weekly(c.saving_usd)}). {md(c.assumption)}."
    )
for note in result.notes:
    st.caption(md(note))
st.caption(
    "Each change removes only the time and the part it touches: spot and another GPU model reprice the moved "
    "jobs (each of their parts with their cost; unallocated capacity never moves, and on owned or reserved "
    "capacity spot saves nothing unless capacity is released); another GPU model runs the moved jobs' GPU-hours "
    "÷ the speed-up; a recommendation's saving comes out of the part its kind names. Utilization stays as it "
    "is: the same work runs. Totals are over this view's days; $/week = total ÷ days × 7."
)
