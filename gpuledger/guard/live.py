"""``gpuledger guard run``: the policies applied to the jobs running now, from the ledger the live collectors
feed. Each tick finds the steps due (:func:`due`, pure: a connection in, plans out); under ``--enforce``
:func:`act` takes them: a warning is a mail to the job's owner, a signal or cancel goes to the scheduler
(gpuledger/guard/edge.py) only when ``[guard] allow_cancel`` is true, each step is one ``guard_actions`` row,
and the admins get one digest of the tick. Without ``--enforce`` nothing is sent, cancelled or written: the
plans are printed.

Which steps are due now: those of each job's **current** idle run (its telemetry's last segment is idle and
reaches within ``fresh_minutes`` of now; a job whose telemetry went stale is left alone), due at or before now
(gpuledger/guard/steps.py decides when), and not yet in ``guard_actions``. A signal or cancel also needs a
warning of the same run taken at least ``cancel_minutes − warn_minutes`` ago: a guard started late warns first
and cancels later, never at once. After a checkpoint signal, the cancel waits ``grace_minutes`` from the
signal actually sent.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import duckdb

from gpuledger.guard.edge import Answer, KubeTarget, delete_pod, pod_labels, scancel, scheduler, slurm_qos
from gpuledger.guard.replay import Job, evaluate, usd
from gpuledger.guard.steps import IDLE, Step
from gpuledger.ledger.guard_policy import Policy
from gpuledger.ledger.prices import price_book
from gpuledger.ledger.settings import Settings

FRESH_MINUTES = 15.0


@dataclass(frozen=True)
class Plan:
    """One step due on one job."""

    job: Job
    policy: Policy
    step: Step
    idle_gpu_hours: float
    idle_usd: float | None
    blocked: str | None = None  # why it waits (a cancel before its warning's time is up)

    def describe(self) -> str:
        money = "" if self.idle_usd is None else f", ${self.idle_usd:,.2f}"
        head = (
            f"{self.step.step} {self.job.job_id} ({self.job.user or 'unknown user'}, policy {self.policy.name}): "
            f"idle {self.step.idle_minutes:.0f} min on {self.job.gpu_count:g} GPU(s), "
            f"{self.idle_gpu_hours:.2f} GPU-h{money}"
        )
        return head + (f" — waits: {self.blocked}" if self.blocked else "")


TAKEN_SQL = """
SELECT job_id, policy, step, run_start, acted_ts FROM guard_actions
WHERE job_id IN (SELECT unnest($jobs::VARCHAR[]))
"""


def _taken(
    con: duckdb.DuckDBPyConnection, job_ids: list[str]
) -> dict[tuple[str, str, dt.datetime], dict[str, dt.datetime]]:
    out: dict[tuple[str, str, dt.datetime], dict[str, dt.datetime]] = {}
    if not job_ids:
        return out
    for job_id, policy, step, run_start, acted in con.execute(TAKEN_SQL, {"jobs": job_ids}).fetchall():
        out.setdefault((job_id, policy, run_start), {})[step] = acted
    return out


def running_jobs(con: duckdb.DuckDBPyConnection) -> list[Job]:
    rows = con.execute(
        """SELECT job_id, source, cluster, user_name, team, name, kind, partition, gpu_model, gpu_count,
                  pricing_tier, start_ts, end_ts
           FROM jobs WHERE end_ts IS NULL AND start_ts IS NOT NULL AND gpu_count > 0 ORDER BY start_ts, job_id"""
    ).fetchall()
    return [Job(*r) for r in rows]


def due(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    now: dt.datetime,
    *,
    fresh_minutes: float = FRESH_MINUTES,
    policies: tuple[Policy, ...] | None = None,
) -> list[Plan]:
    """The steps due now on running jobs (module docstring), each with its idle GPU-hours and $."""
    jobs = running_jobs(con)
    book = price_book(con)
    taken = _taken(con, [j.job_id for j in jobs])
    fresh = dt.timedelta(minutes=fresh_minutes)
    plans: list[Plan] = []
    for policy in settings.guard.policies if policies is None else policies:
        for ev in evaluate(con, jobs, policy, settings):
            last = ev.segments[-1] if ev.segments else None
            if ev.exempt or last is None or last.state != IDLE or now - last.end > fresh:
                continue
            run = last.start
            done = taken.get((ev.job.job_id, policy.name, run), {})
            warned = min((t for k, t in done.items() if k.startswith("warn")), default=None)
            for step in ev.outcome.steps:
                if step.run_start != run or step.at > now or step.step in done:
                    continue
                blocked = None
                if step.step in ("signal", "cancel"):
                    need = dt.timedelta(minutes=(policy.cancel_minutes or 0) - policy.warn_minutes)
                    if warned is None:
                        blocked = "no warning of this idle run was sent yet"
                    elif now - warned < need:
                        blocked = f"its warning went out at {warned:%H:%M}; the owner has until {warned + need:%H:%M}"
                    if step.step == "cancel" and policy.checkpoint_signal:
                        grace = dt.timedelta(minutes=policy.grace_minutes)
                        if "signal" not in done:
                            blocked = blocked or "the checkpoint signal was not sent yet"
                        elif now - done["signal"] < grace:
                            blocked = (
                                blocked
                                or f"its checkpoint grace runs until {done['signal'] + grace:%H:%M:%S}"
                            )
                hours = ev.job.gpu_count * step.idle_minutes / 60.0
                plans.append(Plan(ev.job, policy, step, hours, usd(book, ev.job, run, step.at), blocked))
                if blocked:
                    break
    return plans


def warning_text(plan: Plan) -> tuple[str, str]:
    """Subject and body of the owner's warning, in the jobstats voice: what happened, what it costs, what next."""
    job, policy, step = plan.job, plan.policy, plan.step
    gpus = f"{job.gpu_count:g} × {job.gpu_model or 'GPU'}"
    money = "" if plan.idle_usd is None else f", ${plan.idle_usd:,.2f} at its price"
    subject = f"Your job {job.job_id} has had idle GPUs for {step.idle_minutes:.0f} minutes"
    if policy.cancel_minutes is not None:
        at = step.run_start + dt.timedelta(minutes=policy.cancel_minutes)
        nxt = (
            f"If its GPUs stay idle, the guard {'signals it (' + policy.checkpoint_signal + ') to checkpoint, then ' if policy.checkpoint_signal else ''}"
            f"cancels it from {at:%Y-%m-%d %H:%M} UTC (policy '{policy.name}')."
        )
    else:
        nxt = f"Nothing will be cancelled (policy '{policy.name}' only notifies)."
    body = (
        f"Hello {job.user or ''},\n\n"
        f"Job {job.job_id} ({job.name or 'no name'}) holds {gpus}, and its GPUs have been idle since "
        f"{step.run_start:%Y-%m-%d %H:%M} UTC: {step.idle_minutes:.0f} minutes, {plan.idle_gpu_hours:.2f} GPU-hours{money}.\n"
        f"{nxt}\n\n"
        "If the job is done, end it so others in the queue get the GPUs; if it waits on purpose, reply to this mail.\n"
    )
    return subject, body


def digest_text(lines: list[str], now: dt.datetime) -> tuple[str, str]:
    return (
        f"gpuledger guard: {len(lines)} action(s) at {now:%Y-%m-%d %H:%M} UTC",
        "The guard took these steps:\n\n" + "\n".join(f"- {line}" for line in lines) + "\n",
    )


def record(
    con: duckdb.DuckDBPyConnection,
    plan: Plan,
    acted: dt.datetime,
    mail_id: str | None,
    answer: Answer | None,
) -> None:
    """Append the step to ``guard_actions`` (the caller owns the transaction)."""
    con.execute(
        """INSERT INTO guard_actions VALUES (nextval('guard_action_seq'), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [
            plan.job.job_id,
            plan.policy.name,
            plan.step.step,
            plan.step.run_start,
            plan.step.at,
            acted,
            plan.job.gpu_count,
            plan.idle_gpu_hours,
            plan.idle_usd,
            mail_id,
            None if answer is None else answer.text,
            None if answer is None else answer.ok,
            None if answer is None else answer.planned_end,
        ],
    )


def scheduler_exemption(job: Job, policy: Policy, kube: KubeTarget) -> str | None:
    """Why ``policy`` spares ``job`` by what only the scheduler knows (the ledger holds neither): its Slurm QOS
    (``exemptions.qos``) or its pod's labels (``exemptions.labels``), asked at the edge before any step. None:
    not spared (also when the scheduler cannot say)."""
    e = policy.exemptions
    if scheduler(job.source) == "kubernetes":
        if e.labels and (labels := pod_labels(job.job_id, kube)) is not None:
            hit = next((x for x in e.labels if labels.get(x.split("=", 1)[0]) == x.split("=", 1)[1]), None)
            return f"label {hit}" if hit else None
        return None
    if e.qos and (qos := slurm_qos(job.job_id)) in e.qos:
        return f"qos {qos}"
    return None


def take(
    plan: Plan, *, allow_cancel: bool, kube: KubeTarget, scancel_command: str = "scancel"
) -> Answer | None:
    """Signal or cancel ``plan``'s job (None for a warning, or where cancels are not allowed)."""
    step = plan.step.step
    if step not in ("signal", "cancel") or not allow_cancel:
        return None
    if scheduler(plan.job.source) == "kubernetes":
        if (
            step == "signal"
        ):  # a pod's checkpoint signal is its termination grace period, given with the delete
            return Answer(True, "pod: the checkpoint signal comes with the deletion's grace period")
        grace = int(plan.policy.grace_minutes * 60) if plan.policy.checkpoint_signal else None
        return delete_pod(plan.job.job_id, kube, grace_seconds=grace)
    signal = plan.policy.checkpoint_signal if step == "signal" else None
    return scancel(plan.job.job_id, signal=signal, command=scancel_command)
