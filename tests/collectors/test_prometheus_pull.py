"""The Prometheus collector's planning, staging and HTTP client, without Prometheus (the live test runs a real one).

The client tests talk to a real HTTP server on 127.0.0.1 (TinyServer) that answers from a script.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import shutil
import ssl
import subprocess
import threading
import time
from pathlib import Path

import pytest

from collectors.base import IngestOptions
from collectors.prometheus_pull import (
    MAX_CHUNK_POINTS,
    TOKEN_ENV,
    PromClient,
    PullOptions,
    chunk_span,
    fleet_size,
    host_batches,
    parse_duration,
    parse_time,
    plan_chunks,
    read_token,
    selector,
    stage_responses,
)
from gpuledger.cli.main import main
from gpuledger.ledger.errors import CollectorError


def test_chunks_stay_under_the_11000_point_cap_and_cover_the_range_once():
    # 30 days at 60 s = 43,200 steps; a 30-day chunk request is cut at 10,000 steps (600,000 s)
    chunks = plan_chunks(0, 30 * 86_400, 60, 30 * 86_400)
    assert chunks[0] == (0, 600_000) and chunks[-1] == (2_400_000, 2_592_000)
    assert all(b - a <= 10_000 * 60 for a, b in chunks)
    assert [a for a, _ in chunks[1:]] == [b for _, b in chunks[:-1]]  # contiguous, no overlap
    assert plan_chunks(0, 7_200, 60, 3_600) == [(0, 3_600), (3_600, 7_200)]


def test_a_chunk_holds_at_most_max_chunk_points_of_the_queries_with_data():
    opts = PullOptions(url="http://x", step_s=60)  # chunk_s: a day
    # 14 GPUs x 12 queries x 1,440 steps = 241,920 points: the day fits
    assert chunk_span(opts, 14) == 86_400
    # 1,000 GPUs with 4 of the queries answering (util, its count, memory used, power): by hand,
    # 1,500,000 // (1,000 x 4) = 375 steps of 60 s
    present = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"}
    assert MAX_CHUNK_POINTS == 1_500_000
    assert chunk_span(opts, 1_000, present) == 375 * 60
    # every query counted when the fields present are unknown: 1,500,000 // 12,000 = 125 steps
    assert chunk_span(opts, 1_000) == 125 * 60
    # never under one step, never past the asked chunk, whole steps
    assert chunk_span(opts, 10_000_000) == 60
    assert chunk_span(PullOptions(url="http://x", step_s=300, chunk_s=3_600), 1) == 3_600


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
    assert not any("blank" in reason for reason in notes)  # stored as NULL, not a skip (collectors.dcgm)


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


# ------------------------------------------------------------------ the HTTP client against a real local server


class TinyServer:
    """A real HTTP(S) server on 127.0.0.1 that answers from a script and records what it was sent.

    ``answers`` is a list of ``(status, headers, body)``, used in turn (the last one repeats). Each request
    is recorded as ``(path, headers, client_port, arrival perf_counter)``: one client port for many
    requests means the client kept the connection alive.
    """

    def __init__(self, answers: list[tuple[int, dict[str, str], bytes]], tls: ssl.SSLContext | None = None):
        self.answers, self.seen = answers, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive

            def do_GET(self) -> None:
                self.answer()

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.answer()

            def answer(self) -> None:
                server.seen.append(
                    (self.path, dict(self.headers), self.client_address[1], time.perf_counter())
                )
                status, headers, body = server.answers[min(len(server.seen), len(server.answers)) - 1]
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def __enter__(self) -> TinyServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


LABELS_OK = (200, {}, json.dumps({"status": "success", "data": ["gpu-a", "gpu-b"]}).encode())
EMPTY_MATRIX = (
    200,
    {},
    json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode(),
)


def test_429_with_retry_after_waits_what_the_server_asks():
    too_many = (429, {"Retry-After": "1"}, b'{"status":"error","error":"too many queries"}')
    with TinyServer([too_many, LABELS_OK]) as srv:
        client = PromClient(PullOptions(url=srv.url, retries=2, backoff_s=0.01))
        assert client.label_values("Hostname", "up", 0, 60) == ["gpu-a", "gpu-b"]
    assert len(srv.seen) == 2 and client.retried == 1
    # the backoff alone would wait at most 0.01 x 2 + 0.01 s; the second request came after the 1 s asked for
    assert srv.seen[1][3] - srv.seen[0][3] >= 1.0


def test_a_lasting_outage_is_one_sentence_after_the_retries():
    unavailable = (503, {}, b'{"status":"error","error":"shutting down"}')
    with TinyServer([unavailable]) as srv:
        client = PromClient(PullOptions(url=srv.url, retries=2, backoff_s=0.01))
        with pytest.raises(
            CollectorError,
            match=r"/api/v1/label/Hostname/values: no answer after 3 tries \(HTTP 503: shutting down\); "
            r"committed chunks are kept, run the same command again to resume",
        ):
            client.label_values("Hostname", "up", 0, 60)
    assert len(srv.seen) == 3  # the first try and 2 retries


def test_a_bad_query_fails_at_once_with_prometheus_own_words():
    bad = (400, {}, b'{"status":"error","errorType":"bad_data","error":"parse error at char 4"}')
    with TinyServer([bad]) as srv:
        client = PromClient(PullOptions(url=srv.url, retries=5))
        with pytest.raises(CollectorError, match=r"rejected the request: HTTP 400: parse error at char 4$"):
            client.post("/api/v1/query", [("query", "up{")])
    assert len(srv.seen) == 1  # a 4xx other than 429 is not retried


def test_one_kept_alive_connection_serves_many_requests():
    with TinyServer([LABELS_OK]) as srv, PromClient(PullOptions(url=srv.url)) as client:
        for _ in range(5):
            client.label_values("Hostname", "up", 0, 60)
    assert len(srv.seen) == 5 and len({port for _, _, port, _ in srv.seen}) == 1


def test_the_token_comes_from_the_environment_or_a_file_never_the_command_line(
    tmp_path, monkeypatch, db_path, capsys
):
    monkeypatch.setenv(TOKEN_ENV, "env-secret")
    assert read_token(None) == "env-secret"
    token_file = tmp_path / "token"
    token_file.write_text("file-secret\n")
    assert read_token(str(token_file)) == "file-secret"  # the flag wins over the environment
    monkeypatch.delenv(TOKEN_ENV)
    assert read_token(None) is None
    with pytest.raises(CollectorError, match=r"--token-file .*/missing: No such file"):
        read_token(str(tmp_path / "missing"))
    assert "file-secret" not in repr(PullOptions(url="http://x", token="file-secret"))
    with TinyServer([LABELS_OK, EMPTY_MATRIX]) as srv:
        argv = ["collect", "prometheus", "--url", srv.url, "--db", db_path, "--token-file", str(token_file)]
        assert (
            main([*argv, "--since", "1970-01-01T00:00:00", "--until", "1970-01-01T00:02:00", "--json"]) == 0
        )
    capsys.readouterr()
    assert {h.get("Authorization") for _, h, _, _ in srv.seen} == {"Bearer file-secret"}
    unauthorized = (401, {}, b'{"status":"error","error":"authentication required"}')
    with TinyServer([unauthorized]) as srv:
        assert main(["collect", "prometheus", "--url", srv.url, "--db", db_path, "--since", "1h"]) == 1
    assert capsys.readouterr().err.endswith(
        "rejected the request: HTTP 401: authentication required "
        "(check the token: GPULEDGER_PROM_TOKEN or --token-file)\n"
    )


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, ssl.SSLContext]:
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return cert, context


def test_tls_is_verified_against_the_ca_file_or_skipped_with_insecure(self_signed):
    cert, context = self_signed
    with TinyServer([LABELS_OK], tls=context) as srv:
        with pytest.raises(CollectorError, match=r"TLS failed \(.*certificate verify failed.*--ca-file"):
            PromClient(PullOptions(url=srv.url, retries=0)).label_values("Hostname", "up", 0, 60)
        assert PromClient(PullOptions(url=srv.url, ca_file=str(cert))).label_values("Hostname", "up", 0, 60)
        assert PromClient(PullOptions(url=srv.url, insecure=True)).label_values("Hostname", "up", 0, 60)


def test_the_fleet_is_counted_under_either_spelling_of_the_uuid_label():
    """dcgm-exporter labels a GPU ``UUID``; a relabelling scrape config writes ``uuid`` (collectors.dcgm reads
    both). The pull sizes its chunks by the distinct UUIDs of either, and by 8 GPUs a host without any."""

    def labels(values: list[str]) -> tuple[int, dict[str, str], bytes]:
        return 200, {}, json.dumps({"status": "success", "data": values}).encode()

    opts = PullOptions(url="", step_s=60)
    names = labels(["DCGM_FI_DEV_GPU_UTIL"])
    # answered in turn: __name__, UUID, uuid
    answers = [names, labels([]), labels(["GPU-a", "GPU-b", "GPU-c"])]
    with TinyServer(answers) as srv, PromClient(PullOptions(url=srv.url)) as client:
        assert fleet_size(client, opts, ["h1"], 0, 3_600) == (3, {"DCGM_FI_DEV_GPU_UTIL"})
    assert [p.split("?")[0] for p, *_ in srv.seen] == [
        "/api/v1/label/__name__/values",
        "/api/v1/label/UUID/values",
        "/api/v1/label/uuid/values",
    ]
    with TinyServer([names, labels([]), labels([])]) as srv, PromClient(PullOptions(url=srv.url)) as client:
        assert fleet_size(client, opts, ["h1", "h2"], 0, 3_600)[0] == 16
