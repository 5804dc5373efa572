"""``gpuledger guard run`` against a REAL Slurm (tests/services/slurm_up.sh, as tests/live/test_slurm_collector.py
starts it) and a real SMTP server on 127.0.0.1 (tests/test_report_mail.py's).

One real ``sbatch --gres=gpu:4 --time=30`` job holds the whole fake-GPU node; the Slurm collector polls it into
the ledger; its node's four GPUs report 0 % (the only mock: this machine has no GPU) from the job's start. Policy:
warn after 0.05 idle minutes (3 s), cancel after 0.1 (6 s). Without ``--enforce`` the guard says it would warn
and cancel, and the job runs on with no row written and no mail sent. With it: the first tick mails the owner
and records the warning, while the cancel waits (its warning went out less than 3 s ago); a later tick runs
``scancel``, sacct then says CANCELLED, and ``guard_actions`` holds both steps with the scheduler's answer.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import duckdb
import pytest

from collectors.slurm_poll import poll
from gpuledger.ledger.db import writer
from tests.analytics.build import gpu, ingest
from tests.conftest import gpuledger
from tests.live.test_slurm_collector import NO_OVERLAP, sbatch, wait_until
from tests.live.test_slurm_collector import slurm as slurm  # the session's real Slurm (a fixture)
from tests.test_report_mail import smtp_server

SETTINGS = """
[guard]
allow_cancel = true
admins = ["hpc-admins@example.org"]
mail_domain = "example.org"

[[guard.policy]]
name = "idle"
util_pct = 0
warn_minutes = 0.05
cancel_minutes = 0.1
"""


def host() -> str:
    return socket.gethostname().split(".")[0]


def zero_telemetry(db: str, lo: dt.datetime, hi: dt.datetime) -> None:
    """The node's 4 GPUs at 0 % every second in [lo, hi]."""
    n = int((hi - lo).total_seconds()) + 1
    samples = [
        {"ts": lo + dt.timedelta(seconds=s), "gpu_id": f"{host()}:{i}", "util_pct": 0.0, "mem_used_mib": 0.0}
        for i in range(4)
        for s in range(n)
    ]
    with writer(db) as con:
        ingest(con, gpus=[gpu(f"{host()}:{i}", cluster="ci") for i in range(4)], samples=samples)


def squeue_state(job: str) -> str:
    out = subprocess.run(
        ["timeout", "20", "squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True
    )
    return out.stdout.strip()


def rows(db: str) -> list[tuple]:
    con = duckdb.connect(db, read_only=True)
    try:
        return con.execute(
            "SELECT job_id, policy, step, mail_id IS NOT NULL, accepted, answer, planned_end_ts IS NOT NULL "
            "FROM guard_actions ORDER BY action_id"
        ).fetchall()
    finally:
        con.close()


@pytest.mark.usefixtures("slurm")
def test_an_idle_job_is_warned_then_cancelled_only_with_enforce(tmp_path: Path) -> None:
    db = str(tmp_path / "l.duckdb")
    toml = tmp_path / "s.toml"
    toml.write_text(SETTINGS, encoding="utf-8")
    raw = sbatch("--gres=gpu:4", "--time=30", "--job-name=idle-notebook", "--wrap", "sleep 300")
    truth = wait_until([raw], {raw: {"RUNNING"}})
    start = truth[raw]["start"]
    time.sleep(8)
    poll(db, overlap=NO_OVERLAP)
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    zero_telemetry(db, start, now)
    job = f"ci/{raw}"
    with smtp_server() as inbox:
        smtp = ["--smtp", f"smtp://127.0.0.1:{inbox.port}"]
        dry = gpuledger("guard", "run", "--json", "--db", db, "--settings", str(toml), *smtp)
        assert dry.returncode == 0, dry.stderr
        plans = json.loads(dry.stdout)
        assert [(p["job_id"], p["step"], p["blocked"]) for p in plans] == [
            (job, "warn", None),
            (job, "cancel", "no warning of this idle run was sent yet"),
        ]
        assert all(p["done"].startswith("dry run") for p in plans)
        time.sleep(2)
        assert squeue_state(raw) == "RUNNING"  # left running
        assert rows(db) == [] and inbox.messages == []  # nothing recorded, nothing sent

        qos = tmp_path / "qos.toml"  # sbatch gave the job Slurm's default QOS, normal: squeue says so
        qos.write_text(SETTINGS + '[guard.policy.exemptions]\nqos = ["normal"]\n', encoding="utf-8")
        spared = gpuledger("guard", "run", "--enforce", "--json", "--db", db, "--settings", str(qos), *smtp)
        assert spared.returncode == 0, spared.stderr
        assert {p["done"] for p in json.loads(spared.stdout)} == {"exempt: qos normal"}
        assert rows(db) == [] and inbox.messages == []

        first = gpuledger("guard", "run", "--enforce", "--json", "--db", db, "--settings", str(toml), *smtp)
        assert first.returncode == 0, first.stderr
        assert [(p["step"], p["done"]) for p in json.loads(first.stdout)] == [
            ("warn", "mailed root@example.org"),
            ("cancel", "waits"),
        ]
        assert squeue_state(raw) == "RUNNING"
        owner = [m for _, to, m in inbox.messages if to == ["root@example.org"]]
        assert len(owner) == 1 and f"Your job {job} has had idle GPUs" in owner[0]["Subject"]
        assert "holds 4 × " in owner[0].get_content()
        digest = [m for _, to, m in inbox.messages if to == ["hpc-admins@example.org"]]
        assert len(digest) == 1 and "1 action(s)" in digest[0]["Subject"]

        time.sleep(4)  # past the 3 s the cancel keeps from its warning
        later = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
        zero_telemetry(db, now + dt.timedelta(seconds=1), later)
        second = gpuledger("guard", "run", "--enforce", "--json", "--db", db, "--settings", str(toml), *smtp)
        assert second.returncode == 0, second.stderr
        assert [p["step"] for p in json.loads(second.stdout)] == ["cancel"]
    done = wait_until([raw], {raw: {"CANCELLED"}})
    assert done[raw]["state"] == "CANCELLED"
    got = rows(db)
    assert [(r[0], r[1], r[2], r[3]) for r in got] == [
        (job, "idle", "warn", True),
        (job, "idle", "cancel", False),
    ]
    assert got[1][4] is True and got[1][5] == f"scancel {raw}: exit 0"
    assert got[1][6] is True  # --time=30: squeue gave its planned end before the cancel
    # the report line and the command read the same rows: 1 job, 4 GPUs × (planned end − cancel)
    actions = gpuledger("guard", "actions", "--json", "--db", db)
    assert actions.returncode == 0, actions.stderr
    totals = json.loads(actions.stdout)["totals"]
    assert totals["jobs_cancelled"] == 1 and totals["saved_gpu_hours"] == pytest.approx(
        4 * 0.5, abs=4 * 1 / 60
    )


CHECKPOINT = SETTINGS.replace(
    "cancel_minutes = 0.1\n", 'cancel_minutes = 0.1\ncheckpoint_signal = "USR1"\ngrace_minutes = 1\n'
)


@pytest.mark.usefixtures("slurm")
def test_a_checkpointing_job_gets_its_signal_first_and_exits_by_itself(tmp_path: Path) -> None:
    """With ``checkpoint_signal = "USR1"`` the guard's cancel step is first ``scancel --signal=USR1 --full``: the
    job's own trap writes its checkpoint and exits 0, so Slurm records it COMPLETED, not CANCELLED. The cancel
    itself would come 1 minute (the grace) later, had the job stayed."""
    work = Path(os.environ["SLURM_CONF"]).parent  # the slurm user can write there (pytest's tmp_path: no)
    mark = work / f"checkpoint-{time.monotonic_ns()}"
    db = str(tmp_path / "l.duckdb")
    toml = tmp_path / "s.toml"
    toml.write_text(CHECKPOINT, encoding="utf-8")
    script = f"trap 'echo saved > {mark}; exit 0' USR1; sleep 300 & wait"
    raw = sbatch("--gres=gpu:4", "--time=30", "--wrap", script)
    start = wait_until([raw], {raw: {"RUNNING"}})[raw]["start"]
    time.sleep(8)
    poll(db, overlap=NO_OVERLAP)
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    zero_telemetry(db, start, now)
    with smtp_server() as inbox:
        args = ("guard", "run", "--enforce", "--json", "--db", db, "--settings", str(toml),
                "--smtp", f"smtp://127.0.0.1:{inbox.port}")  # fmt: skip
        first = json.loads(gpuledger(*args).stdout)
        assert [p["step"] for p in first] == ["warn", "signal"] and first[1]["done"] == "waits"
        time.sleep(4)
        later = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
        zero_telemetry(db, now + dt.timedelta(seconds=1), later)
        second = json.loads(gpuledger(*args).stdout)
        # the cancel is not even due: 1 minute of grace after the signal has not passed
        assert [(p["step"], p["done"]) for p in second] == [
            ("signal", f"scancel --signal=USR1 --full {raw}: exit 0")
        ]
    done = wait_until([raw], {raw: {"COMPLETED"}})
    assert done[raw]["state"] == "COMPLETED"
    assert mark.read_text().strip() == "saved"
    assert [r[2] for r in rows(db)] == ["warn", "signal"]
