"""``gpuledger guard replay``: the policies run over the ledger's history, per job what would have happened and
when, and what a cancel would have saved. Pure: a connection in, dicts out; it reads and never writes.

Which jobs: those that held GPUs (``start_ts`` known) during ``[since, until + 1 day)``, in the policy's scope.
A job is evaluated over its whole telemetry (a run that began before ``since`` counts from its start); a step is
listed when it falls inside the window. An exempt job (user, account, name) is listed with the steps the policy
would have taken, marked ``exempt``, and counts in no total. QOS and label exemptions need the scheduler
(``guard run`` asks it); the ledger holds neither, so the replay cannot apply them.

Saved by a cancel (docs/metrics.md, "Guard"): the GPUs the job held (``gpu_count``) × the time from the cancel
to the job's real end (``end_ts``; a job still running: its last telemetry, so a lower bound), each moment at
the price in force then for the job's GPU model, tier and cluster (gpuledger/ledger/prices.py ``PriceBook.usd``;
None when the model has no price). The idle GPU-hours of a step: ``gpu_count`` × the idle
run's length at that step.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
from dataclasses import dataclass
from typing import Any

import duckdb

from gpuledger.guard.steps import Outcome, Segment, Step, simulate
from gpuledger.guard.timeline import gpu_runs, job_segments
from gpuledger.ledger.guard_policy import Policy
from gpuledger.ledger.prices import PriceBook, price_book
from gpuledger.ledger.settings import Settings
from gpuledger.ledger.thresholds import thresholds

KUBERNETES_SOURCES = ("kubernetes_pods", "kubernetes")


@dataclass(frozen=True)
class Job:
    job_id: str
    source: str
    cluster: str | None
    user: str | None
    team: str | None
    name: str | None
    kind: str
    partition: str | None
    gpu_model: str | None
    gpu_count: float
    tier: str
    start: dt.datetime
    end: dt.datetime | None
    qos: str | None = None  # not in the ledger today
    labels: tuple[str, ...] = ()  # "key=value"; not in the ledger today

    @property
    def namespace(self) -> str | None:
        """A pod's namespace: the ``<namespace>`` of ``[<cluster>/]<namespace>/<pod>``."""
        if self.source not in KUBERNETES_SOURCES:
            return None
        parts = self.job_id.split("/")
        return parts[-2] if len(parts) >= 2 else None


JOBS_SQL = """
SELECT job_id, source, cluster, user_name, team, name, kind, partition, gpu_model, gpu_count, pricing_tier,
       start_ts, end_ts
FROM jobs
WHERE start_ts IS NOT NULL AND gpu_count > 0
  AND start_ts < $until AND coalesce(end_ts, TIMESTAMP '9999-12-31') > $since
ORDER BY start_ts, job_id
"""


def jobs_in(con: duckdb.DuckDBPyConnection, since: dt.datetime, until: dt.datetime) -> list[Job]:
    """Jobs that held GPUs during ``[since, until)``."""
    rows = con.execute(JOBS_SQL, {"since": since, "until": until}).fetchall()
    return [Job(*r) for r in rows]


def in_scope(job: Job, policy: Policy) -> bool:
    s = policy.scope
    return (
        (not s.clusters or job.cluster in s.clusters)
        and (not s.partitions or job.partition in s.partitions)
        and (not s.namespaces or job.namespace in s.namespaces)
        and (not s.kinds or job.kind in s.kinds)
    )


def exemption(job: Job, policy: Policy) -> str | None:
    """Why ``policy`` spares ``job`` entirely (None: it does not). The interactive carve-out spares time, not
    the job: :func:`interactive_until`."""
    e = policy.exemptions
    if job.user is not None and job.user in e.users:
        return f"user {job.user}"
    if job.team is not None and job.team in e.accounts:
        return f"account {job.team}"
    if job.qos is not None and job.qos in e.qos:
        return f"qos {job.qos}"
    if hit := next((label for label in e.labels if label in job.labels), None):
        return f"label {hit}"
    if job.name is not None and (hit := next((p for p in e.names if fnmatch.fnmatchcase(job.name, p)), None)):
        return f"name {hit}"
    return None


def interactive_until(job: Job, policy: Policy) -> dt.datetime | None:
    """An interactive job of at most ``interactive_max_gpus`` GPUs is spared for its first
    ``interactive_max_hours``: the end of that time (None: not spared)."""
    e = policy.exemptions
    if e.interactive_max_gpus is None or job.kind != "interactive" or job.gpu_count > e.interactive_max_gpus:
        return None
    return job.start + dt.timedelta(hours=e.interactive_max_hours)


def util_pct_of(policy: Policy, settings: Settings) -> float:
    """The utilization at or under which a GPU is idle for ``policy``: its own, else the ledger's."""
    return policy.util_pct if policy.util_pct is not None else thresholds(settings).idle_util_pct


@dataclass(frozen=True)
class Evaluated:
    job: Job
    policy: Policy
    outcome: Outcome
    end: dt.datetime | None  # the job's real end, else its last telemetry
    exempt: str | None
    segments: tuple[Segment, ...]  # the job's idle timeline under the policy (merged)


def evaluate(
    con: duckdb.DuckDBPyConnection, jobs: list[Job], policy: Policy, settings: Settings
) -> list[Evaluated]:
    """``policy`` run over each job in its scope (exempt jobs too, marked)."""
    scoped = [j for j in jobs if in_scope(j, policy)]
    runs = gpu_runs(con, [j.job_id for j in scoped], util_pct_of(policy, settings), policy.memory_floor_pct)
    out = []
    for job in scoped:
        segments: list[Segment] = job_segments(
            runs.get(job.job_id, {}), job.gpu_count, policy.gpu_fraction, interactive_until(job, policy)
        )
        end = job.end or (segments[-1].end if segments else None)
        out.append(
            Evaluated(
                job,
                policy,
                simulate(segments, policy, open_end=job.end is None),
                end,
                exemption(job, policy),
                tuple(segments),
            )
        )
    return out


def usd(book: PriceBook, job: Job, t0: dt.datetime, t1: dt.datetime) -> float | None:
    """$ of the job's GPUs held from ``t0`` to ``t1``, each moment at the price in force then (``PriceBook.usd``)."""
    one = book.usd(job.gpu_model, job.tier, job.cluster, t0, t1) if t1 > t0 else 0.0
    return None if one is None else job.gpu_count * one


def step_dict(book: PriceBook, job: Job, step: Step) -> dict[str, Any]:
    idle_h = job.gpu_count * step.idle_minutes / 60.0
    return {
        "step": step.step,
        "at": step.at.isoformat(sep=" "),
        "idle_minutes": round(step.idle_minutes, 3),
        "idle_gpu_hours": idle_h,
        "idle_usd": usd(book, job, step.run_start, step.at),
        "mailed": step.mailed if step.step.startswith("warn") else None,
    }


def saved(book: PriceBook, ev: Evaluated) -> tuple[float, float | None]:
    """GPU-hours and $ a cancel saved: from the cancel to the job's real end."""
    at = ev.outcome.cancelled_at
    if at is None or ev.end is None:
        return 0.0, 0.0
    hours = ev.job.gpu_count * max((ev.end - at).total_seconds(), 0.0) / 3600.0
    return hours, usd(book, ev.job, at, ev.end)


def replay(
    con: duckdb.DuckDBPyConnection,
    *,
    since: dt.date,
    until: dt.date,
    settings: Settings,
    policies: tuple[Policy, ...] | None = None,
) -> dict[str, Any]:
    """Per policy and job, the steps inside ``[since, until + 1 day)``, the cancels' savings and the false
    alarms, with totals per policy. ``policies`` defaults to every ``[[guard.policy]]`` of ``settings``.

    Returns ``{"since", "until", "policies": [{"policy", "cancels", "totals": {...}, "jobs": [...]}]}``; each
    job: ``job_id, user, team, cluster, gpu_model, gpu_count, start, end, exempt`` (None or why), ``steps``
    (``step, at, idle_minutes, idle_gpu_hours, idle_usd, mailed``), ``cancelled_at``, ``saved_gpu_hours``,
    ``saved_usd`` (None: no price), ``busy_again`` (false alarms: when a warned job turned busy). Totals
    (exempt jobs left out): ``jobs_warned, jobs_cancelled, saved_gpu_hours, saved_usd, false_alarms,
    jobs_exempt``, and ``jobs_without_telemetry`` (jobs in scope with no sample tied to them: not judged).
    """
    lo = dt.datetime.combine(since, dt.time())
    hi = dt.datetime.combine(until + dt.timedelta(days=1), dt.time())
    jobs = jobs_in(con, lo, hi)
    book = price_book(con)
    result = []
    for policy in settings.guard.policies if policies is None else policies:
        rows = []
        totals = {
            "jobs_warned": 0,
            "jobs_cancelled": 0,
            "saved_gpu_hours": 0.0,
            "saved_usd": 0.0,
            "false_alarms": 0,
            "jobs_exempt": 0,
            "jobs_without_telemetry": 0,
        }
        for ev in evaluate(con, jobs, policy, settings):
            if not ev.segments:  # no sample tied to the job: it cannot be judged (not counted as not idle)
                totals["jobs_without_telemetry"] += 1
            steps = [s for s in ev.outcome.steps if lo <= s.at < hi]
            if not steps:
                continue
            cancel = next((s for s in steps if s.step == "cancel"), None)
            hours, money = saved(book, ev) if cancel else (0.0, 0.0)
            busy = [t for t in ev.outcome.busy_again if lo <= t < hi]
            job = ev.job
            rows.append(
                {
                    "job_id": job.job_id,
                    "user": job.user,
                    "team": job.team,
                    "cluster": job.cluster,
                    "kind": job.kind,
                    "gpu_model": job.gpu_model,
                    "gpu_count": job.gpu_count,
                    "start": job.start.isoformat(sep=" "),
                    "end": None if job.end is None else job.end.isoformat(sep=" "),
                    "exempt": ev.exempt,
                    "steps": [step_dict(book, job, s) for s in steps],
                    "cancelled_at": None if cancel is None else cancel.at.isoformat(sep=" "),
                    "saved_gpu_hours": hours,
                    "saved_usd": money,
                    "busy_again": [t.isoformat(sep=" ") for t in busy],
                }
            )
            if ev.exempt:
                totals["jobs_exempt"] += 1
                continue
            totals["jobs_warned"] += any(s.step.startswith("warn") for s in steps)
            totals["jobs_cancelled"] += cancel is not None
            totals["saved_gpu_hours"] += hours
            if money is None or totals["saved_usd"] is None:
                totals["saved_usd"] = None
            else:
                totals["saved_usd"] += money
            totals["false_alarms"] += len(busy)
        result.append(
            {
                "policy": policy.name,
                "cancels": policy.cancel_minutes is not None,
                "totals": totals,
                "jobs": rows,
            }
        )
    return {"since": since.isoformat(), "until": until.isoformat(), "policies": result}
