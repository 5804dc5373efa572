"""The example idle-job policy: what the Guard page replays over a ledger whose settings hold no
``[[guard.policy]]`` (clearly labelled as not configured), ``gpuledger guard replay --example`` prints, and
data/settings.example.toml and docs/settings.md quote as the TOML to paste (tests/guard/test_example.py checks
they agree). Its one home is :data:`EXAMPLE_TOML`: the policy object is parsed from that text by the settings'
own parser, so the replay runs exactly what a pasted block would.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from gpuledger.ledger.guard_policy import Policy, parse_guard

EXAMPLE_TOML = """\
[[guard.policy]]
name = "idle"
util_pct = 5                # a GPU at or under this is idle
warn_minutes = 60
cancel_minutes = 120        # leave out to only notify
memory_floor_pct = 50       # a GPU holding half its memory is not idle
[guard.policy.exemptions]
users = ["alice"]
"""


def example_policy() -> Policy:
    """:data:`EXAMPLE_TOML` as the settings would load it."""
    raw = tomllib.loads(EXAMPLE_TOML)["guard"]
    return parse_guard(Path("gpuledger/guard/example.py"), raw, lambda _address: None).policies[0]


def _minutes(m: float) -> str:
    return f"{m:g} idle minutes"


def _named(*groups: tuple[str, tuple[str, ...]]) -> list[str]:
    """``label a, b`` for each group with values, in order (the exemptions and the scope alike)."""
    return [f"{label} {', '.join(values)}" for label, values in groups if values]


def spelled_out(policy: Policy, idle_util_pct: float) -> str:
    """A policy's parameters in one sentence (``idle_util_pct``: the ledger's threshold, the default of
    ``util_pct``), e.g. "a job is idle when all of its GPUs sit at or under 0 % utilization …"."""
    util = idle_util_pct if policy.util_pct is None else policy.util_pct
    share = (
        "all of its GPUs" if policy.gpu_fraction >= 1 else f"{policy.gpu_fraction:.0%} of its GPUs or more"
    )
    parts = [f"a job is idle when {share} sit at or under {util:g} % utilization"]
    if policy.memory_floor_pct is not None:
        parts[0] += f" (a GPU holding {policy.memory_floor_pct:g} % of its memory or more is not idle)"
    parts.append(
        "idle time counted over a sliding window (any unbroken idle run)"
        if policy.window == "sliding"
        else "idle time counted only from the job's start"
    )
    steps = [f"warned after {_minutes(policy.warn_minutes)}"]
    if policy.warn_again_minutes is not None:
        steps.append(f"warned again after {_minutes(policy.warn_again_minutes)}")
    steps.append(
        f"cancelled after {_minutes(policy.cancel_minutes)}"
        if policy.cancel_minutes is not None
        else "never cancelled (notify only)"
    )
    parts.append(", ".join(steps))
    ex = policy.exemptions
    spared = _named(
        ("users", ex.users),
        ("accounts", ex.accounts),
        ("QOS", ex.qos),
        ("labels", ex.labels),
        ("job names", ex.names),
    )
    if ex.interactive_max_gpus is not None:
        spared.append(
            f"interactive jobs of up to {ex.interactive_max_gpus:g} GPUs for their first "
            f"{ex.interactive_max_hours:g} hours"
        )
    if spared:
        parts.append("exempt: " + "; ".join(spared))
    sc = policy.scope
    within = _named(
        ("clusters", sc.clusters),
        ("partitions", sc.partitions),
        ("namespaces", sc.namespaces),
        ("kinds", sc.kinds),
    )
    if within:
        parts.append("only " + "; ".join(within))
    return "; ".join(parts) + "."
