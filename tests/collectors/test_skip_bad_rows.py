"""``--skip-bad-rows`` on a job file: the good rows land, each bad line is reported with its reason; without the
flag the file is refused with that line (collectors/row_checks.py, docs/metrics.md "Plausibility").

Money by hand: H100 at the test's own $2.00 per GPU-hour, each good job 1 GPU × 2 h = $4.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import gpuledger, write

PRICE = '[[price]]\ngpu_model = "H100-SXM-80GB"\ntier = "on_demand"\nusd_per_gpu_hour = 2.0\neffective_from = 2025-01-01\nsource = "test"\n'
SACCT_HEADER = "JobID|Cluster|JobName|User|Account|Partition|State|ExitCode|Submit|Start|End|Elapsed|AllocTRES|ReqTRES|NodeList"


def sacct_row(job: str, start: str, end: str, node: str) -> str:
    return (
        f"{job}|ci|j{job}|alice|nlp|gpu|COMPLETED|0:0|2026-11-20T09:00:00|{start}|{end}|02:00:00"
        f"|gres/gpu:h100=1,gres/gpu=1,node=1|gres/gpu=1|{node}"
    )


SACCT = [
    sacct_row("1", "2026-11-20T10:00:00", "2026-11-20T12:00:00", "g01"),
    sacct_row("2", "2026-11-20T10:00:00", "2026-11-20T09:00:00", "g02"),  # line 3: ends before it starts
    sacct_row("2.batch", "2026-11-20T10:00:00", "2026-11-20T12:00:00", "g02"),  # its step goes with it
    sacct_row("3", "2026-11-20T10:00:00", "2026-11-20T12:00:00", "g03"),
    sacct_row("4", "2026-11-20T10:00:00", "not-a-time", "g04"),  # line 6: another reason
]
JOBS_HEADER = "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state"
JOBS = [
    "a,alice,nlp,c1,H100,1,2026-11-20T10:00:00,2026-11-20T12:00:00,COMPLETED",
    "b,bob,cv,c1,H100,1,2026-11-20T10:00:00,2026-11-20T09:00:00,COMPLETED",  # line 3
    "c,carol,cv,c1,H100,1,2026-11-20T10:00:00,2026-11-20T12:00:00,COMPLETED",
    "d,dave,cv,c1,H100,1,2026-11-20T10:00:00,,COMPLETED",  # line 5: finished without an end
]
CASES = {
    "sacct": (
        "sacct.txt",
        "\n".join([SACCT_HEADER, *SACCT]),
        [
            (3, 'job ends before it starts (End "2026-11-20T09:00:00")'),
            (6, 'column "End" is not a time: "not-a-time"'),
        ],
    ),
    "jobs table": (
        "jobs.csv",
        "\n".join([JOBS_HEADER, *JOBS]),
        [
            (3, 'job ends before it starts (end "2026-11-20T09:00:00")'),
            (
                5,
                'column "end" is empty for a COMPLETED job: a finished job needs the time it ended (leave it '
                "empty only while the job is pending or running)",
            ),
        ],
    ),
}


@pytest.mark.parametrize("kind", list(CASES))
def test_skip_bad_rows_lands_the_good_rows_and_names_each_bad_line(tmp_path: Path, kind: str) -> None:
    name, text, bad = CASES[kind]
    db, settings = str(tmp_path / "l.duckdb"), str(write(tmp_path, "settings.toml", PRICE))
    path = write(tmp_path, name, text + "\n")
    common = ("--db", db, "--settings", settings, "--tz", "UTC")
    refused = gpuledger("ingest", *common, str(path))
    assert refused.returncode == 1
    assert refused.stderr.strip() == f"error: {path}:{bad[0][0]}: {bad[0][1]}"  # the first bad line, as today
    assert (
        json.loads(gpuledger("summary", "--json", "--db", db, "--settings", settings).stdout)["spend_usd"]
        == 0
    )
    done = gpuledger("ingest", *common, "--skip-bad-rows", "--json", str(path))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)[0]
    assert [(r["line"], r["reason"]) for r in report["rejected_rows"]] == bad
    assert report["rows"]["jobs"] == 2
    # the two good jobs: 2 × 1 GPU × 2 h × $2.00 = $8
    summary = json.loads(gpuledger("summary", "--json", "--db", db, "--settings", settings).stdout)
    assert summary["spend_usd"] == pytest.approx(8.0)
    # the terminal names each line: rejected FILE:LINE: reason
    again = gpuledger("ingest", *common, "--replace", "--skip-bad-rows", str(path))
    for line, reason in bad:
        assert f"rejected {path}:{line}: {reason}" in again.stdout


def test_sacct_json_skips_an_entry_that_ends_before_it_starts(tmp_path: Path) -> None:
    """sacct --json has no lines: the left-out entry is named by its place in jobs[] (entry 2)."""
    import datetime as dt

    def job(jid: int, start: dt.datetime, end: dt.datetime) -> dict:
        return {
            "job_id": jid,
            "account": "nlp",
            "user": "alice",
            "nodes": f"g0{jid}",
            "state": {"current": ["COMPLETED"]},
            "time": {"start": int(start.timestamp()), "end": int(end.timestamp()), "elapsed": 7200},
            "tres": {"allocated": [{"type": "gres", "name": "gpu:h100", "count": 1}]},
        }

    t = dt.datetime(2026, 11, 20, 10, tzinfo=dt.UTC)
    jobs = [
        job(1, t, t + dt.timedelta(hours=2)),
        job(2, t, t - dt.timedelta(hours=1)),
        job(3, t, t + dt.timedelta(hours=2)),
    ]
    db, settings = str(tmp_path / "l.duckdb"), str(write(tmp_path, "settings.toml", PRICE))
    path = write(tmp_path, "sacct.json", json.dumps({"meta": {"Slurm": {}}, "jobs": jobs}))
    common = ("--db", db, "--settings", settings, "--tz", "UTC")
    refused = gpuledger("ingest", *common, str(path))
    assert refused.returncode == 1 and "jobs[] entry 2: job ends before it starts" in refused.stderr
    done = gpuledger("ingest", *common, "--skip-bad-rows", "--json", str(path))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)[0]
    assert [(r["line"], r["reason"].split(" (")[0]) for r in report["rejected_rows"]] == [
        (None, "jobs[] entry 2: job ends before it starts")
    ]
    summary = json.loads(gpuledger("summary", "--json", "--db", db, "--settings", settings).stdout)
    assert summary["spend_usd"] == pytest.approx(8.0)  # jobs 1 and 3: 2 × 1 GPU × 2 h × $2.00
