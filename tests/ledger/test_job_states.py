"""gpuledger/ledger/job_states.py: the one home of the job-state sets and the state normalising SQL."""

from __future__ import annotations

import duckdb
import pytest

from collectors.slurm_poll import FIELDS, running_ids
from gpuledger.demo.workload import OUTCOMES
from gpuledger.ledger import job_states as js


def test_every_slurm_state_is_open_or_final_and_open_is_waiting_or_held():
    assert set(js.WAITING_STATES).isdisjoint(js.HELD_STATES)
    assert set(js.OPEN_STATES) <= set(js.SLURM_STATES)
    # the final states, by hand from Slurm's job state codes
    final = set(js.SLURM_STATES) - set(js.OPEN_STATES)
    assert final == {
        "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
        "PREEMPTED", "REVOKED", "SPECIAL_EXIT", "TIMEOUT",
    }  # fmt: skip


def test_a_failed_or_crashed_state_is_a_final_one():
    # a disruption is final, with one exception: REQUEUED, which on a job's latest record means it waits to run
    # again, and on an earlier attempt's record (sacct -D, jobs.attempt_of) is how that attempt ended
    final = {js.ALIASES.get(s, s) for s in js.SLURM_STATES if s not in js.OPEN_STATES}
    final |= set(js.SLURM_STATES) - set(js.OPEN_STATES)  # OUT_OF_MEMORY is listed beside its alias OOM
    for states in (js.FAILED_STATES, js.INTERRUPTED_STATES, js.CRASHED_STATES, js.FAULT_STATES):
        assert set(states) - {"REQUEUED"} <= final
    assert set(js.DISRUPTED_STATES) & set(js.OPEN_STATES) == {"REQUEUED"}
    assert not set(js.CANCELLED_STATES) & set(js.DISRUPTED_STATES)  # a person's decision, not a disruption


@pytest.mark.parametrize(
    ("text", "stored"),
    [("OUT_OF_MEMORY", "OOM"), ("cancelled by 1234", "CANCELLED"), (" RUNNING ", "RUNNING"), ("OOM", "OOM")],
)
def test_state_text_is_stored_in_one_spelling(text, stored):
    sql = js.stored_state_sql(js.state_word_sql("?"))
    assert duckdb.sql("SELECT " + sql.replace("?", f"'{text}'")).fetchall() == [(stored,)]


def test_the_demo_writes_only_stored_states():
    stored = {js.ALIASES.get(s, s) for s in js.SLURM_STATES}
    assert {s for states, _ in OUTCOMES.values() for s in states} <= stored


@pytest.mark.parametrize("state", ["RUNNING", "CONFIGURING", "STOPPED", "STAGE_OUT", "COMPLETING"])
def test_the_slurm_poll_asks_scontrol_about_every_job_holding_gpus(state):
    # it asked about RUNNING, SUSPENDED and COMPLETING only: a job still CONFIGURING (nodes booting) or
    # STOPPED holds its GPUs too, and its GPU indices come from scontrol alone
    line = ["7" if f == "JobIDRaw" else state if f == "State" else "" for f in FIELDS]
    done = ["8" if f == "JobIDRaw" else "COMPLETED" if f == "State" else "" for f in FIELDS]
    text = "\n".join(["|".join(FIELDS), "|".join(line), "|".join(done)])
    assert running_ids(text) == ["7"]
