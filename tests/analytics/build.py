"""Hand-built ledgers for the analytics tests, landed through the real write path (collectors.landing.land).

Prices are replaced by round test prices so every expected figure can be worked out by hand:
H100-SXM-80GB on_demand $4.00/GPU-h, spot $1.00/GPU-h, T4 on_demand $0.50/GPU-h.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import duckdb
import polars as pl

from collectors.base import IngestOptions, drop_stage, land, next_ingest_id
from gpuledger.ledger.reference import rollup_thresholds
from gpuledger.ledger.rollup import ensure_rollup
from gpuledger.ledger.settings import Settings

H100 = "H100-SXM-80GB"
T0 = dt.datetime(2025, 3, 3)  # a Monday, ISO week 2025-W10

TEST_PRICES = [
    (H100, "on_demand", None, dt.date(2025, 1, 1), 4.0),
    (H100, "spot", None, dt.date(2025, 1, 1), 1.0),
    ("T4", "on_demand", None, dt.date(2025, 1, 1), 0.5),
]


def set_test_prices(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("DELETE FROM prices")
    for model, tier, cluster, day, usd in TEST_PRICES:
        con.execute(
            "INSERT INTO prices VALUES (?, ?, ?, ?, ?, 'test price', ?, 'sheet', NULL)",
            [model, tier, cluster, day, usd, day],
        )


def sync_thresholds(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    """Rebuild the rollups for ``settings``' thresholds, as every entry point's sync does
    (gpuledger.ledger.reference.sync_reference_in) before it reads; the test's prices stay. Call it after the
    last ingest: :func:`ingest` lands with the default thresholds, so a later one rebuilds for those (the
    analytics then raise RollupMismatch for ``settings``)."""
    con.execute("BEGIN TRANSACTION")
    ensure_rollup(con, rollup_thresholds(settings))
    con.execute("COMMIT")


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def job(job_id: str, start_min: float, end_min: float | None, **fields: Any) -> dict[str, Any]:
    row = {
        "job_id": job_id,
        "source": "test",
        "cluster": "c1",
        "user_name": "alice",
        "team": "nlp",
        "name": job_id,
        "kind": "training",
        "gpu_model": H100,
        "gpu_count": 1.0,
        "pricing_tier": "on_demand",
        "start_ts": at(start_min),
        "end_ts": at(end_min) if end_min is not None else None,
        "state": "COMPLETED",
        "last_checkpoint_ts": None,
    }
    row.update(fields)
    return row


def series(gpu_id: str, start_min: float, utils: list[float | None], step_s: float = 60.0, **cols: Any):
    """One sample every ``step_s`` seconds from ``start_min``, with the given utilizations."""
    return [
        {
            "ts": T0 + dt.timedelta(minutes=start_min, seconds=i * step_s),
            "gpu_id": gpu_id,
            "util_pct": u,
            **cols,
        }
        for i, u in enumerate(utils)
    ]


def ingest(
    con: duckdb.DuckDBPyConnection,
    *,
    jobs: list[dict[str, Any]] = (),  # type: ignore[assignment]
    allocations: list[dict[str, Any]] = (),  # type: ignore[assignment]
    samples: list[dict[str, Any]] = (),  # type: ignore[assignment]
    gpus: list[dict[str, Any]] = (),  # type: ignore[assignment]
    training_runs: list[dict[str, Any]] = (),  # type: ignore[assignment]
    opts: IngestOptions | None = None,
) -> int:
    """Stage the given rows and land them in one transaction, like a parser would."""
    con.execute("BEGIN TRANSACTION")
    try:
        iid = next_ingest_id(con)
        for name, rows in (
            ("jobs", jobs),
            ("allocations", allocations),
            ("samples", samples),
            ("gpus", gpus),
            ("training_runs", training_runs),
        ):
            if rows:
                df = pl.DataFrame(list(rows), infer_schema_length=None)
                con.register("stage_df", df)
                con.execute(f"CREATE TEMP TABLE stage_{name} AS SELECT * FROM stage_df")
                con.unregister("stage_df")
        land(con, iid, opts or IngestOptions())
        con.execute(
            "INSERT INTO ingests VALUES (?, 'test', 'test', ?, 'test', '{}', '{}', now()::TIMESTAMP)",
            [iid, f"sha-{iid}"],
        )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    finally:
        drop_stage(con)
    return iid


def alloc(job_id: str, gpu_id: str, start_min: float, end_min: float | None) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "host": gpu_id.split(":")[0],
        "gpu_id": gpu_id,
        "gpu_count": 1.0,
        "start_ts": at(start_min),
        "end_ts": at(end_min) if end_min is not None else None,
    }


def gpu(gpu_id: str, model: str = H100, cluster: str = "c1") -> dict[str, Any]:
    return {"gpu_id": gpu_id, "host": gpu_id.split(":")[0], "model": model, "cluster": cluster}
