"""A jobs table row's state decides what its times mean: a pending job holds no GPU (the start a scheduler
shows for it is when it expects to start), and a finished one without its end cannot be costed."""

from __future__ import annotations

import datetime as dt
import json
import re

import duckdb
import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.conftest import gpuledger, write

HEADER = "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state"
PENDING = "p1,amy,cv,c1,H100,8,2025-03-01T12:00:00,,PENDING"
DONE = "p2,bob,cv,c1,H100,1,2025-03-02T10:00:00,2025-03-02T11:00:00,COMPLETED"


def test_a_pending_job_lands_without_times_and_costs_nothing(tmp_path):
    db = str(tmp_path / "ledger.duckdb")
    # p3: pending, no start at all; p4: pending with the scheduler's expected start and end
    path = write(
        tmp_path,
        "jobs.csv",
        f"{HEADER}\n{PENDING}\n{DONE}\np3,amy,cv,c1,H100,2,,,PENDING\n"
        "p4,amy,cv,c1,H100,4,2025-03-03T00:00:00,2025-03-03T05:00:00,PENDING\n",
    )
    assert gpuledger("--db", db, "ingest", str(path)).returncode == 0
    con = duckdb.connect(db, read_only=True)
    assert con.execute(
        "SELECT job_id, state, gpu_count, start_ts, end_ts FROM jobs ORDER BY job_id"
    ).fetchall() == [
        ("p1", "PENDING", 8.0, None, None),
        ("p2", "COMPLETED", 1.0, dt.datetime(2025, 3, 2, 10), dt.datetime(2025, 3, 2, 11)),
        ("p3", "PENDING", 2.0, None, None),
        ("p4", "PENDING", 4.0, None, None),
    ]
    con.close()
    jobs = json.loads(gpuledger("--db", db, "jobs", "--json").stdout)
    # only p2 held a GPU: 1 GPU × 1 h × $2.99 (the shipped on-demand H100 price) = $2.99; before, p1 was
    # costed from its expected start to the ledger's horizon: 8 × 23 h = 184 GPU-h, $550.16
    assert sum(j["cost_usd"] or 0 for j in jobs) == pytest.approx(2.99)
    assert sum(j["gpu_hours"] or 0 for j in jobs) == pytest.approx(1.0)


def test_a_pending_job_with_a_start_that_is_no_time_is_still_an_error(ledger, tmp_path):
    path = write(tmp_path, "jobs.csv", f"{HEADER}\n{DONE}\np1,amy,cv,c1,H100,8,soon,,PENDING\n")
    with pytest.raises(
        FormatError, match=re.escape('jobs.csv:3: column "start" is not a time: "soon"') + "$"
    ):
        ingest_file(ledger, path)


@pytest.mark.parametrize(
    ("state", "shown"),
    [
        ("COMPLETED", "COMPLETED"),
        ("FAILED", "FAILED"),
        ("CANCELLED by 1234", "CANCELLED"),
        ("TIMEOUT", "TIMEOUT"),
        ("OUT_OF_MEMORY", "OOM"),
        ("NODE_FAIL", "NODE_FAIL"),
        ("PREEMPTED", "PREEMPTED"),
    ],
)
def test_a_finished_job_without_its_end_is_an_error_naming_its_line(ledger, tmp_path, state, shown):
    path = write(
        tmp_path, "jobs.csv", f"{HEADER}\n{DONE}\nc1,amy,cv,c1,H100,1,2025-03-01T00:00:00,,{state}\n"
    )
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, path)
    assert str(err.value) == (
        f'{path}:3: column "end" is empty for a {shown} job: a finished job needs the time it ended '
        "(leave it empty only while the job is pending or running)"
    )
    assert ledger.execute("SELECT count(*) FROM jobs").fetchall() == [(0,)]


def test_cli_a_finished_job_without_its_end_exits_1(tmp_path):
    # the tester's file: before, c1 was costed up to the ledger's latest data point ($104.65)
    path = write(
        tmp_path,
        "b4.csv",
        f"{HEADER}\n{PENDING}\nc1,amy,cv,c1,H100,1,2025-03-01T00:00:00,,COMPLETED\n{DONE}\n",
    )
    result = gpuledger("--db", str(tmp_path / "ledger.duckdb"), "ingest", str(path))
    assert result.returncode == 1
    assert result.stderr.strip().startswith(f'error: {path}:3: column "end" is empty for a COMPLETED job')


@pytest.mark.parametrize("state", ["RUNNING", "SUSPENDED", "REQUEUED"])
def test_a_job_still_open_may_have_no_end(ledger, tmp_path, state):
    row = {"job_id": "r1", "user": "u", "team": "t", "cluster": "c", "gpu_model": "H100", "gpu_count": 2,
           "start": "2025-03-01T00:00:00", "end": None, "state": state}  # fmt: skip
    path = write(tmp_path, "jobs.jsonl", json.dumps(row) + "\n")
    ingest_file(ledger, path, fmt="jobs_jsonl")
    assert ledger.execute("SELECT state, start_ts, end_ts FROM jobs").fetchall() == [
        (state, dt.datetime(2025, 3, 1), None)
    ]


def test_skip_bad_rows_leaves_a_finished_job_without_its_end_out_and_says_on_which_line(ledger, tmp_path):
    # the tester's file: line 2 pending, line 3 COMPLETED with no end, line 4 complete
    path = write(
        tmp_path,
        "b4.csv",
        f"{HEADER}\n{PENDING}\nc1,amy,cv,c1,H100,1,2025-03-01T00:00:00,,COMPLETED\n{DONE}\n",
    )
    report = ingest_file(ledger, path, opts=IngestOptions(skip_bad_rows=True))
    assert report.rows == {"jobs": 2}
    assert [(r["line"], r["reason"].split(":")[0]) for r in report.rejected] == [
        (3, 'column "end" is empty for a COMPLETED job')
    ]
    assert ledger.execute("SELECT job_id FROM jobs ORDER BY job_id").fetchall() == [("p1",), ("p2",)]
