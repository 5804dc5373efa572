"""``guard run`` on a Kubernetes pod, through the recorded-API replay of tests/collectors/test_kubernetes.py (this
machine runs no API server): the real lightkube client sends ``DELETE /api/v1/namespaces/NS/pods/NAME`` to a
local HTTP server on 127.0.0.1 that answers as a kube-apiserver does (the pod, now with a
``deletionTimestamp``; a ``Status`` 404 for a pod that is gone). Mail goes to the real SMTP server of
tests/test_report_mail.py. The pod's GPU telemetry is the only mock (no GPU here)."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import duckdb
import pytest

from gpuledger.guard.edge import KubeTarget, delete_pod
from gpuledger.ledger.db import writer
from tests.analytics.build import alloc, gpu, ingest, job
from tests.collectors.test_kubernetes import FIXTURES, _Replay
from tests.conftest import gpuledger
from tests.test_report_mail import smtp_server

POD = json.loads((FIXTURES / "api_pods_page1.json").read_text(encoding="utf-8"))["items"][
    0
]  # ml-train/llama-ft-0


class _Deletes(_Replay):
    deleted: ClassVar[list[tuple[str, dict]]] = []

    def do_GET(self) -> None:
        if self.path.startswith(
            "/api/v1/namespaces/ml-train/pods/llama-ft-0"
        ):  # a GET of the pod: its labels
            raw = json.dumps(dict(POD, kind="Pod", apiVersion="v1")).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
            return
        super().do_GET()

    def do_DELETE(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        type(self).deleted.append((self.path, body))
        if self.path.startswith("/api/v1/namespaces/ml-train/pods/llama-ft-0"):
            pod = dict(POD, metadata=dict(POD["metadata"], deletionTimestamp="2025-03-01T12:00:00Z"))
            code, answer = 200, dict(pod, kind="Pod", apiVersion="v1")
        else:
            name = self.path.rsplit("/", 1)[-1].split("?")[0]
            code, answer = 404, {
                "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
                "message": f'pods "{name}" not found',
            }  # fmt: skip
        raw = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def api() -> Iterator[tuple[str, type[_Deletes]]]:
    import http.server
    import threading

    pytest.importorskip("lightkube", reason="the kubernetes extra (make setup installs it)")
    handler = type("Deletes", (_Deletes,), {"seen": [], "pages": {}, "deleted": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_delete_pod_sends_the_grace_period_and_reads_the_answer(api):
    url, handler = api
    ok = delete_pod("ml-train/llama-ft-0", KubeTarget(server=url), grace_seconds=600)
    assert ok.ok and ok.text == "DELETE pod ml-train/llama-ft-0: accepted"
    path, body = handler.deleted[0]
    assert path.startswith("/api/v1/namespaces/ml-train/pods/llama-ft-0")
    assert body.get("gracePeriodSeconds") == 600 or "gracePeriodSeconds=600" in path
    gone = delete_pod("k1/ml-train/nothing-here", KubeTarget(server=url))
    assert not gone.ok and gone.text.startswith("DELETE pod ml-train/nothing-here: 404")


SETTINGS = """
[guard]
allow_cancel = true
mail_domain = "example.org"

[[guard.policy]]
name = "pods"
util_pct = 0
warn_minutes = 0.05
cancel_minutes = 0.1
[guard.policy.scope]
namespaces = ["ml-train"]
"""


def test_an_idle_pod_is_warned_then_deleted_with_enforce(api, tmp_path: Path):
    url, handler = api
    db = str(tmp_path / "l.duckdb")
    toml = tmp_path / "s.toml"
    toml.write_text(SETTINGS, encoding="utf-8")
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    start = now - dt.timedelta(seconds=20)
    t0 = dt.datetime(2025, 3, 3)
    minutes = (start - t0).total_seconds() / 60
    samples = [{"ts": start + dt.timedelta(seconds=s), "gpu_id": "kn1:0", "util_pct": 0.0} for s in range(21)]
    with writer(db) as con:
        ingest(
            con,
            jobs=[
                job(
                    "ml-train/llama-ft-0",
                    minutes,
                    None,
                    source="kubernetes_pods",
                    user_name="ana",
                    state="RUNNING",
                )
            ],
            gpus=[gpu("kn1:0")],
            allocations=[alloc("ml-train/llama-ft-0", "kn1:0", minutes, None)],
            samples=samples,
        )
    with smtp_server() as inbox:
        spared = tmp_path / "spared.toml"
        spared.write_text(SETTINGS + '[guard.policy.exemptions]\nlabels = ["team=nlp"]\n', encoding="utf-8")
        exempt = gpuledger("guard", "run", "--json", "--enforce", "--db", db, "--settings", str(spared),
                           "--kube-server", url, "--smtp", f"smtp://127.0.0.1:{inbox.port}")  # fmt: skip
        assert exempt.returncode == 0, exempt.stderr
        assert {p["done"] for p in json.loads(exempt.stdout)} == {
            "exempt: label team=nlp"
        }  # the pod's own label
        assert handler.deleted == [] and inbox.messages == []
        args = ("guard", "run", "--json", "--db", db, "--settings", str(toml), "--kube-server", url,
                "--smtp", f"smtp://127.0.0.1:{inbox.port}")  # fmt: skip
        dry = gpuledger(*args)
        assert dry.returncode == 0, dry.stderr
        assert [p["step"] for p in json.loads(dry.stdout)] == ["warn", "cancel"]
        assert handler.deleted == [] and inbox.messages == []
        first = gpuledger(*args, "--enforce")
        assert [(p["step"], p["done"]) for p in json.loads(first.stdout)] == [
            ("warn", "mailed ana@example.org"),
            ("cancel", "waits"),
        ]
        time.sleep(3.5)
        with writer(db) as con:  # the pod still reports 0 %
            later = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
            extra = int((later - samples[-1]["ts"]).total_seconds())
            ingest(con, samples=[{"ts": samples[-1]["ts"] + dt.timedelta(seconds=s), "gpu_id": "kn1:0", "util_pct": 0.0} for s in range(1, extra + 1)])  # fmt: skip
        second = gpuledger(*args, "--enforce")
        assert second.returncode == 0, second.stderr
        assert [(p["step"], p["done"]) for p in json.loads(second.stdout)] == [
            ("cancel", "DELETE pod ml-train/llama-ft-0: accepted")
        ]
    assert [p for p, _ in handler.deleted] and handler.deleted[0][0].startswith(
        "/api/v1/namespaces/ml-train/pods/llama-ft-0"
    )
    con = duckdb.connect(db, read_only=True)
    got = con.execute(
        "SELECT step, mail_id IS NOT NULL, accepted, answer FROM guard_actions ORDER BY action_id"
    ).fetchall()
    con.close()
    assert got == [
        ("warn", True, None, None),
        ("cancel", False, True, "DELETE pod ml-train/llama-ft-0: accepted"),
    ]
