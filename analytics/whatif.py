"""What-if: the view's headline figures before and after a set of changes, with the assumptions stated.

Plain functions over what the dashboard already has (``analytics.summary.summary``'s dict, the
``analytics.jobs.jobs_table`` frame, the ``analytics.recommend.recommendations`` frame and the ledger's
prices in force, gpuledger.ledger.prices.PriceBook), so the arithmetic is testable by hand:

- **recommendations** taken: each chosen item's ``counted_saving_usd`` over the view (analytics.savings: a
  dollar two chosen items both claim is counted once) leaves the spend and the waste;
- **team X on spot**: each job of team X that is not already priced at spot is repriced at the spot price of
  its GPU model on its cluster: ``gpu_hours × spot $/GPU-h``; the difference to its ``cost_usd`` leaves the spend (a job
  whose model has no spot price, or whose spot price is not lower, is left as it is and counted);
- **GPU model Y instead of Z**: each job on Z is repriced at Y's price of the same tier as Z's (``gpu_hours ×
  Y $/GPU-h``, the same GPU-hours: no speed-up or slow-down is assumed).

Repricing moves money, not waste: after a price change the waste parts keep their share of the spend
(each part scaled by after/before spend). Utilization and GPU-hours are not recomputed (the same work runs).

:func:`capacity_utilization_pct` is the Overview's capacity figure: held-GPU utilization spread over the
paid-for capacity, unheld capacity counted at 0 %.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from gpuledger.ledger.prices import PriceBook

WASTE_KEYS = ("idle_allocated_usd", "underused_usd", "failed_usd", "unallocated_usd")


def capacity_utilization_pct(
    mean_util_pct: float | None, held_gpu_hours: float, unallocated_gpu_hours: float
) -> float | None:
    """``mean_util_pct × held / (held + unallocated)``: the utilization of every paid-for GPU-hour, the
    hours no job held counted at 0 %. None when the held utilization is unknown or there is no time."""
    total = held_gpu_hours + unallocated_gpu_hours
    if mean_util_pct is None or total <= 0:
        return None
    return mean_util_pct * held_gpu_hours / total


@dataclass(frozen=True)
class Change:
    """One line of the what-if: what it is, the $ it takes out of the view's spend, and its assumption."""

    what: str
    saving_usd: float
    assumption: str
    jobs: int = 0
    from_waste: bool = False  # True: the saving is waste removed (recommendations); False: a repricing


@dataclass(frozen=True)
class WhatIf:
    before: dict[str, float | None]
    after: dict[str, float | None]
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _figures(s: dict[str, Any]) -> dict[str, float | None]:
    w = s["waste"]
    out: dict[str, float | None] = {
        "spend_usd": float(s["spend_usd"]),
        "waste_usd": float(s["waste_usd"]),
        "gpu_hours": float(s["gpu_hours"]),
        "mean_util_pct": s.get("mean_util_pct"),
    }
    for k in (*WASTE_KEYS, "productive_usd", "unmeasured_usd"):
        out[k] = float(w[k])
    return out


def recommendations_change(chosen: pl.DataFrame) -> Change | None:
    """The chosen recommendation rows (with ``counted_saving_usd`` from analytics.savings.with_counted over
    the chosen rows only) as one change."""
    if chosen.is_empty():
        return None
    saved = float(chosen["counted_saving_usd"].sum())
    listed = float(chosen["saving_usd"].sum())
    note = "each dollar counted once" + (
        f" (the items list ${listed:,.2f}; ${listed - saved:,.2f} of it is the same dollars twice)"
        if listed - saved >= 0.005
        else ""
    )
    return Change(
        f"{chosen.height:,} recommendation(s) taken",
        saved,
        f"the saving each item states for this view, {note}; every saved dollar was waste",
        from_waste=True,
    )


def reprice_team_on_spot(jobs: pl.DataFrame, team: str, prices: PriceBook) -> Change:
    """Team ``team``'s jobs at their GPU model's spot price (see the module docstring)."""
    saving = 0.0
    moved = 0
    no_price: set[str] = set()
    for j in jobs.filter(pl.col("team") == team).iter_rows(named=True):
        hours, cost, model = j["gpu_hours"] or 0.0, j["cost_usd"], j["gpu_model"]
        if cost is None or hours <= 0 or model is None:
            continue
        spot = prices.offered(model, "spot", j.get("cluster"))
        if spot is None:
            no_price.add(model)
            continue
        new = hours * spot
        if new < cost - 0.005:
            saving += cost - new
            moved += 1
    text = (
        "the same GPU-hours at the spot price of each job's GPU model; restarts after a preemption are not "
        "counted (checkpoint often)"
    )
    if no_price:
        text += f"; no spot price for {', '.join(sorted(no_price))}: those jobs stay as they are"
    return Change(f"team {team} on spot", saving, text, moved)


def reprice_model(jobs: pl.DataFrame, old: str, new: str, prices: PriceBook, tier: str) -> Change:
    """Jobs on ``old`` repriced at ``new``'s ``tier`` price (the same GPU-hours)."""
    new_price = prices.offered(new, tier)  # fleet-wide: the generic rows
    rows = jobs.filter((pl.col("gpu_model") == old) & pl.col("cost_usd").is_not_null())
    if new_price is None:
        return Change(f"{new} instead of {old}", 0.0, f"no {tier} price for {new}: nothing repriced", 0)
    cost = float(rows["cost_usd"].sum()) if rows.height else 0.0
    hours = float(rows["gpu_hours"].sum()) if rows.height else 0.0
    return Change(
        f"{new} instead of {old}",
        cost - hours * new_price,
        f"the same {hours:,.1f} GPU-hours at {new}'s {tier} price (${new_price:,.2f}/GPU-h): no speed-up or "
        "slow-down assumed; a negative saving means the change costs more",
        rows.height,
    )


def after_model_change(jobs: pl.DataFrame, old: str, new: str, prices: PriceBook, tier: str) -> pl.DataFrame:
    """``jobs`` as they would be after :func:`reprice_model`: the jobs on ``old`` now on ``new`` at its
    ``tier`` price, so that a later change (a team on spot) reprices them once, from there."""
    new_price = prices.offered(new, tier)  # fleet-wide: the generic rows
    if new_price is None:
        return jobs
    on_old = (pl.col("gpu_model") == old) & pl.col("cost_usd").is_not_null()
    return jobs.with_columns(
        pl.when(on_old).then(pl.col("gpu_hours") * new_price).otherwise(pl.col("cost_usd")).alias("cost_usd"),
        pl.when(on_old).then(pl.lit(new)).otherwise(pl.col("gpu_model")).alias("gpu_model"),
    )


def what_if(summary: dict[str, Any], changes: list[Change]) -> WhatIf:
    """The summary's figures before and after ``changes``.

    Recommendation savings come out of the waste (and the spend); repricing savings come out of the spend
    with each waste part scaled to keep its share. The order: repricing first, then recommendations."""
    before = _figures(summary)
    after = dict(before)
    spend = before["spend_usd"] or 0.0
    reprice = sum(c.saving_usd for c in changes if not c.from_waste)
    recs = sum(c.saving_usd for c in changes if c.from_waste)
    notes = []
    if spend > 0 and reprice:
        scale = (spend - reprice) / spend
        for k in (*WASTE_KEYS, "productive_usd", "unmeasured_usd"):
            after[k] = (before[k] or 0.0) * scale
    waste = sum(after[k] or 0.0 for k in WASTE_KEYS)
    taken = min(recs, waste)
    if recs > waste + 0.005:
        notes.append("The recommendations claim more than the waste left; the saving is capped at the waste.")
    # recommendation dollars leave the waste parts in proportion to each part's size
    if waste > 0:
        for k in WASTE_KEYS:
            after[k] = (after[k] or 0.0) * (1 - taken / waste)
    after["waste_usd"] = sum(after[k] or 0.0 for k in WASTE_KEYS)
    after["spend_usd"] = spend - reprice - taken
    return WhatIf(before, after, changes, notes)
