"""The NVML sampler end to end: replayed real nvidia-smi telemetry → sampler → a real DuckDB ledger.

The only fake is the GPU this machine lacks: collectors/nvml_replay.py answers the NvmlApi seam from real
recorded logs in ../shared/datasets. Expected values come from reading the same CSV with plain SQL here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from collectors.nvml_api import DeviceLost, DeviceReading, ProcessReading
from collectors.nvml_replay import ReplayNvml
from collectors.nvml_sampler import NvmlSampler
from collectors.proc_jobs import job_from_cgroup, job_from_environ
from gpuledger.ledger.db import writer
from tests.conftest import ROOT, dataset, write

EOBO = "nvidia-smi-csv/eobo0530_vlm_optimization_gpu_log.csv"  # 1 x RTX 4090 at 1 s, 2,619 rows
XYPP3 = "nvidia-smi-csv/xypp3_gpu_glasses_nvidia_smi.csv"  # 8 GPUs, 43 rows, mislabelled header
# xypp3's header says timestamp,gpu,index,...: "gpu" holds the GPU index and "index" the utilization
XYPP3_COLUMNS = (
    "timestamp",
    "index",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "power.draw",
    "temperature.gpu",
)
MIB = 1024 * 1024


def rows(db: str, sql: str, params: list[object] | None = None) -> list[tuple]:
    con = duckdb.connect(db, read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def replay_run(db: str, replay: ReplayNvml, ticks: int, **kw: object) -> NvmlSampler:
    sampler = NvmlSampler(replay, db=db, host="ws1", clock=replay.clock(), **kw)  # type: ignore[arg-type]
    sampler.run(max_ticks=ticks)
    return sampler


# ---- values land exactly as recorded -------------------------------------------------------------------
def test_single_gpu_replay_lands_every_recorded_value(db_path: str) -> None:
    path = dataset(EOBO)
    sampler = replay_run(db_path, ReplayNvml(path), 2619, interval_s=1.0, flush_s=240.0)

    assert sampler.summary.samples == 2619
    # 48 min of recorded time flushed every 4 min of it: one ingest per flush, each its own provenance (a
    # flush is ~0.45 s of fixed ingest work here; at 60 s the test spent 21 s in 47 flushes)
    ingests = rows(db_path, "SELECT count(*), count(DISTINCT content_sha256), min(path) FROM ingests")[0]
    assert ingests[0] == sampler.summary.flushes >= 12
    assert ingests[1] == ingests[0] and ingests[2] == "nvml://ws1"
    # the same file read independently with plain SQL: every field of every row must match
    mismatches = rows(
        db_path,
        f"""
        WITH f AS (
            SELECT strptime(timestamp, '%Y/%m/%d %H:%M:%S.%g') AS ts,
                   CAST(replace("utilization.gpu [%]", ' %', '') AS DOUBLE) AS util,
                   CAST(replace("utilization.memory [%]", ' %', '') AS DOUBLE) AS mem_util,
                   CAST(replace("memory.used [MiB]", ' MiB', '') AS DOUBLE) AS mem_used,
                   CAST(replace("power.draw [W]", ' W', '') AS DOUBLE) AS power
            FROM read_csv('{path}', delim=', ', header=true, all_varchar=true)
        )
        SELECT count(*) FROM f FULL JOIN samples s ON s.ts = f.ts AND s.gpu_id = 'ws1:0'
        WHERE s.ts IS NULL OR f.ts IS NULL OR s.util_pct <> f.util OR s.mem_util_pct <> f.mem_util
           OR s.mem_used_mib <> f.mem_used OR abs(s.power_w - f.power) > 1e-4
           OR s.mem_total_mib IS NOT NULL OR s.temp_c IS NOT NULL OR s.energy_j IS NOT NULL
        """,
    )
    assert mismatches == [(0,)]
    # a sample stands for the gap to the next one; the file's ~4 s stalls are gaps (> 2.5 x 1 s), not busy time
    assert rows(db_path, "SELECT max(interval_s) <= 2.5, min(interval_s) > 0 FROM samples") == [(True, True)]
    assert rows(db_path, "SELECT gpu_id, host, gpu_index, model_raw FROM gpus") == [
        ("ws1:0", "ws1", 0, "NVIDIA GeForce RTX 4090")
    ]
    assert rows(db_path, "SELECT collector, cursor_ts FROM collector_state") == [
        ("nvml:ws1", dt.datetime(2026, 1, 3, 16, 24, 53, 961000))
    ]


def test_eight_gpu_replay_with_mislabelled_header(db_path: str) -> None:
    path = dataset(XYPP3)
    replay = ReplayNvml(path, columns=XYPP3_COLUMNS)
    sampler = replay_run(db_path, replay, 6, interval_s=1.0, flush_s=60.0)

    # GPUs 0-2 have 6 rows, 3-7 only 5: the sixth round reads five exhausted GPUs as lost
    assert sampler.summary.samples == 43
    assert sampler.summary.lost_reads == 5
    # the flush records them in its ingest's skipped counts, beside the landing's notes
    assert rows(db_path, "SELECT path, skipped_json FROM ingests") == [
        ("nvml://ws1", '{"lost GPU reads": 5}')
    ]
    mismatches = rows(
        db_path,
        f"""
        WITH f AS (
            SELECT CAST(timestamp AS TIMESTAMPTZ) AT TIME ZONE 'UTC' AS ts, 'ws1:' || trim(gpu) AS gpu_id,
                   CAST(trim("index") AS DOUBLE) AS util, CAST(trim("memory.used") AS DOUBLE) AS mem_used,
                   CAST(trim("memory.total") AS DOUBLE) AS mem_total,
                   CAST(trim("power.draw") AS DOUBLE) AS power, CAST(trim("temperature.gpu") AS DOUBLE) AS temp
            FROM read_csv('{path}', header=true, all_varchar=true)
        )
        SELECT count(*) FROM f FULL JOIN samples s USING (ts, gpu_id)
        WHERE s.ingest_id IS NULL OR f.util IS NULL OR s.util_pct <> f.util OR s.mem_used_mib <> f.mem_used
           OR s.mem_total_mib <> f.mem_total OR abs(s.power_w - f.power) > 1e-4 OR s.temp_c <> f.temp
        """,
    )
    assert mismatches == [(0,)]
    # 17:26:50+08:00 is 09:26:50 UTC; 81559 MiB per card
    assert rows(
        db_path, "SELECT min(ts), count(*), min(memory_total_mib) FROM samples JOIN gpus USING (gpu_id)"
    )[0] == (dt.datetime(2025, 9, 8, 9, 26, 50), 43, 81559.0)


# ---- job attribution ----------------------------------------------------------------------------------
def fake_proc(tmp_path: Path) -> Path:
    """A /proc tree: environ for one Slurm job, cgroups for another and for a Kubernetes pod, one unknown."""
    root = tmp_path / "proc"
    for pid, files in {
        101: {"environ": b"HOME=/root\0SLURM_JOB_ID=4242\0SLURM_CLUSTER_NAME=ci\0", "comm": b"python\n"},
        102: {
            "cgroup": b"0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n",
            "comm": b"torchrun\n",
        },
        103: {
            "cgroup": b"12:memory:/kubepods/burstable/pod1c2d3e4f-0000-4a4a-9b9b-123456789abc/f00d\n",
            "comm": b"triton\n",
        },
        104: {"cgroup": b"0::/user.slice/user-1000.slice/session-3.scope\n", "comm": b"jupyter\n"},
    }.items():
        (root / str(pid)).mkdir(parents=True)
        for name, data in files.items():
            (root / str(pid) / name).write_bytes(data)
    return root


def test_processes_jobs_and_allocations_from_proc_and_job_map(db_path: str, tmp_path: Path) -> None:
    path = dataset(XYPP3)
    job_map = tmp_path / "job-map"
    job_map.mkdir()
    write(job_map, "5", "5150\n")  # dcgm-exporter HPC map: GPU 5 runs job 5150 (no process visible)
    procs = {
        0: [ProcessReading(101, 2000 * MIB), ProcessReading(104, 100 * MIB)],
        1: [ProcessReading(102, 1000 * MIB), ProcessReading(103, 3000 * MIB)],  # pod has more memory
        2: [ProcessReading(104, 50 * MIB)],  # a process with no job
    }
    # a host-level allocation of job ci/4242 that sacct brought earlier must survive the sampler's flushes
    with writer(db_path) as con:
        con.execute(
            "INSERT INTO allocations (job_id, host, gpu_id, gpu_count, start_ts, end_ts, ingest_id) "
            "VALUES ('ci/4242', 'ws1', NULL, 1, '2025-09-08 09:00:00', NULL, 0)"
        )
    replay = ReplayNvml(path, columns=XYPP3_COLUMNS, processes=procs)
    replay_run(
        db_path,
        replay,
        3,
        interval_s=1.0,
        flush_s=60.0,
        cluster="ci",
        proc_root=fake_proc(tmp_path),
        job_map_dir=job_map,
    )

    assert rows(
        db_path,
        "SELECT gpu_id, pid, process_name, used_mem_mib, job_id, count(*) FROM processes GROUP BY ALL ORDER BY 1, 2",
    ) == [
        ("ws1:0", 101, "python", 2000.0, "ci/4242", 3),  # SLURM_JOB_ID + SLURM_CLUSTER_NAME from environ
        ("ws1:0", 104, "jupyter", 100.0, None, 3),
        ("ws1:1", 102, "torchrun", 1000.0, "ci/77", 3),  # job_77 in the cgroup path, --cluster prefix
        ("ws1:1", 103, "triton", 3000.0, "pod/1c2d3e4f-0000-4a4a-9b9b-123456789abc", 3),
        ("ws1:2", 104, "jupyter", 50.0, None, 3),
    ]
    # a sample belongs to the job holding the most memory on its GPU, else the job map's job, else none; a card
    # two jobs' processes share (ws1:1) is split between them (gpuledger/ledger/shares.py): its samples carry
    # the smallest job id and count for each holder by its share
    assert rows(db_path, "SELECT gpu_id, job_id, count(*) FROM samples GROUP BY ALL ORDER BY 1") == [
        ("ws1:0", "ci/4242", 3),
        ("ws1:1", "ci/77", 3),
        ("ws1:2", None, 3),
        ("ws1:3", None, 3),
        ("ws1:4", None, 3),
        ("ws1:5", "ci/5150", 3),
        ("ws1:6", None, 3),
        ("ws1:7", None, 3),
    ]
    assert rows(
        db_path, "SELECT job_id, sum(share) FROM gpu_shares WHERE gpu_id = 'ws1:1' GROUP BY 1 ORDER BY 1"
    ) == [
        ("ci/77", pytest.approx(0.5)),
        ("pod/1c2d3e4f-0000-4a4a-9b9b-123456789abc", pytest.approx(0.5)),
    ]
    # every job seen on a GPU holds it from first sighting (09:26:50) to last (09:26:53) + one interval
    first, end = dt.datetime(2025, 9, 8, 9, 26, 50), dt.datetime(2025, 9, 8, 9, 26, 54)
    assert rows(
        db_path,
        "SELECT job_id, host, gpu_id, gpu_count, start_ts, end_ts FROM allocations ORDER BY 1, 3 NULLS FIRST",
    ) == [
        ("ci/4242", "ws1", None, 1.0, dt.datetime(2025, 9, 8, 9, 0), None),
        ("ci/4242", "ws1", "ws1:0", 1.0, first, end),
        ("ci/5150", "ws1", "ws1:5", 1.0, first, end),
        ("ci/77", "ws1", "ws1:1", 1.0, first, end),
        ("pod/1c2d3e4f-0000-4a4a-9b9b-123456789abc", "ws1", "ws1:1", 1.0, first, end),
    ]


def test_allocation_spans_several_flushes(db_path: str, tmp_path: Path) -> None:
    """land() replaces a job's allocations per flush: the span must still start at the first sighting."""
    path = dataset(EOBO)
    replay = ReplayNvml(path, processes={0: [ProcessReading(101, 5000 * MIB)]})
    sampler = replay_run(db_path, replay, 200, interval_s=1.0, flush_s=30.0, proc_root=fake_proc(tmp_path))
    assert sampler.summary.flushes >= 6
    recorded = rows(
        db_path,
        f"""SELECT min(strptime(timestamp, '%Y/%m/%d %H:%M:%S.%g')), max(strptime(timestamp, '%Y/%m/%d %H:%M:%S.%g'))
            FROM (SELECT * FROM read_csv('{path}', delim=', ', header=true, all_varchar=true) LIMIT 200)""",
    )[0]
    assert rows(db_path, "SELECT job_id, start_ts, end_ts FROM allocations") == [
        ("ci/4242", recorded[0], recorded[1] + dt.timedelta(seconds=1))
    ]
    assert rows(db_path, "SELECT count(*) FROM samples WHERE job_id = 'ci/4242'") == [(200,)]


@pytest.mark.parametrize(
    ("cgroup", "job"),
    [
        ("0::/system.slice/slurmstepd.scope/job_123/step_batch/user/task_0", "c1/123"),  # cgroup v2
        ("7:devices:/slurm/uid_1000/job_98765/step_0", "c1/98765"),  # cgroup v1
        (
            "11:memory:/kubepods/besteffort/podab12cd34-5678-90ab-cdef-1234567890ab/0123abc",
            "pod/ab12cd34-5678-90ab-cdef-1234567890ab",
        ),
        (
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podab12cd34_5678_90ab_cdef_1234567890ab.slice/cri-containerd-1.scope",
            "pod/ab12cd34-5678-90ab-cdef-1234567890ab",
        ),
        ("0::/user.slice/user-1000.slice/session-2.scope", None),
        ("0::/system.slice/job_x.service", None),
    ],
)
def test_job_from_cgroup(cgroup: str, job: str | None) -> None:
    assert job_from_cgroup(cgroup + "\n", "c1") == job


def test_job_from_environ_prefers_the_jobs_own_cluster() -> None:
    assert job_from_environ(b"SLURM_JOB_ID=9\0SLURM_CLUSTER_NAME=gpu-a\0", "other") == "gpu-a/9"
    assert job_from_environ(b"SLURM_JOB_ID=9\0", None) == "9"
    assert job_from_environ(b"PATH=/bin\0", "c1") is None


# ---- events --------------------------------------------------------------------------------------------
class EccReplay(ReplayNvml):
    """The replay plus volatile ECC counters (nvidia-smi logs carry none): corrected count rises 0, 0, 2, 5."""

    corrected = (0, 0, 2, 5)

    def read(self, index: int) -> DeviceReading:
        n = self._cursor[index]
        reading = super().read(index)
        return dataclasses.replace(reading, ecc_corrected_total=self.corrected[n], ecc_uncorrected_total=0)


def test_ecc_increases_and_xids_become_gpu_events(db_path: str) -> None:
    replay = EccReplay(dataset(EOBO), xids=[(1, 0, 79), (3, 0, 13)])
    replay_run(db_path, replay, 4, interval_s=1.0, flush_s=60.0)
    assert rows(db_path, "SELECT ts, gpu_id, kind, value FROM gpu_events ORDER BY ts, kind") == [
        (dt.datetime(2026, 1, 3, 15, 36, 54, 512000), "ws1:0", "xid", "79"),
        (dt.datetime(2026, 1, 3, 15, 36, 55, 514000), "ws1:0", "ecc_sbe", "2"),  # 0 -> 2
        (dt.datetime(2026, 1, 3, 15, 36, 56, 518000), "ws1:0", "ecc_sbe", "3"),  # 2 -> 5
        (dt.datetime(2026, 1, 3, 15, 36, 56, 518000), "ws1:0", "xid", "13"),
    ]


# ---- the CLI process: signals, kill -9, no driver --------------------------------------------------------
def gpuledger_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpuledger", *args]


def start_replay(db: str, interval: float, flush: float) -> subprocess.Popen[str]:
    cmd = gpuledger_cmd(
        "collect",
        "nvml",
        "--replay",
        str(dataset(EOBO)),
        "--interval",
        str(interval),
        "--flush",
        str(flush),
        "--host",
        "ws1",
        "--db",
        db,
    )
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_lines(
    proc: subprocess.Popen[str], prefix: str, count: int, timeout_s: float = 30.0
) -> list[str]:
    """Read stderr until ``count`` lines start with ``prefix``; fail with what it said otherwise."""
    assert proc.stderr is not None
    seen: list[str] = []
    matched = 0
    deadline = time.monotonic() + timeout_s
    while matched < count:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([proc.stderr], [], [], max(left, 0))
        if not ready:
            proc.kill()
            pytest.fail(f"no {count} x {prefix!r} within {timeout_s} s; stderr so far: {seen}")
        line = proc.stderr.readline()
        if not line:
            pytest.fail(f"sampler exited early (rc {proc.wait()}); stderr: {seen}")
        seen.append(line.rstrip())
        matched += line.startswith(prefix)
    return seen


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def test_sigterm_flushes_what_is_buffered_and_exits_0(db_path: str) -> None:
    proc = start_replay(db_path, interval=0.05, flush=600)  # no periodic flush will come
    wait_for_lines(proc, "nvml: sampling 1 GPU(s)", 1)
    time.sleep(1.0)
    asked = utc_now()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "nvml: flushed" in err and out.startswith("nvml: ")
    n, last, ingests = rows(db_path, "SELECT count(*), max(ts), (SELECT count(*) FROM ingests) FROM samples")[
        0
    ]
    assert ingests == 1  # the only write was the one the signal triggered
    assert n >= 5
    assert (asked - last).total_seconds() <= 0.05 + 1.0  # nothing sampled before the signal was dropped


def test_kill_9_loses_at_most_one_flush_interval(db_path: str) -> None:
    """kill -9 loses only the samples of the flush in progress: every flush the sampler reported is in the
    ledger, whole, and what is missing spans at most one flush period as this machine achieved it (measured
    here between the sampler's own flush lines, so a loaded CI box does not turn into a failure)."""
    interval, flush = 0.05, 0.5
    proc = start_replay(db_path, interval=interval, flush=flush)
    wait_for_lines(proc, "nvml: flushed", 2)
    arrivals = []
    for _ in range(3):
        wait_for_lines(proc, "nvml: flushed", 1)
        arrivals.append(time.monotonic())
    period = max(b - a for a, b in itertools.pairwise(arrivals))
    time.sleep(0.3)
    killed = utc_now()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    n, last, ingests = rows(db_path, "SELECT count(*), max(ts), (SELECT count(*) FROM ingests) FROM samples")[
        0
    ]
    assert ingests >= 5 and n >= 5  # the 5 flushes it reported are all there
    lost_s = (killed - last).total_seconds()
    assert lost_s <= max(period, flush) + interval + 0.5, (
        f"lost {lost_s:.2f} s of samples at kill -9 (flush period here {period:.2f} s)"
    )
    # the ledger is intact: every committed flush is whole (its rows_json count equals its rows)
    assert rows(
        db_path,
        """SELECT count(*) FROM ingests i WHERE CAST(json_extract(rows_json, '$.samples') AS BIGINT)
                  <> (SELECT count(*) FROM samples s WHERE s.ingest_id = i.ingest_id)""",
    ) == [(0,)]


def test_missing_nvml_is_one_line_and_exit_1(db_path: str) -> None:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVML driver")
    proc = subprocess.run(
        gpuledger_cmd("collect", "nvml", "--duration", "1", "--db", db_path),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == ["error: NVML not available: NVML Shared Library Not Found"]
    assert proc.stdout == ""


# ---- a live flush is held to the same physical ranges as a file ----------------------------------------
def test_a_bad_reading_is_left_out_and_recorded_without_stopping_the_collector(
    db_path: str, tmp_path: Path
) -> None:
    # four readings of one RTX 4090 at 1 s; the third says 250 % utilization and -300 W (a driver glitch)
    path = write(
        tmp_path,
        "gpu.csv",
        "timestamp, name, utilization.gpu [%], utilization.memory [%], memory.used [MiB], power.draw [W]\n"
        "2026/01/03 15:36:53.000, NVIDIA GeForce RTX 4090, 96 %, 40 %, 17959 MiB, 305.81 W\n"
        "2026/01/03 15:36:54.000, NVIDIA GeForce RTX 4090, 97 %, 41 %, 17959 MiB, 306.00 W\n"
        "2026/01/03 15:36:55.000, NVIDIA GeForce RTX 4090, 250 %, 41 %, 17959 MiB, -300 W\n"
        "2026/01/03 15:36:56.000, NVIDIA GeForce RTX 4090, 95 %, 40 %, 17959 MiB, 304.00 W\n",
    )
    sampler = replay_run(db_path, ReplayNvml(path), 4, interval_s=1.0, flush_s=60.0)
    assert sampler.summary.samples == 4
    assert rows(db_path, "SELECT count(*), max(util_pct), min(power_w) FROM samples") == [(3, 97.0, 304.0)]
    rejected = rows(db_path, "SELECT path, table_name, count(*) FROM rejected_rows GROUP BY ALL")
    assert rejected == [("nvml://ws1", "samples", 1)]
    ((ingest_id, skipped),) = rows(db_path, "SELECT ingest_id, skipped_json FROM ingests")
    assert json.loads(skipped) == {
        f"rows outside their physical range (rejected_rows of ingest #{ingest_id})": 1
    }


# ---- lost reads are counted once, in the flush that follows them ---------------------------------------
class LossyReplay(ReplayNvml):
    """The replay, but the GPU read fails (DeviceLost, as a GPU fallen off the bus) in the given rounds; the
    row it would have read is replayed in the next round instead."""

    def __init__(self, path: Path, lost_rounds: set[int]) -> None:
        super().__init__(path)
        self.lost_rounds = lost_rounds

    def read(self, index: int) -> DeviceReading:
        if self._round in self.lost_rounds:
            raise DeviceLost(f"GPU {index} lost in round {self._round}")
        return super().read(index)


def test_each_flush_records_only_its_own_lost_reads(db_path: str) -> None:
    # one GPU at ~1 s; a lost round reads no row, so the recorded clock stands still. Rounds 0-3 read
    # 15:36:53.5, lost, 54.5, 55.5; the clock then says 56.5, 3 s after the first: flush 1 (3 samples, 1 lost).
    # Rounds 4-6 read 56.5-58.5, clock 59.5: flush 2 (3 samples, none lost). Round 7 lost, 8-9 read 59.5 and
    # 00.5, then max_ticks: the final flush (2 samples, 1 lost). 1 + 0 + 1 = the run's 2 lost reads.
    sampler = replay_run(db_path, LossyReplay(dataset(EOBO), {1, 7}), 10, interval_s=1.0, flush_s=3.0)
    assert sampler.summary.lost_reads == 2 and sampler.summary.samples == 8
    flushes = rows(
        db_path,
        """SELECT CAST(json_extract(rows_json, '$.samples') AS BIGINT), skipped_json FROM ingests
           ORDER BY ingest_id""",
    )
    # was 1, 1, 2: each flush recorded the run's running total, counting the first lost read three times
    assert [(n, json.loads(skipped).get("lost GPU reads", 0)) for n, skipped in flushes] == [
        (3, 1),
        (3, 0),
        (2, 1),
    ]
