"""What-if: the view's figures before and after a set of changes, each taken out of the part it touches.

Plain functions over what the dashboard already has (``analytics.summary.summary``'s dict, the per-job parts of
``analytics.jobs.jobs_table`` / ``analytics.waste.job_waste``, the ``analytics.recommend.recommendations``
frame and the price rows in force), so the arithmetic is testable by hand; :func:`what_if_view` loads them from
a ledger for ``gpuledger whatif`` and the What-if page calls :func:`what_if` on its own copies of the same.

A change removes only the time and the part it touches (docs/metrics.md, "What-if"):

- **team X on spot**: each job of team X on a cluster whose capacity is *elastic* (its tier in settings,
  ``[clusters.X] tier`` else ``pricing.default_tier``, is on_demand or spot: capacity bought by the hour) is
  repriced at the spot price of its GPU model in force each day for its cluster, as the same ledger re-billed
  with the job asking for spot would bill it: each piece of its time as the bill cut it (``pieces``, one per
  price period of the view: :func:`whatif_jobs`) at the row in force over that piece
  (gpuledger/ledger/prices.py, the rule its cost was billed by; on a day with no spot row in force yet, the
  on_demand one), part by part (each part's GPU-hours at the new rate). A job unpriced as booked that has a
  spot price is billed at it (its dollars come off the saving). Unallocated capacity never moves. On owned or
  reserved capacity (on_prem, reserved) the same GPU-hours are paid for whether a job runs on spot or not:
  nothing is saved unless capacity is released, and the change says so;
- **GPU model Y instead of Z** at speed-up S: each job on Z runs its GPU-hours ÷ S on Y (S = 1: the same
  GPU-hours), repriced at Y's price in force each day for the job's own tier and cluster, piece by piece and
  part by part, exactly as if the ledger had booked Y (a job unpriced on Z is billed on Y).
  :func:`default_speedup` is S from the catalog: Y's dense peak ÷ Z's at the jobs' precision (bf16 where none
  is logged);
- **a recommendation taken**: its counted saving (analytics.savings: a dollar two chosen items both claim is
  counted once) comes out of the part(s) its kind names (``addresses``), split over them by their size and
  capped at what is left of them.

Utilization is not recomputed (the same work runs); GPU-hours move only by a model change's speed-up.

:func:`capacity_utilization_pct` is the Overview's capacity figure: held-GPU utilization spread over the
paid-for capacity, unheld capacity counted at 0 %.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import duckdb
import polars as pl

from analytics.diagnoses import peak_tflops
from analytics.filters import Filters, horizon
from analytics.waste_jobs import PARTS, WASTE_PARTS, headline_figures
from gpuledger.ledger.prices import PriceBook, price_book
from gpuledger.ledger.settings import Settings

WASTE_KEYS = WASTE_PARTS
PART_KEYS = PARTS
JOB_PARTS = tuple(k for k in PART_KEYS if k != "unallocated_usd")  # a job's own parts
SPOT = "spot"
ELASTIC_TIERS = ("on_demand", SPOT)  # capacity bought by the hour: a job that does not run is not paid for


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
    """One line of the what-if: what it is, the $ each part loses (``parts``; their sum leaves the spend), its
    assumption, and how many jobs it moved."""

    what: str
    saving_usd: float
    assumption: str
    jobs: int = 0
    parts: dict[str, float] = field(default_factory=dict)
    gpu_hours_saved: float = 0.0  # a model change's speed-up: the moved jobs' GPU-hours × (1 − 1/S)
    priced_gpu_hours: float = 0.0  # GPU-hours without a price as booked that have one after the change

    def as_dict(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "saving_usd": self.saving_usd,
            "assumption": self.assumption,
            "jobs": self.jobs,
            "parts": dict(self.parts),
            "gpu_hours_saved": self.gpu_hours_saved,
            "priced_gpu_hours": self.priced_gpu_hours,
        }


@dataclass(frozen=True)
class WhatIf:
    before: dict[str, Any]
    after: dict[str, Any]
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


REPRICE_COLUMNS = ("span_start", "span_end", "pricing_tier")  # what a reprice needs beside jobs_table's
# each money part of a job and the column of its GPU-hours (analytics/waste_jobs.py: the part is the rate × them);
# unmeasured_usd's GPU-hours are the job's gpu_hours less these
PART_HOURS = {
    "productive_usd": "productive_gpu_hours",
    "idle_allocated_usd": "idle_gpu_hours",
    "underused_usd": "underused_gpu_hours",
    "failed_usd": "failed_gpu_hours",
}
PIECE_COLUMNS = ("span_start", "span_end", "gpu_hours", *PART_HOURS.values())  # a ``pieces`` entry's fields
UNMEASURED = "unmeasured_usd"


def _job_rows(jobs: pl.DataFrame) -> list[dict[str, Any]]:
    """The jobs a change may reprice, priced or not (a job without a price at its tier may have one after)."""
    missing = [c for c in REPRICE_COLUMNS if c not in jobs.columns]
    if missing and jobs.height:
        raise ValueError(
            f"the jobs frame lacks {', '.join(missing)} (analytics.whatif.whatif_jobs adds them)"
        )
    cols = [
        c
        for c in (
            "job_id",
            "team",
            "cluster",
            "gpu_model",
            "gpu_hours",
            "cost_usd",
            "pieces",
            *REPRICE_COLUMNS,
            *JOB_PARTS,
        )
        if c in jobs.columns
    ]
    return jobs.select(cols).to_dicts()


def _pieces(j: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Job ``j``'s time as the bill cut it (``pieces``, :func:`whatif_jobs`: one per price piece of the view,
    each with its span and each part's GPU-hours); a frame without them (a page's own copy, a worked
    example) is one piece, the job's span, each part's GPU-hours read back from its dollars. None when that
    cannot be done (no span, or an unpriced job without pieces)."""
    if j.get("pieces"):
        return j["pieces"]
    start, end, hours, cost = (
        j.get("span_start"),
        j.get("span_end"),
        j.get("gpu_hours") or 0.0,
        j.get("cost_usd"),
    )
    if hours <= 0:
        return []
    if start is None or end is None or end <= start or cost is None or cost <= 0:
        return None
    per_hour = cost / hours
    return [
        {
            "span_start": start,
            "span_end": end,
            "gpu_hours": hours,
            **{h: (j.get(k) or 0.0) / per_hour for k, h in PART_HOURS.items()},
        }
    ]


def repriced_parts(
    j: dict[str, Any],
    model: str | None,
    tier: str | None,
    prices: PriceBook,
    *,
    speedup: float = 1.0,
    fallback: bool = True,
) -> dict[str, float] | None:
    """Job ``j``'s parts (JOB_PARTS → $) were it billed as ``model`` asking for ``tier`` on its cluster, its
    GPU-hours ÷ ``speedup``: each piece of its time as the bill cut it (:func:`_pieces`; inside a piece every
    price in force is one rate) at the price in force over that piece (gpuledger/ledger/prices.py, the rule
    its cost was billed by, docs/metrics.md "What-if"), part by part, so the parts are what the ledger
    re-billed so would give. None when unpriced. ``fallback``: on days the tier has no row in force, the
    on_demand price in force, as a job asking for the tier is billed."""
    pieces = _pieces(j)
    if pieces is None:
        return None
    out = dict.fromkeys(JOB_PARTS, 0.0)
    for p in pieces:
        a, b = p["span_start"], p["span_end"]
        wall = (b - a).total_seconds() / 3600.0 if a is not None and b is not None else 0.0
        if wall <= 0:
            continue
        usd = prices.usd(model, tier or "", j.get("cluster"), a, b, fallback=fallback)
        if usd is None:
            return None
        per_gpu_hour = usd / wall / speedup
        hours = {k: p.get(h) or 0.0 for k, h in PART_HOURS.items()}
        hours[UNMEASURED] = (p.get("gpu_hours") or 0.0) - sum(hours.values())
        for k, h in hours.items():
            out[k] += per_gpu_hour * h
    return out


def repriced_usd(
    j: dict[str, Any], model: str | None, tier: str | None, prices: PriceBook, *, fallback: bool = True
) -> float | None:
    """Job ``j``'s dollars at ``model``'s ``tier`` price: :func:`repriced_parts` summed (None when unpriced)."""
    parts = repriced_parts(j, model, tier, prices, fallback=fallback)
    return None if parts is None else sum(parts.values())


def _lost(j: dict[str, Any], new: dict[str, float]) -> dict[str, float]:
    """What each part of job ``j`` loses when its parts become ``new`` (negative: it grows; an unpriced job's
    parts are $0 before)."""
    return {k: (j.get(k) or 0.0) - new[k] for k in JOB_PARTS}


def _add(total: dict[str, float], more: dict[str, float]) -> None:
    for k, v in more.items():
        total[k] = total.get(k, 0.0) + v


def _newly_priced(n: int, hours: float, usd: float, what: str) -> str:
    return (
        f"; {n:,} job(s) without a price as booked ({hours:,.1f} GPU-hours, not in the spend) are priced "
        f"{what}: ${usd:,.2f} added to the figures after the change (the saving is net of it)"
        if n
        else ""
    )


def cheaper_pieces(
    j: dict[str, Any], model: str, tier: str, prices: PriceBook
) -> list[tuple[dict[str, float] | None, dict[str, float]]]:
    """The price pieces of job ``j`` (:func:`_pieces`) that ``tier`` makes cheaper, each as (its parts as
    billed: None where it is unpriced as booked, its parts at ``tier``). A piece is one set of rates (every
    row in force is one rate inside it), so the choice is the same for any part of it: a day of a piece
    chooses as the whole piece does, and a change over two disjoint date ranges is the sum of the two (a job
    whose cluster's own on-demand row undercuts spot from the 1st moves only on the days before). Before,
    one choice per job over whatever view was asked: a job moved in a one-day view stayed in the month's."""
    out: list[tuple[dict[str, float] | None, dict[str, float]]] = []
    for p in _pieces(j) or ():
        piece = {**j, "pieces": [p]}
        new = repriced_parts(piece, model, tier, prices)
        if new is None or (p.get("gpu_hours") or 0.0) <= 0:
            continue
        was = repriced_parts(piece, model, j.get("pricing_tier"), prices)
        if was is not None and sum(new.values()) >= sum(was.values()) * (1 - 1e-9):
            continue
        out.append((was, new))
    return out


def reprice_team_on_spot(
    jobs: pl.DataFrame, team: str, prices: PriceBook, settings: Settings | None = None
) -> Change:
    """Team ``team``'s jobs on elastic capacity at their GPU model's spot price in force each day (see the
    module docstring): each job as the ledger would bill it asking for spot, price piece by price piece
    (:func:`cheaper_pieces`): a piece spot does not make cheaper stays; a job without a price as booked that
    has one on spot is billed at it."""
    settings = settings or Settings()
    lost = dict.fromkeys(JOB_PARTS, 0.0)
    moved = 0
    no_price: set[str] = set()
    owned: dict[str, float] = {}
    newly = [0, 0.0, 0.0]  # jobs without a price before, their GPU-hours, their spot dollars
    for j in _job_rows(jobs):
        if j["team"] != team:
            continue
        hours, cost, model = j["gpu_hours"] or 0.0, j["cost_usd"], j["gpu_model"]
        if (cost is not None and cost <= 0) or hours <= 0 or model is None:
            continue
        if not prices.periods(model, SPOT, j.get("cluster"), fallback=False):
            no_price.add(model)
            continue
        cheaper = cheaper_pieces(j, model, SPOT, prices)
        if not cheaper:
            continue
        tier = settings.cluster_tier(j.get("cluster"))
        if tier not in ELASTIC_TIERS:
            if cost is not None:
                key = f"{j.get('cluster') or '(no cluster)'} ({tier})"
                owned[key] = owned.get(key, 0.0) + sum(
                    sum((was or {}).values()) - sum(new.values()) for was, new in cheaper
                )
            continue
        for was, new in cheaper:
            _add(lost, {k: (was or {}).get(k, 0.0) - new[k] for k in JOB_PARTS})
        moved += 1
        if cost is None:
            newly = [newly[0] + 1, newly[1] + hours, newly[2] + sum(sum(n.values()) for _, n in cheaper)]
    text = (
        "the same GPU-hours at the spot price in force each day for each job's GPU model and cluster, on "
        "clusters whose capacity is bought by the hour; each part of a moved job at the new price for its own "
        "GPU-hours, unallocated capacity does not move; restarts after a preemption are not counted "
        "(checkpoint often)"
    )
    if owned:
        text += (
            "; on owned or reserved capacity ("
            + ", ".join(f"{k}: ${v:,.2f} at spot prices" for k, v in sorted(owned.items()))
            + ") the GPUs are paid for whether the jobs run on spot or not: nothing saved unless that capacity "
            "is released"
        )
    if no_price:
        text += f"; no spot price for {', '.join(sorted(no_price))}: those jobs stay as they are"
    text += _newly_priced(int(newly[0]), newly[1], newly[2], "at spot")
    return Change(f"team {team} on spot", sum(lost.values()), text, moved, lost, priced_gpu_hours=newly[1])


def _model_parts(
    rows: list[dict[str, Any]], old: str, new: str, prices: PriceBook, speedup: float = 1.0
) -> dict[str, dict[str, float]]:
    """The new parts of each job on ``old`` were it on ``new`` (priced or not as booked): its GPU-hours ÷
    ``speedup`` over the same pieces of time, the job's own tier and cluster, the price in force each day
    (:func:`repriced_parts`)."""
    if not speedup > 0:
        raise ValueError(f"a speed-up must be above 0, got {speedup}")
    out: dict[str, dict[str, float]] = {}
    for j in rows:
        cost = j["cost_usd"]
        if j["gpu_model"] != old or (cost is not None and cost <= 0) or (j["gpu_hours"] or 0.0) <= 0:
            continue
        parts = repriced_parts(j, new, j.get("pricing_tier"), prices, speedup=speedup)
        if parts is not None:
            out[j["job_id"]] = parts
    return out


def default_speedup(jobs: pl.DataFrame, old: str, new: str) -> tuple[float, str]:
    """The speed-up a job on ``old`` gets on ``new`` by the catalog (docs/metrics.md "What-if"): ``new``'s
    dense peak ÷ ``old``'s at the precision most of ``old``'s jobs logged (``precision``, else bf16, MFU's
    assumption), and how it was found. 1.0 where the catalog lacks a peak: no speed-up assumed."""
    prec = None
    if "precision" in jobs.columns and jobs.height:
        logged = jobs.filter((pl.col("gpu_model") == old) & pl.col("precision").is_not_null())["precision"]
        if logged.len():
            prec = str(logged.mode().sort()[0]).lower()
    a, b = peak_tflops(old, prec), peak_tflops(new, prec)
    label = prec or "bf16 (assumed: no precision logged)"
    if not a or not b:
        return 1.0, f"no catalog peak at {label} for {old if not a else new}: no speed-up assumed"
    return b / a, f"{new}'s {label} peak {b:,.1f} TFLOP/s ÷ {old}'s {a:,.1f}"


def reprice_model(jobs: pl.DataFrame, old: str, new: str, prices: PriceBook, speedup: float = 1.0) -> Change:
    """Jobs on ``old`` run their GPU-hours ÷ ``speedup`` on ``new``, at its price in force each day for their
    tier and cluster, part by part, as the ledger would bill them had it booked ``new`` (a job without a
    price on ``old`` is billed on ``new`` too)."""
    rows = [j for j in _job_rows(jobs) if j["gpu_model"] == old]
    moved = _model_parts(rows, old, new, prices, speedup)
    if rows and not moved:
        return Change(f"{new} instead of {old}", 0.0, f"no price for {new}: nothing repriced", 0)
    lost = dict.fromkeys(JOB_PARTS, 0.0)
    newly = [0, 0.0, 0.0]
    for j in rows:
        if j["job_id"] in moved:
            _add(lost, _lost(j, moved[j["job_id"]]))
            if j["cost_usd"] is None:
                newly = [
                    newly[0] + 1,
                    newly[1] + (j["gpu_hours"] or 0.0),
                    newly[2] + sum(moved[j["job_id"]].values()),
                ]
    hours = sum(j["gpu_hours"] or 0.0 for j in rows if j["job_id"] in moved)
    mean = sum(sum(p.values()) for p in moved.values()) / hours if hours > 0 else 0.0
    runs = (
        "no speed-up or slow-down assumed"
        if speedup == 1.0
        else f"a speed-up of {speedup:,.2f}× assumed: {hours / speedup:,.1f} GPU-hours instead"
    )
    return Change(
        f"{new} instead of {old}",
        sum(lost.values()),
        f"{hours:,.1f} GPU-hours on {old}; {runs}, at {new}'s price in force each day for each job's tier and "
        f"cluster (${mean * speedup:,.2f}/GPU-h on average); each part of a job at the new price for its own "
        "GPU-hours; a negative saving means the change costs more"
        + _newly_priced(int(newly[0]), newly[1], newly[2], f"on {new}"),
        len(moved),
        lost,
        hours * (1.0 - 1.0 / speedup),
        newly[1],
    )


def after_model_change(
    jobs: pl.DataFrame, old: str, new: str, prices: PriceBook, speedup: float = 1.0
) -> pl.DataFrame:
    """``jobs`` as they would be after :func:`reprice_model`: the jobs on ``old`` now on ``new`` at its price
    in force, their parts and GPU-hours (and their pieces' GPU-hours) with it, so that a later change (a team
    on spot) reprices them once, from there."""
    moved = _model_parts(_job_rows(jobs), old, new, prices, speedup)
    if not moved:
        return jobs
    is_moved = pl.col("job_id").is_in(list(moved))

    def value(k: str | None) -> pl.Expr:
        got = {jid: (sum(p.values()) if k is None else p[k]) for jid, p in moved.items()}
        return pl.col("job_id").replace_strict(got, default=None, return_dtype=pl.Float64)

    out = jobs.with_columns(
        *[
            pl.when(is_moved).then(value(k)).otherwise(pl.col(k)).alias(k)
            for k in JOB_PARTS
            if k in jobs.columns
        ],
        pl.when(is_moved).then(value(None)).otherwise(pl.col("cost_usd")).alias("cost_usd"),
        pl.when(is_moved).then(pl.lit(new)).otherwise(pl.col("gpu_model")).alias("gpu_model"),
        pl.when(is_moved)
        .then(pl.col("gpu_hours") / speedup)
        .otherwise(pl.col("gpu_hours"))
        .alias("gpu_hours"),
    )
    if "pieces" in out.columns and speedup != 1.0:
        hours = ("gpu_hours", *PART_HOURS.values())
        col = [
            [{**p, **{c: p[c] / speedup for c in hours if p.get(c) is not None}} for p in ps]
            if jid in moved and ps
            else ps
            for jid, ps in zip(out["job_id"].to_list(), out["pieces"].to_list(), strict=True)
        ]
        out = out.with_columns(pl.Series("pieces", col, dtype=out.schema["pieces"]))
    return out


def recommendations_change(chosen: pl.DataFrame, left: dict[str, float]) -> Change | None:
    """The chosen recommendation rows (``counted_saving_usd`` from analytics.savings.with_counted over the
    chosen rows only) as one change: each row's saving out of the part(s) its kind names (``addresses``,
    split by their size in ``left``, the parts as they stand after the other changes), capped at what is left
    of them."""
    if chosen.is_empty():
        return None
    left = dict(left)
    parts = dict.fromkeys(PART_KEYS, 0.0)
    capped = 0.0
    listed = float(chosen["saving_usd"].sum())
    for r in chosen.iter_rows(named=True):
        want = float(r["counted_saving_usd"] or 0.0)
        named = [k for k in (r.get("addresses") or []) if k in left] or list(WASTE_KEYS)
        pool = sum(max(0.0, left[k]) for k in named)
        take = min(want, pool)
        capped += want - take
        for k in named:
            share = take * max(0.0, left[k]) / pool if pool > 0 else 0.0
            parts[k] += share
            left[k] -= share
    saved = sum(parts.values())
    counted = float(chosen["counted_saving_usd"].sum())
    note = "each dollar counted once" + (
        f" (the items list ${listed:,.2f}; ${listed - counted:,.2f} of it is the same dollars twice)"
        if listed - counted >= 0.005
        else ""
    )
    if capped >= 0.005:
        note += f"; ${capped:,.2f} more than the parts they address hold was left out"
    return Change(
        f"{chosen.height:,} recommendation(s) taken",
        saved,
        f"the saving each item states for this view, {note}; each saving comes out of the part its kind names",
        parts={k: v for k, v in parts.items() if v},
    )


def _figures(s: dict[str, Any]) -> dict[str, Any]:
    return {**s, "waste": dict(s["waste"])}


def apply(summary: dict[str, Any], changes: list[Change]) -> dict[str, Any]:
    """``summary`` (the keys of ``summary --json``) with each change's parts taken out: the parts, spend,
    waste and idle dollars move; utilization, GPU-hours and the rest are the same work's."""
    after = _figures(summary)
    w = after["waste"]
    for c in changes:
        for k, v in c.parts.items():
            w[k] = (w.get(k) or 0.0) - v
    after["spend_usd"] = sum(w[k] for k in PART_KEYS)
    if hours := sum(c.gpu_hours_saved for c in changes):
        after["gpu_hours"] = (summary.get("gpu_hours") or 0.0) - hours
    if (priced := sum(c.priced_gpu_hours for c in changes)) and "unpriced_gpu_hours" in summary:
        after["unpriced_gpu_hours"] = max(0.0, (summary["unpriced_gpu_hours"] or 0.0) - priced)
    after.update(headline_figures(w))
    after["idle_usd"] = w["idle_allocated_usd"]
    return after


def what_if(
    summary: dict[str, Any],
    jobs: pl.DataFrame,
    recs: pl.DataFrame,
    prices: PriceBook,
    settings: Settings,
    *,
    spot: tuple[str, ...] = (),
    models: tuple[tuple[str, str] | tuple[str, str, float], ...] = (),
    take: tuple[str, ...] = (),
) -> WhatIf:
    """The view before and after the chosen changes. ``jobs``: per-job parts (jobs_table / job_waste);
    ``recs``: the view's recommendations with ``id`` (analytics.savings.with_counted); ``take``: their ids.
    ``models``: (old, new) at the same GPU-hours, or (old, new, speed-up). Order: model changes, then teams on
    spot (from the new model's price), then recommendations (out of the parts as they stand then). With
    nothing chosen, after is before and there are no changes."""
    changes: list[Change] = []
    notes: list[str] = []
    repriced = jobs
    for old, new, *rest in models:
        speedup = float(rest[0]) if rest else 1.0
        if new == old and speedup == 1.0:
            continue
        changes.append(reprice_model(repriced, old, new, prices, speedup))
        repriced = after_model_change(repriced, old, new, prices, speedup)
    for team in spot:
        changes.append(reprice_team_on_spot(repriced, team, prices, settings))
    if take:
        known = set(recs["id"].to_list()) if "id" in recs.columns else set()
        unknown = [t for t in take if t not in known]
        if unknown:
            raise ValueError(f"no recommendation with id {', '.join(unknown)} in this view")
        from analytics.savings import with_counted

        chosen = with_counted(
            recs.filter(pl.col("id").is_in(list(take))).drop(
                [
                    c
                    for c in ("id", "overlaps_with", "counted_saving_usd", "counted_usd_per_week")
                    if c in recs.columns
                ]
            )
        )
        left = apply(summary, changes)["waste"]
        taken = recommendations_change(chosen, left)
        if taken is not None:
            changes.append(taken)
    after = apply(summary, changes)
    return WhatIf(summary, after, changes, notes)


def what_if_view(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters,
    settings: Settings,
    spot: tuple[str, ...] = (),
    models: tuple[tuple[str, str, float | None], ...] = (),
    take: tuple[str, ...] = (),
) -> dict[str, Any]:
    """``gpuledger whatif --json``: {now, with_changes (each with the keys of summary --json), changes,
    days, per_week}. ``models``: (old, new, speed-up), a None speed-up read from the catalog
    (:func:`default_speedup`). ``per_week``: each change's saving ÷ days × 7 (:func:`per_week`)."""
    from analytics.recommend import recommendations
    from analytics.summary import summary as view_summary

    now = view_summary(con, filters=filters, settings=settings)
    jobs = whatif_jobs(con, filters=filters, settings=settings) if (spot or models) else pl.DataFrame()
    recs = recommendations(con, filters=filters, settings=settings) if take else pl.DataFrame()
    basis = {(old, new): default_speedup(jobs, old, new) for old, new, s in models if s is None}
    pairs = tuple((old, new, basis[old, new][0] if s is None else s) for old, new, s in models)
    result = what_if(now, jobs, recs, price_book(con), settings, spot=spot, models=pairs, take=take)
    said = {f"{new} instead of {old}": f"{f:,.2f}× = {why}" for (old, new), (f, why) in basis.items()}
    result.changes[:] = [
        replace(c, assumption=f"{c.assumption}; the speed-up from the catalog: {said[c.what]}")
        if c.what in said
        else c
        for c in result.changes
    ]
    days = period_days(con, filters)
    return {
        "now": result.before,
        "with_changes": result.after,
        "changes": [
            {**c.as_dict(), "saving_usd_per_week": per_week(c.saving_usd, days)} for c in result.changes
        ],
        "days": days,
    }


def period_days(con: duckdb.DuckDBPyConnection, filters: Filters) -> float | None:
    """The view's length in days, as a recommendation's ``usd_per_week`` is scaled by
    (analytics.recommend.view_window: first in-view job start to the view's end or the data horizon, at
    least 1 day); None when the view has no job."""
    from analytics.recommend import view_window

    window = view_window(con, filters, horizon(con))
    return None if window is None else window[2]


def per_week(usd: float | None, days: float | None) -> float | None:
    """A total over the period as $/week: ``usd ÷ days × 7`` (None when either is unknown)."""
    return None if usd is None or not days else usd / days * 7.0


def whatif_jobs(con: duckdb.DuckDBPyConnection, *, filters: Filters, settings: Settings) -> pl.DataFrame:
    """The view's jobs with their parts (analytics.waste_jobs.job_waste: the rows ``jobs --json`` and the
    summary sum, with each job's span inside the view and the tier it asked for) and ``pieces``, each job's
    time as the bill cut it (job_waste_pieces: one entry per price piece of the view, each with its span, its
    GPU-hours and each part's), so that a change prices each piece's GPU-seconds at the price in force then,
    as the same ledger re-billed would. Only what a what-if reads: not jobs_table's utilization percentiles,
    unit costs and summaries (measured on a generated two-day ledger: 0.9 s → 0.3 s)."""
    from analytics.query import frame
    from analytics.waste_jobs import job_waste_pieces, summed_pieces

    cut = job_waste_pieces(con, filters=filters, settings=settings, as_of=horizon(con))
    jobs = summed_pieces(con, cut)  # = job_waste's rows, without computing them again
    pieces = cut.group_by("job_id").agg(pl.struct(*PIECE_COLUMNS).sort_by("span_start").alias("pieces"))
    # the precision a job's run logged: a model swap's default speed-up is the peaks' ratio at it
    logged = frame(
        con,
        "SELECT job_id, any_value(lower(precision)) AS precision FROM training_runs "
        "WHERE precision IS NOT NULL GROUP BY job_id",
    )
    out = jobs.join(pieces, on="job_id", how="left")
    return out.join(logged.cast({"job_id": out.schema["job_id"]}), on="job_id", how="left")
