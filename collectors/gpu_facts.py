"""Pricing a file whose jobs name no GPU: ``gpuledger ingest --gpu-model MODEL --gpu-count N``.

A training log (Hugging Face, LLaMA-Factory, Lightning) says how long a run trained but not on what, so its
job lands with no GPU model, ``gpu_count`` 0 and no start or end, and costs nothing. Given the GPUs that ran
it, each job of the file that names no GPU model or count gets MODEL × N; one with no start or end runs for
its logged runtime (``training_runs.runtime_s``) ending at the ingest, one with a start but no end ends at the
ingest. The log does not say when it ran, so the price in force on the ingest's day applies. A log that
records no runtime (a checkpoint's ``trainer_state.json``: only the final one has ``train_runtime``) takes
the run's wall time from the user (``hours``, the Upload page's field): a job with neither a start and end
nor a logged runtime then runs for those hours; a runtime the log records always wins. Nothing is done
when no job of the file could be timed (no start and end, no logged runtime, no hours given).

The rule runs on the staged rows, before validation and landing (collectors/ingest.py ``ingest_file``), so
the CLI and the Upload page (gpuledger/upload/) price a log the same way, through the same option.
"""

from __future__ import annotations

import datetime as dt
import difflib
from dataclasses import dataclass

import duckdb

from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.reference import catalog, normalize_model

MAX_GPU_COUNT = 100_000  # the Upload page's field allows as many
MAX_WALL_HOURS = 24 * 366  # a year: the wall time field's bound (collectors/validate.py caps a job's length)


@dataclass(frozen=True)
class GpuFacts:
    """What ran a file's jobs that name no GPU: a catalog model, a count of GPUs and, for a log that records
    no runtime, the run's wall time in hours (None: the log's own)."""

    model: str
    count: float
    hours: float | None = None


def gpu_facts(model: str, count: float, hours: float | None = None) -> GpuFacts:
    """``model`` as a catalog model (its own name or a name the catalog's patterns recognise, e.g. "NVIDIA
    H100 80GB HBM3") and ``count`` checked; an unknown model is refused naming the closest catalog names."""
    known = sorted(m.model for m in catalog())
    found = model.strip() if model.strip() in known else normalize_model(model)
    if found is None:
        asked = model.strip().lower()
        by_lower = {m.lower(): m for m in known}
        close = [m for m in by_lower if asked and asked in m]  # "h100" → both H100s
        close += [
            m for m in difflib.get_close_matches(asked, list(by_lower), n=3, cutoff=0.4) if m not in close
        ]
        hint = f"; close matches: {', '.join(by_lower[c] for c in close[:4])}" if close else ""
        raise LedgerError(
            f"--gpu-model {model[:80]!r} is not in the GPU catalog{hint} (the catalog: {', '.join(known)})"
        )
    if not 0 < count <= MAX_GPU_COUNT:
        raise LedgerError(f"--gpu-count must be a number of GPUs from 1 to {MAX_GPU_COUNT:,}, got {count:g}")
    if hours is not None and not 0 < hours <= MAX_WALL_HOURS:
        raise LedgerError(f"the wall time must be from 0 to {MAX_WALL_HOURS:,} hours, got {hours:g}")
    return GpuFacts(found, float(count), None if hours is None else float(hours))


_NO_GPU = "gpu_model IS NULL OR coalesce(gpu_count, 0) = 0"


def price_staged_jobs(
    con: duckdb.DuckDBPyConnection, gpu: GpuFacts, at: dt.datetime | None = None
) -> str | None:
    """Give the staged jobs that name no GPU ``gpu`` (see the module); ``at``: the ingest's time (UTC,
    naive; default now). Returns the assumption in words, or None when no staged job could be timed."""
    at = at or dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    staged = {
        r[0]
        for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'temp'").fetchall()
    }
    if "stage_jobs" not in staged:
        return None
    have = {r[0] for r in con.execute("SELECT column_name FROM (DESCRIBE stage_jobs)").fetchall()}
    for col, typ in (
        ("gpu_model", "VARCHAR"),
        ("gpu_count", "DOUBLE"),
        ("start_ts", "TIMESTAMP"),
        ("end_ts", "TIMESTAMP"),
    ):
        if col not in have:
            con.execute(f"ALTER TABLE stage_jobs ADD COLUMN {col} {typ}")
    runtime = "NULL::DOUBLE"
    if "stage_training_runs" in staged and "runtime_s" in {
        r[0] for r in con.execute("SELECT column_name FROM (DESCRIBE stage_training_runs)").fetchall()
    }:
        runtime = "(SELECT max(r.runtime_s) FROM stage_training_runs r WHERE r.job_id = stage_jobs.job_id)"
    given = f"{gpu.hours * 3600.0!r}::DOUBLE" if gpu.hours else "NULL::DOUBLE"  # a float's repr: no injection
    logged = runtime
    runtime = f"coalesce({logged}, {given})"
    rows = con.execute(
        f"SELECT {logged}, start_ts IS NOT NULL AND end_ts IS NOT NULL FROM stage_jobs WHERE {_NO_GPU}"
    ).fetchall()
    typed = gpu.hours * 3600.0 if gpu.hours else None
    # (seconds it ran by the log or the user, timed by its own start and end, timed by the typed hours)
    runs = [(r[0] or (None if r[1] else typed), r[1], r[0] is None and not r[1] and typed) for r in rows]
    timed = [r for r in runs if r[1] or r[0]]
    if not timed:
        return None
    con.execute(
        f"""UPDATE stage_jobs SET gpu_model = ?, gpu_count = ?,
                start_ts = coalesce(start_ts, ?::TIMESTAMP - to_seconds(round({runtime})::BIGINT)),
                end_ts = coalesce(end_ts, ?::TIMESTAMP)
            WHERE {_NO_GPU}""",
        [gpu.model, gpu.count, at, at],
    )
    hours = sum((r[0] or 0.0) for r in timed) / 3600.0
    basis = "the wall time you gave" if any(r[2] for r in timed) else "the logged runtime"
    return (
        f"{gpu.count:g} × {gpu.model} for {basis} ({hours:,.2f} h), at the price in force today "
        "(the log does not say when it ran)"
    )
