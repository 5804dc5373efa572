"""The demo fleet: a deterministic, realistic ledger that every analysis has something to find in.

:func:`build_demo` turns the plan of gpuledger/demo/fleet.py (fleet and people), demo_planted.py (the twelve
planted scenarios of the waste-and-demo contract) and demo_workload.py (thousands of ordinary jobs) into
``stage_*`` tables — jobs, allocations with ``gpu_id`` (so samples are attributed by the same rule as real
data), training runs, GPUs, capacity, and 60 s telemetry computed with numpy in time order (telemetry.py) — and lands them with
:func:`collectors.landing.land` inside one transaction, recorded in ``ingests`` with format ``demo`` and a
content hash of (seed, days, end): building the same demo twice is a no-op, and a different demo replaces
the earlier one. The same seed, days and end date give an identical ledger. docs/demo.md lists what is in it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from collectors.base import (
    IngestOptions,
    IngestReport,
    delete_ingests,
    land,
    next_ingest_id,
    quote,
    record_ingest,
    run_in_transaction,
    split_sample_notes,
)
from gpuledger.demo.fleet import (
    DAY,
    EPISODE_EVERY_S,
    EPISODE_S,
    Fleet,
    Grid,
    Job,
    build_fleet,
)
from gpuledger.demo.planted import outages, plant_episode
from gpuledger.demo.telemetry import telemetry_chunks
from gpuledger.demo.workload import background
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.job_states import RUNNING
from gpuledger.ledger.settings import Settings

DEFAULT_DAYS = 28
DEFAULT_SEED = 7
DEFAULT_END = dt.date(2026, 11, 23)  # a Monday: the demo is reproducible, --end moves it
MIN_DAYS = 2  # one copy of the planted scenarios needs two days
FORMAT = "demo"
SOURCE_KEY = "demo"
VERSION = 1  # bump when the generator changes what a (seed, days, end) produces

# borealis is on-prem: its A100s cost an amortized rate, a per-cluster price row the demo adds.
ONPREM_PRICE_USD = 1.10
ONPREM_PRICE_SOURCE = (
    "demo fleet: amortized on-prem A100-80GB = DGX A100 list price $199,000 / 8 GPUs / 3 years "
    "(26,280 h) = $0.95, plus $0.15 power, cooling and hosting"
)
CAPACITY = (("borealis", "A100-80GB", 32.0),)
# DuckDB's memory limit while the demo builds into a file (see _bounded_memory), leaving room for Python's
# ~300 MiB (interpreter, plan, one chunk of telemetry) under the demo's 1 GiB budget. Measured on 28 days
# with the time-order telemetry: 1,484 MiB peak RSS (1,978 MiB before): DuckDB's own memory still grows past
# its limit with the window (issue 11), and the spilling costs CPU (7 days at 500 MB: +7 %).
DEMO_MEMORY_LIMIT = "400MB"


def demo_hash(*, days: int, seed: int, end: dt.date) -> str:
    """The ingest's content hash: what makes re-building the same demo a no-op."""
    return hashlib.sha256(f"gpuledger-demo v{VERSION} days={days} seed={seed} end={end}".encode()).hexdigest()


def window(days: int, end: dt.date) -> tuple[dt.datetime, dt.datetime]:
    """[start, end) of the demo in naive UTC: ``days`` whole days ending at midnight of ``end``."""
    hi = dt.datetime.combine(end, dt.time())
    return hi - dt.timedelta(days=days), hi


def make_plan(*, days: int, seed: int) -> tuple[Fleet, list[Job]]:
    """The fleet and every job, with ids; planted scenarios first, background around them."""
    rng = np.random.default_rng(seed)
    fleet = build_fleet()
    window_s = days * DAY
    grid = Grid(len(fleet.gpus), window_s)
    jobs: list[Job] = []
    e0, ep = 0, 0
    while e0 + EPISODE_S <= window_s:
        for job in plant_episode(fleet, rng, e0, ep, window_s):
            if not grid.free(job.gpus, job.start_s, job.end_s).all():
                raise AssertionError(f"planted job {job.name} overlaps another")
            grid.take(job.gpus, job.start_s, job.end_s)
            jobs.append(job)
        e0, ep = e0 + EPISODE_EVERY_S, ep + 1
    jobs.extend(background(fleet, grid, rng, window_s))
    jobs.sort(key=lambda j: (j.start_s - j.submit_wait_s, j.name))
    for n, job in enumerate(jobs):
        job.job_id = f"{job.cluster}/{410001 + n}"
    return fleet, jobs


def _register(
    con: duckdb.DuckDBPyConnection, name: str, columns: dict[str, tuple[pa.DataType, list[Any]]]
) -> None:
    table = pa.table({c: pa.array(v, type=t) for c, (t, v) in columns.items()})
    con.register(f"{name}_arrow", table)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM {name}_arrow")
    con.unregister(f"{name}_arrow")


def _stage_jobs(
    con: duckdb.DuckDBPyConnection, fleet: Fleet, jobs: list[Job], lo: dt.datetime, window_s: int
) -> None:
    def at(seconds: int | None) -> dt.datetime | None:
        return None if seconds is None else lo + dt.timedelta(seconds=seconds)

    running = [j.end_s > window_s for j in jobs]
    ts = pa.timestamp("us")
    _register(
        con,
        "stage_jobs",
        {
            "job_id": (pa.string(), [j.job_id for j in jobs]),
            "source": (pa.string(), [FORMAT] * len(jobs)),
            "cluster": (pa.string(), [j.cluster for j in jobs]),
            "user_name": (pa.string(), [j.user for j in jobs]),
            "team": (pa.string(), [j.team for j in jobs]),
            "project": (pa.string(), [j.project for j in jobs]),
            "name": (pa.string(), [j.name for j in jobs]),
            "kind": (pa.string(), [j.kind for j in jobs]),
            "gpu_model": (pa.string(), [fleet.gpus[j.gpus[0]].spec.model for j in jobs]),
            "gpu_count": (pa.float64(), [float(len(j.gpus)) for j in jobs]),
            "pricing_tier": (pa.string(), [j.tier or fleet.clusters[j.cluster].tier for j in jobs]),
            "submit_ts": (ts, [at(j.start_s - j.submit_wait_s) for j in jobs]),
            "start_ts": (ts, [at(j.start_s) for j in jobs]),
            "end_ts": (ts, [None if r else at(j.end_s) for j, r in zip(jobs, running, strict=True)]),
            "state": (pa.string(), [RUNNING if r else j.state for j, r in zip(jobs, running, strict=True)]),
            "exit_reason": (
                pa.string(),
                [None if r else j.exit_reason for j, r in zip(jobs, running, strict=True)],
            ),
            "last_checkpoint_ts": (ts, [at(j.checkpoint_s) for j in jobs]),
        },
    )
    alloc = [(j, g, r) for j, r in zip(jobs, running, strict=True) for g in j.gpus]
    _register(
        con,
        "stage_allocations",
        {
            "job_id": (pa.string(), [j.job_id for j, _, _ in alloc]),
            "host": (pa.string(), [fleet.gpus[g].host for _, g, _ in alloc]),
            "gpu_id": (pa.string(), [fleet.gpus[g].gpu_id for _, g, _ in alloc]),
            "gpu_count": (pa.float64(), [1.0] * len(alloc)),
            "start_ts": (ts, [at(j.start_s) for j, _, _ in alloc]),
            "end_ts": (ts, [None if r else at(j.end_s) for j, _, r in alloc]),
        },
    )
    runs = [j for j in jobs if j.run]
    keys = sorted({k for j in runs for k in j.run or {}})
    text = {"model", "precision", "optimizer"}
    ints = {"n_layers", "hidden_size", "batch_size", "grad_accum", "global_batch_size", "seq_len", "steps"}
    cols: dict[str, tuple[pa.DataType, list[Any]]] = {
        "job_id": (pa.string(), [j.job_id for j in runs]),
        "source": (pa.string(), [FORMAT] * len(runs)),
    }
    for k in keys:
        typ = pa.string() if k in text else pa.int64() if k in ints else pa.float64()
        cols[k] = (typ, [(j.run or {}).get(k) for j in runs])
    _register(con, "stage_training_runs", cols)


def _stage_telemetry(
    con: duckdb.DuckDBPyConnection, fleet: Fleet, jobs: list[Job], lo: dt.datetime, window_s: int, seed: int
) -> None:
    """``stage_samples`` from gpuledger/demo/telemetry.py's Arrow table; interval_s and job_id stay NULL
    so that land() derives the interval and attributes samples through the allocations, as for real data."""
    gaps = outages(fleet, window_s)
    chunks = telemetry_chunks(
        fleet, jobs, lo=np.datetime64(lo, "us"), window_s=window_s, seed=seed, gaps=gaps
    )
    # a day of polls at a time, appended in time order: Python holds one chunk's columns and the stage
    # grows at its end. (borealis-n00's outages leave its GPUs out of some polls, so land() takes its
    # general path rather than the whole-polls one; the samples table is written in time order either way.)
    for i, table in enumerate(chunks):
        con.register("demo_samples_arrow", table)
        cols = ", ".join("gpu_id::VARCHAR AS gpu_id" if c == "gpu_id" else c for c in table.column_names)
        into = "CREATE TEMP TABLE stage_samples AS" if i == 0 else "INSERT INTO stage_samples"
        con.execute(f"{into} SELECT {cols} FROM demo_samples_arrow")
        con.unregister("demo_samples_arrow")
        del table


def _stage_fleet(con: duckdb.DuckDBPyConnection, fleet: Fleet, lo: dt.datetime, hi: dt.datetime) -> None:
    ts = pa.timestamp("us")
    gpus = fleet.gpus
    _register(
        con,
        "stage_gpus",
        {
            "gpu_id": (pa.string(), [g.gpu_id for g in gpus]),
            "uuid": (pa.string(), [g.gpu_id for g in gpus]),
            "host": (pa.string(), [g.host for g in gpus]),
            "gpu_index": (pa.int32(), [g.index for g in gpus]),
            "model": (pa.string(), [g.spec.model for g in gpus]),
            "model_raw": (pa.string(), [g.spec.model_raw for g in gpus]),
            "memory_total_mib": (pa.float64(), [g.spec.memory_mib for g in gpus]),
            "cluster": (pa.string(), [g.cluster for g in gpus]),
        },
    )
    _register(
        con,
        "stage_capacity",
        {
            "cluster": (pa.string(), [c for c, _, _ in CAPACITY]),
            "gpu_model": (pa.string(), [m for _, m, _ in CAPACITY]),
            "gpu_count": (pa.float64(), [n for _, _, n in CAPACITY]),
            "start_ts": (ts, [lo] * len(CAPACITY)),
            "end_ts": (ts, [hi] * len(CAPACITY)),
        },
    )


def _stage_onprem_price(lo: dt.datetime) -> str:
    """borealis's amortized A100 price, as per-cluster rows for the tiers its GPU-hours can be priced at.

    on_prem prices its jobs; on_demand is the tier analytics fall back to for capacity nobody allocated
    (when settings name no tier for the cluster), and an owned GPU costs the same whoever asks. The rows are
    staged like any source-declared price, so they belong to the demo's ingest and survive settings changes.
    """
    rows = ", ".join(
        f"('A100-80GB', '{tier}', 'borealis', DATE '{(lo - dt.timedelta(days=365)).date()}', "
        f"{ONPREM_PRICE_USD}, {quote(ONPREM_PRICE_SOURCE)}, DATE '2026-01-15')"
        for tier in ("on_prem", "on_demand")
    )
    return f"""CREATE TEMP TABLE stage_prices AS SELECT * FROM (VALUES {rows})
               v(gpu_model, tier, cluster, effective_from, usd_per_gpu_hour, source, source_date)"""


def build_demo(
    con: duckdb.DuckDBPyConnection,
    *,
    days: int = DEFAULT_DAYS,
    seed: int = DEFAULT_SEED,
    end: dt.date | None = None,
    settings: Settings | None = None,
) -> dict[str, int]:
    """Fill the ledger behind ``con`` (a writer connection, no open transaction) with the demo fleet.

    Returns rows written per table ({} when this very demo is already in the ledger). A demo with another
    seed, length or end date replaces the earlier demo. ``settings`` supplies the thresholds the rollup is
    built with (default: the defaults). Raises ``LedgerError`` for fewer than 2 days.
    """
    if days < MIN_DAYS:
        raise LedgerError(f"the demo needs at least {MIN_DAYS} days (got {days})")
    end = end or DEFAULT_END
    digest = demo_hash(days=days, seed=seed, end=end)
    if con.execute("SELECT count(*) FROM ingests WHERE content_sha256 = ?", [digest]).fetchall()[0][0]:
        return {}
    settings = settings or Settings()
    opts = IngestOptions.from_settings(settings)
    lo, hi = window(days, end)
    window_s = days * DAY
    fleet, jobs = make_plan(days=days, seed=seed)
    started = time.perf_counter()

    def work() -> IngestReport:
        earlier = [
            int(r[0])
            for r in con.execute(
                "SELECT ingest_id FROM ingests WHERE source_key = ?", [SOURCE_KEY]
            ).fetchall()
        ]
        delete_ingests(
            con,
            earlier,
            idle_util_pct=opts.idle_util_pct,
            idle_min_minutes=opts.idle_min_minutes,
            target_util_pct=opts.target_util_pct,
        )
        ingest_id = next_ingest_id(con)
        _stage_fleet(con, fleet, lo, hi)
        _stage_jobs(con, fleet, jobs, lo, window_s)
        _stage_telemetry(con, fleet, jobs, lo, window_s, seed)
        con.execute(_stage_onprem_price(lo))
        rows, skipped = split_sample_notes(land(con, ingest_id, opts))
        path = f"demo://fleet?days={days}&seed={seed}&end={end}"
        record_ingest(
            con,
            ingest_id,
            path=path,
            source_key=SOURCE_KEY,
            sha256=digest,
            fmt=FORMAT,
            rows=rows,
            skipped=skipped,
        )
        return IngestReport(
            path, FORMAT, ingest_id, rows, skipped, replaced=earlier, seconds=time.perf_counter() - started
        )

    with _bounded_memory(con):
        return run_in_transaction(con, work).rows


@contextmanager
def _bounded_memory(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """DuckDB's memory limit lowered to DEMO_MEMORY_LIMIT for the build, then put back.

    The writer's 1 GB limit bounds DuckDB's buffer pool, not the process: with the interpreter, the plan
    and DuckDB's allocations outside the pool, the 28-day build peaked near 2 GiB. The demo's budget is
    1 GiB for the whole process, so it gives DuckDB less and lets the rollup spill to the ledger's
    ``.tmp`` folder. A limit the user chose ($GPULEDGER_MEMORY_LIMIT) is left alone, and so is an
    in-memory ledger (tests, the upload page), which has nowhere to spill to.
    """
    on_file = con.execute(
        "SELECT path IS NOT NULL AND path <> '' FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchall()
    if os.environ.get("GPULEDGER_MEMORY_LIMIT") or not (on_file and on_file[0][0]):
        yield
        return
    # put back as DuckDB prints it (to 0.1 of its unit): the writer's limit, give or take 0.1 MiB
    before = con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    con.execute(f"SET memory_limit = '{DEMO_MEMORY_LIMIT}'")
    try:
        yield
    finally:
        con.execute(f"SET memory_limit = '{str(before).replace(chr(39), '')}'")


def ensure_demo(
    db_path: str | os.PathLike[str] | None = None,
    *,
    settings: Settings | None = None,
    days: int = DEFAULT_DAYS,
    seed: int = DEFAULT_SEED,
    end: dt.date | None = None,
    before_build: Callable[[], None] | None = None,
) -> bool:
    """Fill the ledger at ``db_path`` with the demo when it has no jobs and no samples; True when it did.
    ``before_build`` is called just before building (``gpuledger dashboard`` says it takes about 30 s).

    For ``gpuledger dashboard``: a fresh clone opens on a dashboard full of believable data. ``settings``
    (default: :func:`gpuledger.ledger.settings.load_settings`) are synced into the ledger first and give the
    rollup's thresholds. A ledger with any job or sample of its own is left alone.
    """
    from gpuledger.ledger.db import reader, sync_reference, writer
    from gpuledger.ledger.settings import load_settings

    db = str(db_path) if db_path else None
    settings = settings or load_settings()
    sync_reference(db, settings)
    empty = "SELECT (SELECT count(*) FROM jobs) + (SELECT count(*) FROM samples)"
    with reader(db) as con:
        if con.execute(empty).fetchall()[0][0]:
            return False
    with writer(db) as con:
        if con.execute(empty).fetchall()[0][0]:  # another process filled it meanwhile
            return False
        if before_build is not None:
            before_build()
        build_demo(con, days=days, seed=seed, end=end, settings=settings)
    return True
