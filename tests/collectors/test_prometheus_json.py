"""Prometheus API query_range / query JSON saved to a file: series → samples through the DCGM mapping."""

from __future__ import annotations

import json

import pytest

from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.conftest import write

T0 = 1740823200  # 2025-03-01 10:00:00 UTC


def matrix(*series: dict[str, object], kind: str = "matrix") -> str:
    return json.dumps({"status": "success", "data": {"resultType": kind, "result": list(series)}})


UTIL = {
    "metric": {
        "__name__": "DCGM_FI_DEV_GPU_UTIL",
        "UUID": "GPU-aaa",
        "gpu": "0",
        "Hostname": "node1",
        "modelName": "NVIDIA H100 80GB HBM3",
        "hpc_job": "77",
    },
    "values": [[T0, "10"], [T0 + 30, "30"], [T0 + 60.5, "50"]],
}
FB = {
    "metric": {"__name__": "DCGM_FI_DEV_FB_USED", "UUID": "GPU-aaa", "gpu": "0", "Hostname": "node1"},
    "values": [[T0, "1000"], [T0 + 30, "9223372036854775794"]],
}


def _rows(ledger, sql: str) -> list[tuple[object, ...]]:
    return ledger.execute(sql).fetchall()


def test_query_range_matrix_lands_samples(ledger, tmp_path):
    report = ingest_file(ledger, write(tmp_path, "range.json", matrix(UTIL, FB)))
    assert report.format == "prometheus_json"
    assert report.rows == {"samples": 3, "gpus": 1}
    assert report.skipped == {}  # the NaN is stored as NULL: a missing reading, not a skip
    assert _rows(ledger, "SELECT ts::VARCHAR, util_pct, mem_used_mib, job_id FROM samples ORDER BY ts") == [
        ("2025-03-01 10:00:00", 10.0, 1000.0, "77"),
        ("2025-03-01 10:00:30", 30.0, None, "77"),
        ("2025-03-01 10:01:00.5", 50.0, None, "77"),
    ]
    assert _rows(ledger, "SELECT gpu_id, host, model FROM gpus") == [("GPU-aaa", "node1", "H100-SXM-80GB")]


def test_instant_query_vector(ledger, tmp_path):
    series = {"metric": {"__name__": "DCGM_FI_DEV_POWER_USAGE", "UUID": "GPU-b"}, "value": [T0, "222.5"]}
    ingest_file(ledger, write(tmp_path, "now.json", matrix(series, kind="vector")))
    assert _rows(ledger, "SELECT ts::VARCHAR, gpu_id, power_w FROM samples") == [
        ("2025-03-01 10:00:00", "GPU-b", 222.5)
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (matrix({"metric": {"UUID": "GPU-a"}, "values": [[T0, "1"]]}), "series 1 has no __name__ label"),
        (
            matrix(dict(UTIL, values=[[T0, "high"]])),
            'series 1: point [1740823200,"high"] is not [time, value]',
        ),
        (
            json.dumps({"status": "success", "data": {"resultType": "scalar", "result": [T0, "1"]}}),
            "resultType",
        ),
        (matrix(UTIL)[:-20], "not valid JSON"),
    ],
    ids=["nameless-expression", "bad-value", "scalar", "truncated"],
)
def test_bad_documents_are_refused_and_change_nothing(ledger, tmp_path, text, expected):
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, write(tmp_path, "q.json", text), fmt="prometheus_json")
    assert expected in str(err.value)
    assert _rows(ledger, "SELECT (SELECT count(*) FROM samples), (SELECT count(*) FROM ingests)") == [(0, 0)]


def test_reingest_is_a_noop_and_overlap_is_not_double_counted(ledger, tmp_path):
    path = write(tmp_path, "a.json", matrix(UTIL))
    ingest_file(ledger, path)
    assert ingest_file(ledger, path).already
    later = dict(UTIL, values=[[T0 + 60.5, "50"], [T0 + 90, "70"]])
    report = ingest_file(ledger, write(tmp_path, "b.json", matrix(later)))
    assert report.rows["samples"] == 1 and report.skipped["samples already in the ledger"] == 1
    assert _rows(ledger, "SELECT count(*) FROM samples") == [(4,)]
