"""``gpuledger collect prometheus``: DCGM telemetry from Prometheus (or Thanos, Mimir) as per-step rollups.

Why pushdown: a 1,000-GPU fleet scraped every 15-30 s holds billions of raw samples a month. The server that
already stores them aggregates where the data lives, so every request asks PromQL for one value per GPU per
step over a window of one step (``/api/v1/query_range``) and only those rollups travel (see ROLLUPS:
``avg_over_time`` for rates and levels, ``max_over_time`` for peak memory and temperature, ``last_over_time``
for the energy counter, FB_USED + FB_FREE as the memory total). Each returned GPU-step becomes one
``samples`` row with ``ts`` = start of its window ``(t - step, t]`` and ``interval_s`` = step.

Labels → GPU, metric → column, blank sentinels → NULL: exactly as for a dcgm-exporter file, because the
rollups go through :func:`collectors.dcgm.stage_long` (``UUID``/``uuid``, ``UUID/GPU_I_ID`` for a MIG
instance, else ``Hostname:gpu``; ``modelName``; util from GPU_UTIL, else 100 × PROF_GR_ENGINE_ACTIVE on MIG).
Jobs: ``job_id`` = ``hpc_job``, else ``namespace/pod`` (``exported_*`` first), prefixed ``<cluster>/`` with
``--cluster`` so they match the Slurm collector's ids. When a GPU's job label changes inside a step
Prometheus returns two series for that step; they are merged, averages weighted by each series' sample count
(``count_over_time`` of GPU_UTIL), and the step goes to the job with more samples.

Bounded requests: Prometheus refuses more than 11,000 points per series, so the time range is cut into chunks
of at most 10,000 steps (``--chunk``, default one day); series per request are bounded by querying at most
``--hosts-per-query`` hosts at a time (plus one request for series without a ``Hostname``) and by ``--match``.

Incremental and resumable: each chunk is fetched over one keep-alive ``requests`` session (urllib3
``Retry`` on connection errors, 5xx and 429, honouring ``Retry-After``; TLS with the system CAs or
``--ca-file``; a bearer token from ``$GPULEDGER_PROM_TOKEN`` or ``--token-file``), then staged, landed through :func:`collectors.landing.land` and recorded (path
``prometheus://host/api/v1/query_range?start=…``; hash over the range and the answers) in ONE transaction
together with the cursor in ``collector_state`` (open, write, close: the dashboard keeps reading in
between). A failure keeps every committed chunk and the cursor at the last one; the next run resumes there.
docs/scale.md has the figures.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import hashlib
import json
import os
import re
import sys
import tempfile
import time
import urllib.parse
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import requests
import requests.adapters
import urllib3
from urllib3.util.retry import Retry

from collectors.base import (
    IngestOptions,
    IngestReport,
    next_ingest_id,
    quote,
    run_in_transaction,
)
from collectors.dcgm import stage_long
from collectors.landing import land_and_record
from collectors.validate import screen_live
from gpuledger.ledger.db import writer
from gpuledger.ledger.errors import CollectorError
from gpuledger.ledger.settings import Settings

FORMAT = "prometheus"
MAX_STEPS_PER_REQUEST = 10_000  # Prometheus caps query_range at 11,000 points per series
# Points one chunk (one transaction) stages at most, summed over the rollup queries (chunk_span shortens the
# chunk to fit): the staging holds each point with its series' labels, so a day of a 1,000-GPU fleet at
# 60 s (5.8 M points) ran the writer out of its default memory (gpuledger.ledger.db.WRITER_MEMORY_LIMIT).
MAX_CHUNK_POINTS = 1_500_000
BLANK_VALUE = 1e15  # DCGM reports "no value" as sentinels near 9.2e18; nothing real reaches 1e15


@dataclass(frozen=True)
class Rollup:
    """One PromQL query per chunk, named for the DCGM field its values stand for (what collectors.dcgm maps).

    ``expr`` has ``{sel}`` (label matchers) and ``{w}`` (the step window); ``combine`` says how two series of
    one GPU-step merge (``avg`` weighted by their sample counts, or ``max``).
    """

    metric: str
    expr: str
    combine: str = "avg"


ROLLUPS: tuple[Rollup, ...] = (
    Rollup("DCGM_FI_DEV_GPU_UTIL", "avg_over_time(DCGM_FI_DEV_GPU_UTIL{sel}[{w}])"),
    Rollup("count", "count_over_time(DCGM_FI_DEV_GPU_UTIL{sel}[{w}])"),  # merge weight, not stored
    Rollup("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{sel}[{w}])"),
    Rollup("DCGM_FI_DEV_MEM_COPY_UTIL", "avg_over_time(DCGM_FI_DEV_MEM_COPY_UTIL{sel}[{w}])"),
    Rollup("DCGM_FI_DEV_FB_USED", "max_over_time(DCGM_FI_DEV_FB_USED{sel}[{w}])", "max"),
    Rollup(
        "DCGM_FI_DEV_FB_TOTAL",
        "avg_over_time(DCGM_FI_DEV_FB_USED{sel}[{w}]) + avg_over_time(DCGM_FI_DEV_FB_FREE{sel}[{w}])",
    ),
    Rollup("DCGM_FI_DEV_POWER_USAGE", "avg_over_time(DCGM_FI_DEV_POWER_USAGE{sel}[{w}])"),
    Rollup(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "last_over_time(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{sel}[{w}])",
        "max",
    ),
    Rollup("DCGM_FI_DEV_GPU_TEMP", "max_over_time(DCGM_FI_DEV_GPU_TEMP{sel}[{w}])", "max"),
    Rollup("DCGM_FI_DEV_SM_CLOCK", "avg_over_time(DCGM_FI_DEV_SM_CLOCK{sel}[{w}])"),
    Rollup("DCGM_FI_PROF_SM_ACTIVE", "avg_over_time(DCGM_FI_PROF_SM_ACTIVE{sel}[{w}])"),
    Rollup("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "avg_over_time(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{sel}[{w}])"),
)
METRIC_NAMES = tuple(sorted({m for r in ROLLUPS for m in re.findall(r"DCGM_FI_[A-Z_]+", r.expr)}))
# Labels that name a workload, not a GPU: a change of job inside a step splits a GPU's series in two.
JOB_LABELS = (
    "hpc_job",
    "pod",
    "namespace",
    "container",
    "exported_pod",
    "exported_namespace",
    "exported_container",
    "pod_name",
    "pod_namespace",
    "container_name",
)


@dataclass(frozen=True)
class PullOptions:
    url: str  # base URL of the Prometheus HTTP API (a Mimir/Thanos prefix such as /prometheus included)
    step_s: int = 60
    since: dt.datetime | None = None  # naive UTC; None: resume at the cursor, else 24 h ago
    until: dt.datetime | None = None  # naive UTC; None: now minus one step (windows still filling)
    match: str = ""  # extra label matchers, e.g. 'cluster="a",Hostname=~"gpu-.*"'
    chunk_s: int = 86_400  # time range per transaction (capped at 10,000 steps)
    hosts_per_query: int = 64
    retries: int = 5
    backoff_s: float = 1.0
    timeout_s: float = 120.0
    headers: tuple[tuple[str, str], ...] = ()  # e.g. (("X-Scope-OrgID", "tenant"),) for Mimir
    token: str | None = field(default=None, repr=False)  # bearer token (read_token: env or file)
    ca_file: str | None = None  # PEM bundle to verify the server's TLS certificate with
    insecure: bool = False  # skip TLS verification (a self-signed test server)
    job_prefix: str | None = None  # prepended to job ids; None: "<cluster>/" (the sacct ids) or nothing
    cluster: str | None = None
    rollups: tuple[str, ...] = ()  # DCGM fields of ROLLUPS to pull (empty: all); the fleet rollup of --jobs


@dataclass
class ChunkReport:
    start: dt.datetime  # first window start (naive UTC), inclusive
    end: dt.datetime  # last window end, exclusive; the cursor after this chunk
    ingest_id: int | None
    rows: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    points: int = 0  # rolled-up points received (series × steps, all queries)
    bytes: int = 0
    fetch_s: float = 0.0  # of ``seconds``: waiting for Prometheus and saving its answers
    seconds: float = 0.0
    already: bool = False

    def as_dict(self) -> dict[str, object]:
        return {
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "ingest_id": self.ingest_id,
            "rows": self.rows,
            "skipped": self.skipped,
            "requests": self.requests,
            "points": self.points,
            "bytes": self.bytes,
            "fetch_s": round(self.fetch_s, 3),
            "seconds": round(self.seconds, 3),
            "already_ingested": self.already,
        }


@dataclass
class PullReport:
    collector: str
    step_s: int
    cursor: dt.datetime | None
    chunks: list[ChunkReport] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "collector": self.collector,
            "step_s": self.step_s,
            "cursor": self.cursor.isoformat() if self.cursor else None,
            "samples": sum(c.rows.get("samples", 0) for c in self.chunks),
            "chunks": [c.as_dict() for c in self.chunks],
        }


# ---------------------------------------------------------------------------------------------- HTTP

TOKEN_ENV = "GPULEDGER_PROM_TOKEN"  # a bearer token from the environment (never from the command line)
RETRY_AFTER_MAX_S = 300.0  # a server asking for a longer pause is retried after this many seconds
RETRY_STATUSES = (429, 500, 502, 503, 504)


class _Retry(Retry):
    """urllib3's Retry with the server's ``Retry-After`` honoured but capped at :data:`RETRY_AFTER_MAX_S`,
    and a TLS failure (a certificate that does not verify) final at once: retrying cannot fix it."""

    def increment(self, method=None, url=None, response=None, error=None, _pool=None, _stacktrace=None):  # type: ignore[no-untyped-def]
        if isinstance(error, urllib3.exceptions.SSLError):
            raise urllib3.exceptions.MaxRetryError(_pool, url, error) from error  # type: ignore[arg-type]
        return super().increment(method, url, response, error, _pool, _stacktrace)

    def get_retry_after(self, response):  # type: ignore[no-untyped-def]
        seconds = super().get_retry_after(response)
        return None if seconds is None else min(float(seconds), RETRY_AFTER_MAX_S)


class PromClient:
    """The Prometheus HTTP API over one keep-alive ``requests`` session, retried by urllib3's ``Retry``.

    Retries (``opts.retries`` per request): connection errors, read timeouts, HTTP 429/5xx, for GET and
    POST alike (every call here is a read). A 429 or 503 with ``Retry-After`` waits what the server asks
    (capped at :data:`RETRY_AFTER_MAX_S`); otherwise urllib3's exponential backoff (the first retry at once,
    then ``backoff_s`` × 2, 4, 8 … s, capped at 60 s, plus up to ``backoff_s`` of jitter). Other 4xx (a bad
    selector, a bad token) fail at once with Prometheus' own error text. TLS: the system's CAs, or
    ``opts.ca_file``, or none with ``opts.insecure``. ``opts.token`` goes out as ``Authorization: Bearer``.
    """

    def __init__(self, opts: PullOptions) -> None:
        self.base = opts.url.rstrip("/")
        self.opts = opts
        self.requests = 0
        self.bytes = 0  # answer bodies, decoded
        self.wire_bytes = 0  # as received (Prometheus gzips its answers for a client that accepts it)
        self.retried = 0
        retry = _Retry(
            total=opts.retries,
            status_forcelist=RETRY_STATUSES,
            allowed_methods=frozenset({"GET", "POST"}),
            backoff_factor=opts.backoff_s,
            backoff_max=60.0,
            backoff_jitter=opts.backoff_s,
            respect_retry_after_header=True,
            raise_on_status=False,  # the last answer comes back: its error text goes into the message
        )
        self.session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(max_retries=retry, pool_connections=1, pool_maxsize=4)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.headers.update({"Accept": "application/json", "User-Agent": "gpuledger"})
        if opts.token:
            self.session.headers["Authorization"] = f"Bearer {opts.token}"
        self.session.headers.update(dict(opts.headers))
        # per request, not on the session: requests lets $REQUESTS_CA_BUNDLE override a session's verify
        self.verify: bool | str = False if opts.insecure else (opts.ca_file or True)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> PromClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def post(self, path: str, params: list[tuple[str, str]], *, method: str = "POST") -> bytes:
        """POST (queries: long selectors fit) or GET (the label API) ``params``; the body as bytes."""
        url = self.base + path
        kwargs: dict[str, object] = {"data": params} if method == "POST" else {"params": params}
        try:
            with warnings.catch_warnings():
                if self.opts.insecure:  # said once by the CLI, not once per request
                    warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
                response = self.session.request(
                    method, url, timeout=self.opts.timeout_s, verify=self.verify, **kwargs
                )
        except requests.exceptions.SSLError as exc:
            raise CollectorError(
                f"{url}: TLS failed ({_root_cause(exc)}); "
                "give the server's CA with --ca-file, or --insecure to skip the check"
            ) from None
        except requests.exceptions.RequestException as exc:
            raise CollectorError(
                f"{url}: no answer after {_tries(self.opts.retries + 1)} ({_root_cause(exc)}); "
                "committed chunks are kept, run the same command again to resume"
            ) from None
        history = getattr(getattr(response.raw, "retries", None), "history", ()) or ()
        self.retried += len(history)
        if response.status_code in RETRY_STATUSES:
            raise CollectorError(
                f"{url}: no answer after {_tries(self.opts.retries + 1)} (HTTP {response.status_code}: "
                f"{_api_error(response)}); committed chunks are kept, run the same command again to resume"
            )
        if response.status_code >= 400:
            hint = (
                " (check the token: GPULEDGER_PROM_TOKEN or --token-file)"
                if response.status_code in (401, 403)
                else ""
            )
            raise CollectorError(
                f"{url}: Prometheus rejected the request: HTTP {response.status_code}: {_api_error(response)}{hint}"
            )
        body = response.content
        self.requests += 1
        self.bytes += len(body)
        self.wire_bytes += int(response.raw.tell() or len(body))  # compressed, when the server gzips
        return body

    def label_values(self, label: str, match: str, start: float, end: float) -> list[str]:
        body = self.post(
            f"/api/v1/label/{label}/values",
            [("match[]", match), ("start", f"{start}"), ("end", f"{end}")],
            method="GET",
        )
        return sorted(v for v in json.loads(body).get("data") or [] if v)


def _api_error(response: requests.Response) -> str:
    """Prometheus' ``error`` field of a JSON answer, else the HTTP reason."""
    try:
        return str(response.json().get("error") or response.reason)
    except (ValueError, AttributeError):
        return str(response.reason or response.status_code)


def _tries(n: int) -> str:
    return f"{n} try" if n == 1 else f"{n} tries"


def _root_cause(exc: BaseException) -> str:
    """The innermost reason of a requests/urllib3 error chain (MaxRetryError wraps the real one)."""
    seen = exc
    while True:
        inner = getattr(seen, "reason", None) or (seen.args[0] if seen.args else None)
        if isinstance(inner, BaseException) and inner is not seen:
            seen = inner
            continue
        return str(seen)


def read_token(token_file: str | None) -> str | None:
    """The bearer token: the first line of ``token_file`` if given, else ``$GPULEDGER_PROM_TOKEN``, else None.

    Never a command-line value: a token there is visible to every user in ``ps``.
    """
    if token_file:
        try:
            text = Path(token_file).read_text().strip()
        except OSError as exc:
            raise CollectorError(f"--token-file {token_file}: {exc.strerror or exc}") from None
        if not text:
            raise CollectorError(f"--token-file {token_file}: the file is empty")
        return text.splitlines()[0].strip()
    return os.environ.get(TOKEN_ENV, "").strip() or None


# ------------------------------------------------------------------------------------------- planning


def parse_duration(text: str) -> int:
    """``60``, ``60s``, ``5m``, ``1h``, ``7d`` → seconds (a positive integer)."""
    m = re.fullmatch(r"\s*(\d+)\s*([smhdw]?)\s*", text)
    if not m or int(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"not a duration (like 60s, 5m, 1h, 7d): {text!r}")
    return int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}[m.group(2)]


def parse_time(text: str, *, now: dt.datetime | None = None) -> dt.datetime:
    """ISO date/time (UTC unless it has an offset), epoch seconds, or an age like ``6h``/``7d`` → naive UTC."""
    now = now or utcnow()
    if re.fullmatch(r"\d+[smhdw]", text.strip()):
        return now - dt.timedelta(seconds=parse_duration(text))
    try:
        return dt.datetime.fromtimestamp(float(text), dt.UTC).replace(tzinfo=None)
    except ValueError:
        pass
    try:
        value = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time (ISO 8601, epoch seconds, or an age like 6h): {text!r}"
        ) from None
    return value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def _epoch(ts: dt.datetime) -> int:
    return int(ts.replace(tzinfo=dt.UTC).timestamp())


def _from_epoch(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).replace(tzinfo=None)


def plan_chunks(start: int, end: int, step_s: int, chunk_s: int) -> list[tuple[int, int]]:
    """Cut ``[start, end)`` (epoch seconds, step-aligned) into ``(a, b)`` chunks of whole steps.

    A chunk's ``query_range`` evaluates ``t = a + step … b``; each window ``(t - step, t]`` becomes a sample at
    ``t - step``, so the chunk covers ``[a, b)``. No chunk has more than 10,000 steps.
    """
    span = max(step_s, min(chunk_s, MAX_STEPS_PER_REQUEST * step_s) // step_s * step_s)
    return [(a, min(a + span, end)) for a in range(start, end, span)]


def chunk_span(opts: PullOptions, gpus: int, metrics: set[str] | None = None) -> int:
    """Seconds per chunk: ``opts.chunk_s``, shortened so that one chunk stages at most MAX_CHUNK_POINTS
    points (GPUs × steps × the rollup queries with data: those whose DCGM fields are all in ``metrics``,
    every one when None); whole steps, at least one."""
    queries = [
        r
        for r in rollups_of(opts)
        if metrics is None or set(re.findall(r"DCGM_FI_[A-Z_]+", r.expr)) <= metrics
    ]
    steps = max(1, MAX_CHUNK_POINTS // max(1, gpus * max(1, len(queries))))
    return max(opts.step_s, min(opts.chunk_s, steps * opts.step_s) // opts.step_s * opts.step_s)


def fleet_size(
    client: PromClient, opts: PullOptions, hosts: list[str], start: int, end: int
) -> tuple[int, set[str]]:
    """What the pull will see, for sizing its chunks: GPUs (the distinct GPU UUIDs on the fields it reads over
    the range, under dcgm-exporter's ``UUID`` label or a relabelled ``uuid``, as collectors.dcgm reads them;
    else 8 a host, an HGX/DGX node) and the DCGM fields present. A MIG instance shares its card's UUID, so a
    MIG fleet is sized low: the chunk that then runs out of memory is pulled again in halves."""
    names = selector(f'__name__=~"{"|".join(METRIC_NAMES)}"', opts.match)
    present = set(client.label_values("__name__", names, start, end + opts.step_s))
    uuids = {
        u for label in ("UUID", "uuid") for u in client.label_values(label, names, start, end + opts.step_s)
    }
    return len(uuids) or 8 * len(hosts) or 1, present


def selector(*matchers: str) -> str:
    """``{a,b}`` from label matcher lists (empty parts dropped; braces in the input tolerated)."""
    parts = [m.strip().strip("{}").strip().strip(",") for m in matchers]
    parts = [p for p in parts if p]
    return "{" + ",".join(parts) + "}" if parts else ""


def host_batches(hosts: list[str], per_query: int) -> list[str]:
    """Host matchers that partition every series: regex batches of known hosts, then ``Hostname=""``.

    One batch without a matcher when the fleet is small enough for a single request.
    """
    if len(hosts) <= per_query:
        return [""]
    batches = []
    for i in range(0, len(hosts), per_query):
        alternatives = "|".join(re.escape(h) for h in hosts[i : i + per_query])
        batches.append('Hostname=~"' + alternatives.replace("\\", "\\\\").replace('"', '\\"') + '"')
    batches.append('Hostname=""')
    return batches


def collector_key(opts: PullOptions) -> str:
    key = f"prometheus:{opts.url.rstrip('/')}" + (f" {selector(opts.match)}" if opts.match.strip() else "")
    # a restricted rollup set (the fleet rollup of --jobs) keeps its own cursor
    return key + (f" [{','.join(opts.rollups)} @{opts.step_s}s]" if opts.rollups else "")


def rollups_of(opts: PullOptions) -> tuple[Rollup, ...]:
    """The rollups this pull runs: all, or those named in ``opts.rollups`` (plus the merge weight)."""
    if not opts.rollups:
        return ROLLUPS
    names = {*opts.rollups, "count"}
    unknown = names - {r.metric for r in ROLLUPS}
    if unknown:
        raise CollectorError(
            f"unknown rollup(s) {', '.join(sorted(unknown))}: choose from the DCGM fields of ROLLUPS"
        )
    return tuple(r for r in ROLLUPS if r.metric in names)


# -------------------------------------------------------------------------------------------- staging


def stage_responses(
    con: duckdb.DuckDBPyConnection, files: list[Path], source: str, opts: PullOptions, ingest: IngestOptions
) -> dict[str, int]:
    """Create ``stage_samples`` and ``stage_gpus`` from saved ``query_range`` responses (one file per query).

    Set-based: DuckDB reads the JSON (one row per returned point), merges the series of one GPU-step that a
    job change split (weighted by sample counts; the step goes to the job with more samples), and hands the
    result as ``prom_long`` to :func:`collectors.dcgm.stage_long`, so labels map to GPUs exactly as for a
    dcgm-exporter file. ``ts`` = window start, ``interval_s`` = step. Returns values skipped, by reason.
    """
    step = int(opts.step_s)
    names = ", ".join(quote(str(f)) for f in files)
    prefix = quote(job_prefix(opts))
    # read_json buffers up to maximum_object_size per file: size it to the largest response, not 2 GB, so a
    # writer under its memory limit (gpuledger.ledger.db.WRITER_MEMORY_LIMIT) can read it
    largest = max((f.stat().st_size for f in files), default=0) + 1024
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE stage_prom_points AS
        SELECT metric, key, t,
               CASE WHEN isnan(x) OR isinf(x) OR abs(x) >= {BLANK_VALUE} THEN NULL ELSE x END AS val
        FROM (
            SELECT regexp_extract(filename, '([A-Za-z_]+)-[0-9]+\\.json$', 1) AS metric,
                   r.metric::VARCHAR AS key, v[1]::DOUBLE AS t, TRY_CAST(v[2] AS DOUBLE) AS x
            FROM (SELECT filename, unnest(data.result) AS r
                  FROM read_json([{names}], filename = true, maximum_object_size = {largest},
                       columns = {{status: 'VARCHAR',
                                   data: 'STRUCT(resultType VARCHAR, result STRUCT(metric JSON, "values" VARCHAR[][])[])'}})),
                 unnest(r."values") AS p(v))
        """
    )
    jobs = ", ".join(quote(j) for j in JOB_LABELS)

    def label(*names: str) -> str:
        return "coalesce(" + ", ".join(f"nullif(m[{quote(n)}], '')" for n in names) + ")"

    # one row per distinct label set: the GPU's labels without the workload ones, and the job they name
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE stage_prom_keys AS
        SELECT key, gpu_labels, gpu_labels::VARCHAR AS gkey,
               CASE WHEN {label("hpc_job")} IS NOT NULL THEN {prefix} || {label("hpc_job")}
                    WHEN {label("exported_pod", "pod")} IS NOT NULL
                        THEN {prefix} || coalesce({label("exported_namespace", "namespace")} || '/', '')
                             || {label("exported_pod", "pod")}
               END AS job
        FROM (SELECT key, m, map_from_entries(list_filter(map_entries(m), lambda e: e.key NOT IN ({jobs}))) AS gpu_labels
              FROM (SELECT key, CAST(key::JSON AS MAP(VARCHAR, VARCHAR)) AS m
                    FROM (SELECT DISTINCT key FROM stage_prom_points)))
        """
    )
    maxed = ", ".join(quote(r.metric) for r in ROLLUPS if r.combine == "max")
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE stage_prom_merged AS
        WITH weighted AS (
            SELECT p.metric, p.t, p.val, k.gkey, k.job, coalesce(c.val, 1) AS w
            FROM stage_prom_points p JOIN stage_prom_keys k USING (key)
            LEFT JOIN (SELECT key, t, val FROM stage_prom_points WHERE metric = 'count') c USING (key, t)
            WHERE p.metric <> 'count'
        ),
        steps AS (
            SELECT gkey, t, nullif(arg_max(coalesce(job, ''), (w, coalesce(job, ''))), '') AS job
            FROM weighted GROUP BY gkey, t
        ),
        merged AS (
            SELECT gkey, t, metric,
                   CASE WHEN metric IN ({maxed}) THEN max(val)
                        ELSE sum(val * w) FILTER (WHERE val IS NOT NULL) / sum(w) FILTER (WHERE val IS NOT NULL)
                   END AS value
            FROM weighted GROUP BY gkey, t, metric
        )
        SELECT m.*, s.job FROM merged m JOIN steps s USING (gkey, t)
        """
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE prom_long AS
        WITH labelsets AS (  -- built once per GPU and job, not per point
            SELECT gkey, coalesce(job, '') AS jkey,
                   CASE WHEN job IS NULL THEN gpu_labels ELSE map_concat(gpu_labels, MAP {{'hpc_job': job}}) END
                       AS labels
            FROM (SELECT DISTINCT gkey, job FROM stage_prom_merged)
            JOIN (SELECT DISTINCT gkey, gpu_labels FROM stage_prom_keys) USING (gkey)
        )
        SELECT row_number() OVER () AS line_no, m.metric, l.labels,
               make_timestamp(CAST((m.t - {step}) * 1000000 AS BIGINT)) AS ts, m.value
        FROM stage_prom_merged m JOIN labelsets l ON l.gkey = m.gkey AND l.jkey = coalesce(m.job, '')
        """
    )
    if not con.execute("SELECT count(*) FROM prom_long").fetchall()[0][0]:
        con.execute("DROP TABLE temp.prom_long")
        return {}
    notes = stage_long(con, Path(source), ingest, job_prefix="")  # ids are final: prefixed above
    con.execute("ALTER TABLE stage_samples ADD COLUMN interval_s FLOAT")
    con.execute(f"UPDATE stage_samples SET interval_s = {float(step)}")
    return notes


def job_prefix(opts: PullOptions) -> str:
    """``--job-prefix``, else ``<cluster>/`` so hpc_job ids match the Slurm collector's ``<cluster>/<JobIDRaw>``."""
    if opts.job_prefix is not None:
        return opts.job_prefix
    return f"{opts.cluster}/" if opts.cluster else ""


def _drop_intermediates(con: duckdb.DuckDBPyConnection) -> None:
    for table in ("stage_prom_points", "stage_prom_keys", "stage_prom_merged"):
        con.execute(f"DROP TABLE IF EXISTS temp.{table}")


# ---------------------------------------------------------------------------------------------- pull


def read_cursor(db: str | None, key: str) -> dt.datetime | None:
    with writer(db) as con:
        rows = con.execute("SELECT cursor_ts FROM collector_state WHERE collector = ?", [key]).fetchall()
    return rows[0][0] if rows else None


def fetch_chunk(
    client: PromClient, opts: PullOptions, batches: list[str], a: int, b: int, folder: Path
) -> list[Path]:
    """Run every rollup for every host batch over ``[a, b)``; save each response body as a file."""
    window = f"{opts.step_s * 1000 - 1}ms"  # (t - step, t]: a scrape exactly on a boundary counts once
    files = []
    for i, batch in enumerate(batches):
        sel = selector(opts.match, batch)
        for rollup in rollups_of(opts):
            query = rollup.expr.replace("{sel}", sel).replace("{w}", window)
            body = client.post(
                "/api/v1/query_range",
                [
                    ("query", query),
                    ("start", str(a + opts.step_s)),
                    ("end", str(b)),
                    ("step", str(opts.step_s)),
                ],
            )
            path = folder / f"{rollup.metric}-{i}.json"
            path.write_bytes(body)
            files.append(path)
    return files


def pull(
    db: str | None,
    opts: PullOptions,
    *,
    settings: Settings | None = None,
    now: dt.datetime | None = None,
    progress: bool = False,
) -> PullReport:
    """Collect ``[since, until)`` (or from the cursor on) into the ledger at ``db``, one transaction per chunk.

    Returns what each chunk brought; raises :class:`CollectorError` when Prometheus stays unreachable (the
    chunks before stay committed and the cursor with them).
    """
    step = opts.step_s
    key = collector_key(opts)
    now = now or utcnow()
    cursor = read_cursor(db, key)
    if opts.since is not None:
        first = opts.since
    elif cursor is not None:
        first = cursor
    else:
        first = now - dt.timedelta(days=1)
    last = opts.until or now - dt.timedelta(seconds=step)
    start = -(-_epoch(first) // step) * step
    end = _epoch(last) // step * step
    report = PullReport(key, step, cursor)
    if end <= start:
        return report
    with PromClient(opts) as client:  # one keep-alive session for the whole pull
        names = "|".join(METRIC_NAMES)
        hosts = client.label_values(
            "Hostname", selector(f'__name__=~"{names}"', opts.match), start, end + step
        )
        batches = host_batches(hosts, opts.hosts_per_query)
        ingest_opts = IngestOptions.from_settings(settings or Settings(), cluster=opts.cluster)
        span = chunk_span(opts, *fleet_size(client, opts, hosts, start, end))
        todo = collections.deque(plan_chunks(start, end, step, span))
        while todo:
            a, b = todo.popleft()
            began = time.perf_counter()
            requests_before, bytes_before = client.requests, client.bytes
            chunk = ChunkReport(_from_epoch(a), _from_epoch(b), None)
            with tempfile.TemporaryDirectory(prefix="gpuledger-prom-") as tmp:
                files = fetch_chunk(client, opts, batches, a, b, Path(tmp))
                chunk.fetch_s = time.perf_counter() - began
                chunk.requests = client.requests - requests_before
                chunk.bytes = client.bytes - bytes_before
                try:
                    commit_chunk(db, opts, chunk, files, ingest_opts)
                except duckdb.OutOfMemoryException:
                    # nothing of it landed (rolled back): its points were larger than sized for (more
                    # labels, more metrics); the rest of the pull again, from this chunk on, in halves
                    if b - a <= step:
                        raise
                    span = max(step, (b - a) // 2 // step * step)
                    todo = collections.deque(plan_chunks(a, end, step, span))
                    continue
            chunk.seconds = time.perf_counter() - began
            report.chunks.append(chunk)
            report.cursor = max(report.cursor or chunk.end, chunk.end)
            if progress:
                print(describe_chunk(chunk), file=sys.stderr, flush=True)
    return report


def commit_chunk(
    db: str | None, opts: PullOptions, chunk: ChunkReport, files: list[Path], ingest_opts: IngestOptions
) -> None:
    """Stage, land and record one fetched chunk and move the cursor to its end, in one transaction.

    The chunk's hash covers the collector, its range and every response body: fetching the same range again
    with the same answers is a no-op (only the cursor is written).
    """
    key, step = collector_key(opts), opts.step_s
    digest = hashlib.sha256(f"{key}|{chunk.start}|{chunk.end}|{step}".encode())
    for f in files:
        digest.update(f.read_bytes())
    sha = digest.hexdigest()
    split = urllib.parse.urlsplit(opts.url)
    path = (
        f"prometheus://{split.netloc}{split.path.rstrip('/')}/api/v1/query_range"
        f"?start={chunk.start.isoformat()}Z&end={chunk.end.isoformat()}Z&step={step}s"
        + (f"&match={urllib.parse.quote(selector(opts.match))}" if opts.match.strip() else "")
    )
    with writer(db) as con:

        def work() -> IngestReport:
            seen = con.execute(
                "SELECT ingest_id FROM ingests WHERE content_sha256 = ? LIMIT 1", [sha]
            ).fetchall()
            if seen:
                chunk.ingest_id, chunk.already = int(seen[0][0]), True
            else:
                chunk.skipped = stage_responses(con, files, path, opts, ingest_opts)
                chunk.points = int(con.execute("SELECT count(*) FROM stage_prom_points").fetchall()[0][0])
                _drop_intermediates(con)
                staged = con.execute(
                    "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = 'stage_samples'"
                ).fetchall()[0][0]
                if staged:
                    chunk.ingest_id = next_ingest_id(con)
                    chunk.skipped.update(screen_live(con, chunk.ingest_id, path))
                    chunk.rows = land_and_record(
                        con,
                        chunk.ingest_id,
                        ingest_opts,
                        source=path,
                        source_key=key,
                        sha256=sha,
                        fmt=FORMAT,
                        skipped=chunk.skipped,
                    )
            con.execute(
                """INSERT INTO collector_state VALUES (?, ?, ?, ?)
                   ON CONFLICT (collector) DO UPDATE SET
                       cursor_ts = greatest(collector_state.cursor_ts, excluded.cursor_ts),
                       updated_at = excluded.updated_at, detail_json = excluded.detail_json""",
                [key, chunk.end, utcnow(), json.dumps({"step_s": step, "url": opts.url})],
            )
            return IngestReport(key, FORMAT, chunk.ingest_id)

        run_in_transaction(con, work)


def describe_chunk(chunk: ChunkReport) -> str:
    if chunk.already:
        what = f"already ingested (ingest #{chunk.ingest_id})"
    else:
        what = ", ".join(f"{n:,} {t}" for t, n in chunk.rows.items() if n) or "no data"
    return (
        f"{chunk.start:%Y-%m-%d %H:%M} → {chunk.end:%Y-%m-%d %H:%M} UTC: {what} "
        f"({chunk.requests} requests, {chunk.points:,} points, {chunk.bytes / 1e6:.1f} MB, {chunk.seconds:.1f} s)"
    )
