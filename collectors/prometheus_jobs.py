"""``gpuledger collect prometheus --jobs``: per-job GPU summaries computed by Prometheus, not from raw points.

Why: a 1,000-GPU fleet scraped every 30 s holds 20 M utilization samples a week. What the ledger needs per
job (mean/max/quantiles of utilization, memory, power, SM/tensor activity, and the time inside idle
stretches) is a handful of numbers per job and GPU, and PromQL computes them where the samples live, as
Princeton's jobstats does (one instant query per job window: ``avg_over_time(…[span])``, ``max_over_time``,
``quantile_over_time``). Only those numbers travel. docs/scale.md has the figures.

Three kinds of request, all on the keep-alive client of :mod:`collectors.prometheus_pull`:

1. **Which jobs, when** (one ``query_range`` at a 1 h step): ``count by (hpc_job)(count_over_time(U[1h]))``
   over the range gives every job id seen and the hours it has samples in. A job's window is
   ``(first hour - 1 h, last hour]``.
2. **Per-job summaries** (instant queries, see :data:`SUMMARY`): jobs whose windows end at the same hour
   share one query per figure, ``{hpc_job=~"a|b|…"}`` over the longest window of the group, evaluated at
   that hour. The selector picks each job's own series, so a window wider than the job changes nothing:
   every figure is over exactly the job's samples on each GPU. ``util_mean_pct`` = ``sum_over_time /
   count_over_time`` (sample-weighted, the same mean as ingesting the raw samples).
3. **Idle stretches** (two ``query_range`` calls per chunk at the scrape step ``s``): ``F(t)`` = the window
   ``(t - M, t]`` (M = ``thresholds.idle_min_minutes``) holds the full count of samples (M / s) and all are
   at or under ``thresholds.idle_util_pct`` (``max_over_time``). A stretch of at least M is exactly the
   union of those windows, so only its edges are asked for: ``F unless F offset s`` (a stretch's first
   flagged step ``t1``) and ``F offset s unless F`` (one step after its last, ``t2``); its length is
   ``t2 - t1 + M``. Two points per stretch cross the wire, whatever its length. A stretch under way at
   the range's start or end is cut there (and continued by the next run).

4. **The fleet rollup** the pages need (the heatmap is hourly): the ordinary pull
   (:func:`collectors.prometheus_pull.pull`) at a 1 h step with only :data:`FLEET_ROLLUPS`, landing one
   ``samples`` row per GPU-hour (``interval_s`` 3600) under its own cursor.

Rows land in ``job_summaries`` (one per job, GPU and window; docs/schema.md) in one transaction with an
``ingests`` row (format ``prometheus_jobs``) and the cursor ``prometheus-jobs:<url>`` in ``collector_state``.
Accuracy: sample counts become GPU-hours at the scrape interval (``--scrape``, else measured in the last
hour of the range, :func:`measure_scrape_s`); idle stretches are exact when scrapes
are regular, and off by at most one scrape interval per stretch edge otherwise. A job that crosses the
range's edge gets one row per part (sums and counts add; quantiles are per part).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
import sys
import time
import urllib.parse
from collections import defaultdict
from dataclasses import dataclass, field, replace

import pyarrow as pa

from collectors.base import IngestReport, next_ingest_id, record_ingest, run_in_transaction
from collectors.prometheus_pull import (
    BLANK_VALUE,
    MAX_STEPS_PER_REQUEST,
    PromClient,
    PullOptions,
    _epoch,
    _from_epoch,
    job_prefix,
    pull,
    read_cursor,
    selector,
    utcnow,
)
from gpuledger.ledger.db import writer
from gpuledger.ledger.errors import CollectorError
from gpuledger.ledger.settings import Settings

FORMAT = "prometheus_jobs"
UTIL = "DCGM_FI_DEV_GPU_UTIL"
HOUR = 3600
MAX_JOBS_PER_QUERY = 200  # ids per regex: keeps a POSTed query well under any proxy's body limit

# figure → PromQL over one job window; {sel} = label matchers, {w} = the window. None-safe: a metric the
# exporter does not send returns no series and the figure is NULL.
SUMMARY: dict[str, str] = {
    "samples": f"count_over_time({UTIL}{{sel}}[{{w}}])",
    "util_sum": f"sum_over_time({UTIL}{{sel}}[{{w}}])",
    "util_max_pct": f"max_over_time({UTIL}{{sel}}[{{w}}])",
    "util_p50_pct": f"quantile_over_time(0.5, {UTIL}{{sel}}[{{w}}])",
    "util_p90_pct": f"quantile_over_time(0.9, {UTIL}{{sel}}[{{w}}])",
    "mem_used_mean_mib": "avg_over_time(DCGM_FI_DEV_FB_USED{sel}[{w}])",
    "mem_used_max_mib": "max_over_time(DCGM_FI_DEV_FB_USED{sel}[{w}])",
    "mem_total_mib": "avg_over_time(DCGM_FI_DEV_FB_USED{sel}[{w}]) + avg_over_time(DCGM_FI_DEV_FB_FREE{sel}[{w}])",
    "power_mean_w": "avg_over_time(DCGM_FI_DEV_POWER_USAGE{sel}[{w}])",
    "power_max_w": "max_over_time(DCGM_FI_DEV_POWER_USAGE{sel}[{w}])",
    "sm_active_pct": "100 * avg_over_time(DCGM_FI_PROF_SM_ACTIVE{sel}[{w}])",
    "tensor_active_pct": "100 * avg_over_time(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{sel}[{w}])",
}
# the hourly fleet rollup (the heatmap and fleet views): utilization and its sample count, one GPU-hour a row
FLEET_ROLLUPS = ("DCGM_FI_DEV_GPU_UTIL",)
# labels that name a workload, not a GPU (collectors.prometheus_pull.JOB_LABELS, the ones we key on)
WORKLOAD_LABELS = ("hpc_job", "pod", "namespace", "container", "exported_pod", "exported_namespace")


@dataclass
class JobsReport:
    collector: str
    start: dt.datetime
    end: dt.datetime
    scrape_s: float
    jobs: int = 0
    rows: int = 0
    stretches: int = 0
    requests: int = 0
    points: int = 0  # values received, all queries (series × steps for ranges, series for instants)
    points_by_kind: dict[str, int] = field(default_factory=dict)
    seconds_by_kind: dict[str, float] = field(default_factory=dict)  # waiting for Prometheus, by kind
    fleet_samples: int = 0  # hourly fleet-rollup rows landed in samples
    fleet_points: int = 0
    bytes: int = 0
    seconds: float = 0.0
    ingest_id: int | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "collector": self.collector,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "scrape_s": self.scrape_s,
            "jobs": self.jobs,
            "job_summaries": self.rows,
            "idle_stretches": self.stretches,
            "requests": self.requests,
            "points": self.points,
            "points_by_kind": self.points_by_kind,
            "seconds_by_kind": self.seconds_by_kind,
            "fleet_samples": self.fleet_samples,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "ingest_id": self.ingest_id,
        }


def collector_key(opts: PullOptions) -> str:
    return f"prometheus-jobs:{opts.url.rstrip('/')}" + (
        f" {selector(opts.match)}" if opts.match.strip() else ""
    )


def gpu_key(labels: dict[str, str]) -> tuple[str, str | None]:
    """``(gpu_id, host)`` from a series' labels, as collectors.dcgm maps them: UUID (``/GPU_I_ID`` for a MIG
    instance), else ``Hostname:gpu``."""
    uuid = labels.get("UUID") or labels.get("uuid")
    host = labels.get("Hostname") or None
    if uuid:
        return (f"{uuid}/{labels['GPU_I_ID']}" if labels.get("GPU_I_ID") else uuid), host
    return f"{host or '?'}:{labels.get('gpu', '?')}", host


def _value(text: str) -> float | None:
    x = float(text)
    return None if math.isnan(x) or math.isinf(x) or abs(x) >= BLANK_VALUE else x


def _ms(seconds: float) -> str:
    """A PromQL range of ``(t - seconds, t]``: a sample exactly on the left edge is left out (Prometheus 2.x
    ranges are closed at both ends)."""
    return f"{int(seconds * 1000) - 1}ms"


class _Api:
    """Queries with their points counted by kind (what bench/pushdown.py reports)."""

    def __init__(self, client: PromClient) -> None:
        self.client = client
        self.points: dict[str, int] = defaultdict(int)
        self.seconds: dict[str, float] = defaultdict(float)  # waiting for the answers, by kind

    def instant(self, kind: str, query: str, at: int) -> list[dict]:
        began = time.perf_counter()
        body = self.client.post("/api/v1/query", [("query", query), ("time", str(at))])
        self.seconds[kind] += time.perf_counter() - began
        result = json.loads(body)["data"]["result"]
        self.points[kind] += len(result)
        return result

    def range(self, kind: str, query: str, start: int, end: int, step: int) -> list[dict]:
        out: list[dict] = []
        span = MAX_STEPS_PER_REQUEST * step
        for a in range(start, end + 1, span):
            b = min(a + span - step, end)
            began = time.perf_counter()
            body = self.client.post(
                "/api/v1/query_range",
                [("query", query), ("start", str(a)), ("end", str(b)), ("step", str(step))],
            )
            self.seconds[kind] += time.perf_counter() - began
            result = json.loads(body)["data"]["result"]
            self.points[kind] += sum(len(r["values"]) for r in result)
            out.extend(result)
        return out


def measure_scrape_s(api: _Api, sel: str, at: int) -> float:
    """The scrape interval: per GPU, the time between its last sample before ``at`` and its last sample before
    ``at - 1 h`` (``timestamp``) over the samples in between (``count_over_time``): exact for regular scrapes,
    wherever they fall against the hour. The median over the GPUs."""
    query = (
        f"quantile(0.5, (timestamp({UTIL}{sel}) - timestamp({UTIL}{sel} offset 1h))"
        f" / count_over_time({UTIL}{sel}[{_ms(HOUR)}]))"
    )
    result = api.instant("scrape", query, at)
    value = float(result[0]["value"][1]) if result else math.nan
    if not value > 0:
        raise CollectorError(
            f"no {UTIL} samples in the hour before {_from_epoch(at)} UTC to measure the scrape interval: "
            "give it with --scrape"
        )
    return round(value, 3)


def discover_jobs(api: _Api, opts: PullOptions, start: int, end: int) -> dict[str, tuple[int, int]]:
    """``hpc_job`` → (window start, window end) in epoch s: the hours in ``[start, end)`` it has samples in."""
    sel = selector(opts.match, 'hpc_job!=""')
    query = f"count by (hpc_job) (count_over_time({UTIL}{sel}[{_ms(HOUR)}]))"
    spans: dict[str, tuple[int, int]] = {}
    for r in api.range("discovery", query, start + HOUR, end, HOUR):
        hours = [int(float(t)) for t, v in r["values"] if float(v) > 0]
        if hours:
            spans[r["metric"]["hpc_job"]] = (min(hours) - HOUR, max(hours))
    return spans


def summarise_jobs(
    api: _Api, opts: PullOptions, spans: dict[str, tuple[int, int]]
) -> dict[tuple[str, str], dict[str, object]]:
    """(hpc_job, gpu_id) → figures of :data:`SUMMARY` (+ host, model, window): grouped instant queries."""
    by_end: dict[int, list[str]] = defaultdict(list)
    for job, (_, end) in spans.items():
        by_end[end].append(job)
    out: dict[tuple[str, str], dict[str, object]] = {}
    for end, jobs in sorted(by_end.items()):
        jobs.sort()
        for i in range(0, len(jobs), MAX_JOBS_PER_QUERY):
            group = jobs[i : i + MAX_JOBS_PER_QUERY]
            window = max(end - spans[j][0] for j in group)
            ids = "|".join(re.escape(j) for j in group).replace("\\", "\\\\").replace('"', '\\"')
            sel = selector(opts.match, f'hpc_job=~"{ids}"')
            for figure, expr in SUMMARY.items():
                query = expr.replace("{sel}", sel).replace("{w}", _ms(window))
                for r in api.instant("summaries", query, end):
                    labels = r["metric"]
                    gpu, host = gpu_key(labels)
                    row = out.setdefault(
                        (labels["hpc_job"], gpu),
                        {
                            "host": host,
                            "model_raw": labels.get("modelName"),
                            "window": spans[labels["hpc_job"]],
                        },
                    )
                    row[figure] = _value(r["value"][1])
    return out


def _flag(sel: str, minutes: float, util_pct: float, need: int, offset_s: int) -> str:
    """PromQL of F: the window of ``minutes`` before each step is full (``need`` samples) and all idle."""
    w = _ms(minutes * 60)
    off = f" offset {offset_s}s" if offset_s else ""
    return (  # parenthesised whole: `and` and `unless` bind equally, left to right
        f"((max_over_time({UTIL}{sel}[{w}]{off}) <= {util_pct:g})"
        f" and (count_over_time({UTIL}{sel}[{w}]{off}) >= {need}))"
    )


def idle_stretches(
    api: _Api, opts: PullOptions, start: int, end: int, step: int, settings: Settings
) -> list[tuple[dict[str, str], int, int]]:
    """Idle stretches of ``[start, end]`` as (series labels, union start, union end) in epoch s (see module doc)."""
    minutes, util = settings.idle_min_minutes, settings.idle_util_pct
    need = max(1, round(minutes * 60 / step))
    sel = selector(opts.match)
    now, before = _flag(sel, minutes, util, need, 0), _flag(sel, minutes, util, need, step)
    events: dict[str, tuple[dict[str, str], list[tuple[int, int]]]] = {}

    def collect(kind: int, result: list[dict]) -> None:
        for r in result:
            key = json.dumps(r["metric"], sort_keys=True)
            entry = events.setdefault(key, (r["metric"], []))
            for t, _ in r.get("values") or [r["value"]]:
                entry[1].append((int(float(t)), kind))

    collect(0, api.range("idle", f"{now} unless {before}", start, end, step))  # first flagged step
    collect(1, api.range("idle", f"{before} unless {now}", start + step, end, step))  # step after the last
    collect(2, api.instant("idle", now, start))  # flagged when the range begins: cut at the start
    collect(3, api.instant("idle", now, end))  # flagged when it ends: cut at the end
    stretches = []
    for labels, marks in events.values():
        begin: int | None = None
        for t, kind in sorted(marks, key=lambda m: (m[0], -m[1] if m[1] == 2 else m[1])):
            if kind == 2:
                begin = start + int(minutes * 60)  # the union so far is counted by the run before
            elif kind == 0 and begin is None:
                begin = t
            elif kind in (1, 3) and begin is not None:
                last = t - step if kind == 1 else end
                stretches.append((labels, begin - int(minutes * 60), last))
                begin = None
    return stretches


def pull_jobs(
    db: str | None,
    opts: PullOptions,
    *,
    settings: Settings | None = None,
    scrape_s: float | None = None,
    fleet: bool = True,
    now: dt.datetime | None = None,
    progress: bool = False,
) -> JobsReport:
    """Summarise every job with samples in ``[since, until)`` (or from the cursor on) into ``job_summaries``;
    with ``fleet``, also pull the hourly fleet rollup (:data:`FLEET_ROLLUPS` at 1 h, as ``samples``).

    Raises :class:`CollectorError` when Prometheus stays unreachable; the summaries are written only when
    every query answered (the fleet rollup commits per chunk, as ``pull`` does).
    """
    settings = settings or Settings()
    key = collector_key(opts)
    now = now or utcnow()
    cursor = read_cursor(db, key)
    first = opts.since or cursor or now - dt.timedelta(days=1)
    last = opts.until or now - dt.timedelta(hours=1)
    start = -(-_epoch(first) // HOUR) * HOUR  # whole hours: the discovery step
    end = _epoch(last) // HOUR * HOUR
    began = time.perf_counter()
    report = JobsReport(key, _from_epoch(start), _from_epoch(end), float(scrape_s or 0))
    if end <= start:
        return report
    with PromClient(opts) as client:
        api = _Api(client)
        report.scrape_s = float(scrape_s or measure_scrape_s(api, selector(opts.match), end))
        step = max(1, round(report.scrape_s))
        spans = discover_jobs(api, opts, start, end)
        figures = summarise_jobs(api, opts, spans)
        stretches = idle_stretches(api, opts, start, end, step, settings)
        report.requests, report.bytes = client.requests, client.wire_bytes
    report.points_by_kind = dict(api.points)
    report.seconds_by_kind = {k: round(v, 3) for k, v in api.seconds.items()}
    report.points = sum(api.points.values())
    prefix = job_prefix(opts)
    idle: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for labels, a, b in stretches:
        if labels.get("hpc_job"):
            acc = idle[(labels["hpc_job"], gpu_key(labels)[0])]
            acc[0] += b - a
            acc[1] += 1
    report.stretches = len(stretches)
    report.jobs = len(spans)
    rows = []
    for (job, gpu), f in sorted(figures.items()):
        n = f.get("samples")
        if not n:
            continue
        a, b = f["window"]  # type: ignore[misc]
        util_sum = f.get("util_sum")
        idle_s, idle_n = idle.get((job, gpu), (0.0, 0))
        rows.append(
            (
                prefix + job,
                gpu,
                f["host"],
                _from_epoch(a),
                _from_epoch(b),
                report.scrape_s,
                int(n),  # type: ignore[arg-type]
                float(n) * report.scrape_s / 3600.0,  # type: ignore[arg-type]
                None if util_sum is None else float(util_sum) / float(n),  # type: ignore[arg-type]
                *(f.get(k) for k in ("util_max_pct", "util_p50_pct", "util_p90_pct")),
                *(f.get(k) for k in ("mem_used_mean_mib", "mem_used_max_mib", "mem_total_mib")),
                *(f.get(k) for k in ("power_mean_w", "power_max_w", "sm_active_pct", "tensor_active_pct")),
                idle_s,
                int(idle_n),
                settings.idle_util_pct,
                settings.idle_min_minutes,
            )
        )
    report.rows = len(rows)
    commit_summaries(db, opts, report, rows)
    if fleet:
        rolled = pull(
            db,
            replace(opts, step_s=HOUR, rollups=FLEET_ROLLUPS, since=report.start, until=report.end),
            settings=settings,
        )
        report.fleet_samples = sum(c.rows.get("samples", 0) for c in rolled.chunks)
        report.fleet_points = sum(c.points for c in rolled.chunks)
        report.requests += sum(c.requests for c in rolled.chunks)
        report.points_by_kind["fleet hourly"] = report.fleet_points
        report.seconds_by_kind["fleet hourly"] = round(sum(c.seconds for c in rolled.chunks), 3)
        report.points += report.fleet_points
    report.seconds = time.perf_counter() - began
    if progress:
        print(describe(report), file=sys.stderr, flush=True)
    return report


COLUMNS = (
    "job_id, gpu_id, host, window_start, window_end, scrape_s, samples, gpu_hours, util_mean_pct, util_max_pct, "
    "util_p50_pct, util_p90_pct, mem_used_mean_mib, mem_used_max_mib, mem_total_mib, power_mean_w, power_max_w, "
    "sm_active_pct, tensor_active_pct, idle_s, idle_stretches, idle_util_pct, idle_min_minutes"
)


def commit_summaries(db: str | None, opts: PullOptions, report: JobsReport, rows: list[tuple]) -> None:
    """Upsert the rows by (job, GPU, window end), record the ingest and move the cursor: one transaction."""
    digest = hashlib.sha256(f"{report.collector}|{report.start}|{report.end}".encode())
    digest.update(repr(rows).encode())
    split = urllib.parse.urlsplit(opts.url)
    path = (
        f"prometheus://{split.netloc}{split.path.rstrip('/')}/jobs"
        f"?start={report.start.isoformat()}Z&end={report.end.isoformat()}Z"
    )
    with writer(db) as con:

        def work() -> IngestReport:
            seen = con.execute(
                "SELECT ingest_id FROM ingests WHERE content_sha256 = ? LIMIT 1", [digest.hexdigest()]
            ).fetchall()
            if seen:
                report.ingest_id = int(seen[0][0])
            elif rows:
                report.ingest_id = next_ingest_id(con)
                # one set-based insert from an Arrow table (executemany costs ~20 ms a row here)
                names = [c.strip() for c in COLUMNS.split(",")]
                table = pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)})
                con.register("staged_job_summaries", table)
                try:
                    con.execute(
                        f"INSERT OR REPLACE INTO job_summaries ({COLUMNS}, ingest_id) "
                        f"SELECT {COLUMNS}, ? FROM staged_job_summaries",
                        [report.ingest_id],
                    )
                finally:
                    con.unregister("staged_job_summaries")
                record_ingest(
                    con,
                    report.ingest_id,
                    path=path,
                    source_key=report.collector,
                    sha256=digest.hexdigest(),
                    fmt=FORMAT,
                    rows={"job_summaries": len(rows)},
                    skipped={},
                )
            con.execute(
                """INSERT INTO collector_state VALUES (?, ?, ?, ?)
                   ON CONFLICT (collector) DO UPDATE SET
                       cursor_ts = greatest(collector_state.cursor_ts, excluded.cursor_ts),
                       updated_at = excluded.updated_at, detail_json = excluded.detail_json""",
                [
                    report.collector,
                    report.end,
                    utcnow(),
                    json.dumps({"scrape_s": report.scrape_s, "url": opts.url}),
                ],
            )
            return IngestReport(report.collector, FORMAT, report.ingest_id)

        run_in_transaction(con, work)


def describe(report: JobsReport) -> str:
    return (
        f"{report.start:%Y-%m-%d %H:%M} → {report.end:%Y-%m-%d %H:%M} UTC: {report.jobs:,} jobs, "
        f"{report.rows:,} job-GPU summaries, {report.stretches:,} idle stretches "
        f"({report.requests} requests, {report.points:,} points, {report.bytes / 1e6:.1f} MB, {report.seconds:.1f} s)"
    )
