"""The headline numbers of a view: the ``gpuledger summary --json`` contract, also the dashboard's Overview.

Every figure comes from the per-job functions (analytics/waste.py, utilization.py, unit_costs.py) so the
summary equals the sum of its parts; docs/metrics.md defines each key.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import duckdb

from analytics.filters import Filters, horizon
from analytics.unit_costs import view_usd_per_mtok
from analytics.utilization import ROLLUPS, Source
from analytics.waste import PARTS, job_waste, unallocated
from analytics.waste_jobs import headline_figures
from gpuledger.ledger.settings import Settings
from gpuledger.ledger.sql import job_count_sql

ALL_FILTERS = Filters()  # the whole ledger
DEFAULT_SETTINGS = Settings()

SUMMARY_KEYS = (
    "spend_usd",
    "gpu_hours",
    "mean_util_pct",
    "idle_gpu_hours",
    "idle_usd",
    "team_waste_usd",
    "unheld_capacity_usd",
    "unmeasured_usd",
    "cancelled_usd",
    "jobs",
    "unpriced_gpu_hours",
    "energy_kwh",
    "co2e_kg",
    "training_usd_per_mtok",
    "inference_usd_per_mtok_generated",
    "waste",
    "attribution",
    "filters",
    "as_of",
)


def _filters_dict(filters: Filters) -> dict[str, Any]:
    return {
        "since": filters.since.isoformat() if filters.since else None,
        "until": filters.until.isoformat() if filters.until else None,
        "teams": list(filters.teams),
        "clusters": list(filters.clusters),
        "users": list(filters.users),
    }


def attribution_quality(con: duckdb.DuckDBPyConnection, sql: str, params: list[object]) -> dict[str, Any]:
    """How the view's GPU jobs got their telemetry (jobs.attribution, collectors/attribute.py): jobs and held
    GPU-hours per method (jobs that held no GPU-time in the view, and pseudo-jobs, are left out), and a
    data-quality note (None when every job is tied exactly)."""
    rows = con.execute(
        f"""SELECT coalesce(j.attribution, 'none'), {job_count_sql("j")}, coalesce(sum(w.gpu_hours), 0)
            FROM ({sql}) w JOIN jobs j ON j.job_id = w.job_id WHERE w.gpu_hours > 0 GROUP BY 1""",
        params,
    ).fetchall()
    got = {m: (int(n), float(h)) for m, n, h in rows}
    out: dict[str, Any] = {}
    for m in ("exact", "by_share", "none"):
        n, h = got.get(m, (0, 0.0))
        out[f"{m}_jobs"], out[f"{m}_gpu_hours"] = n, h
    notes = []
    if out["by_share_jobs"]:
        notes.append(
            f"{out['by_share_jobs']} job(s) ({out['by_share_gpu_hours']:,.1f} GPU-h) shared a host with no record of "
            "which GPUs were theirs: the host's GPU-time was split by GPUs held, so their utilization is an "
            "estimate (sacct --json gres_detail or NVML processes make it exact)"
        )
    if out["none_jobs"]:
        notes.append(
            f"{out['none_jobs']} job(s) ({out['none_gpu_hours']:,.1f} GPU-h) have no telemetry tied to them: "
            "their time counts as unmeasured"
        )
    out["note"] = "; ".join(notes) or None
    return out


def summary(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
    source: Source = ROLLUPS,
) -> dict[str, Any]:
    """The view's headline figures as a JSON-ready dict (keys: SUMMARY_KEYS).

    - spend_usd = Σ priced job cost + unallocated capacity = Σ ``waste`` parts (to the cent);
    - gpu_hours: held GPU-hours of the view's jobs (priced or not); unpriced_gpu_hours: those without price;
    - mean_util_pct: time-weighted over the samples attributed to the view's jobs (NULL when none);
    - idle_gpu_hours: GPU-hours inside idle stretches; idle_usd = waste.idle_allocated_usd;
    - team_waste_usd = idle_allocated + underused + failed (the waste teams control), unheld_capacity_usd =
      unallocated (capacity no job held), unmeasured_usd: each apart (analytics.waste_jobs.headline_figures);
    - cancelled_usd: the in-view cost of cancelled jobs, a person's decision and not waste (its dollars are
      inside the parts, classified by telemetry like a completed job's);
    - energy_kwh over the jobs' samples (NULL without power/energy readings), co2e_kg at the settings'
      grid intensity;
    - training_usd_per_mtok over the jobs that are not inference and have a token count, and
      inference_usd_per_mtok_generated over inference jobs with a generated-token count (each NULL when
      none): never one blended figure, since a generated token and a training token are different work;
    - as_of: the ledger's data horizon (running jobs are costed up to it), ISO-8601 UTC, or NULL when empty.
    """
    as_of = as_of or horizon(con)
    # the view's per-job waste, shared with the other callers of one page load (analytics/shared.py), read
    # back by DuckDB for the sums instead of running its SQL again (once for the sums, once for attribution)
    jobs = job_waste(con, filters=filters, settings=settings, as_of=as_of, source=source)
    parts = [p for p in PARTS if p != "unallocated_usd"]
    name = f"summary_jobs_{uuid.uuid4().hex}"
    con.register(name, jobs.to_arrow())
    try:
        row = con.execute(
            f"""SELECT {", ".join(f"coalesce(sum({p}), 0)" for p in parts)},
                       coalesce(sum(gpu_hours), 0),
                       sum(effective_gpu_hours) / nullif(sum(util_covered_hours), 0) * 100.0,
                       coalesce(sum(idle_gpu_hours), 0),
                       (SELECT {job_count_sql("j", "w.job_id")} FROM {name} w
                        LEFT JOIN jobs j ON j.job_id = w.job_id),
                       coalesce(sum(gpu_hours) FILTER (WHERE cost_usd IS NULL), 0),
                       sum(energy_kwh),
                       coalesce(sum(cancelled_usd), 0)
                FROM {name}"""
        ).fetchall()[0]
        attribution = attribution_quality(con, f"SELECT * FROM {name}", [])
    finally:
        con.unregister(name)
    waste = {p: float(v) for p, v in zip(parts, row[: len(parts)], strict=True)}
    gpu_hours, mean_util, idle_h, n_jobs, unpriced_h, energy_kwh, cancelled = row[len(parts) :]
    un = unallocated(con, filters=filters, settings=settings, as_of=as_of)
    waste["unallocated_usd"] = float(un["unallocated_usd"].fill_null(0).sum()) if un.height else 0.0
    waste = {p: waste[p] for p in PARTS}
    spend = sum(waste.values())
    energy = None if energy_kwh is None else float(energy_kwh)
    per_mtok = view_usd_per_mtok(con, filters=filters, as_of=as_of)  # training, inference: one pass
    return {
        "spend_usd": spend,
        "gpu_hours": float(gpu_hours),
        "mean_util_pct": None if mean_util is None else float(mean_util),
        "idle_gpu_hours": float(idle_h),
        "idle_usd": waste["idle_allocated_usd"],
        **headline_figures(waste),
        "cancelled_usd": float(cancelled),
        "jobs": int(n_jobs),
        "unpriced_gpu_hours": float(unpriced_h),
        "energy_kwh": energy,
        "co2e_kg": None if energy is None else energy * settings.gco2e_per_kwh / 1000.0,
        "training_usd_per_mtok": per_mtok[0],
        "inference_usd_per_mtok_generated": per_mtok[1],
        "waste": waste,
        "attribution": attribution,
        "filters": _filters_dict(filters),
        "as_of": as_of.isoformat() if as_of else None,
    }
