"""The GPU catalog and the price sheet: shipped as data in data/, mirrored into the ledger.

The ledger's ``gpu_catalog`` and ``prices`` tables are what every cost query joins against, so a number on a
page, in a report and in ``--json`` comes from one place. They are rebuilt from data/gpu_catalog.toml,
data/prices.toml and the user's settings whenever the settings' fingerprint changes (:func:`sync_reference`).
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import tomllib
from dataclasses import dataclass

import duckdb

from gpuledger.ledger.errors import SettingsError
from gpuledger.ledger.paths import shipped
from gpuledger.ledger.settings import PriceRow, Settings, parse_price_rows

DATA = shipped("data")
CATALOG_FILE = DATA / "gpu_catalog.toml"
PRICES_FILE = DATA / "prices.toml"


@dataclass(frozen=True)
class GpuModel:
    model: str
    vendor: str
    memory_mib: int
    bf16_tflops: float | None
    fp16_tflops: float
    fp32_tflops: float
    tdp_w: float
    mig_capable: bool
    match: tuple[str, ...]
    source: str
    interconnect: str = "pcie"  # nvlink | xgmi | pcie: the GPU-to-GPU link (data/gpu_catalog.toml)
    tf32_tflops: float | None = None  # dense TF32 tensor peak; None where the card has none
    fp8_tflops: float | None = None  # dense FP8 tensor peak; None where the card has none


@functools.cache
def catalog() -> tuple[GpuModel, ...]:
    raw = tomllib.loads(CATALOG_FILE.read_text(encoding="utf-8"))
    return tuple(
        GpuModel(
            model=name,
            vendor=body["vendor"],
            memory_mib=int(body["memory_mib"]),
            bf16_tflops=body.get("bf16_tflops"),
            fp16_tflops=float(body["fp16_tflops"]),
            fp32_tflops=float(body["fp32_tflops"]),
            tdp_w=float(body["tdp_w"]),
            mig_capable=bool(body["mig_capable"]),
            match=tuple(body["match"]),
            source=body["source"],
            interconnect=body.get("interconnect", "pcie"),
            tf32_tflops=body.get("tf32_tflops"),
            fp8_tflops=body.get("fp8_tflops"),
        )
        for name, body in raw.items()
    )


@functools.cache
def _patterns() -> tuple[tuple[re.Pattern[str], str], ...]:
    return tuple((re.compile(p, re.IGNORECASE), m.model) for m in catalog() for p in m.match)


# bounded: keyed by whatever names the files report (a dashboard and a collector run for weeks)
@functools.lru_cache(maxsize=4096)
def normalize_model(name: str | None) -> str | None:
    """Map a reported GPU name ("NVIDIA H100 80GB HBM3", "Tesla T4", "a100_3g.20gb") to a catalog model."""
    if not name:
        return None
    text = name.strip()[:256].replace("_", " ")  # no model name is longer; a search stays bounded
    models = {m.model for m in catalog()}
    if text in models:
        return text
    for pattern, model in _patterns():
        if pattern.search(text):
            return model
    return None


def model_sql_case(column: str) -> str:
    """A SQL CASE expression mapping ``column`` to a catalog model: lets collectors normalize in DuckDB."""
    arms = []
    models = sorted({m.model for m in catalog()})
    quoted = ", ".join("'" + m.replace("'", "''") + "'" for m in models)
    arms.append(f"WHEN replace({column}, '_', ' ') IN ({quoted}) THEN replace({column}, '_', ' ')")
    for pattern, model in _patterns():
        arms.append(
            f"WHEN regexp_matches(replace({column}, '_', ' '), '{pattern.pattern.replace(chr(39), chr(39) * 2)}', 'i') "
            f"THEN '{model}'"
        )
    return "CASE " + " ".join(arms) + " ELSE NULL END"


@functools.cache
def shipped_prices() -> tuple[PriceRow, ...]:
    raw = tomllib.loads(PRICES_FILE.read_text(encoding="utf-8"))
    return parse_price_rows(PRICES_FILE, raw.get("price", []))


def effective_prices(settings: Settings) -> list[PriceRow]:
    """Shipped rows, with a user row replacing the shipped one of the same (model, tier, cluster, date)."""
    known = {m.model for m in catalog()}
    for i, row in enumerate(settings.prices):
        if row.gpu_model not in known:
            raise SettingsError(
                settings.source, f"price[{i}].gpu_model", f"{row.gpu_model!r} is not in the GPU catalog"
            )
    merged: dict[tuple[str, str, str | None, object], PriceRow] = {}
    for row in (*shipped_prices(), *settings.prices):
        merged[(row.gpu_model, row.tier, row.cluster, row.effective_from)] = row
    return list(merged.values())


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[list[object]]) -> None:
    """All ``rows`` in one ``INSERT … VALUES`` statement: ``executemany`` runs one statement a row, which made
    the ~90 rows of catalog and prices most of a new ledger's cost (~60 ms of ~150 ms, measured)."""
    if not rows:
        return
    one = "(" + ", ".join("?" * len(rows[0])) + ")"
    con.execute(
        f"INSERT INTO {table} VALUES {', '.join([one] * len(rows))}", [v for row in rows for v in row]
    )


def load_reference(con: duckdb.DuckDBPyConnection, settings: Settings | None = None) -> None:
    """Replace the catalog and price tables; the caller owns the transaction."""
    settings = settings or Settings()
    con.execute("DELETE FROM gpu_catalog")
    _insert(
        con,
        "gpu_catalog",
        [
            [
                m.model,
                m.vendor,
                m.memory_mib,
                m.bf16_tflops,
                m.fp16_tflops,
                m.fp32_tflops,
                m.tdp_w,
                m.mig_capable,
                m.source,
                m.tf32_tflops,
                m.fp8_tflops,
            ]
            for m in catalog()
        ],
    )
    # Rows a source declared (origin 'ingest') stay: they belong to their ingest.
    con.execute("DELETE FROM prices WHERE ingest_id IS NULL")
    from_settings = set(settings.prices)
    _insert(
        con,
        "prices",
        [
            [
                p.gpu_model,
                p.tier,
                p.cluster,
                p.effective_from,
                p.usd_per_gpu_hour,
                p.source,
                p.source_date,
                "settings" if p in from_settings else "sheet",
                None,  # ingest_id: the sheet's and the settings' rows belong to no ingest
            ]
            for p in effective_prices(settings)
        ],
    )
    # Capacity declared in settings (the GPUs an organisation pays for, used or not) lives beside the
    # capacity that traces declare; ingest_id 0 marks the settings' rows.
    con.execute("DELETE FROM capacity WHERE ingest_id = 0")
    declared = [
        [cluster, cap.gpu_model, cap.gpu_count]
        for cluster, body in settings.clusters.items()
        for cap in body.capacity
    ]
    _insert(con, "capacity", [[*row, dt.datetime(1970, 1, 1), None, 0] for row in declared])
    con.execute(
        "INSERT OR REPLACE INTO schema_meta VALUES ('settings_fingerprint', ?)", [settings.fingerprint()]
    )


def reference_is_current(con: duckdb.DuckDBPyConnection, settings: Settings) -> bool:
    rows = con.execute("SELECT value FROM schema_meta WHERE key = 'settings_fingerprint'").fetchall()
    return bool(rows) and rows[0][0] == settings.fingerprint()


def sync_reference(path: str | None, settings: Settings) -> bool:
    """Make the ledger's catalog and prices reflect ``settings``; returns True when it had to write."""
    from gpuledger.ledger.db import reader, writer
    from gpuledger.ledger.rollup import rollup_matches

    with reader(path) as con:
        if reference_is_current(con, settings) and rollup_matches(con, _thresholds(settings)):
            return False
    with writer(path) as con:
        return sync_reference_in(con, settings)


def sync_reference_in(con: duckdb.DuckDBPyConnection, settings: Settings) -> bool:
    """:func:`sync_reference` on a writer the caller already holds (the CLI's ingest opens one writer for
    the sync and the files, not a reader and two writers: 0.05-0.1 s of a small ingest). Runs its own
    transaction, so call it outside one."""
    from gpuledger.ledger.rollup import ensure_rollup, rollup_matches

    th = _thresholds(settings)
    if reference_is_current(con, settings) and rollup_matches(con, th):
        return False
    effective_prices(settings)  # validate before touching anything
    con.execute("BEGIN TRANSACTION")
    try:
        load_reference(con, settings)
        ensure_rollup(con, th)  # the fast path's rollups follow the settings' thresholds
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return True


def _thresholds(settings: Settings) -> tuple[float, float, float]:
    from gpuledger.ledger.rollup import thresholds

    return thresholds(settings.idle_util_pct, settings.idle_min_minutes, settings.target_util_pct)
