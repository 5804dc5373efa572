"""Pushdown vs raw pull from a REAL Prometheus holding a generated GPU fleet, measured in one run.

    .venv/bin/python bench/pushdown.py                       # 1,000 GPUs x 7 days, scraped every 30 s
    .venv/bin/python bench/pushdown.py --gpus 1000 --days 1  # what fits a 2-core machine in a few minutes

Steps (each timed):
1. DuckDB writes dcgm-exporter-style OpenMetrics history (GPU_UTIL, FB_USED, POWER_USAGE per GPU, 8 GPUs a
   host, jobs as ``hpc_job`` labels changing every 4 h), promtool backfills it (``--max-block-duration=72h``)
   and tests/services/prometheus_up.sh starts Prometheus on it;
2. pushdown: ``collectors.prometheus_pull.pull`` over the whole range at ``--step`` into a fresh ledger file
   (fetch + stage + land + rollup: the shipped collector, end to end);
3. raw: the same range fetched as raw samples (``{__name__=~"…"}[6h]`` range-vector queries, the same host
   batches), decoded into DuckDB and rolled up to the same step locally — what a collector without
   pushdown has to do before it can even start landing;
4. the ledger's size on disk, per 1,000 GPU-months at this step;
5. job summaries (``collect prometheus --jobs``, collectors/prometheus_jobs.py): per-job, per-GPU figures
   and idle stretches computed in PromQL, plus the hourly fleet rollup the heatmap needs (the collector at
   ``--step 1h``), against the raw pull at the scrape interval; the idle GPU-hours are checked against what
   the generator planted (every 5th job idle at 0 % for its whole 4 h).

Prints raw points vs rolled-up points moved, bytes, and seconds, with the ratios. Needs the Debian
``prometheus`` package. Everything lives in a temp folder, removed at the end (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collectors.prometheus_jobs import pull_jobs  # noqa: E402
from collectors.prometheus_pull import (  # noqa: E402
    PromClient,
    PullOptions,
    fetch_chunk,
    host_batches,
    plan_chunks,
    pull,
    selector,
)
from gpuledger.ledger.db import writer  # noqa: E402

SERVICES = ROOT / "tests" / "services"
METRICS = {  # name → SQL value expression of (g = GPU number, k = scrape number, job)
    "DCGM_FI_DEV_GPU_UTIL": "CASE WHEN job % 5 = 0 THEN 0 ELSE (g * 13 + job * 7 + k % 11) % 101 END",
    "DCGM_FI_DEV_FB_USED": "(g * 97 + job * 1009) % 81000",
    "DCGM_FI_DEV_POWER_USAGE": "round(70 + ((g * 13 + job * 7) % 101) * 6.3 + (k % 7), 3)",
}


def generate(path: Path, gpus: int, start: int, scrapes: int, scrape_s: int) -> int:
    """Write the OpenMetrics history with DuckDB; return the raw sample count."""
    con = duckdb.connect()
    parts = []
    for metric, value in METRICS.items():
        part = path.with_suffix(f".{metric}.txt")
        con.execute(
            f"""COPY (
                SELECT '{metric}{{gpu="' || (g % 8) || '",UUID="GPU-' || lpad(g::VARCHAR, 8, '0')
                       || '-0000-4000-8000-000000000000",Hostname="gpu-node-' || lpad((g // 8)::VARCHAR, 4, '0')
                       || '",modelName="NVIDIA H100 80GB HBM3",hpc_job="' || (100000 + g * 1000 + job) || '"}} '
                       || ({value}) || ' ' || ({start} + k * {scrape_s}) AS line
                FROM (SELECT g, k, (k * {scrape_s}) // 14400 AS job FROM range({gpus}) a(g), range({scrapes}) b(k))
                ORDER BY g, k
            ) TO '{part}' (FORMAT csv, HEADER false, QUOTE '', ESCAPE '')"""
        )
        parts.append((metric, part))
    with path.open("wb") as out:
        for metric, part in parts:
            out.write(f"# HELP {metric} generated\n# TYPE {metric} gauge\n".encode())
            with part.open("rb") as fh:
                shutil.copyfileobj(fh, out, 1 << 24)
            part.unlink()
        out.write(b"# EOF\n")
    return gpus * scrapes * len(METRICS)


DECODE = """
    SELECT r.metric::VARCHAR AS key, v[1]::DOUBLE AS t, TRY_CAST(v[2] AS DOUBLE) AS x
    FROM (SELECT unnest(data.result) AS r FROM read_json([{files}], maximum_object_size = 2000000000,
          columns = {{status: 'VARCHAR',
                      data: 'STRUCT(resultType VARCHAR, result STRUCT(metric JSON, "values" VARCHAR[][])[])'}})),
         unnest(r."values") AS p(v)
"""


def pushdown_fetch(url: str, start: int, end: int, step_s: int, folder: Path) -> dict[str, float]:
    """The collector's own requests for [start, end) (fetch_chunk), decoded into DuckDB the same way as raw."""
    opts = PullOptions(url=url, step_s=step_s)
    client = PromClient(opts)
    hosts = client.label_values("Hostname", selector(f'__name__=~"{"|".join(METRICS)}"'), start, end)
    batches = host_batches(hosts, opts.hosts_per_query)
    began = time.perf_counter()
    files = []
    for a, b in plan_chunks(start, end, step_s, opts.chunk_s):
        sub = folder / f"push-{step_s}-{a}"
        sub.mkdir()
        files += fetch_chunk(client, opts, batches, a, b, sub)
    fetched = time.perf_counter() - began
    names = ", ".join(f"'{f}'" for f in files)
    points = duckdb.connect().execute(f"SELECT count(*) FROM ({DECODE.format(files=names)})").fetchall()[0][0]
    for f in files:
        f.unlink()
    return {
        "points": points,
        "bytes": client.bytes,
        "requests": client.requests,
        "fetch_s": fetched,
        "seconds": time.perf_counter() - began,
    }


def raw_pull(url: str, start: int, end: int, step_s: int, folder: Path) -> dict[str, float]:
    """Fetch every raw sample of [start, end) in 6-hour range-vector queries and roll it up in DuckDB."""
    client = PromClient(PullOptions(url=url))
    names = "|".join(METRICS)
    hosts = client.label_values("Hostname", selector(f'__name__=~"{names}"'), start, end)
    batches = host_batches(hosts, 64)
    began = time.perf_counter()
    files = []
    for a, b in plan_chunks(start, end, step_s, 6 * 3600):
        for i, batch in enumerate(batches):
            # a window ending at b - 1 ms: (a, b) exactly, no sample counted in two chunks
            query = f"{selector(f'__name__=~{json.dumps(names)}', batch)}[{(b - a) * 1000 - 1}ms]"
            body = client.post("/api/v1/query", [("query", query), ("time", f"{b - 0.001:.3f}")])
            f = folder / f"raw-{a}-{i}.json"
            f.write_bytes(body)
            files.append(f)
    fetched = time.perf_counter() - began
    con = duckdb.connect()
    names_sql = ", ".join(f"'{f}'" for f in files)
    points, rollups = con.execute(
        f"""
        WITH pts AS ({DECODE.format(files=names_sql)}),
        rolled AS (SELECT key, floor(t / {step_s}) AS s, avg(x) FROM pts GROUP BY ALL)
        SELECT (SELECT count(*) FROM pts), (SELECT count(*) FROM rolled)
        """
    ).fetchall()[0]
    for f in files:
        f.unlink()
    return {
        "points": points,
        "rollups": rollups,
        "bytes": client.bytes,
        "requests": client.requests,
        "fetch_s": fetched,
        "seconds": time.perf_counter() - began,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--scrape", type=int, default=30, help="scrape interval of the generated history, s")
    ap.add_argument(
        "--steps",
        type=lambda v: [int(x) for x in v.split(",") if x],
        default=[60, 300],
        help="rollup steps, s",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (history, data, ledger)")
    ap.add_argument("--no-jobs", action="store_true", help="skip the job-summaries measurement")
    args = ap.parse_args()
    if not (shutil.which("prometheus") and shutil.which("promtool")):
        print("bench/pushdown.py needs the Debian package `prometheus` (make system-deps)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="gpuledger-bench-prom-"))
    end = (int(time.time()) // 3600 - 3) * 3600
    scrapes = int(args.days * 86_400 // args.scrape)
    start = end - scrapes * args.scrape
    print(
        f"fleet: {args.gpus:,} GPUs x {args.days:g} days, scraped every {args.scrape} s, steps {args.steps} s"
    )
    try:
        t = time.perf_counter()
        raw_samples = generate(work / "history.om", args.gpus, start, scrapes, args.scrape)
        size = (work / "history.om").stat().st_size
        print(
            f"history: {raw_samples:,} raw samples, {size / 1e9:.2f} GB OpenMetrics in {time.perf_counter() - t:.1f} s"
        )
        (work / "srv" / "data").mkdir(parents=True)
        t = time.perf_counter()
        subprocess.run(
            [
                "promtool",
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                "--quiet",
                "--max-block-duration=72h",
                str(work / "history.om"),
                str(work / "srv" / "data"),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        print(
            f"promtool backfill: {time.perf_counter() - t:.1f} s ({raw_samples / (time.perf_counter() - t):,.0f} samples/s)"
        )
        (work / "history.om").unlink()
        subprocess.run(
            ["bash", str(SERVICES / "prometheus_up.sh"), str(work / "srv")],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        url = dict(line.split("=", 1) for line in (work / "srv" / "env").read_text().split())["PROM_URL"]

        results = []
        for step in args.steps:
            ledger = str(work / f"ledger-{step}.duckdb")
            t = time.perf_counter()
            report = pull(ledger, PullOptions(url=url, step_s=step, since=_utc(start), until=_utc(end)))
            collect_s = time.perf_counter() - t
            with writer(ledger) as con:
                con.execute("CHECKPOINT")
            push = pushdown_fetch(url, start, end, step, work)
            raw = raw_pull(url, start, end, step, work)
            samples = sum(c.rows.get("samples", 0) for c in report.chunks)
            results.append((step, push, raw, collect_s, samples, os.path.getsize(ledger)))
        jobs = None if args.no_jobs else bench_jobs(url, start, end, args.scrape, args.gpus, work)
    finally:
        subprocess.run(["bash", str(SERVICES / "prometheus_down.sh"), str(work / "srv")], check=False)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    gpu_months = args.gpus * args.days / 30.0
    if jobs is not None:
        print_jobs(jobs, raw_samples)
    for step, push, raw, collect_s, samples, ledger_bytes in results:
        print(f"\nstep {step} s{'':16}{'raw pull':>16}{'pushdown':>16}{'raw / pushdown':>16}")
        for label, key in (("points moved", "points"), ("bytes moved", "bytes"), ("requests", "requests")):
            print(f"{label:28}{raw[key]:>16,.0f}{push[key]:>16,.0f}{raw[key] / max(push[key], 1):>15.1f}x")
        for label, key in (("fetch s", "fetch_s"), ("fetch + decode s", "seconds")):
            print(f"{label:28}{raw[key]:>16.1f}{push[key]:>16.1f}{raw[key] / push[key]:>15.1f}x")
        print("  (raw decode includes rolling the raw points up to the step locally)")
        print(f"raw samples the pushdown avoided moving: {raw['points'] - push['points']:,}")
        print(
            f"collector end to end (fetch + stage + land + rollup): {collect_s:.1f} s for {samples:,} samples "
            f"({samples / collect_s:,.0f}/s)"
        )
        print(
            f"ledger: {ledger_bytes / 1e6:.1f} MB for {gpu_months:,.1f} GPU-months at {step} s "
            f"= {ledger_bytes / gpu_months * 1000 / 1e9:.2f} GB per 1,000 GPU-months"
        )
    return 0


def bench_jobs(url: str, start: int, end: int, scrape_s: int, gpus: int, work: Path) -> dict[str, object]:
    """``collect prometheus --jobs`` over the range (summaries, idle stretches and the hourly fleet rollup),
    timed; the idle GPU-hours against what ``generate`` planted, by plain SQL over its job numbering."""
    ledger = str(work / "ledger-jobs.duckdb")
    t = time.perf_counter()
    report = pull_jobs(ledger, PullOptions(url=url, since=_utc(start), until=_utc(end)))
    jobs_s = time.perf_counter() - t
    with writer(ledger) as con:
        idle_h, util = con.execute(
            "SELECT sum(idle_s) / 3600, sum(util_mean_pct * samples) / sum(samples) FROM job_summaries"
        ).fetchall()[0]
    # planted: scrape k of every GPU belongs to job (k * scrape_s) // 14400, at 0 % when job % 5 = 0
    scrapes = (end - start) // scrape_s
    planted = (
        duckdb.connect()
        .execute(
            f"""SELECT count(*) FILTER (WHERE (k * {scrape_s}) // 14400 % 5 = 0) * {scrape_s} / 3600.0 * {gpus}
            FROM range({scrapes}) r(k)"""
        )
        .fetchall()[0][0]
    )
    return {
        "report": report.as_dict(),
        "seconds": jobs_s,
        "idle_gpu_hours": idle_h,
        "planted_idle_gpu_hours": planted,
        "mean_util_pct": util,
    }


def print_jobs(jobs: dict[str, object], raw_samples: int) -> None:
    rep = jobs["report"]
    assert isinstance(rep, dict)
    by_kind = dict(rep["points_by_kind"])
    fleet = by_kind.pop("fleet hourly", 0)
    summaries = sum(by_kind.values())
    print(
        f"\njob summaries (collect prometheus --jobs): {rep['jobs']:,} jobs, {rep['job_summaries']:,} job-GPU rows, "
        f"{rep['idle_stretches']:,} idle stretches, {rep['fleet_samples']:,} fleet GPU-hours; "
        f"{rep['requests']:,} requests, {jobs['seconds']:.1f} s end to end"
    )
    secs = rep["seconds_by_kind"]
    print(
        "  seconds by kind (waiting for Prometheus; fleet: fetch + land): "
        + ", ".join(f"{k} {v:.1f}" for k, v in sorted(secs.items()))
    )
    print(f"{'points moved':28}{'raw pull':>16}{'pushdown':>16}{'raw / pushdown':>16}")
    for label, n in (
        *((f"  {k}", v) for k, v in sorted(by_kind.items())),
        ("job summaries, all", summaries),
        ("hourly fleet rollup (util)", fleet),
        ("everything --jobs moved", summaries + fleet),
    ):
        print(f"{label:28}{raw_samples:>16,}{n:>16,}{raw_samples / max(n, 1):>15.1f}x")
    print(
        f"idle GPU-hours found in PromQL: {jobs['idle_gpu_hours']:,.2f}; planted: {jobs['planted_idle_gpu_hours']:,.2f}"
        f"; fleet mean utilization {jobs['mean_util_pct']:.3f} %"
    )


def _utc(epoch: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).replace(tzinfo=None)


if __name__ == "__main__":
    sys.exit(main())
