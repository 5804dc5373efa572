"""The demo fleet's background workload: thousands of ordinary jobs placed around the planted scenarios.

Each cluster has a mix of job types (:data:`MIX`) arriving as a Poisson process per type; a job goes on the
first GPUs free for its whole duration within a few hours of its arrival (whole nodes for multi-node jobs,
one node otherwise), or is dropped when the cluster stays full. Outcomes (failed, cancelled, OOM, timeout)
are drawn per kind, so the ledger has the usual share of lost work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuledger.demo.fleet import (
    DIURNAL,
    HOUR,
    NOTEBOOK,
    STEADY,
    TEAMS,
    Fleet,
    Grid,
    Job,
    Profile,
    lm_run,
    serve_run,
    tick,
    user_of,
)
from gpuledger.ledger.job_states import CANCELLED, COMPLETED, FAILED, OOM, TIMEOUT


@dataclass(frozen=True)
class JobType:
    label: str  # name stem
    kind: str
    per_day: float  # mean arrivals per day
    gpus: tuple[int, ...]  # GPU counts to draw from (multiples of 8 take whole nodes)
    hours: tuple[float, float]  # duration range (log-uniform)
    teams: tuple[str, ...]
    util: tuple[float, float]
    mem_frac: tuple[float, float]  # memory used as a fraction of the card
    pattern: int = STEADY
    model: str | None = None  # training_runs model (training / fine-tune / inference)
    gpu_models: tuple[str, ...] = ()  # on cirrus: which card types it runs on
    tier: str | None = None
    nodes: tuple[int, ...] | None = None  # a partition: only these nodes (None: any)
    max_wait_h: float = 6.0  # queue this long at most, else the job is dropped


def _t(
    label: str,
    kind: str,
    per_day: float,
    gpus: tuple[int, ...],
    hours: tuple[float, float],
    teams: str,
    util: tuple[float, float],
    mem: tuple[float, float],
    **extra: Any,
) -> JobType:
    return JobType(label, kind, per_day, gpus, hours, tuple(teams.split()), util, mem, **extra)


# fmt: off
ATLAS_BATCH, ATLAS_INTERACTIVE = (0, 1, 2, 3, 4, 5), (6, 7)
MIX: dict[str, tuple[JobType, ...]] = {
    # label, kind, arrivals/day, GPU counts, hours, teams, util % range, memory fraction range, extras
    "atlas": (
        _t("pretrain", "training", 0.8, (16, 32), (20, 70), "llm-core", (86, 95), (0.8, 0.9),
           model="lm-7b", nodes=ATLAS_BATCH, max_wait_h=36),
        _t("sft", "fine-tune", 4.0, (8,), (3, 14), "llm-core applied-ml search", (72, 90), (0.5, 0.85),
           model="lm-7b", max_wait_h=12),
        _t("eval", "other", 20.0, (1, 1, 2, 4), (0.25, 2.5), "llm-core applied-ml search", (40, 80), (0.3, 0.7),
           nodes=ATLAS_INTERACTIVE),
        _t("jupyter", "interactive", 3.0, (1,), (1, 8), "llm-core applied-ml", (40, 40), (0.1, 0.4),
           pattern=NOTEBOOK, nodes=ATLAS_INTERACTIVE),
        _t("serve", "inference", 0.25, (2,), (48, 140), "applied-ml", (45, 55), (0.5, 0.6),
           pattern=DIURNAL, model="lm-7b", nodes=ATLAS_INTERACTIVE, max_wait_h=24),
    ),
    "borealis": (
        _t("train", "training", 1.0, (8,), (12, 36), "vision speech", (80, 93), (0.6, 0.85),
           model="vit-l16", max_wait_h=24),
        _t("ft", "fine-tune", 6.0, (1, 2, 4), (2, 12), "vision speech applied-ml", (65, 88), (0.35, 0.8),
           model="whisper-medium"),
        _t("eval", "other", 12.0, (1,), (0.25, 2), "vision speech search", (45, 80), (0.2, 0.6)),
        _t("jupyter", "interactive", 4.0, (1,), (1, 8), "vision speech", (40, 40), (0.1, 0.3), pattern=NOTEBOOK),
    ),
    "cirrus": (
        _t("serve", "inference", 1.0, (1,), (24, 120), "applied-ml search", (30, 40), (0.55, 0.75),
           pattern=DIURNAL, model="embed-base", gpu_models=("L4",), tier="on_demand"),
        _t("eval", "other", 60.0, (1,), (0.2, 1.5), "search applied-ml speech vision", (50, 85), (0.3, 0.8),
           gpu_models=("L4", "A10G")),
        _t("ft", "fine-tune", 8.0, (1,), (2, 8), "applied-ml search", (70, 90), (0.5, 0.85),
           model="embed-base", gpu_models=("L40S",)),
        _t("jupyter", "interactive", 5.0, (1,), (1, 6), "applied-ml search", (40, 40), (0.1, 0.4),
           pattern=NOTEBOOK, gpu_models=("A10G",), tier="on_demand"),
    ),
}
# fmt: on

OUTCOMES = {
    # kind: (states, probabilities)
    "training": ((COMPLETED, FAILED, CANCELLED, OOM, TIMEOUT), (0.82, 0.08, 0.05, 0.03, 0.02)),
    "fine-tune": ((COMPLETED, FAILED, CANCELLED, OOM, TIMEOUT), (0.84, 0.06, 0.05, 0.03, 0.02)),
    "other": ((COMPLETED, FAILED, CANCELLED, OOM), (0.9, 0.05, 0.04, 0.01)),
    "interactive": ((CANCELLED, TIMEOUT, COMPLETED), (0.5, 0.2, 0.3)),
    "inference": ((COMPLETED, CANCELLED), (0.6, 0.4)),
}
REASONS = {
    FAILED: (
        "NCCL watchdog timeout",
        "CUDA error: an illegal memory access was encountered",
        "loss became NaN",
        "exit code 1",
    ),
    OOM: ("CUDA out of memory",),
    CANCELLED: ("cancelled by user",),
    TIMEOUT: ("wall-clock limit reached",),
}
TRY_STEP_S = 1800


def _place(
    fleet: Fleet, grid: Grid, jt: JobType, cluster: str, gpus: int, start: int, end: int
) -> list[int] | None:
    nodes = fleet.clusters[cluster].nodes
    if jt.nodes is not None:
        nodes = tuple(nodes[n] for n in jt.nodes)
    if gpus >= 8:
        chosen: list[int] = []
        for node in nodes:
            if grid.free(node, start, end).all():
                chosen.extend(node)
                if len(chosen) == gpus:
                    return chosen
        return None
    if cluster == "cirrus":
        candidates = [n[0] for n in nodes if fleet.gpus[n[0]].spec.model in jt.gpu_models]
        free = grid.free(candidates, start, end)
        hits = [g for g, ok in zip(candidates, free, strict=True) if ok]
        return hits[:1] or None
    # pack: the fullest node that still has room
    best: list[int] | None = None
    for node in nodes:
        free = grid.free(node, start, end)
        if free.sum() >= gpus and (best is None or free.sum() < len(best)):
            best = [g for g, ok in zip(node, free, strict=True) if ok]
    return best[:gpus] if best else None


def background(fleet: Fleet, grid: Grid, rng: np.random.Generator, window_s: int) -> list[Job]:
    """Draw and place the ordinary jobs of every cluster; the grid already holds the planted ones."""
    drawn: list[tuple[int, str, JobType]] = []
    days = window_s / 86400
    for cluster, types in MIX.items():
        for jt in types:
            n = int(rng.poisson(jt.per_day * days))
            # work hours are busier: arrivals drawn over the day with a 09:00–19:00 bump
            for t in np.sort(rng.uniform(0, window_s, n)):
                if rng.random() < 0.5 and jt.kind in ("other", "interactive"):
                    t = (t // 86400) * 86400 + rng.uniform(9, 19) * HOUR
                drawn.append((int(t), cluster, jt))
    drawn.sort(key=lambda d: (d[0], d[1], d[2].label))
    jobs: list[Job] = []
    for arrive, cluster, jt in drawn:
        gpus = int(rng.choice(jt.gpus))
        hours = float(np.exp(rng.uniform(np.log(jt.hours[0]), np.log(jt.hours[1]))))
        planned = max(tick(hours * HOUR), 600)
        states, probs = OUTCOMES[jt.kind]
        state = str(rng.choice(states, p=probs))
        team = str(rng.choice(jt.teams))
        user, project = user_of(rng, team)
        util = float(rng.uniform(*jt.util))
        mem_frac = float(rng.uniform(*jt.mem_frac))
        dur = planned
        if state in (FAILED, CANCELLED) and jt.kind != "interactive":
            dur = max(tick(planned * rng.uniform(0.05, 0.8)), 300)
        elif state == OOM:
            dur = tick(rng.uniform(2, 12) * 60)
        start = tick(arrive)
        held = None
        for _ in range(int(jt.max_wait_h * HOUR / TRY_STEP_S) + 1):
            if start + 600 > window_s:
                break
            held = _place(fleet, grid, jt, cluster, gpus, start, start + dur)
            if held:
                break
            start += TRY_STEP_S
        if not held:
            continue
        grid.take(held, start, start + dur)
        spec = fleet.gpus[held[0]].spec
        mem = mem_frac * spec.memory_mib
        job = Job(
            f"{jt.label}-{user}-{len(jobs):04d}",
            cluster,
            user,
            team,
            project,
            jt.kind,
            held,
            start,
            start + dur,
            state=state,
            exit_reason=str(rng.choice(REASONS[state])) if state in REASONS else None,
            tier=jt.tier,
            submit_wait_s=int(rng.exponential(300 if gpus < 8 else 1800)) + (start - tick(arrive)),
            profiles=[Profile(jt.pattern, util, 6 if jt.pattern == STEADY else 15, mem)] * len(held),
        )
        if jt.model and jt.kind in ("training", "fine-tune"):
            job.run = lm_run(
                jt.model,
                gpus=len(held),
                spec=spec,
                mfu=util / 100 * float(rng.uniform(0.38, 0.5)),
                runtime_s=dur,
                batch_size=int(rng.choice((4, 8, 16, 32))),
                peak_mem_mib=mem,
            )
            if jt.kind == "training" and state == FAILED:
                job.checkpoint_s = start + tick(dur * rng.uniform(0.5, 0.95))
        elif jt.model and jt.kind == "inference":
            job.run = serve_run(
                jt.model, runtime_s=dur, requests_per_s=float(rng.uniform(5, 40)), tokens_per_request=200
            )
        jobs.append(job)
    return jobs


def all_users() -> list[tuple[str, str]]:
    return [(u, t) for t, (users, _) in TEAMS.items() for u in users]
