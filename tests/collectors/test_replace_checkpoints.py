"""Removing a training log's ingest takes back the checkpoint it placed on a job (collectors/checkpoints.py
``withdraw``, called by collectors/provenance.py ``delete_ingests``).

Jobs from real sacct dumps and jobs tables, logs as Hugging Face writes ``trainer_state.json``, through
``ingest_file`` as the CLI calls it. Each job is 1 H100 for 10 h that FAILED: $29.90 at the price sheet's
$2.99/GPU-h, of which the hours after its last checkpoint are failed waste. Times worked by hand: a log whose
last step is 1,250 with ``save_steps`` 500 last saved at step 1,000 = 1,000/1,250 × 10 h = hour 8 ($5.98 lost);
with ``save_steps`` 400 at step 1,200 = hour 9.6 ($1.196 lost).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pytest

from analytics.waste import job_waste
from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from tests.collectors.test_checkpoints import hf_state
from tests.conftest import write

T = dt.datetime
H100_USD = 2.99
COST = 10 * H100_USD  # $29.90
HEADER = "JobIDRaw|Cluster|JobName|User|Account|State|Start|End|Elapsed|AllocTRES|NodeList"
DAY = {"ci/700": 1, "ci/701": 2}


def sacct_row(job: str, hours: int = 10) -> str:
    n, day = job.split("/")[1], DAY[job]
    return (
        f"{n}|ci|train|bob|cv|FAILED|2025-03-0{day}T00:00:00|2025-03-0{day}T{hours:02d}:00:00|{hours:02d}:00:00|"
        "gres/gpu:h100=1,gres/gpu=1|g01"
    )


def jobs_dump(tmp_path: Path, name: str, *rows: str) -> Path:
    return write(tmp_path, name, "\n".join([HEADER, *rows]) + "\n")


def log(tmp_path: Path, run: str, save_steps: int) -> Path:
    folder = tmp_path / run
    folder.mkdir(exist_ok=True)
    return write(folder, "trainer_state.json", hf_state(1250, save_steps=save_steps))


def tie(job: str, **kw: object) -> IngestOptions:
    return IngestOptions(tz="UTC", job_id=job, **kw)  # type: ignore[arg-type]


def checkpoint(con: duckdb.DuckDBPyConnection, job: str) -> dt.datetime | None:
    return con.execute("SELECT last_checkpoint_ts FROM jobs WHERE job_id = ?", [job]).fetchall()[0][0]


def failed_usd(con: duckdb.DuckDBPyConnection, job: str) -> float:
    return next(r["failed_usd"] for r in job_waste(con).to_dicts() if r["job_id"] == job)


@pytest.fixture
def con(ledger, tmp_path):
    """Jobs ci/700 (March 1) and ci/701 (March 2), from one sacct dump, no checkpoint known."""
    ingest_file(
        ledger, jobs_dump(tmp_path, "jobs.txt", sacct_row("ci/700"), sacct_row("ci/701")), opts=tie(None)
    )
    return ledger


def test_replace_tied_to_another_job_takes_back_the_first_jobs_checkpoint(con, tmp_path):
    path = log(tmp_path, "out", save_steps=500)
    ingest_file(con, path, opts=tie("ci/700"))
    assert checkpoint(con, "ci/700") == T(2025, 3, 1, 8)
    assert failed_usd(con, "ci/700") == pytest.approx(2 * H100_USD)  # $5.98
    # the same log was the other job's: --replace with --job ci/701
    again = ingest_file(con, path, opts=tie("ci/701", replace=True))
    assert checkpoint(con, "ci/700") is None  # was hour 8, placed by the withdrawn ingest
    assert failed_usd(con, "ci/700") == pytest.approx(COST)  # $29.90, not $5.98: no checkpoint known
    assert checkpoint(con, "ci/701") == T(2025, 3, 2, 8)
    assert failed_usd(con, "ci/701") == pytest.approx(2 * H100_USD)
    assert con.execute("SELECT job_id, ingest_id FROM checkpoint_placements").fetchall() == [
        ("ci/701", again.ingest_id)
    ]


def test_removing_one_of_two_logs_leaves_the_others_checkpoint(con, tmp_path):
    a, b = log(tmp_path, "run_a", save_steps=500), log(tmp_path, "run_b", save_steps=400)
    ingest_file(con, a, opts=tie("ci/700"))
    ingest_file(con, b, opts=tie("ci/700"))
    assert checkpoint(con, "ci/700") == T(2025, 3, 1, 9, 36)  # the later log's: 9.6 h
    # b goes to the other job: a's hour 8 comes back (not the "none" from before a)
    ingest_file(con, b, opts=tie("ci/701", replace=True))
    assert checkpoint(con, "ci/700") == T(2025, 3, 1, 8)
    assert failed_usd(con, "ci/700") == pytest.approx(2 * H100_USD)
    # and a too: nothing is left of either
    ingest_file(con, a, opts=tie("ci/701", replace=True))
    assert checkpoint(con, "ci/700") is None
    assert failed_usd(con, "ci/700") == pytest.approx(COST)


def test_removing_the_earlier_of_two_logs_keeps_the_later_ones(con, tmp_path):
    a, b = log(tmp_path, "run_a", save_steps=500), log(tmp_path, "run_b", save_steps=400)
    ingest_file(con, a, opts=tie("ci/700"))
    ingest_file(con, b, opts=tie("ci/700"))
    ingest_file(con, a, opts=tie("ci/701", replace=True))
    assert checkpoint(con, "ci/700") == T(2025, 3, 1, 9, 36)  # b's, still
    assert failed_usd(con, "ci/700") == pytest.approx(0.4 * H100_USD)  # $1.196
    ingest_file(con, b, opts=tie("ci/701", replace=True))
    assert checkpoint(con, "ci/700") is None


def test_a_newer_scheduler_record_keeps_the_log_checkpoint_until_the_log_goes(con, tmp_path):
    path = log(tmp_path, "out", save_steps=500)
    ingest_file(con, path, opts=tie("ci/700"))
    # the scheduler reports the job again (no checkpoint field, ended 1 h later): the log's hour 8 stays ...
    ingest_file(con, jobs_dump(tmp_path, "later.txt", sacct_row("ci/700", hours=11)), opts=tie(None))
    assert checkpoint(con, "ci/700") == T(2025, 3, 1, 8)
    # ... until the log is withdrawn: the scheduler never named one
    ingest_file(con, path, opts=tie("ci/701", replace=True))
    assert checkpoint(con, "ci/700") is None
    assert failed_usd(con, "ci/700") == pytest.approx(11 * H100_USD)  # the whole 11 h: $32.89


@pytest.mark.parametrize(("given_h", "with_log_h"), [(9, 8), (5, 5)], ids=["log-earlier", "table-earlier"])
def test_a_jobs_table_checkpoint_comes_back_when_the_log_goes(ledger, tmp_path, given_h, with_log_h):
    # a jobs table names its own checkpoint; a log's counts only when earlier (the earlier of the two)
    table = write(
        tmp_path,
        "jobs.csv",
        "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state,last_checkpoint\n"
        f"j1,ann,nlp,c,H100,1,2025-03-01T00:00:00,2025-03-01T10:00:00,FAILED,2025-03-01T{given_h:02d}:00:00\n",
    )
    ingest_file(ledger, table, opts=tie(None))
    path = log(tmp_path, "out", save_steps=500)
    ingest_file(ledger, path, opts=tie("j1"))
    assert checkpoint(ledger, "j1") == T(2025, 3, 1, with_log_h)
    # the log withdrawn (tied to a job not in the ledger): the table's own checkpoint again
    ingest_file(ledger, path, opts=tie("ci/none", replace=True))
    assert checkpoint(ledger, "j1") == T(2025, 3, 1, given_h)
    assert failed_usd(ledger, "j1") == pytest.approx((10 - given_h) * H100_USD)


def test_a_newer_record_with_its_own_checkpoint_is_not_undone_by_removing_the_log(ledger, tmp_path):
    head = "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state,last_checkpoint\n"
    job = "j1,ann,nlp,c,H100,1,2025-03-01T00:00:00,2025-03-01T10:00:00,FAILED,"
    ingest_file(ledger, write(tmp_path, "a.csv", head + job + "\n"), opts=tie(None))
    path = log(tmp_path, "out", save_steps=500)
    ingest_file(ledger, path, opts=tie("j1"))
    assert checkpoint(ledger, "j1") == T(2025, 3, 1, 8)
    # a corrected jobs table names hour 7: the row's value is the table's now, not the log's
    ingest_file(ledger, write(tmp_path, "b.csv", head + job + "2025-03-01T07:00:00\n"), opts=tie(None))
    assert checkpoint(ledger, "j1") == T(2025, 3, 1, 7)
    ingest_file(ledger, path, opts=tie("ci/none", replace=True))
    assert checkpoint(ledger, "j1") == T(2025, 3, 1, 7)
