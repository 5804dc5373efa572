"""``gpuledger collect nvml``: sample every GPU and GPU process through NVML into the ledger.

Each round (every ``--interval`` seconds) reads, per GPU, utilization, memory utilization, memory used/total,
power, the total-energy counter, temperature, SM clock, clocks-event (throttle) reasons, the volatile ECC
counters and, on Hopper and newer where the driver supports GPM, SM and tensor activity; per compute
process its pid, used memory and the job it belongs to (collectors/proc_jobs.py); and any XID events.

Rows wait in bounded in-memory column buffers and are written every ``--flush`` seconds in ONE transaction
through :func:`collectors.landing.land_and_record` (samples, gpus, processes, allocations, gpu_events), with provenance
``nvml://<host>`` and a unique hash per flush, and the collector's cursor in ``collector_state``. Each flush
opens the ledger, writes and closes it (gpuledger.ledger.db.writer), so the dashboard keeps reading in between.
SIGTERM/SIGINT stop the loop, flush what is buffered and exit 0; a ``kill -9`` loses at most the rows of
the flush interval in progress (committed flushes are durable). Units are converted once, in the flush SQL:
bytes → MiB, mW → W, mJ → J.

Job attribution: a sample's ``job_id`` is the job of the process holding the most GPU memory (else the
dcgm-exporter job map's job for that GPU); every job seen on a GPU gets an allocation row on that GPU from
its first to its last sighting (+ one interval), merged with the allocation rows the ledger already has.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import duckdb
import pyarrow as pa

from collectors.base import IngestOptions, next_ingest_id, run_in_transaction
from collectors.landing import land_and_record
from collectors.nvml_api import DeviceInfo, DeviceLost, NvmlApi
from collectors.proc_jobs import ProcJobs, jobs_from_mapping_dir
from collectors.validate import screen_live
from gpuledger.ledger.db import writer
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.reference import normalize_model
from gpuledger.ledger.sample_time import interval_sql

MIB = 1024 * 1024
FORMAT = "nvml"

_SAMPLE_TYPES: dict[str, pa.DataType] = {
    "ts": pa.timestamp("us"),
    "gpu_id": pa.string(),
    "util_gpu_pct": pa.float64(),
    "util_mem_pct": pa.float64(),
    "mem_used_bytes": pa.int64(),
    "mem_total_bytes": pa.int64(),
    "power_mw": pa.int64(),
    "energy_mj": pa.int64(),
    "temp_c": pa.float64(),
    "sm_clock_mhz": pa.float64(),
    "clocks_event_reasons": pa.uint64(),
    "sm_active_pct": pa.float64(),
    "tensor_active_pct": pa.float64(),
    "job_id": pa.string(),
}
_PROCESS_TYPES: dict[str, pa.DataType] = {
    "ts": pa.timestamp("us"),
    "gpu_id": pa.string(),
    "pid": pa.int64(),
    "process_name": pa.string(),
    "used_mem_bytes": pa.int64(),
    "job_id": pa.string(),
}
_EVENT_TYPES: dict[str, pa.DataType] = {
    "ts": pa.timestamp("us"),
    "gpu_id": pa.string(),
    "kind": pa.string(),
    "value": pa.string(),
}


class Clock(Protocol):
    """Where the sampler gets its time: the wall clock, or a replay's recorded timestamps."""

    def now(self) -> dt.datetime:
        """Naive UTC."""
        ...

    def wait(self, seconds: float) -> None:
        """Sleep, returning early when the sampler is asked to stop."""
        ...


class SystemClock:
    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC).replace(tzinfo=None)

    def wait(self, seconds: float) -> None:
        if seconds > 0:
            self.stop.wait(seconds)  # a signal handler that sets ``stop`` wakes this at once


class Columns:
    """Column lists that become one Arrow table per flush; row count bounded by the caller."""

    def __init__(self, types: dict[str, pa.DataType]) -> None:
        self.types = types
        self.data: dict[str, list[Any]] = {c: [] for c in types}

    def __len__(self) -> int:
        return len(self.data["ts"])

    def append(self, **row: Any) -> None:
        for col, values in self.data.items():
            values.append(row.get(col))

    def drop_oldest(self, n: int) -> None:
        for values in self.data.values():
            del values[:n]

    def clear(self) -> None:
        for values in self.data.values():
            values.clear()

    def table(self) -> pa.Table:
        return pa.table({c: pa.array(v, type=self.types[c]) for c, v in self.data.items()})


@dataclass
class RunSummary:
    ticks: int = 0
    samples: int = 0
    processes: int = 0
    events: int = 0
    flushes: int = 0
    ingest_ids: list[int] = field(default_factory=list)
    dropped_samples: int = 0  # only when the ledger stayed unwritable past the buffer cap
    lost_reads: int = 0  # GPU polls that failed (GPU lost, replay exhausted)
    flush_errors: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class NvmlSampler:
    """The sampling loop and its flushes; independent of the CLI so tests and the bench drive it directly."""

    def __init__(
        self,
        api: NvmlApi,
        *,
        db: str | None,
        interval_s: float = 10.0,
        flush_s: float = 60.0,
        host: str | None = None,
        cluster: str | None = None,
        proc_root: str | Path = "/proc",
        job_map_dir: str | Path | None = None,
        opts: IngestOptions | None = None,
        clock: Clock | None = None,
        stop: threading.Event | None = None,
        max_buffer_rows: int = 200_000,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.api = api
        self.db = db
        self.interval_s = float(interval_s)
        self.flush_s = float(flush_s)
        self.host = host or socket.gethostname().split(".")[0]
        self.cluster = cluster
        self.proc_jobs = ProcJobs(proc_root, cluster=cluster)
        self.job_map_dir = job_map_dir
        self.opts = opts or IngestOptions(cluster=cluster)
        self.stop = stop or threading.Event()
        self.clock = clock or SystemClock(self.stop)
        self.max_buffer_rows = max_buffer_rows
        self.flush_rows = max(1, max_buffer_rows // 4)  # flush early when a long interval fills the buffer
        self.log = log or (lambda _msg: None)
        self.samples = Columns(_SAMPLE_TYPES)
        self.procs = Columns(_PROCESS_TYPES)
        self.events = Columns(_EVENT_TYPES)
        self.devices: list[DeviceInfo] = []
        self.gpu_ids: dict[int, str] = {}
        self._alloc: dict[tuple[str, str], list[dt.datetime]] = {}  # (job, gpu) -> [first, last] seen
        self._ecc: dict[str, tuple[int | None, int | None]] = {}
        self.summary = RunSummary()
        # lost reads since the last flush that landed: each flush records its own (summary.lost_reads is the
        # run's total), and a failed flush leaves them for the next one with the rows it kept
        self._lost_unflushed = 0

    # ---- the loop -------------------------------------------------------------------------------------
    def run(self, *, duration_s: float | None = None, max_ticks: int | None = None) -> RunSummary:
        """Sample until stopped (signal), ``duration_s`` elapses or ``max_ticks`` rounds ran; flush; return."""
        started = time.perf_counter()
        self.api.start()
        try:
            self.devices = self.api.devices()
            self.gpu_ids = {d.index: d.uuid or f"{self.host}:{d.index}" for d in self.devices}
            self.log(f"nvml: sampling {len(self.devices)} GPU(s) on {self.host} every {self.interval_s:g} s")
            first = self.clock.now()
            last_flush = first
            while not self.stop.is_set():
                tick_ts = self.clock.now()
                if duration_s is not None and (tick_ts - first).total_seconds() >= duration_s:
                    break
                self.sample_once(tick_ts)
                if max_ticks is not None and self.summary.ticks >= max_ticks:
                    break
                now = self.clock.now()
                if (now - last_flush).total_seconds() >= self.flush_s or len(self.samples) >= self.flush_rows:
                    self.flush()
                    last_flush = now
                self.clock.wait(self.interval_s - (self.clock.now() - tick_ts).total_seconds())
        finally:
            try:
                self.flush(final=True)
            finally:
                self.api.stop()
                self.summary.seconds = time.perf_counter() - started
        return self.summary

    def sample_once(self, ts: dt.datetime) -> None:
        """One round over every GPU: buffer a sample, its processes and any ECC/XID events."""
        gpu_jobs = jobs_from_mapping_dir(self.job_map_dir, self.cluster) if self.job_map_dir else {}
        seen_pids: set[int] = set()
        for dev in self.devices:
            gpu_id = self.gpu_ids[dev.index]
            try:
                r = self.api.read(dev.index)
                procs = self.api.processes(dev.index)
            except DeviceLost:
                self.summary.lost_reads += 1
                self._lost_unflushed += 1
                continue
            best_job, best_mem = gpu_jobs.get(dev.index), -1
            jobs_here = {best_job} if best_job else set()
            for p in procs:
                seen_pids.add(p.pid)
                job, name = self.proc_jobs.lookup(p.pid)
                self.procs.append(
                    ts=ts,
                    gpu_id=gpu_id,
                    pid=p.pid,
                    process_name=name,
                    used_mem_bytes=p.used_mem_bytes,
                    job_id=job,
                )
                if job:
                    jobs_here.add(job)
                    if (p.used_mem_bytes or 0) > best_mem:
                        best_job, best_mem = job, p.used_mem_bytes or 0
            for job in jobs_here:
                span = self._alloc.setdefault((job, gpu_id), [ts, ts])
                span[1] = ts
            self.samples.append(
                ts=ts,
                gpu_id=gpu_id,
                util_gpu_pct=r.util_gpu_pct,
                util_mem_pct=r.util_mem_pct,
                mem_used_bytes=r.mem_used_bytes,
                mem_total_bytes=r.mem_total_bytes
                if r.mem_total_bytes is not None
                else dev.memory_total_bytes,
                power_mw=r.power_mw,
                energy_mj=r.energy_mj,
                temp_c=r.temp_c,
                sm_clock_mhz=r.sm_clock_mhz,
                clocks_event_reasons=r.clocks_event_reasons,
                sm_active_pct=r.sm_active_pct,
                tensor_active_pct=r.tensor_active_pct,
                job_id=best_job,
            )
            self._ecc_events(ts, gpu_id, r.ecc_corrected_total, r.ecc_uncorrected_total)
        for index, xid in self.api.xid_events():
            self.events.append(
                ts=ts, gpu_id=self.gpu_ids.get(index, f"{self.host}:{index}"), kind="xid", value=str(xid)
            )
        self.proc_jobs.keep_only(seen_pids)
        self.summary.ticks += 1
        self._bound_buffers()

    def _ecc_events(
        self, ts: dt.datetime, gpu_id: str, corrected: int | None, uncorrected: int | None
    ) -> None:
        """An ECC event is a rise of the volatile counter between two polls; value = errors added."""
        before = self._ecc.get(gpu_id)
        self._ecc[gpu_id] = (corrected, uncorrected)
        if before is None:
            return
        for kind, old, new in (("ecc_sbe", before[0], corrected), ("ecc_dbe", before[1], uncorrected)):
            if old is not None and new is not None and new > old:
                self.events.append(ts=ts, gpu_id=gpu_id, kind=kind, value=str(new - old))

    def _bound_buffers(self) -> None:
        excess = len(self.samples) - self.max_buffer_rows
        if excess > 0:  # the ledger has been unwritable for long: keep the newest rows
            self.samples.drop_oldest(excess)
            self.summary.dropped_samples += excess
        for buf in (self.procs, self.events):
            if len(buf) > self.max_buffer_rows:
                buf.drop_oldest(len(buf) - self.max_buffer_rows)

    # ---- the flush ------------------------------------------------------------------------------------
    def flush(self, *, final: bool = False) -> int | None:
        """Write the buffers in one transaction; return the ingest id, or None when there was nothing.

        A failed periodic flush (database busy past the writer's timeout) keeps the rows for the next one.
        """
        if not len(self.samples) and not len(self.procs) and not len(self.events):
            return None
        try:
            with writer(self.db) as con:
                ingest_id = run_in_transaction(con, lambda: self._land(con)).ingest_id
        except (LedgerError, duckdb.Error) as exc:
            self.summary.flush_errors += 1
            self.log(f"nvml: flush failed, keeping {len(self.samples)} samples for the next one: {exc}")
            if final:
                raise
            return None
        n = len(self.samples)
        self.summary.samples += n
        self.summary.processes += len(self.procs)
        self.summary.events += len(self.events)
        self.summary.flushes += 1
        self.summary.ingest_ids.append(int(ingest_id or 0))
        self._lost_unflushed = 0
        last = self.samples.data["ts"][-1] if n else None
        self.samples.clear()
        self.procs.clear()
        self.events.clear()
        if last is not None:  # jobs not seen for 10 minutes live on in the ledger; forget them here
            horizon = last - dt.timedelta(minutes=10)
            self._alloc = {k: v for k, v in self._alloc.items() if v[1] >= horizon}
        self.log(f"nvml: flushed {n} samples (ingest #{ingest_id})")
        return ingest_id

    def _land(self, con: duckdb.DuckDBPyConnection) -> Any:
        from collectors.base import IngestReport

        ingest_id = next_ingest_id(con)
        self._stage(con)
        source = f"nvml://{self.host}"
        skipped = screen_live(con, ingest_id, source)
        if self._lost_unflushed:
            skipped["lost GPU reads"] = self._lost_unflushed
        span = self.samples.data["ts"]
        marker = f"{self.host}|{span[0] if span else ''}|{span[-1] if span else ''}|{uuid.uuid4()}"
        rows = land_and_record(
            con,
            ingest_id,
            self.opts,
            source=source,
            source_key=source,
            sha256=hashlib.sha256(marker.encode()).hexdigest(),
            fmt=FORMAT,
            skipped=skipped,
        )
        if span:
            con.execute(
                """INSERT OR REPLACE INTO collector_state VALUES (?, ?, ?, ?)""",
                [
                    f"nvml:{self.host}",
                    max(span),
                    dt.datetime.now(dt.UTC).replace(tzinfo=None),
                    json.dumps({"gpus": len(self.devices), "interval_s": self.interval_s}),
                ],
            )
        return IngestReport(source, FORMAT, ingest_id, rows)

    def _stage(self, con: duckdb.DuckDBPyConnection) -> None:
        """Create the stage_* tables from the buffers, converting NVML units to the ledger's in SQL."""
        nominal = self.interval_s
        con.register("nvml_samples", self.samples.table())
        con.register("nvml_procs", self.procs.table())
        con.register("nvml_events", self.events.table())
        try:
            con.execute(
                f"""
                CREATE TEMP TABLE stage_samples AS
                WITH spaced AS (
                    SELECT *, epoch(lead(ts) OVER (PARTITION BY gpu_id ORDER BY ts) - ts) AS gap_s
                    FROM nvml_samples
                )
                SELECT ts, gpu_id,
                       CAST({interval_sql("CASE WHEN gap_s > 0 THEN gap_s END", str(nominal))} AS FLOAT) AS interval_s,
                       util_gpu_pct AS util_pct, util_mem_pct AS mem_util_pct,
                       mem_used_bytes / {MIB} AS mem_used_mib, mem_total_bytes / {MIB} AS mem_total_mib,
                       power_mw / 1000.0 AS power_w, energy_mj / 1000.0 AS energy_j, temp_c,
                       sm_active_pct, tensor_active_pct, sm_clock_mhz,
                       clocks_event_reasons AS throttle_reasons, job_id
                FROM spaced ORDER BY ts, gpu_id
                """
            )
            con.execute(
                f"""CREATE TEMP TABLE stage_processes AS
                    SELECT ts, gpu_id, pid, process_name, used_mem_bytes / {MIB} AS used_mem_mib, job_id
                    FROM nvml_procs"""
            )
            con.execute(
                "CREATE TEMP TABLE stage_gpu_events AS SELECT ts, gpu_id, kind, value FROM nvml_events"
            )
        finally:
            for name in ("nvml_samples", "nvml_procs", "nvml_events"):
                con.unregister(name)
        self._stage_gpus(con)
        self._stage_allocations(con)

    def _stage_gpus(self, con: duckdb.DuckDBPyConnection) -> None:
        rows = [
            (
                self.gpu_ids[d.index],
                d.uuid,
                self.host,
                d.index,
                normalize_model(d.name),
                d.name,
                d.memory_total_bytes / MIB if d.memory_total_bytes is not None else None,
                self.cluster,
            )
            for d in self.devices
        ]
        con.execute(
            """CREATE TEMP TABLE stage_gpus (gpu_id VARCHAR, uuid VARCHAR, host VARCHAR, gpu_index INTEGER,
                   model VARCHAR, model_raw VARCHAR, memory_total_mib DOUBLE, cluster VARCHAR)"""
        )
        if rows:
            con.executemany("INSERT INTO stage_gpus VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def _stage_allocations(self, con: duckdb.DuckDBPyConnection) -> None:
        """Allocations of the jobs seen in this batch: ours (first..last sighting on each GPU, widened by
        what the ledger already holds for that job and GPU) plus the job's other rows, kept as they are
        (land() replaces a job's allocations wholesale)."""
        span = self.samples.data["ts"]
        if not span or not self._alloc:
            return
        batch_start = min(span)
        mine = [
            (job, self.host, gpu, first, last + dt.timedelta(seconds=self.interval_s))
            for (job, gpu), (first, last) in self._alloc.items()
            if last >= batch_start
        ]
        if not mine:
            return
        con.execute(
            """CREATE TEMP TABLE nvml_alloc (job_id VARCHAR, host VARCHAR, gpu_id VARCHAR,
                   start_ts TIMESTAMP, end_ts TIMESTAMP)"""
        )
        con.executemany("INSERT INTO nvml_alloc VALUES (?, ?, ?, ?, ?)", mine)
        con.execute(
            """
            CREATE TEMP TABLE stage_allocations AS
            SELECT a.job_id, a.host, a.gpu_id, a.gpu_count, a.start_ts, a.end_ts
            FROM allocations a
            WHERE a.job_id IN (SELECT job_id FROM nvml_alloc)
              AND NOT EXISTS (SELECT 1 FROM nvml_alloc m WHERE m.job_id = a.job_id AND m.gpu_id = a.gpu_id)
            UNION ALL
            SELECT m.job_id, m.host, m.gpu_id, 1.0 AS gpu_count,
                   least(m.start_ts, coalesce(e.start_ts, m.start_ts)) AS start_ts,
                   greatest(m.end_ts, coalesce(e.end_ts, m.end_ts)) AS end_ts
            FROM nvml_alloc m
            LEFT JOIN (SELECT job_id, gpu_id, min(start_ts) AS start_ts, max(end_ts) AS end_ts
                       FROM allocations GROUP BY job_id, gpu_id) e USING (job_id, gpu_id)
            """
        )
        con.execute("DROP TABLE temp.nvml_alloc")
