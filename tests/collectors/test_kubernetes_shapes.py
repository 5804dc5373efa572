"""Kubernetes pod captures as they come (issue 42): a single Pod object (``kubectl get pod NAME -o json``), an
API pod without ``kind``/``apiVersion``, the Python client's snake_case ``to_dict()``, a ``PodList`` whose CPU
pods carry no ``spec``, and a list with an unreadable item. The fixtures are hand-written in the API's shapes
(tests/fixtures/kubernetes/README.md)."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from collectors.kubernetes import KubernetesPods
from gpuledger.ledger.errors import FormatError
from tests.conftest import write

FIXTURES = Path(__file__).parent.parent / "fixtures" / "kubernetes"
T = dt.datetime
UTC = IngestOptions(tz="UTC")


def _jobs(ledger) -> list[tuple]:
    return ledger.execute(
        "SELECT job_id, state, gpu_count, start_ts, end_ts, exit_reason, name FROM jobs ORDER BY job_id"
    ).fetchall()


def _allocations(ledger) -> list[tuple]:
    return ledger.execute(
        "SELECT job_id, host, gpu_count, start_ts, end_ts FROM allocations ORDER BY job_id"
    ).fetchall()


def test_a_single_failed_gpu_pod_is_a_failed_job_holding_its_gpus_from_start_to_its_containers_end(ledger):
    """pod_failed_gpu_single.json: phase Failed, nvidia.com/gpu 4, container terminated (Error, exit 1),
    startedAt 08:00:05, finishedAt 11:30:05 on gpu-a-3: 4 GPUs × 3.5 h = 14 GPU-hours."""
    report = ingest_file(ledger, FIXTURES / "pod_failed_gpu_single.json", opts=UTC)
    assert report.format == "kubernetes_pods"
    start, end = T(2025, 6, 2, 8, 0, 5), T(2025, 6, 2, 11, 30, 5)
    assert _jobs(ledger) == [
        ("vision/train-resnet-7xk2p", "FAILED", 4.0, start, end, "Error 1", "train-resnet")
    ]
    assert _allocations(ledger) == [("vision/train-resnet-7xk2p", "gpu-a-3", 4.0, start, end)]
    hours = ledger.execute(
        "SELECT sum(gpu_count * date_diff('second', start_ts, end_ts)) / 3600 FROM allocations"
    ).fetchone()[0]
    assert hours == pytest.approx(4 * 3.5)


def test_an_api_pod_without_kind_is_read(ledger):
    """api_pod_without_kind.json: a running pod (1 GPU on gpu-b-1 since 09:15:00) saved from a list's items,
    so no kind or apiVersion."""
    report = ingest_file(ledger, FIXTURES / "api_pod_without_kind.json", opts=UTC)
    assert report.format == "kubernetes_pods"
    assert _jobs(ledger) == [
        ("lab/notebook-ana-0", "RUNNING", 1.0, T(2025, 6, 3, 9, 15), None, None, "notebook-ana-0")
    ]


def test_a_pod_list_whose_cpu_pods_have_no_spec_reads_its_gpu_pod(ledger):
    """api_podlist_cpu_pods_without_spec.json: 4 items; coredns, redis and nginx carry metadata and status
    only (no spec: they request no GPU, hold nothing, and are counted); eval-bert holds 2 GPUs on gpu-a-1
    10:00–10:45 and succeeded."""
    report = ingest_file(ledger, FIXTURES / "api_podlist_cpu_pods_without_spec.json", opts=UTC)
    assert report.skipped == {"pods that request no GPU": 3}
    start, end = T(2025, 6, 4, 10), T(2025, 6, 4, 10, 45)
    assert _jobs(ledger) == [("nlp/eval-bert-q9v4m", "COMPLETED", 2.0, start, end, None, "eval-bert")]
    assert _allocations(ledger) == [("nlp/eval-bert-q9v4m", "gpu-a-1", 2.0, start, end)]


@pytest.mark.parametrize(
    ("mutate", "note"),
    [
        (lambda d: d["items"][1]["spec"]["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": "-1"}),
         "items[1] (nlp/eval-bert-q9v4m): nvidia.com/gpu is not a GPU count: '-1'"),
        (lambda d: d["items"][1]["status"]["containerStatuses"][0]["state"]["terminated"].update({"startedAt": "yesterday"}),
         "items[1] (nlp/eval-bert-q9v4m): state.terminated.startedAt is not a time: 'yesterday'"),
        (lambda d: d["items"][1].update({"spec": "oops"}), "items[1] (eval-bert-q9v4m): spec and status must be objects"),
        (lambda d: d["items"][1]["metadata"].pop("name"), "items[1]: a pod without metadata.name"),
    ],
)  # fmt: skip
def test_an_unreadable_item_is_left_out_and_counted_by_name(ledger, tmp_path, mutate, note):
    """The GPU pod made unreadable: the list still lands (3 CPU pods counted), the pod is named in the report."""
    doc = json.loads((FIXTURES / "api_podlist_cpu_pods_without_spec.json").read_text())
    doc["items"][1]["spec"]["containers"][0]["resources"]["requests"].pop("nvidia.com/gpu")
    mutate(doc)
    report = ingest_file(ledger, write(tmp_path, "pods.json", json.dumps(doc)), fmt="kubernetes_pods")
    assert report.skipped == {"pods that request no GPU": 3, f"pods left out, unreadable ({note})": 1}
    assert ledger.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0


def test_a_single_unreadable_pod_is_still_an_error(ledger, tmp_path):
    doc = json.loads((FIXTURES / "pod_failed_gpu_single.json").read_text())
    doc["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "lots"
    doc["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "lots"
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, write(tmp_path, "pod.json", json.dumps(doc)), fmt="kubernetes_pods")
    assert (
        err.value.reason == "the pod (vision/train-resnet-7xk2p): nvidia.com/gpu is not a GPU count: 'lots'"
    )
    assert ledger.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0


_USER = {"labels", "annotations", "limits", "requests", "nodeSelector"}


def _snake(value, user=False):
    """The Python client's to_dict() + json.dumps(default=str): snake_case fields, times as str(datetime)."""
    if isinstance(value, list):
        return [_snake(v) for v in value]
    if not isinstance(value, dict):
        if isinstance(value, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", value):
            return value.replace("T", " ").replace("Z", "+00:00")
        return value
    return {
        (k if user else re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), k)): (
            v if user else _snake(v, k in _USER)
        )
        for k, v in value.items()
    }


def test_the_python_clients_to_dict_form_is_read_as_the_api(ledger, tmp_path):
    doc = _snake(json.loads((FIXTURES / "pod_failed_gpu_single.json").read_text()))
    assert "api_version" in doc and "container_statuses" in doc["status"]
    path = write(tmp_path, "pod.json", json.dumps(doc, indent=2))
    assert KubernetesPods().sniff(path, path.read_text()).score > 0
    ingest_file(ledger, path, opts=UTC)
    start, end = T(2025, 6, 2, 8, 0, 5), T(2025, 6, 2, 11, 30, 5)
    assert _jobs(ledger) == [
        ("vision/train-resnet-7xk2p", "FAILED", 4.0, start, end, "Error 1", "train-resnet")
    ]
