"""``collect prometheus`` against a REAL Prometheus holding days of replayed dcgm-exporter history.

The history is built from the real dcgm-exporter scrapes in ../shared/datasets/dcgm-exporter (read in place):
every GPU label set found there (UUID/uuid, Hostname or none, MIG GPU_I_ID, pod/namespace) becomes a series,
and its values are the real values scraped for that metric, replayed every 30 s over a timeline this test
generates deterministically (jobs as ``hpc_job`` labels, one exporter outage). promtool backfills it before
Prometheus starts. The expected numbers come from plain SQL over the same raw samples, never from the
collector: per GPU, utilization = mean of the raw values and GPU-hours = raw samples × 30 s.

Tolerance: the raw scrapes sit at :15 and :45 of every minute, so each 60 s window ``(t-60, t]`` holds exactly
two of them and no window straddles a job boundary (jobs start on the hour). Per-step averaging is then
exact and the comparison is to 1e-6. With unaligned scrapes the error is bounded by one step per GPU per
gap or job edge (a partial window counts as a whole step) — the docs say so.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from collectors.ingest import ingest_file
from collectors.prometheus_pull import PullOptions, pull
from gpuledger.cli.main import main
from gpuledger.ledger.db import writer
from gpuledger.ledger.errors import CollectorError
from tests.conftest import ROOT, dataset

pytestmark = pytest.mark.service

SERVICES = ROOT / "tests" / "services"
SCRAPE_S = 30
OFFSET_S = 15  # scrapes at :15 and :45
DAYS = 2
FILE_HOURS = 12  # the part also written as a dcgm text file (the file parser is slower than the pull)
LEGACY = {  # gpu-monitoring-tools era names (issue #188) → today's field names
    "DCGM_GPU_UTILIZATION": "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_POWER_USAGE": "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_GPU_TEMP": "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_SM_CLOCK": "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_TOTAL_ENERGY_CONSUMPTION": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
}
FULL_GPU = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
)
# DCGM reports no GPU_UTIL for a MIG instance; GR_ENGINE_ACTIVE (a ratio) is its utilization.
MIG_INSTANCE = (
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
)
RAW = "read_csv(?, header = true, types = {'gpu_id': 'VARCHAR', 'job_id': 'VARCHAR'})"
LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\}\s+(\S+)")
LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def real_scrapes() -> tuple[list[dict[str, str]], dict[str, list[float]], dict[str, float]]:
    """GPU label sets, value pools per metric, and energy counters per GPU from the real scrape files."""
    gpus: dict[tuple[str, str], dict[str, str]] = {}
    pools: dict[str, list[float]] = {}
    energy: dict[str, float] = {}
    for name in ("datadog_dcgm_fixture_metrics.txt", "github_issue_excerpts_metrics.txt"):
        for line in dataset(f"dcgm-exporter/{name}").read_text().splitlines():
            m = LINE.match(line)
            if not m:
                continue
            metric = LEGACY.get(m.group(1).upper(), m.group(1).upper())
            labels = dict(LABEL.findall(m.group(2)))
            uuid = labels.get("UUID") or labels.get("uuid")
            if not uuid:
                continue
            gpus.setdefault((uuid, labels.get("GPU_I_ID", "")), labels)
            value = float(m.group(3))
            pools.setdefault(metric, [])
            if value not in pools[metric]:
                pools[metric].append(value)
            if metric == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
                energy[uuid] = value
    # every pool is replayed onto every GPU, T4s included: keep only readings a T4 can give (2 x its 70 W
    # TDP, its 15,360 MiB), or the plausibility checks (collectors/validate.py) rightly refuse them
    pools["DCGM_FI_DEV_POWER_USAGE"] = [v for v in pools["DCGM_FI_DEV_POWER_USAGE"] if v <= 140]
    pools["DCGM_FI_DEV_FB_USED"] = [v for v in pools["DCGM_FI_DEV_FB_USED"] if v <= 15360]
    return [gpus[k] for k in sorted(gpus)], pools, energy


def expected_gpu_id(labels: dict[str, str]) -> str:
    """The mapping the collector documents: UUID (or uuid), plus /GPU_I_ID for a MIG instance."""
    uuid = labels.get("UUID") or labels["uuid"]
    return f"{uuid}/{labels['GPU_I_ID']}" if labels.get("GPU_I_ID") else uuid


def job_at(i: int, labels: dict[str, str], hour: int) -> str | None:
    """Jobs: 2 h running, 1 h idle, per GPU; a pod's GPU belongs to its pod the whole time."""
    if labels.get("pod"):
        return None  # the pod label itself names the job
    return f"{7000 + i * 100 + hour // 3}" if hour % 3 < 2 else None


def generate(folder: Path, end: int) -> tuple[Path, Path, int]:
    """Write the OpenMetrics history and a CSV of the same raw samples; return their paths and the start."""
    gpus, pools, energy = real_scrapes()
    start = end - DAYS * 86_400
    n = DAYS * 86_400 // SCRAPE_S
    series: dict[str, list[str]] = {}
    raw = ["gpu_id,job_id,metric,t,value"]
    for i, labels in enumerate(gpus):
        gid = expected_gpu_id(labels)
        metrics = MIG_INSTANCE if labels.get("GPU_I_ID") else FULL_GPU
        base = ",".join(f'{k}="{v}"' for k, v in labels.items())
        counter_mj = energy.get(labels.get("UUID") or labels.get("uuid", ""), 1e8)
        pod_job = f"{labels['namespace']}/{labels['pod']}" if labels.get("pod") else ""
        for k in range(n):
            t = start + OFFSET_S + k * SCRAPE_S
            hour = (t - start) // 3600
            if i == 0 and 10 <= hour < 11:
                continue  # one exporter outage: an hour with no samples for the first GPU
            job = job_at(i, labels, hour)
            lbl = base + (f',hpc_job="{job}"' if job else "")
            power = pools["DCGM_FI_DEV_POWER_USAGE"][(i + k // 4) % len(pools["DCGM_FI_DEV_POWER_USAGE"])]
            for metric in metrics:
                if metric == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
                    counter_mj += power * SCRAPE_S * 1000
                    value = counter_mj
                else:
                    pool = pools[metric]
                    value = (
                        pool[(i + k // 5) % len(pool)]
                        if job or pod_job or metric != "DCGM_FI_DEV_GPU_UTIL"
                        else 0.0
                    )
                series.setdefault(metric, []).append(f"{metric}{{{lbl}}} {value:.6f} {t}")
                raw.append(f"{gid},{job or pod_job},{metric},{t},{value:.6f}")
    om = folder / "history.om"
    with om.open("w") as fh:
        for metric, lines in series.items():
            # OpenMetrics wants counters named *_total; declared a gauge it keeps dcgm-exporter's name
            fh.write(f"# HELP {metric} replayed from real dcgm-exporter scrapes\n# TYPE {metric} gauge\n")
            fh.write("\n".join(lines) + "\n")
        fh.write("# EOF\n")
    # the first FILE_HOURS of the same samples as a dcgm-exporter text file (millisecond timestamps)
    cutoff = start + FILE_HOURS * 3600
    with (folder / "history.prom").open("w") as fh:
        for metric, lines in series.items():
            fh.write(f"# TYPE {metric} gauge\n")
            fh.writelines(ln + "000\n" for ln in lines if int(ln.rsplit(" ", 1)[1]) < cutoff)
    csv = folder / "raw.csv"
    csv.write_text("\n".join(raw) + "\n")
    return om, csv, start


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    if not (shutil.which("prometheus") and shutil.which("promtool")):
        pytest.skip(
            "Prometheus is not installed (Debian package `prometheus`; `make system-deps` installs it)"
        )
    work = tmp_path_factory.mktemp("prometheus")
    end = (int(dt.datetime.now(dt.UTC).timestamp()) // 3600 - 3) * 3600  # history ends 3 h ago, on the hour
    om, csv, start = generate(work, end)
    up = subprocess.run(
        ["bash", str(SERVICES / "prometheus_up.sh"), str(work / "srv"), str(om)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if up.returncode == 3:
        pytest.skip(up.stderr.strip())
    assert up.returncode == 0, up.stderr
    env = dict(line.split("=", 1) for line in (work / "srv" / "env").read_text().split())
    try:
        yield {"url": env["PROM_URL"], "start": start, "end": end, "raw": csv, "file": work / "history.prom"}
    finally:
        subprocess.run(["bash", str(SERVICES / "prometheus_down.sh"), str(work / "srv")], timeout=30)


def utc(epoch: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).replace(tzinfo=None)


def expected_per_gpu(raw: Path, a: int = 0, b: int = 2**62) -> dict[str, tuple[float, float]]:
    """Plain SQL over the raw samples (epoch ``a <= t < b``): gpu_id → (mean utilization %, GPU-hours =
    samples × 30 s)."""
    con = duckdb.connect()
    rows = con.execute(
        f"""
        SELECT gpu_id,
               avg(CASE WHEN metric = 'DCGM_FI_DEV_GPU_UTIL' THEN value ELSE value * 100 END),
               count(*) * {SCRAPE_S} / 3600.0
        FROM {RAW}
        WHERE metric IN ('DCGM_FI_DEV_GPU_UTIL', 'DCGM_FI_PROF_GR_ENGINE_ACTIVE') AND t >= ? AND t < ?
        GROUP BY gpu_id
        """,
        [str(raw), a, b],
    ).fetchall()
    return {g: (u, h) for g, u, h in rows}


def expected_per_job(raw: Path) -> dict[str, float]:
    con = duckdb.connect()
    rows = con.execute(
        f"""SELECT job_id, count(*) * {SCRAPE_S} / 3600.0 FROM {RAW}
            WHERE metric IN ('DCGM_FI_DEV_GPU_UTIL', 'DCGM_FI_PROF_GR_ENGINE_ACTIVE') AND job_id IS NOT NULL
            GROUP BY job_id""",
        [str(raw)],
    ).fetchall()
    return {str(j): h for j, h in rows}


def ledger_per_gpu(db: str) -> dict[str, tuple[float, float]]:
    with writer(db) as con:
        rows = con.execute(
            """SELECT gpu_id, sum(util_pct * interval_s) / sum(interval_s), sum(interval_s) / 3600.0
               FROM samples GROUP BY gpu_id"""
        ).fetchall()
    return {g: (u, h) for g, u, h in rows}


def assert_matches_raw(db: str, raw: Path) -> None:
    expected = expected_per_gpu(raw)
    got = ledger_per_gpu(db)
    assert sorted(got) == sorted(expected)
    for gpu, (util, hours) in expected.items():
        assert got[gpu][0] == pytest.approx(util, abs=1e-6), gpu
        assert got[gpu][1] == pytest.approx(hours, abs=1e-6), gpu


def test_pushdown_equals_raw_samples_per_gpu_and_job(prom, db_path):
    """Utilization and GPU-hours per GPU and per job equal the raw samples'; labels map to GPUs and jobs."""
    opts = PullOptions(
        url=str(prom["url"]), since=utc(prom["start"]), until=utc(prom["end"]), hosts_per_query=2
    )
    report = pull(db_path, opts)
    assert len(report.chunks) == DAYS  # one transaction per day
    # 12 rollups x (3 batches of 2 named hosts + 1 for series without Hostname) per chunk
    assert {c.requests for c in report.chunks} == {12 * 4}
    assert_matches_raw(db_path, prom["raw"])
    hours_per_job = expected_per_job(prom["raw"])
    with writer(db_path) as con:
        jobs = dict(
            con.execute(
                "SELECT job_id, sum(interval_s) / 3600.0 FROM samples WHERE job_id IS NOT NULL GROUP BY job_id"
            ).fetchall()
        )
        gpus = con.execute(
            """SELECT gpu_id, uuid, host, gpu_index, model, mig_profile, parent_gpu_id, memory_total_mib
               FROM gpus ORDER BY gpu_id"""
        ).fetchall()
        steps = con.execute(
            "SELECT count(*), count(DISTINCT interval_s), min(ts), max(ts) FROM samples"
        ).fetchall()[0]
        energy = con.execute(
            """SELECT max(energy_j) - min(energy_j), sum(power_w * interval_s) FROM samples
               WHERE gpu_id = 'GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e'"""
        ).fetchall()[0]
    assert jobs.keys() == hours_per_job.keys()
    assert "ray-llm/ray-1111111" in jobs  # namespace/pod of the k8s A10G
    for job, hours in hours_per_job.items():
        assert jobs[job] == pytest.approx(hours, abs=1e-6), job
    by_id = {g[0]: g for g in gpus}
    # a T4 with every label; the A100 MIG instance known only by lower-case `uuid` + GPU_I_ID; the old exporter
    assert by_id["GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"][1:] == (
        "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e",
        "424773df46e0",
        0,
        "T4",
        None,
        None,
        15109.0,
    )
    assert by_id["GPU-ed1353d6-52ba-8793-7230-4d5d3eb68167/2"][1:7] == (
        None,
        None,
        None,  # a MIG instance has no index of its own (collectors.dcgm)
        "A100-80GB",
        "4g.40gb",
        "GPU-ed1353d6-52ba-8793-7230-4d5d3eb68167",
    )
    assert by_id["GPU-6bf47ca9-ad3e-15db-beed-1079a7d74116"][2] is None  # no Hostname label
    # one row per GPU per minute, each standing for 60 s, from the first window to the last
    assert steps[1] == 1 and steps[2] == utc(prom["start"]) and steps[3] == utc(prom["end"] - 60)
    # the energy counter rises by the integral of the power samples (last-in-window minus first-in-window
    # misses the first window's increase: one window of ~30 s at most 302.206 W x 2 samples)
    assert energy[0] == pytest.approx(energy[1], abs=302.206 * 60 * 1.01)


def test_pushdown_equals_the_same_samples_ingested_as_a_dcgm_file(prom, db_path, tmp_path):
    """The Done-when check: the collector's per-GPU utilization and GPU-hours equal those of the raw series
    ingested from a file by the dcgm parser (collectors/dcgm.py)."""
    until = utc(prom["start"] + FILE_HOURS * 3600)
    pull(db_path, PullOptions(url=str(prom["url"]), since=utc(prom["start"]), until=until))
    file_db = str(tmp_path / "file.duckdb")
    with writer(file_db) as con:
        report = ingest_file(con, prom["file"], fmt="dcgm")
    # 14 GPUs x 12 h x 120 scrapes an hour, less the first GPU's one-hour outage (hour 10: 120 scrapes)
    assert report.rows["samples"] == 14 * FILE_HOURS * 120 - 120
    from_file = ledger_per_gpu(file_db)
    pulled = ledger_per_gpu(db_path)
    assert sorted(from_file) == sorted(pulled)
    for gpu, (util, hours) in from_file.items():
        assert pulled[gpu][0] == pytest.approx(util, abs=1e-4), gpu
        assert pulled[gpu][1] == pytest.approx(hours, abs=1e-6), gpu


def test_second_collect_reads_only_new_data(prom, db_path):
    middle = prom["start"] + 86_400
    first = pull(db_path, PullOptions(url=str(prom["url"]), since=utc(prom["start"]), until=utc(middle)))
    second = pull(db_path, PullOptions(url=str(prom["url"]), until=utc(prom["end"])))
    third = pull(db_path, PullOptions(url=str(prom["url"]), until=utc(prom["end"])))
    assert first.cursor == utc(middle) and second.cursor == utc(prom["end"])
    assert [c.start for c in second.chunks] == [utc(middle)]  # resumed at the cursor
    assert "samples already in the ledger" not in second.chunks[0].skipped
    assert third.chunks == []  # nothing new
    assert_matches_raw(db_path, prom["raw"])
    with writer(db_path) as con:
        state = con.execute("SELECT collector, cursor_ts FROM collector_state").fetchall()
    assert state == [(f"prometheus:{prom['url']}", utc(prom["end"]))]


class FlakyProxy:
    """Forwards to Prometheus; ``fail_after`` answers 503 from that many query_range calls on, ``flap``
    answers 503 to every other one, ``throttle`` answers the first that many query_range calls 429 with
    ``Retry-After: 1``, and with ``token`` set anything without ``Authorization: Bearer <token>`` gets 401:
    real HTTP failures, not a mock of the client. ``arrivals`` records when each query_range call came."""

    def __init__(self, target: str) -> None:
        self.target, self.fail_after, self.flap, self.calls = target, None, False, 0
        self.throttle, self.token, self.arrivals = 0, None, []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.forward(None)

            def do_POST(self) -> None:
                self.forward(self.rfile.read(int(self.headers.get("Content-Length", 0))))

            def forward(self, body: bytes | None) -> None:
                if proxy.token and self.headers.get("Authorization") != f"Bearer {proxy.token}":
                    self.send_error(401, "no token")
                    return
                if "query_range" in self.path:
                    proxy.calls += 1
                    proxy.arrivals.append(time.perf_counter())
                    if proxy.calls <= proxy.throttle:
                        self.send_response(429)
                        self.send_header("Retry-After", "1")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    if (proxy.fail_after is not None and proxy.calls > proxy.fail_after) or (
                        proxy.flap and proxy.calls % 2
                    ):
                        self.send_error(503, "injected outage")
                        return
                headers = {k: v for k, v in self.headers.items() if k.lower() != "accept-encoding"}
                req = urllib.request.Request(proxy.target + self.path, data=body, headers=headers)
                with urllib.request.urlopen(req) as upstream:
                    payload = upstream.read()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_outage_keeps_committed_chunks_and_the_rerun_resumes(prom, db_path):
    proxy = FlakyProxy(str(prom["url"]))
    try:
        opts = PullOptions(
            url=proxy.url,
            since=utc(prom["start"]),
            until=utc(prom["end"]),
            chunk_s=6 * 3600,
            retries=2,
            backoff_s=0.01,
        )
        proxy.flap = True  # every other request fails once: retries absorb it
        proxy.fail_after = 12 * 3 * 2  # then a lasting outage after 3 chunks (12 rollups, 2 calls each)
        with pytest.raises(
            CollectorError, match=r"no answer after 3 tries .*HTTP 503.*run the same command again"
        ):
            pull(db_path, opts)
        with writer(db_path) as con:
            cursor = con.execute("SELECT cursor_ts FROM collector_state").fetchall()[0][0]
            ingests = con.execute("SELECT count(*) FROM ingests").fetchall()[0][0]
        assert cursor == utc(prom["start"] + 3 * 6 * 3600) and ingests == 3
        proxy.fail_after, proxy.flap = None, False
        resumed = pull(db_path, PullOptions(url=proxy.url, until=utc(prom["end"]), chunk_s=6 * 3600))
    finally:
        proxy.close()
    assert resumed.chunks[0].start == cursor and len(resumed.chunks) == DAYS * 4 - 3
    assert all("samples already in the ledger" not in c.skipped for c in resumed.chunks)
    assert_matches_raw(db_path, prom["raw"])


def test_a_throttling_server_behind_a_token_gets_the_same_samples(prom, db_path, monkeypatch):
    """Through a proxy that wants a bearer token (given in GPULEDGER_PROM_TOKEN) and answers the first two
    query_range calls 429 with Retry-After: 1, six hours land exactly as plain SQL over the raw samples says."""
    proxy = FlakyProxy(str(prom["url"]))
    proxy.token, proxy.throttle = "s3cret", 2
    a, b = prom["start"], prom["start"] + 6 * 3600
    monkeypatch.setenv("GPULEDGER_PROM_TOKEN", "s3cret")
    argv = ["collect", "prometheus", "--url", proxy.url, "--db", db_path, "--retries", "3", "--json"]
    try:
        assert main([*argv, "--since", utc(a).isoformat(), "--until", utc(b).isoformat()]) == 0
        monkeypatch.delenv("GPULEDGER_PROM_TOKEN")
        assert main([*argv, "--since", utc(a).isoformat(), "--until", utc(b).isoformat()]) == 1  # no token
    finally:
        proxy.close()
    # 12 rollups, the first 2 answered 429 then retried: 14 calls, and the server's pause was kept
    assert proxy.calls == 14 and proxy.arrivals[2] - proxy.arrivals[0] >= 2.0
    expected = expected_per_gpu(prom["raw"], a, b)
    got = ledger_per_gpu(db_path)
    assert sorted(got) == sorted(expected)
    for gpu, (util, hours) in expected.items():
        assert got[gpu][0] == pytest.approx(util, abs=1e-6), gpu
        assert got[gpu][1] == pytest.approx(hours, abs=1e-6), gpu


def test_cli_json_report_and_a_rejected_selector(prom, db_path, capsys):
    argv = ["collect", "prometheus", "--url", str(prom["url"]), "--db", db_path, "--json", "--step", "5m"]
    since = utc(prom["end"] - 3600).isoformat() + "Z"
    assert main([*argv, "--since", since, "--until", utc(prom["end"]).isoformat()]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["step_s"] == 300 and payload["samples"] == 14 * 12  # 14 GPUs x 12 five-minute steps
    assert main([*argv, "--since", since, "--match", 'Hostname=~"(unclosed"']) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Prometheus rejected the request" in err
    with writer(db_path) as con:  # the rejected run wrote nothing
        assert con.execute("SELECT count(*) FROM samples").fetchall() == [(14 * 12,)]


def test_a_chunk_that_runs_out_of_memory_is_pulled_again_in_halves(prom, db_path, monkeypatch):
    """A chunk whose staging runs the writer out of memory (points larger than chunk_span sized for) lands
    nothing; the pull goes on from it in half-length chunks, and the ledger is what one pull would give.
    The first two stagings fail as DuckDB does (OutOfMemoryException inside the chunk's transaction)."""
    import collectors.prometheus_pull as prom_pull

    real = prom_pull.stage_responses
    failures = []

    def stage(con, files, source, opts, ingest):  # type: ignore[no-untyped-def]
        if len(failures) < 2:
            failures.append(source)
            con.execute("CREATE TEMP TABLE stage_prom_points AS SELECT 1 AS half_staged")  # rolled back
            raise duckdb.OutOfMemoryException("Out of Memory Error: failed to allocate data of size 32.0 MiB")
        return real(con, files, source, opts, ingest)

    monkeypatch.setattr(prom_pull, "stage_responses", stage)
    opts = PullOptions(
        url=str(prom["url"]), since=utc(prom["start"]), until=utc(prom["end"]), chunk_s=2 * 86_400
    )
    report = pull(db_path, opts)
    # 2 days failed, then 1 day failed, then 12 h chunks to the end
    assert len(failures) == 2
    spans = [(c.end - c.start).total_seconds() for c in report.chunks]
    assert spans == [12 * 3600.0] * (DAYS * 2)
    assert report.chunks[0].start == utc(prom["start"]) and report.chunks[-1].end == utc(prom["end"])
    with writer(db_path) as con:
        assert con.execute("SELECT count(*) FROM ingests").fetchall()[0][0] == DAYS * 2
        assert con.execute("SELECT cursor_ts FROM collector_state").fetchall()[0][0] == utc(prom["end"])
    assert_matches_raw(db_path, prom["raw"])
