"""``gpuledger check [--fix]``: a ledger that took bad rows before the plausibility checks survives them.

The bad rows get in the way they did before the checks existed: through the real ingest path with
validation switched off (``collectors.ingest.validate_stage`` patched to accept everything), so the rollups
hold them too, exactly as an old ledger would.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import collectors.ingest
from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from gpuledger.cli.commands._common import print_json
from gpuledger.cli.main import main
from gpuledger.ledger.db import writer
from tests.conftest import write

HEADER = "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state"
GOOD = [
    "j1,alice,nlp,c1,H100,8,2026-03-01T00:00:00,2026-03-01T02:00:00,COMPLETED",
    "j2,bob,cv,c1,H100,2,2026-03-01T00:00:00,2026-03-01T03:00:00,COMPLETED",
]
BAD = [
    "j3,carol,cv,c1,H100,8,2026-03-01T00:00:00,infinity,COMPLETED",
    "j4,dave,cv,c1,H100,1e300,2026-03-01T00:00:00,2026-03-01T01:00:00,COMPLETED",
]
SMI_HEADER = "timestamp, index, uuid, name, utilization.gpu [%], power.draw [W]"
# H100 on-demand in the shipped sheet: $2.99 per GPU-hour. Good jobs: 8 GPUs x 2 h + 2 GPUs x 3 h = 22 GPU-h.
GOOD_SPEND = 22 * 2.99


def strict_json(text: str) -> object:
    def refuse(name: str) -> object:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def old_ledger(db_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A ledger file holding the good jobs and, landed without validation, the bad ones and bad samples."""
    good = write(tmp_path, "good.csv", "\n".join([HEADER, *GOOD]) + "\n")
    bad = write(tmp_path, "bad.csv", "\n".join([HEADER, *BAD]) + "\n")
    smi_rows = [
        f"2026/03/01 00:00:{s:02d}.000, 0, GPU-aaa, NVIDIA H100 80GB HBM3, 50 %, 300 W"
        for s in range(0, 60, 10)
    ]
    smi_rows[2] = smi_rows[2].replace("50 %", "inf %")  # stored inf: mean utilization Infinity
    smi_rows.append(
        "2099/01/01 00:00:00.000, 0, GPU-aaa, NVIDIA H100 80GB HBM3, 50 %, 1e30 W"
    )  # a node clock
    smi = write(tmp_path, "gpu.csv", "\n".join([SMI_HEADER, *smi_rows]) + "\n")
    opts = IngestOptions(tz="UTC")
    with writer(db_path) as con:
        ingest_file(con, good, opts=opts)
        with monkeypatch.context() as m:
            m.setattr(collectors.ingest, "validate_stage", lambda *a, **k: [])
            ingest_file(con, bad, opts=opts)
            ingest_file(con, smi, opts=opts)
    return db_path


def test_check_lists_every_bad_row_and_exits_1(old_ledger, capsys):
    assert main(["check", "--db", old_ledger, "--json"]) == 1
    report = strict_json(capsys.readouterr().out)
    found = sorted((r["table"], r["row"], r["column"]) for r in report["rows"])
    assert found == [
        ("gpus", "GPU GPU-aaa", "last_seen"),
        ("jobs", "job j3", "end_ts"),
        ("jobs", "job j4", "gpu_count"),
        ("samples", "GPU-aaa at 2026-03-01 00:00:20", "util_pct"),
        ("samples", "GPU-aaa at 2099-01-01 00:00:00", "ts"),
    ]
    assert report["removed"] == {}
    # nothing changed: check without --fix reads only
    assert main(["check", "--db", old_ledger, "--json"]) == 1
    capsys.readouterr()


def test_json_output_never_carries_nan_or_infinity(old_ledger, capsys):
    # the stored inf utilization made summary --json print "mean_util_pct": Infinity (not JSON)
    main(["summary", "--db", old_ledger, "--json", "--since", "2026-03-01", "--until", "2026-03-01"])
    strict_json(capsys.readouterr().out)
    print_json({"a": math.nan, "b": [math.inf, -math.inf, 1.5], "c": {"d": (math.nan,)}})
    assert strict_json(capsys.readouterr().out) == {"a": None, "b": [None, None, 1.5], "c": {"d": [None]}}


def test_fix_removes_them_in_one_transaction_and_the_analytics_work_again(old_ledger, capsys):
    assert main(["check", "--db", old_ledger, "--fix"]) == 0
    out = capsys.readouterr().out
    # 2 jobs + 2 samples removed, the GPU's last_seen cleared (then re-derived from its good samples)
    assert "removed 5 row(s) in one transaction: 2 samples, 2 jobs, 1 gpus (value cleared)" in out
    assert main(["check", "--db", old_ledger]) == 0
    assert "no rows outside their physical range" in capsys.readouterr().out

    assert (
        main(["summary", "--db", old_ledger, "--json", "--since", "2026-03-01", "--until", "2026-03-01"]) == 0
    )
    summary = strict_json(capsys.readouterr().out)
    # the good jobs' 22 GPU-h at $2.99, plus the telemetry-only GPU's 5 good samples (10 s apart: 50 s of
    # the H100 at $2.99/h) — the same figure plain SQL gives from what is left
    with writer(old_ledger) as con:
        jobs_usd = con.execute(
            "SELECT sum(gpu_count * epoch(end_ts - start_ts) / 3600 * 2.99) FROM jobs"
        ).fetchall()[0][0]
        n, last_seen, minute_max = con.execute(
            """SELECT (SELECT count(*) FROM samples), (SELECT last_seen FROM gpus WHERE gpu_id = 'GPU-aaa'),
                      (SELECT max(minute) FROM samples_minute)"""
        ).fetchall()[0]
    assert jobs_usd == pytest.approx(GOOD_SPEND)
    assert n == 5 and str(last_seen) == "2026-03-01 00:00:50" and minute_max.year == 2026
    assert summary["spend_usd"] >= GOOD_SPEND - 0.01
    assert summary["mean_util_pct"] == pytest.approx(50.0)
    assert main(["jobs", "--db", old_ledger, "--json"]) == 0
    assert {j["job_id"] for j in strict_json(capsys.readouterr().out)} >= {"j1", "j2"}


def test_ingest_skip_bad_rows_through_the_cli(db_path, tmp_path, capsys):
    path = write(tmp_path, "jobs.csv", "\n".join([HEADER, *GOOD, *BAD]) + "\n")
    assert main(["ingest", "--db", db_path, "--skip-bad-rows", "--json", str(path)]) == 0
    report = strict_json(capsys.readouterr().out)[0]
    assert report["rows"]["jobs"] == 2
    assert [(r["line"], r["column"]) for r in report["rejected_rows"]] == [(4, "end"), (5, "gpu_count")]
    assert main(["check", "--db", db_path]) == 0
    capsys.readouterr()


def test_ingest_without_skip_rejects_with_one_line_and_leaves_the_file_untouched(db_path, tmp_path, capsys):
    main(["ingest", "--db", db_path, str(write(tmp_path, "ok.csv", "\n".join([HEADER, *GOOD]) + "\n"))])
    before = Path(db_path).read_bytes()
    path = write(tmp_path, "jobs.csv", "\n".join([HEADER, *GOOD[:1], *BAD]) + "\n")
    capsys.readouterr()
    assert main(["ingest", "--db", db_path, str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: {path}:3: end is infinity, not a time between 2000-01-01 and " + err[0].split(" and ", 1)[1]
    ]
    assert Path(db_path).read_bytes() == before
    assert not Path(db_path + ".tmp").exists(), "the spill folder is removed after every run"


def test_a_literal_path_wins_and_a_pattern_expands_only_when_no_file_has_that_name(db_path, tmp_path, capsys):
    literal = write(tmp_path, "jobs*.csv", "\n".join([HEADER, *GOOD]) + "\n")
    write(
        tmp_path,
        "jobsA.csv",
        f"{HEADER}\nj7,x,t,c1,H100,1,2026-03-01T00:00:00,2026-03-01T01:00:00,COMPLETED\n",
    )
    assert main(["ingest", "--db", db_path, "--json", str(literal)]) == 0
    reports = strict_json(capsys.readouterr().out)
    assert [(Path(r["path"]).name, r["rows"]["jobs"]) for r in reports] == [("jobs*.csv", 2)]
    # no file is named "jobs?.csv": it is a pattern, and matches both (the literal one is already in)
    assert main(["ingest", "--db", db_path, "--json", str(tmp_path / "jobs?.csv")]) == 0
    reports = strict_json(capsys.readouterr().out)
    assert [(Path(r["path"]).name, r["already_ingested"]) for r in reports] == [
        ("jobs*.csv", True),
        ("jobsA.csv", False),
    ]
    assert main(["ingest", "--db", db_path, str(tmp_path / "nothing*.csv")]) == 1
    assert "no such file, and no file matches it as a pattern" in capsys.readouterr().err


def test_a_killed_runs_spill_folder_is_removed_by_the_next_run(db_path, tmp_path, capsys):
    import subprocess

    ended = subprocess.Popen(["true"])  # a process that has ended: its pid names no live writer
    ended.wait()
    stale = Path(db_path + ".tmp") / f"ingest-{ended.pid}"
    stale.mkdir(parents=True)
    (stale / "duckdb_temp_storage-0.tmp").write_bytes(b"\0" * 4096)  # what a killed writer leaves
    path = write(tmp_path, "ok.csv", "\n".join([HEADER, *GOOD]) + "\n")
    assert main(["ingest", "--db", db_path, str(path)]) == 0
    capsys.readouterr()
    assert not Path(db_path + ".tmp").exists()
