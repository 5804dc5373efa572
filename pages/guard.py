"""Guard: what an idle-GPU policy would have done over the view's days, in dollars, before anyone turns it on
(``gpuledger guard replay``), and what the guard did (``guard_actions``, ``gpuledger guard actions``)."""

from __future__ import annotations

import datetime as dt

import polars as pl
import streamlit as st

from analytics.guard_actions import saved_line
from gpuledger.guard.example import EXAMPLE_TOML, example_policy, spelled_out
from gpuledger.ledger.guard_policy import Policy
from pages import _data, _scope, _view
from pages._ui import code, dataframe, md, no_rows, num, usd

filters = _view.open_page("Guard")
settings = _scope.settings()
policies = settings.guard.policies


def show_replay(policy: Policy, cli: str) -> None:
    """The replay of ``policy`` over the view's days (``gpuledger guard replay … --json``; ``cli``: the
    options that pick the policy)."""
    as_of = _data.as_of()
    last = dt.datetime.fromisoformat(as_of).date() if as_of else dt.datetime.now(dt.UTC).date()
    until = filters.until or last
    since = filters.since or until - dt.timedelta(days=6)
    out = _data.guard_replay(filters, policy, since, until)
    t = out["totals"]
    cols = st.columns(5)
    cols[0].metric("Jobs warned", f"{t['jobs_warned']:,}")
    cols[1].metric("Jobs cancelled", f"{t['jobs_cancelled']:,}" if out["cancels"] else "— (notify only)")
    cols[2].metric("GPU-hours saved", num(t["saved_gpu_hours"], 1))
    cols[3].metric("$ saved", usd(t["saved_usd"]))
    cols[4].metric("False alarms", f"{t['false_alarms']:,}", help="warned jobs that turned busy again")
    st.caption(
        f"{since} – {until} (UTC). Saved: the job's GPUs from the cancel to its real end, at the price in force. "
        f"{t['jobs_exempt']} exempt job(s) are listed and counted in no total. The same figures: "
        + code(f"gpuledger guard replay --since {since} --until {until} {cli} --json")
    )
    if not out["jobs"]:
        no_rows("The policy would have taken no step on the view's jobs in these days.")
        return
    rows = pl.DataFrame(
        [
            {
                "job_id": j["job_id"],
                "user_name": j["user"],
                "team": j["team"],
                "gpu_count": j["gpu_count"],
                "steps": ", ".join(f"{s['step']} {s['at'][5:16]}" for s in j["steps"]),
                "cancelled_at": j["cancelled_at"],
                "saved_gpu_hours": j["saved_gpu_hours"],
                "saved_usd": j["saved_usd"],
                "busy_again": ", ".join(b[5:16] for b in j["busy_again"]) or None,
                "exempt": j["exempt"],
            }
            for j in out["jobs"]
        ],
        schema_overrides={
            "saved_usd": pl.Float64,
            "cancelled_at": pl.String,
            "busy_again": pl.String,
            "exempt": pl.String,
        },
    )
    dataframe(rows, key="guard_replay_table")


st.subheader("Replay a policy over history")
if not policies:
    st.info(
        "No `[[guard.policy]]` in the settings yet: add one (docs/settings.md, *Guard: idle-job policies*) to see "
        "what it would have warned, cancelled and saved here before turning it on. Below, an example policy "
        "replayed over the view's days."
    )
    example = example_policy()
    with st.container(border=True, key="guard_example"):
        st.markdown(
            f"**Example policy (not configured): {md(example.name)}**: "
            + md(spelled_out(example, settings.idle_util_pct))
        )
        show_replay(example, "--example")
        st.markdown("To turn it on, paste this into the settings file (docs/settings.md):")
        st.code(EXAMPLE_TOML, language="toml")
else:
    names = [p.name for p in policies]
    name = st.selectbox("Policy", names, key="guard_policy")
    show_replay(policies[names.index(name)], f"--policy {name}")

st.subheader("What the guard did")
actions, saved = _data.guard_actions(filters)
st.write(f"**{saved_line(saved)}**")
if actions.is_empty():
    no_rows(
        "The guard took no step in this view: `gpuledger guard run --enforce` warns, and cancels where "
        "`[guard] allow_cancel = true`."
    )
else:
    dataframe(actions, key="guard_actions_table")
