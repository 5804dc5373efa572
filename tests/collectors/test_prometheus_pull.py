"""The Prometheus collector's planning and staging, without a server (the live test runs a real one)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from collectors.base import IngestOptions
from collectors.prometheus_pull import (
    PullOptions,
    host_batches,
    parse_duration,
    parse_time,
    plan_chunks,
    selector,
    stage_responses,
)


def test_chunks_stay_under_the_11000_point_cap_and_cover_the_range_once():
    # 30 days at 60 s = 43,200 steps; a 30-day chunk request is cut at 10,000 steps (600,000 s)
    chunks = plan_chunks(0, 30 * 86_400, 60, 30 * 86_400)
    assert chunks[0] == (0, 600_000) and chunks[-1] == (2_400_000, 2_592_000)
    assert all(b - a <= 10_000 * 60 for a, b in chunks)
    assert [a for a, _ in chunks[1:]] == [b for _, b in chunks[:-1]]  # contiguous, no overlap
    assert plan_chunks(0, 7_200, 60, 3_600) == [(0, 3_600), (3_600, 7_200)]


def test_host_batches_partition_every_series():
    assert host_batches(["a", "b"], 64) == [""]  # small fleet: one request, no host matcher
    assert host_batches(["gpu-1.x", "gpu-2", "gpu-3"], 2) == [
        'Hostname=~"gpu\\\\-1\\\\.x|gpu\\\\-2"',  # regex-escaped, then escaped for a PromQL string
        'Hostname=~"gpu\\\\-3"',
        'Hostname=""',  # series without a Hostname label
    ]


def test_selector_merges_matcher_lists():
    assert selector("", "") == ""
    assert selector('{cluster="a"}', 'Hostname=""') == '{cluster="a",Hostname=""}'


@pytest.mark.parametrize(
    ("text", "seconds"), [("60", 60), ("60s", 60), ("5m", 300), ("1h", 3600), ("7d", 604_800)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_times_are_naive_utc():
    now = dt.datetime(2025, 3, 2, 12, 0)
    assert parse_time("2025-03-01T02:00:00+02:00") == dt.datetime(2025, 3, 1, 0, 0)
    assert parse_time("2025-03-01") == dt.datetime(2025, 3, 1)
    assert parse_time("1740787200") == dt.datetime(2025, 3, 1)
    assert parse_time("6h", now=now) == dt.datetime(2025, 3, 2, 6, 0)


def _matrix(path: Path, series: list[tuple[dict[str, str], list[tuple[int, str]]]]) -> Path:
    result = [{"metric": m, "values": [[t, v] for t, v in values]} for m, values in series]
    path.write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}))
    return path


def test_a_job_change_inside_a_step_merges_by_sample_count(ledger, tmp_path):
    gpu = {"UUID": "GPU-x", "Hostname": "h1", "gpu": "0", "modelName": "NVIDIA H100 80GB HBM3"}
    mig = {
        "UUID": "GPU-y",
        "gpu": "1",
        "GPU_I_ID": "3",
        "GPU_I_PROFILE": "1g.10gb",
        "pod": "p",
        "namespace": "ns",
    }
    j1, j2 = {**gpu, "hpc_job": "1"}, {**gpu, "hpc_job": "2"}
    files = [
        # window (60, 120]: job 1 had 1 scrape at 90 %, job 2 had 3 scrapes at 10 %
        _matrix(
            tmp_path / "DCGM_FI_DEV_GPU_UTIL-0.json", [(j1, [(120, "90")]), (j2, [(120, "10"), (180, "50")])]
        ),
        _matrix(tmp_path / "count-0.json", [(j1, [(120, "1")]), (j2, [(120, "3"), (180, "4")])]),
        _matrix(tmp_path / "DCGM_FI_DEV_FB_USED-0.json", [(j1, [(120, "1000")]), (j2, [(120, "3000")])]),
        _matrix(tmp_path / "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION-0.json", [(j2, [(120, "5000")])]),
        _matrix(tmp_path / "DCGM_FI_DEV_POWER_USAGE-0.json", [(j2, [(120, "9223372036854775794")])]),
        _matrix(tmp_path / "DCGM_FI_PROF_GR_ENGINE_ACTIVE-0.json", [(mig, [(120, "0.25")])]),
    ]
    notes = stage_responses(ledger, files, "prometheus://test", PullOptions(url="http://x"), IngestOptions())
    rows = ledger.execute(
        """SELECT ts::VARCHAR, gpu_id, interval_s, util_pct, mem_used_mib, energy_j, power_w, job_id
           FROM stage_samples ORDER BY gpu_id, ts"""
    ).fetchall()
    assert rows == [
        # (90 x 1 + 10 x 3) / 4 = 30 %; peak memory 3000; 5000 mJ = 5 J; the blank power sentinel is NULL
        ("1970-01-01 00:01:00", "GPU-x", 60.0, 30.0, 3000.0, 5.0, None, "2"),
        ("1970-01-01 00:02:00", "GPU-x", 60.0, 50.0, None, None, None, "2"),
        # a MIG instance: utilization = 100 x GR_ENGINE_ACTIVE; its job is namespace/pod
        ("1970-01-01 00:01:00", "GPU-y/3", 60.0, 25.0, None, None, None, "ns/p"),
    ]
    gpus = ledger.execute(
        "SELECT gpu_id, host, model, mig_profile, parent_gpu_id FROM stage_gpus ORDER BY 1"
    ).fetchall()
    assert gpus == [("GPU-x", "h1", "H100-SXM-80GB", None, None), ("GPU-y/3", None, None, "1g.10gb", "GPU-y")]
    assert any("blank" in reason for reason in notes)


@pytest.mark.parametrize(
    ("cluster", "prefix", "expected"),
    [(None, None, "7"), ("c1", None, "c1/7"), ("c1", "", "7"), (None, "x-", "x-7")],
)
def test_job_ids_match_the_slurm_collector_when_a_cluster_is_named(
    ledger, tmp_path, cluster, prefix, expected
):
    series = [({"UUID": "GPU-x", "hpc_job": "7"}, [(120, "50")])]
    files = [_matrix(tmp_path / "DCGM_FI_DEV_GPU_UTIL-0.json", series)]
    opts = PullOptions(url="http://x", cluster=cluster, job_prefix=prefix)
    stage_responses(ledger, files, "prometheus://test", opts, IngestOptions(cluster=cluster))
    assert ledger.execute("SELECT job_id FROM stage_samples").fetchall() == [(expected,)]
