"""The generic jobs table: parsing, validation with line numbers, idempotence, atomicity."""

from __future__ import annotations

import datetime as dt
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.conftest import gpuledger, write

HEADER = "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state"


def test_jobs_csv_lands_with_utc_times_and_normalized_fields(ledger, tmp_path):
    path = write(
        tmp_path,
        "jobs.csv",
        HEADER + ",kind,batch_size\n"
        "j1,alice,nlp,c1,NVIDIA H100 80GB HBM3,8,2025-03-01T02:00:00+02:00,2025-03-01T10:00:00Z,COMPLETED,training,16\n"
        "j2,bob,cv,c1,Tesla T4,1,2025-03-01 00:00,2025-03-01 00:30,CANCELLED by 1234,notebook,\n",
    )
    report = ingest_file(ledger, path)
    assert report.rows == {"jobs": 2, "training_runs": 1}
    rows = ledger.execute(
        "SELECT job_id, gpu_model, start_ts::VARCHAR, end_ts, state, kind FROM jobs ORDER BY job_id"
    ).fetchall()
    assert rows == [
        ("j1", "H100-SXM-80GB", "2025-03-01 00:00:00", rows[0][3], "COMPLETED", "training"),
        ("j2", "T4", "2025-03-01 00:00:00", dt.datetime(2025, 3, 1, 0, 30), "CANCELLED", "interactive"),
    ]
    assert ledger.execute("SELECT batch_size FROM training_runs").fetchall() == [(16,)]


def test_reingest_is_a_noop(ledger, tmp_path):
    path = write(tmp_path, "jobs.csv", HEADER + "\nj1,a,t,c,T4,1,2025-01-01,2025-01-02,COMPLETED\n")
    first = ingest_file(ledger, path)
    again = ingest_file(ledger, path)
    assert again.already and again.ingest_id == first.ingest_id
    assert ledger.execute("SELECT count(*) FROM jobs").fetchall() == [(1,)]
    assert ledger.execute("SELECT count(*) FROM ingests").fetchall() == [(1,)]


def test_replace_swaps_a_changed_source(ledger, tmp_path):
    path = write(
        tmp_path,
        "jobs.csv",
        HEADER
        + "\nj1,a,t,c,T4,1,2025-01-01,2025-01-02,COMPLETED\nj2,a,t,c,T4,1,2025-01-01,2025-01-02,COMPLETED\n",
    )
    ingest_file(ledger, path)
    path.write_text(HEADER + "\nj1,a,t,c,T4,2,2025-01-01,2025-01-02,COMPLETED\n")
    report = ingest_file(ledger, path, opts=IngestOptions(replace=True))
    assert report.replaced == [1]
    assert ledger.execute("SELECT job_id, gpu_count FROM jobs").fetchall() == [("j1", 2.0)]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "j1,a,t,c,T4,1,2025-01-01,yesterday,COMPLETED",
            'jobs.csv:3: column "end" is not a time: "yesterday"',
        ),
        (
            "j1,a,t,c,T4,two,2025-01-01,2025-01-02,COMPLETED",
            'jobs.csv:3: column "gpu_count" is not a GPU count: "two"',
        ),
        (
            "j1,a,t,c,T4,1,2025-01-02,2025-01-01,COMPLETED",
            'jobs.csv:3: job ends before it starts (end "2025-01-01")',
        ),
        (
            "j1,a,t,c,T4,1,2025-01-01,2025-01-02,EXPLODED",
            'jobs.csv:3: column "state" is not a job state: "EXPLODED"',
        ),
        (
            "j0,a,t,c,T4,1,2025-01-01,2025-01-02,COMPLETED",
            "jobs.csv:3: job_id 'j0' appears twice (first on line 2)",
        ),
    ],
    ids=["bad-time", "bad-count", "end-before-start", "bad-state", "duplicate-id"],
)
def test_bad_row_in_the_middle_names_file_line_reason(ledger, tmp_path, body, expected):
    path = write(
        tmp_path,
        "jobs.csv",
        f"{HEADER}\nj0,a,t,c,T4,1,2025-01-01,2025-01-02,COMPLETED\n{body}\nj9,a,t,c,T4,1,2025-01-01,2025-01-02,COMPLETED\n",
    )
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, path)
    assert str(err.value).endswith(expected)
    assert ledger.execute("SELECT count(*) FROM jobs").fetchall() == [(0,)]
    assert ledger.execute("SELECT count(*) FROM ingests").fetchall() == [(0,)]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """A real ``gpuledger`` process: its exit status and stderr are what a shell sees."""
    return subprocess.run(
        [sys.executable, "-m", "gpuledger", *args], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "bad.csv",
            HEADER + "\nj1,a,t,c,T4,1,2025-01-01,yesterday,COMPLETED\n",
            'bad.csv:2: column "end" is not a time: "yesterday"',
        ),
        ("empty.csv", "", "empty.csv: the file is empty"),
        ("notes.txt", "hello\n", "notes.txt: no parser recognises this file"),
        (
            "truncated.csv",
            HEADER + "\nj1,a,t,c,T4,1,2025-01-01,2025-01-02,COMPLETED\nj2,a,t,c,T4,1,2025-0",
            # the last line stops after 7 of the header's 9 fields
            "truncated.csv:3: expected 9 fields, found 7 (a truncated line?)",
        ),
        (
            "extra.csv",
            HEADER + "\nj1,a,t,c,T4,1,2025-01-01,2025-01-02,COMPLETED,oops\n",
            "extra.csv:2: expected 9 fields, found 10 (a comma inside an unquoted value?)",
        ),
        (
            "quote.csv",
            HEADER + '\nj1,a,t,c,T4,1,2025-01-01,2025-01-02,"COMPLETED\n',
            "quote.csv:2: a quoted value is never closed (unterminated quote)",
        ),
    ],
    ids=["bad-row", "empty", "unknown", "truncated", "extra-field", "unterminated-quote"],
)
def test_cli_bad_file_exits_1_and_leaves_db_byte_identical(tmp_path, name, text, message):
    db = tmp_path / "ledger.duckdb"
    good = write(tmp_path, "good.csv", HEADER + "\nj0,a,t,c,T4,1,2025-01-01,2025-01-02,COMPLETED\n")
    assert gpuledger("ingest", "--db", str(db), str(good)).returncode == 0  # in-process: only the bad one's
    before = _sha(db)
    bad = write(tmp_path, name, text)
    result = _cli("ingest", "--db", str(db), str(bad))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert _sha(db) == before
