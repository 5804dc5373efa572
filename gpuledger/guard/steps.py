"""What a policy does to one job, given when the job was idle: a plain function over segments, no ledger.

A job's telemetry is a list of :class:`Segment` (idle, busy or unknown, gpuledger/guard/timeline.py builds it).
Each idle run ``[a, b)`` is counted from its start ``a`` (``window = "sliding"``: any run; ``"from_start"``: only
a run that starts with the job's telemetry, Job Defense Shield's fixed window). Steps fall due at ``a +
warn_minutes``, ``a + warn_again_minutes`` and ``a + cancel_minutes`` and happen only while the run lasts (before
``b``). Quiet hours and quiet weekends move a step to the first minute after them, still only while the run
lasts. A cancel comes no sooner than ``cancel_minutes − warn_minutes`` after the run's first warning, so a
warning moved past quiet hours still leaves its owner the time the policy promises. With a
``checkpoint_signal``, the cancel time is the signal's, and the cancel follows ``grace_minutes`` later, again only
while the run lasts (a job that saved and exited by then is not cancelled). A warning within
``cooldown_minutes`` of the job's previous mailed warning is a step without a mail. A warned run that ends in a
busy segment is a false alarm at the time the job turned busy.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from gpuledger.ledger.guard_policy import Policy

IDLE, BUSY, UNKNOWN = "idle", "busy", "unknown"
MINUTE = dt.timedelta(minutes=1)


@dataclass(frozen=True)
class Segment:
    start: dt.datetime
    end: dt.datetime
    state: str  # idle | busy | unknown


@dataclass(frozen=True)
class Step:
    step: str  # warn | warn_again | signal | cancel
    at: dt.datetime
    run_start: dt.datetime  # start of the idle run the step belongs to
    mailed: bool  # warnings: False when inside the cooldown of an earlier mailed warning

    @property
    def idle_minutes(self) -> float:
        return (self.at - self.run_start).total_seconds() / 60.0


@dataclass(frozen=True)
class Outcome:
    steps: tuple[Step, ...]
    cancelled_at: dt.datetime | None
    busy_again: tuple[dt.datetime, ...]  # false alarms: when a warned job turned busy again


def _quiet(t: dt.datetime, policy: Policy) -> dt.datetime | None:
    """The end of the quiet time ``t`` falls in, or None when ``t`` is not quiet."""
    if policy.quiet_weekends and t.weekday() >= 5:
        return dt.datetime.combine(t.date() + dt.timedelta(days=7 - t.weekday()), dt.time())
    if policy.quiet_hours is not None:
        start, end = policy.quiet_hours
        clock = t.time()
        day = t.date()
        if start < end:
            if start <= clock < end:
                return dt.datetime.combine(day, end)
        elif clock >= start:
            return dt.datetime.combine(day + dt.timedelta(days=1), end)
        elif clock < end:
            return dt.datetime.combine(day, end)
    return None


def open_at(t: dt.datetime, policy: Policy) -> dt.datetime:
    """The first time at or after ``t`` outside the policy's quiet hours and quiet weekends."""
    for _ in range(16):  # a weekend then a night then ...: a few hops at most
        later = _quiet(t, policy)
        if later is None:
            return t
        t = later
    return t


def merge(segments: list[Segment]) -> list[Segment]:
    """Adjacent segments of the same state joined into one."""
    out: list[Segment] = []
    for s in segments:
        if out and out[-1].state == s.state and out[-1].end >= s.start:
            out[-1] = Segment(out[-1].start, max(out[-1].end, s.end), s.state)
        else:
            out.append(s)
    return out


def simulate(segments: list[Segment], policy: Policy, *, open_end: bool = False) -> Outcome:
    """The steps ``policy`` takes on a job whose telemetry reads ``segments`` (in time order). ``open_end``: the
    job still runs, so its last run has lasted *up to* its last telemetry and goes on: a step due exactly then
    happens (a finished run ends where the job ended or turned busy: a step must fall before that)."""
    segs = merge(segments)
    steps: list[Step] = []
    busy_again: list[dt.datetime] = []
    last_mail: dt.datetime | None = None
    cooldown = dt.timedelta(minutes=policy.cooldown_minutes)
    due = [("warn", policy.warn_minutes)]
    if policy.warn_again_minutes is not None:
        due.append(("warn_again", policy.warn_again_minutes))
    for i, seg in enumerate(segs):
        if seg.state != IDLE:
            continue
        if policy.window == "from_start" and i > 0:
            break
        a, b = seg.start, seg.end
        last = open_end and i == len(segs) - 1

        def lasts(t: dt.datetime, b: dt.datetime = b, last: bool = last) -> bool:
            return t <= b if last else t < b

        first_warning: dt.datetime | None = None
        for name, minutes in due:
            t = open_at(a + dt.timedelta(minutes=minutes), policy)
            if not lasts(t):
                break
            mailed = last_mail is None or t - last_mail >= cooldown
            if mailed:
                last_mail = t
            steps.append(Step(name, t, a, mailed))
            first_warning = first_warning or t
        if first_warning is not None and policy.cancel_minutes is not None:
            gap = dt.timedelta(minutes=policy.cancel_minutes - policy.warn_minutes)
            t = open_at(max(a + dt.timedelta(minutes=policy.cancel_minutes), first_warning + gap), policy)
            if lasts(t) and policy.checkpoint_signal is not None:
                steps.append(Step("signal", t, a, False))
                t = open_at(t + dt.timedelta(minutes=policy.grace_minutes), policy)
            if lasts(t):
                steps.append(Step("cancel", t, a, False))
                return Outcome(tuple(steps), t, tuple(busy_again))
        if first_warning is not None and i + 1 < len(segs) and segs[i + 1].state == BUSY:
            busy_again.append(segs[i + 1].start)
    return Outcome(tuple(steps), None, tuple(busy_again))
