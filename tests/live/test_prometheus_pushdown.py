"""``collect prometheus --jobs`` against a REAL Prometheus: per-job summaries computed in PromQL equal the raw path.

The history is generated here (8 H100s on 2 hosts, one day scraped every 30 s at :15 and :45, three jobs
per GPU as ``hpc_job`` labels, job edges off the hour) with idle stretches planted at the edges that
matter: at a job's start and end, too short (10 and 29 min) and just long enough (31 min), split by one
busy minute, and cut by an exporter outage. promtool backfills it before Prometheus starts (once per
module). The same samples are written as a dcgm-exporter text file and ingested the ordinary way.

Expected values come from plain SQL over the generated raw samples (gaps-and-islands for the idle
stretches, with the documented rule: consecutive samples of one GPU and job at or under 5 %, no gap over
1.5 × 30 s, at least 30 min in total), and from the ledger the raw ingest builds.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from analytics.jobs import jobs_table
from collectors.ingest import ingest_file
from collectors.prometheus_jobs import pull_jobs
from collectors.prometheus_pull import PullOptions
from gpuledger.cli.main import main
from gpuledger.ledger.db import writer
from tests.conftest import ROOT

pytestmark = pytest.mark.service

SERVICES = ROOT / "tests" / "services"
SCRAPE_S, OFFSET_S, GPUS, MINUTES = 30, 15, 8, 24 * 60
# per GPU: (first minute, end minute, job number); minutes 300-320 hold no job
JOBS = ((0, 300, 1), (320, 800, 2), (800, MINUTES, 3))
# idle segments (minutes, [a, b)): at J1's start, too short, at J1's end; J2's split by one busy minute at
# 450; J3's 29 min (too short) and 31 min; GPU 0's exporter outage 1100-1160 inside 1080-1200
IDLE = ((0, 45), (100, 110), (200, 300), (400, 520), (900, 929), (1000, 1031), (1080, 1200))
BLIP_MIN, OUTAGE = 450, (1100, 1160)
RAW = "read_csv(?, header = true, types = {'job_id': 'VARCHAR'})"


def job_of(g: int, minute: float) -> str | None:
    for a, b, n in JOBS:
        if a <= minute < b:
            return f"{1000 + g * 10 + n}"
    return None


def generate(folder: Path, start: int) -> tuple[Path, Path, Path]:
    """OpenMetrics history, a dcgm-exporter text file and a CSV of the same raw samples."""
    metrics = (
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_POWER_USAGE",
    )
    series: dict[str, list[str]] = {m: [] for m in metrics}
    raw = ["gpu_id,job_id,t,util,mem_used,power"]
    for g in range(GPUS):
        uuid = f"GPU-{g:08d}-0000-4000-8000-000000000000"
        base = f'gpu="{g % 4}",UUID="{uuid}",Hostname="node-{g // 4}",modelName="NVIDIA H100 80GB HBM3"'
        for k in range(MINUTES * 60 // SCRAPE_S):
            offset = OFFSET_S + k * SCRAPE_S
            minute = offset / 60
            if g == 0 and OUTAGE[0] <= minute < OUTAGE[1]:
                continue
            job = job_of(g, minute)
            idle = any(a <= minute < b for a, b in IDLE) and int(minute) != BLIP_MIN
            util = k % 4 if idle else 40 + (g * 7 + k) % 57  # idle: 0-3 %, busy: 40-96 %
            used = 1000 + (g * 977 + k * 13) % 70_000
            power = round(90 + util * 6.1 + k % 3, 1)
            labels = base + (f',hpc_job="{job}"' if job else "")
            t = start + offset
            for metric, value in zip(metrics, (util, used, 81_559 - used, power), strict=True):
                series[metric].append(f"{metric}{{{labels}}} {value} {t}")
            raw.append(f"{uuid},{job or ''},{t},{util},{used},{power}")
    om, prom, csv = folder / "history.om", folder / "history.prom", folder / "raw.csv"
    with om.open("w") as fh, prom.open("w") as fp:
        for metric, lines in series.items():
            fh.write(f"# HELP {metric} generated\n# TYPE {metric} gauge\n" + "\n".join(lines) + "\n")
            fp.write(f"# TYPE {metric} gauge\n" + "".join(ln + "000\n" for ln in lines))  # ms timestamps
        fh.write("# EOF\n")
    csv.write_text("\n".join(raw) + "\n")
    return om, prom, csv


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    if not (shutil.which("prometheus") and shutil.which("promtool")):
        pytest.skip(
            "Prometheus is not installed (Debian package `prometheus`; `make system-deps` installs it)"
        )
    work = tmp_path_factory.mktemp("prometheus-jobs")
    start = (int(dt.datetime.now(dt.UTC).timestamp()) // 86_400 - 2) * 86_400  # midnight two days ago
    om, prom_file, csv = generate(work, start)
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
        yield {"url": env["PROM_URL"], "start": start, "raw": csv, "file": prom_file}
    finally:
        subprocess.run(["bash", str(SERVICES / "prometheus_down.sh"), str(work / "srv")], timeout=30)


def utc(epoch: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).replace(tzinfo=None)


def expected(raw: Path) -> dict[tuple[str, str], tuple]:
    """Plain SQL over the raw samples: (job, gpu) → (samples, mean util, max, p50, p90, peak memory, mean
    power, idle-stretch seconds)."""
    rows = (
        duckdb.connect()
        .execute(
            f"""
        WITH s AS (
            SELECT *, util <= 5 AS idle,
                   coalesce(t - lag(t) OVER (PARTITION BY gpu_id, job_id ORDER BY t) > 45, false) AS gap
            FROM {RAW} WHERE job_id IS NOT NULL),
        seg AS (SELECT *, sum(gap::INT) OVER (PARTITION BY gpu_id, job_id ORDER BY t) AS piece FROM s),
        isl AS (SELECT *, row_number() OVER (PARTITION BY gpu_id, job_id, piece ORDER BY t)
                        - row_number() OVER (PARTITION BY gpu_id, job_id, piece, idle ORDER BY t) AS grp FROM seg),
        runs AS (SELECT gpu_id, job_id, count(*) * 30 AS run_s FROM isl WHERE idle
                 GROUP BY gpu_id, job_id, piece, grp),
        idle AS (SELECT job_id, gpu_id, sum(run_s) FILTER (WHERE run_s >= 1800) AS idle_s
                 FROM runs GROUP BY ALL)
        SELECT job_id, gpu_id, count(*), avg(util), max(util), quantile_cont(util, 0.5),
               quantile_cont(util, 0.9), max(mem_used), avg(power), coalesce(any_value(idle_s), 0)
        FROM s LEFT JOIN idle USING (job_id, gpu_id) GROUP BY job_id, gpu_id
        """,
            [str(raw)],
        )
        .fetchall()
    )
    return {(str(r[0]), r[1]): r[2:] for r in rows}


def test_job_summaries_equal_plain_sql_over_the_raw_samples(prom, db_path):
    opts = PullOptions(url=str(prom["url"]), since=utc(prom["start"]), until=utc(prom["start"] + 86_400))
    report = pull_jobs(db_path, opts)
    truth = expected(prom["raw"])
    assert report.scrape_s == 30.0  # measured: 3,600 s between the last samples an hour apart / 120 samples
    assert report.jobs == GPUS * len(JOBS) == len(truth)
    with writer(db_path) as con:
        got = {
            (r[0], r[1]): r[2:]
            for r in con.execute(
                """SELECT job_id, gpu_id, samples, util_mean_pct, util_max_pct, util_p50_pct, util_p90_pct,
                          mem_used_max_mib, power_mean_w, idle_s, gpu_hours, window_start, window_end
                   FROM job_summaries"""
            ).fetchall()
        }
    assert got.keys() == truth.keys()
    for key, (n, mean, peak, p50, p90, mem, power, idle_s) in truth.items():
        row = got[key]
        assert row[0] == n and row[8] == pytest.approx(n * 30 / 3600), key  # GPU-hours = samples x 30 s
        assert row[1] == pytest.approx(mean, abs=1e-9), key
        assert row[2:6] == pytest.approx((peak, p50, p90, mem), abs=1e-9), key
        assert row[6] == pytest.approx(power, abs=1e-9), key
        assert row[7] == pytest.approx(idle_s, abs=1e-6), key  # regular scrapes: stretches are exact
    # planted by hand for GPU 1 (no outage), J1: 45 + 100 min idle (the 10-min one is too short);
    # J2: 50 min + 69 min (one busy minute, 2 samples, at minute 450 splits 400-520); J3: 31 min (29 is too short)
    # and 120 min at 1080-1200
    assert got[("1011", "GPU-00000001-0000-4000-8000-000000000000")][7] == (45 + 100) * 60
    assert got[("1012", "GPU-00000001-0000-4000-8000-000000000000")][7] == (50 + 69) * 60
    assert got[("1013", "GPU-00000001-0000-4000-8000-000000000000")][7] == (31 + 120) * 60
    # GPU 0's outage cuts 1080-1200 into 20 min (too short) and 40 min
    assert got[("1003", "GPU-00000000-0000-4000-8000-000000000000")][7] == (31 + 40) * 60
    # the hourly fleet rollup: one samples row per GPU-hour, its utilization the hour's mean (plain SQL)
    with writer(db_path) as con:
        fleet = con.execute("SELECT count(*), min(interval_s), max(interval_s) FROM samples").fetchall()[0]
        hour1 = con.execute(
            "SELECT util_pct FROM samples WHERE gpu_id = ? AND ts = ?",
            ["GPU-00000001-0000-4000-8000-000000000000", utc(prom["start"] + 3600)],
        ).fetchall()[0][0]
    assert fleet == (GPUS * 24, 3600.0, 3600.0)
    mean = (
        duckdb.connect()
        .execute(
            f"SELECT avg(util) FROM {RAW} WHERE gpu_id = ? AND t >= ? AND t < ?",
            [
                str(prom["raw"]),
                "GPU-00000001-0000-4000-8000-000000000000",
                prom["start"] + 3600,
                prom["start"] + 7200,
            ],
        )
        .fetchall()[0][0]
    )
    assert hour1 == pytest.approx(mean, abs=1e-4)
    # job 2 runs 05:20-13:20: its window is the whole hours around it
    assert got[("1012", "GPU-00000001-0000-4000-8000-000000000000")][9:] == (
        utc(prom["start"] + 5 * 3600),
        utc(prom["start"] + 14 * 3600),
    )


def test_mean_util_and_idle_hours_equal_the_raw_ingest(prom, db_path, tmp_path):
    """The issue's check: per-job mean utilization equal to, idle GPU-hours within 2 % of, the same raw
    samples ingested as a dcgm-exporter file (the ledger's samples and its idle-stretch rollup)."""
    pull_jobs(
        db_path,
        PullOptions(url=str(prom["url"]), since=utc(prom["start"]), until=utc(prom["start"] + 86_400)),
    )
    raw_db = str(tmp_path / "raw.duckdb")
    with writer(raw_db) as con:
        ingest_file(con, prom["file"], fmt="dcgm")
        from_raw = {
            j: (u, i)
            for j, u, i in con.execute(
                """SELECT s.job_id, avg(s.util_pct),
                          (SELECT sum(idle_run_s) FROM samples_minute m WHERE m.job_id = s.job_id) / 3600
                   FROM samples s WHERE s.job_id IS NOT NULL GROUP BY s.job_id"""
            ).fetchall()
        }
    with writer(db_path) as con:
        pushed = {
            j: (u, i)
            for j, u, i in con.execute(
                """SELECT job_id, sum(util_mean_pct * samples) / sum(samples), sum(idle_s) / 3600
                   FROM job_summaries GROUP BY job_id"""
            ).fetchall()
        }
    assert pushed.keys() == from_raw.keys() and len(pushed) == 24
    for job, (util, idle_h) in from_raw.items():
        assert pushed[job][0] == pytest.approx(util, abs=1e-4), job  # FLOAT util in samples: 1e-4
        assert pushed[job][1] == pytest.approx(idle_h, rel=0.02, abs=1e-9), job
    total_raw = sum(i for _, i in from_raw.values())
    assert total_raw > 0 and sum(i for _, i in pushed.values()) == pytest.approx(total_raw, rel=0.02)


def test_cli_jobs_json_and_a_second_run_reads_only_new_hours(prom, db_path, capsys):
    """Two runs split at 19:00, inside J3 and inside its 18:00-20:00 idle stretch: the parts add up to the
    one-day truth (plain SQL), so a stretch cut at a run's edge is counted once, in full."""
    argv = ["collect", "prometheus", "--jobs", "--url", str(prom["url"]), "--db", db_path, "--json"]
    start, split = prom["start"], prom["start"] + 19 * 3600
    assert main([*argv, "--since", utc(start).isoformat(), "--until", utc(split).isoformat()]) == 0
    first = json.loads(capsys.readouterr().out)
    # up to 19:00: J1 (0-5 h), J2 (5:20-13:20) and J3 (13:20-, cut at 19 h) on 8 GPUs
    assert first["jobs"] == 24 and first["job_summaries"] == 24 and first["scrape_s"] == 30.0
    assert main([*argv, "--until", utc(start + 86_400).isoformat(), "--scrape", "30s"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["start"] == utc(split).isoformat()  # resumed at the cursor
    assert second["jobs"] == 8  # J3's remainder
    with writer(db_path) as con:
        parts = {
            (j, g): (n, p, i)
            for j, g, n, p, i in con.execute(
                """SELECT job_id, gpu_id, count(*), sum(samples), sum(idle_s) FROM job_summaries
                   GROUP BY ALL"""
            ).fetchall()
        }
    truth = expected(prom["raw"])
    assert parts.keys() == truth.keys()
    for key, row in truth.items():
        n_parts, samples, idle_s = parts[key]
        assert n_parts == (2 if key[0].endswith("3") else 1), key
        assert samples == row[0] and idle_s == pytest.approx(row[7], abs=1e-6), key
    # J3 on GPU 1 by hand: 13:20-24:00 = 640 min = 1,280 scrapes; idle 31 min + 120 min (cut at 19:00)
    assert parts[("1013", "GPU-00000001-0000-4000-8000-000000000000")] == (2, 1280, (31 + 120) * 60)


def test_the_jobs_table_reads_summaries_for_jobs_without_samples(prom, db_path, tmp_path):
    """A fleet collected with --jobs --no-fleet has no samples: the jobs table takes each job's mean
    utilization, peak memory fraction and idle GPU-hours from its summaries (plain SQL over the raw samples)."""
    start = prom["start"]
    rows = ["job_id,user,team,cluster,gpu_model,gpu_count,start,end,state,kind"]
    for g in range(GPUS):
        for a, b, n in JOBS:
            rows.append(
                f"{1000 + g * 10 + n},u{g},t{g % 2},c,H100-SXM-80GB,1,{utc(start + a * 60).isoformat()}Z,"
                f"{utc(start + b * 60).isoformat()}Z,COMPLETED,training"
            )
    jobs_csv = tmp_path / "jobs.csv"
    jobs_csv.write_text("\n".join(rows) + "\n")
    with writer(db_path) as con:
        ingest_file(con, jobs_csv)
    opts = PullOptions(url=str(prom["url"]), since=utc(start), until=utc(start + 86_400))
    pull_jobs(db_path, opts, fleet=False)
    truth = expected(prom["raw"])
    with writer(db_path) as con:
        assert con.execute("SELECT count(*) FROM samples").fetchall() == [(0,)]
        table = jobs_table(con).select("job_id", "mean_util_pct", "peak_mem_frac", "idle_gpu_hours")
    got = {r[0]: r[1:] for r in table.iter_rows()}
    assert len(got) == GPUS * len(JOBS)
    for (job, _gpu), (_n, mean, _peak, _p50, _p90, mem, _power, idle_s) in truth.items():
        util, mem_frac, idle_h = got[job]
        assert util == pytest.approx(mean, abs=1e-9), job
        assert mem_frac == pytest.approx(mem / 81_559, abs=1e-9), job  # FB_USED + FB_FREE = 81,559 MiB
        assert idle_h == pytest.approx(idle_s / 3600, abs=1e-9), job
