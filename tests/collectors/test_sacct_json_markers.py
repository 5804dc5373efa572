"""sacct --json: Slurm's "no value" / "unlimited" markers (NO_VAL, INFINITE, their 64-bit forms, and the
``{set, infinite, number}`` objects) read by one rule, and never-started jobs holding no time."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from gpuledger.cli.commands.ingest import describe
from tests.conftest import ROOT, write

UTC = IngestOptions(tz="UTC")
T = dt.datetime
FIXTURE = ROOT / "tests/fixtures/sacct/slurm_24_11_never_started.json"


def test_slurm_24_11_dump_with_never_started_jobs_lands_whole(ledger):
    """The 24.11 (data_parser v0.0.42) dump: jobs 1002 and 1003 were cancelled before they started
    ("start": 4294967294 = NO_VAL, "end": 1771053337, "elapsed": 0), 1004 is pending (start and end NO_VAL,
    time limit {"infinite": true}). Hand-read from the file:

    - 1001: start 1771040000 = 2026-02-14 03:33:20 UTC, end 1771043600 = 04:33:20, gres/gpu=2 typed a100;
      its step's gres/gpumem max is NO_VAL64 (left out: no peak), gres/gpuutil max 87;
    - 1005: TIMEOUT 1771043600 → 1771047200 (05:33:20), 2 × a100 on gpu02;
    - 1002/1003: CANCELLED, no start, end 1771053337 = 07:15:37, requested gres/gpu=4, no allocation;
    - 1004: PENDING, no start, no end, no allocation.
    """
    report = ingest_file(ledger, FIXTURE, opts=UTC)
    assert report.format == "sacct_json"
    assert report.rows["jobs"] == 5
    rows = ledger.execute(
        """SELECT job_id, state, gpu_count, gpu_model, start_ts, end_ts, gpu_mem_peak_mib, gpu_util_peak_pct
           FROM jobs ORDER BY job_id"""
    ).fetchall()
    assert rows == [
        ("kestrel/1001", "COMPLETED", 2.0, "A100-40GB", T(2026, 2, 14, 3, 33, 20), T(2026, 2, 14, 4, 33, 20), None, 87.0),
        ("kestrel/1002", "CANCELLED", 4.0, None, None, T(2026, 2, 14, 7, 15, 37), None, None),
        ("kestrel/1003", "CANCELLED", 4.0, None, None, T(2026, 2, 14, 7, 15, 37), None, None),
        ("kestrel/1004", "PENDING", 4.0, None, None, None, None, None),
        ("kestrel/1005", "TIMEOUT", 2.0, "A100-40GB", T(2026, 2, 14, 4, 33, 20), T(2026, 2, 14, 5, 33, 20), None, None),
    ]  # fmt: skip
    # only the two started jobs hold GPUs: 2 GPUs × 1 h each
    assert ledger.execute(
        "SELECT job_id, host, gpu_count, start_ts, end_ts FROM allocations ORDER BY job_id"
    ).fetchall() == [
        ("kestrel/1001", "gpu01", 2.0, T(2026, 2, 14, 3, 33, 20), T(2026, 2, 14, 4, 33, 20)),
        ("kestrel/1005", "gpu02", 2.0, T(2026, 2, 14, 4, 33, 20), T(2026, 2, 14, 5, 33, 20)),
    ]
    assert report.held_no_gpu == ["kestrel/1002", "kestrel/1003", "kestrel/1004"]
    text = describe(report)
    assert "3 job(s) held no GPU (kestrel/1002, kestrel/1003, kestrel/1004): they never started" in text
    assert "--gpu-model" not in text


def _job(start: object, **time: object) -> dict:
    return {
        "job_id": 9,
        "cluster": "c",
        "user": "u",
        "account": "a",
        "name": "n",
        "nodes": "n1",
        "state": {"current": ["CANCELLED"]},
        "time": {"submission": 1771000000, "start": start, "end": 1771003600, "elapsed": 0, **time},
        "tres": {"requested": [{"type": "gres", "name": "gpu", "count": 1}]},
    }


@pytest.mark.parametrize(
    "marker",
    [
        pytest.param(0xFFFFFFFE, id="NO_VAL"),
        pytest.param(0xFFFFFFFF, id="INFINITE"),
        pytest.param(0xFFFFFFFFFFFFFFFE, id="NO_VAL64"),
        pytest.param(0xFFFFFFFFFFFFFFFF, id="INFINITE64"),
        pytest.param(0xFFFFFFFFFFFFFFFD, id="NO_CONSUME_VAL64"),
        pytest.param(-2, id="NO_VAL64-as-int64"),
        pytest.param({"set": False, "infinite": False, "number": 0}, id="unset-object"),
        pytest.param({"set": True, "infinite": True, "number": 0}, id="infinite-object"),
        pytest.param({"set": False, "infinite": False, "number": 1771000000}, id="unset-object-with-number"),
    ],
)
def test_every_marker_of_a_start_means_never_started(ledger, tmp_path, marker):
    path = write(tmp_path, "s.json", json.dumps({"meta": {"Slurm": {}}, "jobs": [_job(marker)]}))
    report = ingest_file(ledger, path, opts=UTC)
    assert ledger.execute("SELECT state, start_ts, end_ts FROM jobs").fetchall() == [
        ("CANCELLED", None, T(2026, 2, 13, 17, 26, 40))  # 1771003600
    ]
    assert ledger.execute("SELECT count(*) FROM allocations").fetchall() == [(0,)]
    assert report.held_no_gpu == ["c/9"]


def test_a_set_object_and_a_number_just_below_the_markers_are_real(ledger, tmp_path):
    """``{"set": true, "number": 1771000000}`` is 2026-02-13 16:26:40; an elapsed of 65534 s (NO_VAL16 as a
    number) is a real 18 h 12 min 14 s, since the 16-bit markers are not applied."""
    job = _job({"set": True, "infinite": False, "number": 1771000000}, elapsed=65534)
    job["state"] = {"current": ["TIMEOUT"]}
    del job["time"]["end"]
    path = write(tmp_path, "s.json", json.dumps({"meta": {"Slurm": {}}, "jobs": [job]}))
    ingest_file(ledger, path, opts=UTC)
    start = T(2026, 2, 13, 16, 26, 40)
    assert ledger.execute("SELECT start_ts, end_ts FROM jobs").fetchall() == [
        (start, start + dt.timedelta(seconds=65534))
    ]


def test_a_tres_count_that_is_a_marker_is_left_out(ledger, tmp_path):
    """``gres/gpu`` count NO_VAL64 in the allocated list: no GPU count from it; the requested 3 is used."""
    job = _job(1771000000)
    job["state"] = {"current": ["COMPLETED"]}
    job["tres"] = {
        "allocated": [{"type": "gres", "name": "gpu", "count": 18446744073709551614}],
        "requested": [{"type": "gres", "name": "gpu", "count": 3}],
    }
    path = write(tmp_path, "s.json", json.dumps({"meta": {"Slurm": {}}, "jobs": [job]}))
    ingest_file(ledger, path, opts=UTC)
    assert ledger.execute("SELECT gpu_count FROM jobs").fetchall() == [(3.0,)]


def test_a_job_without_a_gpu_model_on_hosts_is_priced_by_their_telemetry_says_the_report(
    ledger, tmp_path: Path
):
    job = _job(1771000000)
    job["state"] = {"current": ["COMPLETED"]}
    job["tres"] = {"allocated": [{"type": "gres", "name": "gpu", "count": 2}]}
    path = write(tmp_path, "s.json", json.dumps({"meta": {"Slurm": {}}, "jobs": [job]}))
    report = ingest_file(ledger, path, opts=UTC)
    assert report.unpriced_hosts == ["c/9"]
    assert "1 job(s) name no GPU model (c/9): they cost nothing until telemetry from their hosts lands" in (
        describe(report)
    )


def test_a_cpu_job_is_said_to_hold_no_gpu_not_to_want_a_gpu_model(ledger):
    """The real Alpine dump (Slurm 23.02): one CPU array job (TRES cpu/mem/node, no gres/gpu) — it asked for
    no GPU, so the report says nothing is owed instead of asking for --gpu-model."""
    from tests.conftest import dataset

    report = ingest_file(ledger, dataset("slurm-sacct/slurmdog_alpine_sacct.json"), opts=UTC)
    assert report.held_no_gpu == ["alpine/12079670"]
    assert "--gpu-model" not in describe(report)
