"""Kubernetes pods as jobs (``kubernetes_pods``: ``kubectl get pods -A -o json``) and the API poller.

The fixtures in tests/fixtures/kubernetes are rebuilt in the exact shape kubectl and the API write (a
``kind: List`` whose items are Pods and Nodes, ``containerStatuses`` states as in kite-org/kite#136's real
pod, GPU requests as in NVIDIA's device plugin docs, a MIG-mixed node's ``nvidia.com/gpu.product``), made
small. This machine cannot run an API server: the poller is tested against a replay of the API's answers
(``GET /api/v1/pods`` in two pages joined by the ``continue`` token, ``GET /api/v1/nodes``) served by a local
HTTP server on 127.0.0.1, through the real lightkube client.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import os
import shutil
import signal
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from analytics.jobs import jobs_table
from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from collectors.kubernetes import mig_share
from gpuledger.ledger.settings import from_dict
from tests.conftest import ROOT, gpuledger, write

FIXTURES = ROOT / "tests" / "fixtures" / "kubernetes"
T = dt.datetime
SETTINGS = from_dict(
    {"kubernetes": {"team_label": "team", "namespace_teams": {"ml-serve": "inference"}}}, Path("s.toml")
)
OPTS = IngestOptions.from_settings(SETTINGS, tz="UTC")


def listed(tmp_path: Path, name: str) -> Path:
    """A fixture copied now: its modification time says nothing of when the list was taken."""
    path = tmp_path / name
    shutil.copy(FIXTURES / name, path)
    return path


def test_a_pod_list_gives_jobs_gpus_and_teams(ledger, tmp_path):
    """Hand-worked: 5 pods; coredns asks no GPU (left out, counted). llama-ft-0: 8 × nvidia.com/gpu (limits
    only), 10:00:05-12:00:05, team "nlp" from its label = 16 GPU-h on an H100 node. vllm: one
    nvidia.com/mig-3g.40gb = 3/7 GPU, running since 11:00; its Ready condition changed at 12:30, the latest time
    the list shows, so it was taken no earlier: 3/7 × 1.5 h = 0.6429 GPU-h, team
    "inference" from the namespace map. oom-job: 2 GPUs (init container 1 < app 2), 09:59:58 (its init
    container's start) to 10:30:00, OOMKilled → OOM, team = namespace ml-train: 2 × 1,802 s = 1.0011 GPU-h.
    notebook-x-0 is Pending: no GPU held, no allocation."""
    report = ingest_file(ledger, listed(tmp_path, "pods_nodes.json"), opts=OPTS)
    assert report.format == "kubernetes_pods"
    assert report.rows["jobs"] == 4 and report.rows["allocations"] == 3
    assert report.skipped == {"pods that request no GPU": 1}
    got = {
        r[0]: r[1:]
        for r in ledger.execute(
            "SELECT job_id, team, name, gpu_model, gpu_count, start_ts, end_ts, state FROM jobs"
        ).fetchall()
    }
    assert got == {
        "ml-train/llama-ft-0": ("nlp", "llama-ft", "H100-SXM-80GB", 8.0, T(2025, 3, 1, 10, 0, 5), T(2025, 3, 1, 12, 0, 5), "COMPLETED"),
        "ml-serve/vllm-7d9f8c-x2k4p": ("inference", "vllm-7d9f8c", "A100-80GB", pytest.approx(3 / 7), T(2025, 3, 1, 11), None, "RUNNING"),
        "ml-train/oom-job-7xq2z": ("ml-train", "oom-job", "H100-SXM-80GB", 2.0, T(2025, 3, 1, 9, 59, 58), T(2025, 3, 1, 10, 30), "OOM"),
        "research/notebook-x-0": ("research", "notebook-x-0", None, 1.0, None, None, "PENDING"),
    }  # fmt: skip
    hours = {r["job_id"]: r["gpu_hours"] for r in jobs_table(ledger).iter_rows(named=True)}
    assert hours["ml-train/llama-ft-0"] == pytest.approx(16.0)
    assert hours["ml-serve/vllm-7d9f8c-x2k4p"] == pytest.approx(3 / 7 * 1.5)
    assert hours["ml-train/oom-job-7xq2z"] == pytest.approx(2 * 1802 / 3600)
    assert hours.get("research/notebook-x-0", 0.0) == 0.0
    teams = ledger.execute("SELECT team, sum(gpu_count) FROM jobs GROUP BY 1 ORDER BY 1").fetchall()
    assert teams == [("inference", pytest.approx(3 / 7)), ("ml-train", 2.0), ("nlp", 8.0), ("research", 1.0)]


def test_without_nodes_or_settings_the_namespace_is_the_team_and_the_model_unknown(ledger, tmp_path):
    ingest_file(ledger, listed(tmp_path, "pods.json"), opts=IngestOptions(cluster="k1"))
    got = dict(ledger.execute("SELECT job_id, team FROM jobs").fetchall())
    assert got["k1/ml-train/llama-ft-0"] == "ml-train"  # no team_label setting: the label is not read
    assert ledger.execute("SELECT count(*) FROM jobs WHERE gpu_model IS NOT NULL").fetchone()[0] == 0


def test_mig_shares():
    assert mig_share(3, 40) == 3 / 7 and mig_share(1, 10) == 1 / 7 and mig_share(7, 80) == 1.0
    assert mig_share(1, 6) == 1 / 4 and mig_share(2, 12) == 2 / 4  # A30


def test_dcgm_samples_labelled_with_the_pod_join_its_job(ledger, tmp_path):
    """dcgm-exporter labels a pod's series namespace/pod: those samples land on the pod's job, tied exactly."""
    ingest_file(ledger, listed(tmp_path, "pods_nodes.json"), opts=OPTS)
    t0 = int(T(2025, 3, 1, 10, 10).replace(tzinfo=dt.UTC).timestamp() * 1000)
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for k in range(6):
        for gpu in range(8):
            labels = (
                f'gpu="{gpu}",UUID="GPU-{gpu:04d}",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-1",'
                'container="trainer",namespace="ml-train",pod="llama-ft-0"'
            )
            lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} 80 {t0 + k * 60_000}")
    ingest_file(ledger, write(tmp_path, "dcgm.prom", "\n".join(lines) + "\n"), opts=IngestOptions(tz="UTC"))
    assert ledger.execute("SELECT DISTINCT job_id FROM samples").fetchall() == [("ml-train/llama-ft-0",)]
    row = next(r for r in jobs_table(ledger).iter_rows(named=True) if r["job_id"] == "ml-train/llama-ft-0")
    assert row["mean_util_pct"] == pytest.approx(80.0) and row["attribution"] == "exact"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["items"][0]["spec"]["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": "-1"}),
         "items[0] (ml-train/llama-ft-0): nvidia.com/gpu is not a GPU count: '-1'"),
        (lambda d: d["items"][0]["status"]["containerStatuses"][0]["state"]["terminated"].update({"startedAt": "yesterday"}),
         "items[0] (ml-train/llama-ft-0): state.terminated.startedAt is not a time: 'yesterday'"),
        (lambda d: d["items"][1]["metadata"].pop("name"), "items[1]: a pod without metadata.name"),
    ],
)  # fmt: skip
def test_a_bad_pod_in_a_list_is_left_out_and_named_the_others_land(ledger, tmp_path, mutate, message):
    """Issue 42: one unreadable item no longer refuses the whole list; it is counted with its name."""
    doc = json.loads((FIXTURES / "pods.json").read_text())
    i = int(message[6])  # items[i]
    bad = f"{doc['items'][i]['metadata']['namespace']}/{doc['items'][i]['metadata']['name']}"
    ingest_file(ledger, FIXTURES / "pods.json", fmt="kubernetes_pods", opts=IngestOptions(cluster="a"))
    whole = {
        r[0].removeprefix("a/")
        for r in ledger.execute("SELECT job_id FROM jobs WHERE cluster = 'a'").fetchall()
    }
    assert bad in whole
    mutate(doc)
    report = ingest_file(ledger, write(tmp_path, "bad.json", json.dumps(doc)), fmt="kubernetes_pods")
    assert report.skipped[f"pods left out, unreadable ({message})"] == 1
    rest = {r[0] for r in ledger.execute("SELECT job_id FROM jobs WHERE cluster IS NULL").fetchall()}
    assert rest == whole - {bad}


def test_broken_json_is_one_line_with_its_line_number(tmp_path):
    path = write(tmp_path, "pods.json", '{"apiVersion": "v1", "kind": "List",\n "items": [\n')
    out = gpuledger("ingest", str(path), "--format", "kubernetes_pods", "--db", str(tmp_path / "l.duckdb"))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith(f"error: {path}:3: not valid JSON")


def test_settings_keys_are_checked():
    from gpuledger.ledger.errors import SettingsError

    with pytest.raises(SettingsError, match=r"kubernetes\.namespace_teams\.ml"):
        from_dict({"kubernetes": {"namespace_teams": {"ml": 3}}}, Path("s.toml"))
    with pytest.raises(SettingsError, match=r"kubernetes\.teams"):
        from_dict({"kubernetes": {"teams": {}}}, Path("s.toml"))


# -- the poller against a replay of the API --------------------------------------------------------------


class _Replay(http.server.BaseHTTPRequestHandler):
    """Answers what a kube-apiserver answered: the recorded PodList pages and NodeList."""

    seen: ClassVar[list[str]] = []
    pages: ClassVar[dict[str, bytes]] = {}

    def do_GET(self) -> None:
        url = urllib.parse.urlparse(self.path)
        query = urllib.parse.parse_qs(url.query)
        type(self).seen.append(self.path)
        if url.path == "/api/v1/pods":
            body = self.pages["pods2" if query.get("continue") else "pods1"]
        elif url.path == "/api/v1/nodes":
            body = self.pages["nodes"]
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api() -> Iterator[tuple[str, type[_Replay]]]:
    pytest.importorskip("lightkube", reason="the kubernetes extra (make setup installs it)")
    handler = type("Replay", (_Replay,), {"seen": [], "pages": {
        "pods1": (FIXTURES / "api_pods_page1.json").read_bytes(),
        "pods2": (FIXTURES / "api_pods_page2.json").read_bytes(),
        "nodes": (FIXTURES / "api_nodes.json").read_bytes(),
    }})  # fmt: skip
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_the_poller_lands_what_the_file_does(api, db_path, tmp_path):
    from collectors.kubernetes_poll import poll
    from gpuledger.ledger.db import reader

    url, handler = api
    report = poll(db_path, opts=OPTS, server=url)
    assert report.pods_read == 5 and report.rows == {"jobs": 4, "allocations": 3}
    assert any("continue=" in s for s in handler.seen)  # the second page was asked for with the token
    assert any(s.startswith("/api/v1/nodes") for s in handler.seen)
    with reader(db_path) as con:
        got = con.execute("SELECT job_id, team, gpu_model, gpu_count, state FROM jobs ORDER BY 1").fetchall()
        state = con.execute("SELECT collector FROM collector_state").fetchall()
    assert got == [
        ("ml-serve/vllm-7d9f8c-x2k4p", "inference", "A100-80GB", pytest.approx(3 / 7), "RUNNING"),
        ("ml-train/llama-ft-0", "nlp", "H100-SXM-80GB", 8.0, "COMPLETED"),
        ("ml-train/oom-job-7xq2z", "ml-train", "H100-SXM-80GB", 2.0, "OOM"),
        ("research/notebook-x-0", "research", None, 1.0, "PENDING"),
    ]
    assert state == [("kubernetes:default",)]


def test_a_running_pod_gone_from_the_api_is_closed_where_it_was_last_seen(api, db_path):
    """Poll 1 sees vllm running; the API then lists page 2 only (the first page's pods deleted): poll 2
    closes vllm at poll 1's time, COMPLETED, and keeps llama-ft-0's finished record as it was."""
    from collectors.kubernetes_poll import GONE, poll
    from gpuledger.ledger.db import reader

    url, handler = api
    first = poll(db_path, opts=OPTS, server=url)
    page2 = json.loads(handler.pages["pods2"])
    handler.pages["pods1"] = json.dumps(page2).encode()
    handler.pages["pods2"] = json.dumps(
        {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}
    ).encode()
    second = poll(db_path, opts=OPTS, server=url)
    assert second.skipped[f"running pods no longer listed, closed at their last sighting ({GONE})"] == 1
    with reader(db_path) as con:
        vllm = con.execute(
            "SELECT state, end_ts, exit_reason FROM jobs WHERE job_id = 'ml-serve/vllm-7d9f8c-x2k4p'"
        ).fetchone()
        llama = con.execute("SELECT state FROM jobs WHERE job_id = 'ml-train/llama-ft-0'").fetchone()
    assert vllm == ("COMPLETED", first.polled_at, GONE)
    assert llama == ("COMPLETED",)


def test_collect_kubernetes_command(api, tmp_path):
    url, _ = api
    db = str(tmp_path / "l.duckdb")
    out = gpuledger("collect", "kubernetes", "--server", url, "--cluster", "k1", "--json", "--db", db)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["rows"] == {"jobs": 4, "allocations": 3}


def test_collect_kubernetes_every_polls_until_sigterm(api, tmp_path):
    """``--every``: a poll each period (gpuledger/cli/live/repeat.py) until SIGTERM, which lets the poll in
    flight finish and be reported, then exits 0. The replay sends SIGTERM while serving the second poll's
    node list: two reports of the same five pods."""
    url, handler = api
    serve = handler.do_GET

    def do_get(self: _Replay) -> None:
        if sum(s.startswith("/api/v1/nodes") for s in type(self).seen) == 1 and self.path.startswith(
            "/api/v1/nodes"
        ):
            os.kill(os.getpid(), signal.SIGTERM)
        serve(self)

    handler.do_GET = do_get
    before = signal.getsignal(signal.SIGTERM)
    db = str(tmp_path / "l.duckdb")
    out = gpuledger("collect", "kubernetes", "--server", url, "--every", "0.05s", "--json", "--db", db)
    assert out.returncode == 0, out.stderr
    reports = [json.loads(r) for r in out.stdout.replace("}\n{", "}\0{").split("\0")]
    assert [r["pods_read"] for r in reports] == [5, 5]
    assert reports[0]["rows"] == {"jobs": 4, "allocations": 3}
    from gpuledger.ledger.db import reader

    with reader(db) as con:  # the second poll re-read the same pods: updated in place, never counted twice
        assert con.execute("SELECT count(*) FROM jobs").fetchone() == (4,)
    assert sum(s.startswith("/api/v1/nodes") for s in handler.seen) == 2
    assert signal.getsignal(signal.SIGTERM) == before


def test_collect_kubernetes_without_a_config_is_one_sentence(tmp_path, monkeypatch):
    pytest.importorskip("lightkube")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    out = gpuledger(
        "collect",
        "kubernetes",
        "--kubeconfig",
        str(tmp_path / "none.yaml"),
        "--db",
        str(tmp_path / "l.duckdb"),
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith("error: ")


def test_container_requests_limits_and_init_containers(tmp_path):
    """Per container the request, else the limit; the pod holds max(sum of containers, largest init)."""
    from collectors.kubernetes import container_gpus

    def c(requests=None, limits=None):
        return {"resources": {k: v for k, v in (("requests", requests), ("limits", limits)) if v}}

    p = tmp_path / "x.json"
    assert container_gpus(p, "x", c(limits={"nvidia.com/gpu": 2})) == 2.0
    assert container_gpus(p, "x", c(requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"})) == 1.0
    assert container_gpus(p, "x", c(limits={"amd.com/gpu": "4", "cpu": "8"})) == 4.0
    assert container_gpus(
        p, "x", c(limits={"nvidia.com/mig-1g.10gb": "2", "nvidia.com/gpu": "1"})
    ) == pytest.approx(1 + 2 / 7)
    assert container_gpus(p, "x", c(requests={"cpu": "100m"})) == 0.0
