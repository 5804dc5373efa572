"""A month's bill per team (``gpuledger chargeback``).

- **used**: the month's spend of the team's jobs at the price in force (analytics/daily.py, the same cut as every
  view: a job across the month's bounds pays for its days inside it);
- **the pool**: what no team used: capacity no job held (``unallocated``) and telemetry no job claimed
  (``unattributed``);
- **shared**: the team's part of the pool by the rule chosen: ``none`` (the pool stays its own lines),
  ``proportional`` (to the team's used $, as OpenCost shares idle cost) or ``even`` (equal parts among the
  teams that used any);
- **total** = used + shared.

Cents: every line is a whole number of cents and the lines add up to the fleet's spend rounded to the cent,
exactly (largest remainders: a line is never off by more than one cent from its exact share).
**GPU units** (``rgu``): GPU-hours weighted per model by its catalog peaks against an A100-40GB, after Mila
SARC's RGU (A100-40GB = 4.0): 4 × the mean of the model's fp16 TFLOP/s, fp32 TFLOP/s and memory, each over the
A100-40GB's. A unit compares work across models; the $ are the bill.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import duckdb
import polars as pl

from analytics.capacity import UNALLOCATED
from analytics.daily import spend_by_period
from analytics.filters import Filters, horizon
from analytics.periods import buckets_sql, job_bucket_costs_sql
from analytics.query import frame
from gpuledger.budgets.periods import period_bounds
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.settings import Settings

RULES = ("none", "proportional", "even")
UNATTRIBUTED = "unattributed"
POOL = (UNALLOCATED, UNATTRIBUTED)
RGU_REFERENCE = "A100-40GB"
RGU_REFERENCE_UNITS = 4.0


def month_bounds(month: str) -> tuple[dt.date, dt.date]:
    """``2026-11`` → its first and last day."""
    try:
        first = dt.date.fromisoformat(f"{month}-01")
    except ValueError:
        raise LedgerError(f"--month: not a month like 2026-11: {month!r}") from None
    return period_bounds(first, "month")


def split_cents(total_cents: int, weights: list[float]) -> list[int]:
    """``total_cents`` split in proportion to ``weights`` (non-negative, not all zero) into whole cents that add
    up to it exactly: each part's floor, then one cent more to the largest remainders (ties: the first)."""
    whole = sum(weights)
    exact = [total_cents * w / whole for w in weights]
    parts = [int(e // 1) for e in exact]
    left = total_cents - sum(parts)
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - parts[i]), i))
    for i in order[:left]:
        parts[i] += 1
    return parts


def rgu_weights(con: duckdb.DuckDBPyConnection) -> dict[str, float]:
    """Model → GPU units per GPU-hour (module docstring); empty when the catalog lacks the reference."""
    rows = con.execute("SELECT model, fp16_tflops, fp32_tflops, memory_mib FROM gpu_catalog").fetchall()
    ref = next((r for r in rows if r[0] == RGU_REFERENCE), None)
    if ref is None:
        return {}
    return {
        m: RGU_REFERENCE_UNITS * ((f16 / ref[1]) + (f32 / ref[2]) + (mem / ref[3])) / 3
        for m, f16, f32, mem in rows
    }


def _units(con: duckdb.DuckDBPyConnection, f: Filters, as_of: dt.datetime | None) -> dict[str, float]:
    """team → GPU units used in the view (GPU-hours × the model's units)."""
    weights = rgu_weights(con)
    sql, params = job_bucket_costs_sql(f, as_of, buckets_sql([("m", f)]))
    rows = frame(
        con,
        f"SELECT coalesce(team, '(none)') AS team, gpu_model, sum(gpu_hours) AS h FROM ({sql}) GROUP BY ALL",
        params,
    )
    out: dict[str, float] = {}
    for team, model, hours in rows.iter_rows():
        out[team] = out.get(team, 0.0) + (hours or 0.0) * weights.get(model, 0.0)
    return out


def chargeback(
    con: duckdb.DuckDBPyConnection,
    month: str,
    *,
    share_idle: str = "proportional",
    settings: Settings,
    teams: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The month's bill: ``rows`` (team, used_usd, shared_usd, total_usd, gpu_units), ``fleet_spend_usd`` (their
    totals' sum, to the cent) and the rule. ``teams`` keeps only those teams' rows, computed over the whole
    fleet, so a team's line is the same with or without the filter."""
    if share_idle not in RULES:
        raise LedgerError(f"--share-idle: must be one of {', '.join(RULES)}, got {share_idle!r}")
    first, last = month_bounds(month)
    view = Filters(first, last)
    as_of = horizon(con)
    spend = spend_by_period(con, [("m", view)], by="team", settings=settings, as_of=as_of)
    used = {k: v for k, v in spend.select("key", "spend_usd").iter_rows() if k not in POOL}
    pool = {k: v for k, v in spend.select("key", "spend_usd").iter_rows() if k in POOL}
    fleet = sum(used.values()) + sum(pool.values())
    fleet_cents = round(fleet * 100)
    names = sorted(used)
    weights = (
        [used[n] for n in names]
        if share_idle == "proportional"
        else [1.0 if used[n] > 0 else 0.0 for n in names]
    )
    shares = share_idle != "none" and bool(pool) and any(weights)
    note = None
    if share_idle != "none" and pool and not shares:
        note = "no team used GPUs in the month: what no team used stays its own lines"
    lines = names + ([] if shares else [p for p in POOL if p in pool])
    if not shares:
        # no sharing: the pool's own lines carry it, every line to the cent, adding up to the fleet
        exact = [used[n] for n in names] + [pool[p] for p in lines[len(names) :]]
        used_cents = split_cents(fleet_cents, exact) if any(exact) else [0] * len(lines)
        shared_cents = [0] * len(lines)
    else:
        # the used lines to the cent first, then the pool's cents (the rest of the fleet's) shared by the rule
        used_cents = split_cents(round(sum(used.values()) * 100), [used[n] for n in names])
        shared_cents = split_cents(fleet_cents - sum(used_cents), weights)
    units = _units(con, view, as_of)
    rows = []
    for i, name in enumerate(lines):
        rows.append(
            {
                "team": name,
                "used_usd": used_cents[i] / 100,
                "shared_usd": shared_cents[i] / 100,
                "total_usd": (used_cents[i] + shared_cents[i]) / 100,
                "gpu_units": round(units.get(name, 0.0), 3) if name not in POOL else None,
            }
        )
    if teams:
        rows = [r for r in rows if r["team"] in teams]
    return {
        "month": month,
        "period_start": first.isoformat(),
        "period_end": last.isoformat(),
        "share_idle": share_idle,
        "fleet_spend_usd": fleet_cents / 100,
        "pool_usd": {k: round(v, 2) for k, v in sorted(pool.items())},
        "rows": rows,
        "rgu_reference": f"{RGU_REFERENCE} = {RGU_REFERENCE_UNITS:g}",
        "note": note,
    }


def to_frame(bill: dict[str, Any]) -> pl.DataFrame:
    return pl.DataFrame(
        bill["rows"],
        schema={
            "team": pl.Utf8,
            "used_usd": pl.Float64,
            "shared_usd": pl.Float64,
            "total_usd": pl.Float64,
            "gpu_units": pl.Float64,
        },
    )
