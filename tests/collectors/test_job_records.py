"""Which record of a job the ledger keeps when several sources or dumps say different things about it.

Through the real CLI (``gpuledger ingest``, ``gpuledger jobs --json``) on tiny sacct dumps; GPU-hours are
GPUs × hours, worked by hand, and money is GPU-hours × $2.99 (the price sheet's H100 on-demand rate).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import duckdb
import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from tests.conftest import gpuledger, write

T = dt.datetime
UTC = IngestOptions(tz="UTC")
H100_USD = 2.99
HEADER = "JobIDRaw|Cluster|JobName|User|Account|State|Start|End|Elapsed|AllocTRES|NodeList"
# job 101, 2 × H100 on gpu03: finished at 20:00 after 10 h, and what sacct said of it at 15:00
FINISHED = "101|ci|train|bob|cv|COMPLETED|2025-03-01T10:00:00|2025-03-01T20:00:00|10:00:00|gres/gpu:h100=2,gres/gpu=2|gpu03"
RUNNING = "101|ci|train|bob|cv|RUNNING|2025-03-01T10:00:00|Unknown|05:00:00|gres/gpu:h100=2,gres/gpu=2|gpu03"
OTHER = "104|ci|train|eve|cv|COMPLETED|2025-03-04T00:00:00|2025-03-04T01:00:00|01:00:00|gres/gpu:h100=1,gres/gpu=1|gpu05"
OLDER_NOTE = (
    "older records of jobs that have finished since (pending or running here; kept the finished record)"
)


def dump(tmp_path: Path, name: str, *rows: str) -> Path:
    return write(tmp_path, name, "\n".join([HEADER, *rows]) + "\n")


def cli(tmp_path: Path, *args: str) -> list[dict]:
    settings = write(tmp_path, "settings.toml", "")  # the price sheet's rates, nobody's own settings
    db = str(tmp_path / "ledger.duckdb")
    done = gpuledger(*args[:1], "--db", db, "--settings", str(settings), "--json", *args[1:])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def ledger_rows(tmp_path: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(tmp_path / "ledger.duckdb"), read_only=True) as con:
        return con.execute(sql).fetchall()


@pytest.mark.parametrize("order", ["newer-first", "older-first"])
def test_an_older_running_record_never_undoes_the_finished_one(tmp_path, order):
    new = dump(tmp_path, "new.txt", FINISHED, OTHER)
    old = dump(tmp_path, "old.txt", RUNNING)
    files = [new, old] if order == "newer-first" else [old, new]
    reports = cli(tmp_path, "ingest", "--tz", "UTC", *map(str, files))
    if order == "newer-first":  # the old dump's one record stays out, and the report says so
        assert reports[1]["rows"] == {"jobs": 0, "allocations": 0} and reports[1]["skipped"] == {
            OLDER_NOTE: 1
        }
    assert ledger_rows(tmp_path, "SELECT state, start_ts, end_ts FROM jobs WHERE job_id = 'ci/101'") == [
        ("COMPLETED", T(2025, 3, 1, 10), T(2025, 3, 1, 20))
    ]
    # its allocation is the finished record's, not the running one's (held until Start + 5 h)
    assert ledger_rows(
        tmp_path, "SELECT host, gpu_count, start_ts, end_ts FROM allocations WHERE job_id = 'ci/101'"
    ) == [("gpu03", 2.0, T(2025, 3, 1, 10), T(2025, 3, 1, 20))]
    jobs = {j["job_id"]: j for j in cli(tmp_path, "jobs")}
    assert jobs["ci/101"]["gpu_hours"] == pytest.approx(2 * 10)  # 2 GPUs × 10:00–20:00
    assert jobs["ci/101"]["cost_usd"] == pytest.approx(
        2 * 10 * H100_USD
    )  # $59.80, not 126 GPU-h to the horizon
    assert jobs["ci/104"]["gpu_hours"] == pytest.approx(1 * 1)


def test_a_requeued_attempt_that_starts_after_the_end_lands_beside_the_record(ledger, tmp_path):
    """A record that starts after the landed one ended is the job's next attempt: it becomes the job's row and
    the finished record stays as attempt 1, billed to the job (before, it replaced the record and the first
    run's 2 GPUs × 10 h left the job)."""
    ingest_file(ledger, dump(tmp_path, "a.txt", FINISHED), opts=UTC)
    # requeued: runs again from 21:00, 1 h so far
    again = (
        "101|ci|train|bob|cv|RUNNING|2025-03-01T21:00:00|Unknown|01:00:00|gres/gpu:h100=2,gres/gpu=2|gpu04"
    )
    report = ingest_file(ledger, dump(tmp_path, "b.txt", again), opts=UTC)
    assert report.skipped == {} and report.rows["jobs"] == 1
    assert ledger.execute(
        "SELECT job_id, state, start_ts, end_ts, attempt, attempt_of FROM jobs ORDER BY start_ts"
    ).fetchall() == [
        ("ci/101#1", "COMPLETED", T(2025, 3, 1, 10), T(2025, 3, 1, 20), 1, "ci/101"),
        ("ci/101", "RUNNING", T(2025, 3, 1, 21), None, 2, "ci/101"),
    ]
    assert ledger.execute(
        "SELECT job_id, host, start_ts, end_ts FROM allocations ORDER BY start_ts"
    ).fetchall() == [
        ("ci/101#1", "gpu03", T(2025, 3, 1, 10), T(2025, 3, 1, 20)),
        ("ci/101", "gpu04", T(2025, 3, 1, 21), T(2025, 3, 1, 22)),  # held at least until Start + Elapsed
    ]


def test_the_rule_holds_for_a_jobs_table_too(ledger, tmp_path):
    head = "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state"
    done = write(
        tmp_path, "done.csv", f"{head}\nj1,ann,nlp,c,H100,4,2025-03-01T00:00:00,2025-03-01T06:00:00,FAILED\n"
    )
    pending = write(
        tmp_path, "pending.csv", f"{head}\nj1,ann,nlp,c,H100,4,,,PENDING\n"
    )  # no start: no new attempt
    ingest_file(ledger, done, opts=UTC)
    report = ingest_file(ledger, pending, opts=UTC)
    assert report.skipped == {OLDER_NOTE: 1}
    assert ledger.execute("SELECT state, end_ts FROM jobs").fetchall() == [("FAILED", T(2025, 3, 1, 6))]


def test_replace_keeps_a_job_that_another_dump_still_holds(tmp_path):
    # jobs 1, 2, 3: 1 GPU for 1 h each
    rows = {
        n: f"{n}|ci|train|bob|cv|COMPLETED|2025-03-0{n}T10:00:00|2025-03-0{n}T11:00:00|01:00:00|gres/gpu:h100=1,gres/gpu=1|g01"
        for n in (1, 2, 3)
    }
    d1 = dump(tmp_path, "d1.txt", rows[1], rows[2])
    d2 = dump(tmp_path, "d2.txt", rows[2], rows[3])
    cli(tmp_path, "ingest", "--tz", "UTC", str(d1), str(d2))
    dump(tmp_path, "d2.txt", rows[3])  # d2 exported again, without job 2
    cli(tmp_path, "ingest", "--tz", "UTC", "--replace", str(d2))
    hours = {j["job_id"]: j["gpu_hours"] for j in cli(tmp_path, "jobs")}
    assert hours == {"ci/1": 1.0, "ci/2": 1.0, "ci/3": 1.0}  # job 2 is still in d1's ingest


def test_a_slurm_poll_keeps_the_finished_record_and_rejects_an_implausible_line_whole(tmp_path):
    from collectors.slurm_poll import FIELDS, poll
    from gpuledger.ledger.db import writer

    db = str(tmp_path / "ledger.duckdb")
    with writer(db) as con:
        ingest_file(con, dump(tmp_path, "new.txt", FINISHED), opts=UTC)
    # what a (fake) sacct answers: 101 as it was at 15:00; 953 running since 2020 for 400 days (past
    # thresholds.max_job_days: 365); 950 done, 1 GPU × 1 h
    rows = [
        "101|101|train|bob|cv|gpu|RUNNING|2025-03-01T09:00:00|2025-03-01T10:00:00|Unknown|05:00:00|gres/gpu:h100=2,gres/gpu=2||gpu03|1|0:0|ci||",
        "953|953|train|bob|cv|gpu|RUNNING|2020-01-01T09:00:00|2020-01-01T10:00:00|Unknown|400-00:00:00|gres/gpu:h100=1,gres/gpu=1||g04|1|0:0|ci||",
        "950|950|train|bob|cv|gpu|COMPLETED|2025-03-02T09:00:00|2025-03-02T10:00:00|2025-03-02T11:00:00|01:00:00|gres/gpu:h100=1,gres/gpu=1||g01|1|0:0|ci||",
    ]
    answer = write(tmp_path, "answer.txt", "\n".join(["|".join(FIELDS), *rows]) + "\n")
    sacct = write(tmp_path, "sacct", f"#!/bin/sh\ncat {answer}\n")
    sacct.chmod(0o755)
    report = poll(db, cluster="ci", since=T(2025, 3, 1), sacct=str(sacct), scontrol=str(tmp_path / "none"))
    assert report.rows == {"jobs": 1, "allocations": 1}  # 950 only
    assert report.skipped == {
        OLDER_NOTE: 1,
        f"rows outside their physical range (rejected_rows of ingest #{report.ingest_id})": 1,
        "running jobs whose GPU indices scontrol did not give": 2,
    }
    with duckdb.connect(db, read_only=True) as con:
        assert con.execute("SELECT job_id, state, end_ts FROM jobs ORDER BY 1").fetchall() == [
            ("ci/101", "COMPLETED", T(2025, 3, 1, 20)),
            ("ci/950", "COMPLETED", T(2025, 3, 2, 11)),
        ]  # no ci/953, and no allocation left of it
        assert con.execute("SELECT job_id, end_ts FROM allocations ORDER BY 1").fetchall() == [
            ("ci/101", T(2025, 3, 1, 20)),
            ("ci/950", T(2025, 3, 2, 11)),
        ]
        assert con.execute("SELECT line, table_name, column_name FROM rejected_rows").fetchall() == [
            (3, "allocations", "Start + Elapsed")  # the answer's line 3
        ]


# job 102 requeued: sacct shows it pending again, with the start the scheduler expects for it
PENDING_102 = "102|ci|train|amy|cv|PENDING|2025-03-01T12:00:00|Unknown|00:00:00|gres/gpu:h100=8,gres/gpu=8|None assigned"
RUNNING_102 = (
    "102|ci|train|amy|cv|RUNNING|2025-03-01T09:00:00|Unknown|01:00:00|gres/gpu:h100=8,gres/gpu=8|gpu07"
)


def test_a_pending_job_holds_no_gpu_whatever_start_its_source_shows(tmp_path):
    """8 H100s pending since an expected start of 12:00 cost nothing (they cost 184 GPU-h, $550.16, up to the
    ledger's end); job 104's one GPU-hour is all the spend: 1 × 1 h × $2.99. A pending record after a running
    one (requeued: the running record has no end, so nothing finished is undone) takes its allocation away."""
    cli(tmp_path, "ingest", "--tz", "UTC", str(dump(tmp_path, "a.txt", RUNNING_102, OTHER)))
    assert ledger_rows(tmp_path, "SELECT count(*) FROM allocations WHERE job_id = 'ci/102'") == [(1,)]
    cli(tmp_path, "ingest", "--tz", "UTC", str(dump(tmp_path, "b.txt", PENDING_102)))
    assert ledger_rows(tmp_path, "SELECT state, start_ts, end_ts FROM jobs WHERE job_id = 'ci/102'") == [
        ("PENDING", None, None)
    ]
    assert ledger_rows(tmp_path, "SELECT count(*) FROM allocations WHERE job_id = 'ci/102'") == [(0,)]
    jobs = cli(tmp_path, "jobs")
    assert [(j["job_id"], j["gpu_hours"], j["cost_usd"]) for j in jobs] == [
        ("ci/104", 1.0, pytest.approx(H100_USD))
    ]


JOBS_HEADER = "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state\n"


@pytest.mark.parametrize("source", ["sacct", "jobs_csv"])
def test_a_requeued_job_pending_again_is_read_alike_from_every_source(tmp_path, source):
    """Job 77 failed with its node (08:00-10:00), then a record says it is pending again with an expected
    start of 11:00: a new attempt after the end, so it becomes the job's row (pending, it holds no GPU) and the
    failed run stays as attempt 1, billed to the job (1 GPU × 2 h = $5.98; before, it was replaced and its
    money left the job), from sacct and from a jobs table alike. The jobs table blanked the pending start
    before the landing compared it, and kept the failed record as newer."""
    if source == "sacct":
        first = dump(
            tmp_path,
            "a.txt",
            "77|ci|train|bob|cv|NODE_FAIL|2025-03-01T08:00:00|2025-03-01T10:00:00|02:00:00|gres/gpu:h100=1,gres/gpu=1|gpu01",
        )
        again = dump(
            tmp_path,
            "b.txt",
            "77|ci|train|bob|cv|PENDING|2025-03-01T11:00:00|Unknown|00:00:00|gres/gpu:h100=1,gres/gpu=1|None assigned",
        )
        job = "ci/77"
    else:
        first = write(
            tmp_path,
            "a.csv",
            JOBS_HEADER + "77,bob,cv,ci,H100,1,2025-03-01T08:00:00,2025-03-01T10:00:00,NODE_FAIL\n",
        )
        again = write(tmp_path, "b.csv", JOBS_HEADER + "77,bob,cv,ci,H100,1,2025-03-01T11:00:00,,PENDING\n")
        job = "77"
    cli(tmp_path, "ingest", "--tz", "UTC", str(first), str(again))
    assert ledger_rows(tmp_path, f"SELECT state, start_ts, end_ts FROM jobs WHERE job_id = '{job}'") == [
        ("PENDING", None, None)
    ]
    assert ledger_rows(
        tmp_path, f"SELECT state, start_ts, end_ts, attempt, attempt_of FROM jobs WHERE job_id = '{job}#1'"
    ) == [("NODE_FAIL", T(2025, 3, 1, 8), T(2025, 3, 1, 10), 1, job)]
    assert [(j["job_id"], j["cost_usd"]) for j in cli(tmp_path, "jobs")] == [
        (f"{job}#1", pytest.approx(1 * 2 * H100_USD))
    ]
