"""Job states: the scheduler's words, the sets every layer asks about, and the SQL that normalises a state.

Here, in the ledger layer, because every layer needs the same answer: the parsers (collectors/sacct.py,
jobs_table.py, slurm_poll.py) to read a record, the landing (collectors/landing.py) and attribution
(collectors/attribute.py) to tell a finished job from one still running, the analytics (waste.py,
advice_failures.py, batch_size.py) to tell a failed run from a good one, and the demo to write valid rows.
Before, 12 lists in 8 modules each said it their own way, and four meanings of "open" drifted apart.

The sets follow Slurm's job state codes (https://slurm.schedmd.com/job_state_codes.html): a state is either
final (the job ended: its End is known or derived from Start + Elapsed) or not. A job not final either waits
(holds no GPU: pending, requeued, held) or holds its allocation now (running, suspended, completing, ...).
"""

from __future__ import annotations

from collections.abc import Mapping

# Every base state Slurm's sacct prints (a ``CANCELLED by 1234`` is CANCELLED; flags after ``+`` dropped).
SLURM_STATES = (
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "COMPLETING",
    "CONFIGURING",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PENDING",
    "PREEMPTED",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "RESIZING",
    "RESV_DEL_HOLD",
    "REVOKED",
    "RUNNING",
    "SIGNALING",
    "SPECIAL_EXIT",
    "STAGE_OUT",
    "STOPPED",
    "SUSPENDED",
    "TIMEOUT",
)
# Source words the ledger stores under another name: one spelling per state in ``jobs.state``.
ALIASES = {"OUT_OF_MEMORY": "OOM"}

PENDING = "PENDING"
# Not final and holding no GPU: the job waits to start (again). A record in one of these has no allocation.
WAITING_STATES = ("PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD")
# Waiting to start again: a start such a record shows is an earlier run's, which ended at Start + Elapsed.
REQUEUE_STATES = tuple(s for s in WAITING_STATES if s != PENDING)
# Not final and holding its GPUs now: the allocation lasts at least until Start + Elapsed, its end is open.
HELD_STATES = (
    "RUNNING",
    "SUSPENDED",
    "COMPLETING",
    "CONFIGURING",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "STOPPED",
)
# Not final: no End is derived from Elapsed, and an older record in one of these never replaces a finished one.
OPEN_STATES = WAITING_STATES + HELD_STATES

# The states a generic jobs table (collectors/jobs_table.py) accepts: the common Slurm words, OOM as stored.
TABLE_STATES = (
    "COMPLETED",
    "RUNNING",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "OOM",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "PENDING",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "REQUEUED",
    "SUSPENDED",
)
# A jobs-table row in any of these has ended, so it needs its end.
TABLE_FINISHED_STATES = tuple(s for s in TABLE_STATES if s not in OPEN_STATES)

# Disruptions, per Google Cloud's ML Goodput (analytics/badput.py, docs/metrics.md "Badput"): the run was stopped
# by something other than its own code finishing or a person's decision, and loses the work since its last
# checkpoint (failed_usd). REQUEUED is an attempt that ended in a requeue. OUT_OF_MEMORY is listed beside OOM
# for rows read before the alias applies.
DISRUPTED_STATES = (
    "FAILED",
    "NODE_FAIL",
    "TIMEOUT",
    "OOM",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "REQUEUED",
)
# A person's decision, not a disruption: its time is classified by telemetry like a completed job's, and its
# spend is shown as its own figure (cancelled_usd), never as waste.
CANCELLED_STATES = ("CANCELLED",)
# Failed waste (failed_usd) is the badput of the disruptions: one set, two names for the readers who ask.
FAILED_STATES = DISRUPTED_STATES
# Stopped before its end by something outside the code: a checkpoint would have saved the work done.
INTERRUPTED_STATES = DISRUPTED_STATES
# Broke by a fault of the job or its node, not a time limit or a person: a cause to fix.
FAULT_STATES = ("FAILED", "NODE_FAIL", "BOOT_FAIL")
CRASHED_STATES = (*FAULT_STATES, "OOM")
OOM = "OOM"
COMPLETED = "COMPLETED"
RUNNING = "RUNNING"
FAILED = "FAILED"
CANCELLED = "CANCELLED"
TIMEOUT = "TIMEOUT"

# Other sources' words for a run's state, as the Slurm word the ledger stores: one table per vocabulary, read
# by every parser of that vocabulary (a Kubernetes pod's status.phase is read by collectors/kubernetes.py and
# by the Alibaba pod traces in collectors/traces.py).
POD_PHASES = {"Pending": PENDING, "Running": RUNNING, "Succeeded": COMPLETED, "Failed": FAILED}
PAI_STATUSES = {
    "Terminated": COMPLETED,
    "Failed": FAILED,
    "Running": RUNNING,
    "Waiting": PENDING,
    "Interrupted": CANCELLED,
}
WANDB_STATES = {"running": RUNNING, "finished": COMPLETED, "failed": FAILED, "crashed": FAILED}


def state_word_sql(col: str) -> str:
    """SQL: the state word of a source's state text, upper case (``cancelled by 1234`` → ``CANCELLED``)."""
    return f"upper(regexp_extract(trim({col}), '^[A-Za-z_]+'))"


def stored_state_sql(word: str) -> str:
    """SQL: a state word (:func:`state_word_sql`) as the ledger stores it (``OUT_OF_MEMORY`` → ``OOM``)."""
    arms = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in ALIASES.items())
    return f"(CASE {word} {arms} ELSE {word} END)"


def mapped_state_sql(word: str, words: Mapping[str, str], otherwise: str = "NULL") -> str:
    """SQL: a source's state ``word`` (an expression, or ``?``) as the ledger's state by one of the tables
    above; ``otherwise`` (SQL) for a word the table does not hold."""
    arms = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in words.items())
    return f"(CASE {word} {arms} ELSE {otherwise} END)"
