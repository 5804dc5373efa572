"""The Overview's figures: one period against the period before, with the waste teams control apart from the
platform's capacity no job held (docs/metrics.md, "Overview").

A team lead acts on the first (their jobs' idle, under-used and badput time); the cluster's operators on the
second (capacity nobody held: release it, or schedule onto it). Mixing them made "waste" read as a team's
fault when 87 % of it was capacity no team could have used (issue 37).

Every figure is :func:`analytics.summary.summary`'s, or a sum of :func:`analytics.waste.job_waste` rows by
team, so the team rows and the capacity row add up to the headline spend to the cent, and a team's row equals
the headline of a view filtered to that team.
"""

from __future__ import annotations

import datetime as dt
import urllib.parse
from dataclasses import dataclass
from typing import Any

import duckdb
import polars as pl

from analytics.filters import Filters
from analytics.job_count import job_count, with_job_of
from analytics.summary import summary
from analytics.waste import TEAM_WASTE_PARTS, UNALLOCATED, job_waste, unallocated
from analytics.whatif import capacity_utilization_pct
from gpuledger.ledger.settings import Settings

DEMO_FORMAT = "demo"  # ingests.format of the demo fleet (gpuledger/demo/build.py)

TEAM_COLUMNS = {
    "team": "the team; 'unallocated' is the capacity row (no team)",
    "jobs": "jobs of the team in the period",
    "gpu_hours": "GPU-hours the team's jobs held in the period",
    "spend_usd": "the team's in-period cost (capacity row: unallocated capacity)",
    "team_waste_usd": "idle while allocated + under-used + badput (failed runs); NULL on the capacity row",
    "waste_pct": "team_waste_usd / spend_usd × 100 (NULL when spend is 0)",
    "util_pct": "held-GPU utilization: Σ util × interval / Σ interval over the team's samples (NULL: none)",
    "spend_before_usd": "the same team's spend in the period before (NULL: no period before)",
    "spend_change_usd": "spend_usd − spend_before_usd",
    "waste_pct_change_pts": "waste_pct − the period before's, in percentage points",
    "util_change_pts": "util_pct − the period before's, in percentage points",
}


@dataclass(frozen=True)
class Demo:
    """The ledger is the demo fleet (``gpuledger demo``): its UTC days and seed, from its ingest record."""

    first_day: dt.date
    last_day: dt.date
    days: int
    seed: int | None


@dataclass(frozen=True)
class Overview:
    """One period's headline (:func:`headline`) and team rows (:func:`team_rows`, with their changes), the
    period before's headline (None when there is no period before, or it holds no data: changes are n/a),
    and whether the ledger is the demo."""

    filters: Filters
    previous: Filters | None
    now: dict[str, Any]
    before: dict[str, Any] | None
    teams: pl.DataFrame
    demo: Demo | None


def demo_ledger(con: duckdb.DuckDBPyConnection) -> Demo | None:
    """The demo's days when the ledger holds a demo ingest (``demo://fleet?days=28&seed=7&end=2026-11-23``:
    ``days`` whole UTC days ending before midnight of ``end``), else None."""
    row = con.execute(
        "SELECT path FROM ingests WHERE format = ? ORDER BY ingest_id DESC LIMIT 1", [DEMO_FORMAT]
    ).fetchone()
    if row is None:
        return None
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(str(row[0])).query)
    try:
        days = int(query["days"][0])
        end = dt.date.fromisoformat(query["end"][0])
    except (KeyError, ValueError, IndexError):
        return None  # a record of another shape: say nothing rather than wrong dates
    seed = query.get("seed", [None])[0]
    return Demo(
        end - dt.timedelta(days=days),
        end - dt.timedelta(days=1),
        days,
        int(seed) if seed and seed.lstrip("-").isdigit() else None,
    )


def headline(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters,
    settings: Settings,
    as_of: dt.datetime | None = None,
) -> dict[str, Any]:
    """The period's headline: the summary's figures (``summary --json``) and

    - ``team_waste_usd`` (the summary's) = idle while allocated + under-used + failed (badput): the waste
      teams control; ``team_waste_pct`` = that ÷ the jobs' spend (spend − unheld capacity) × 100;
    - ``unheld_capacity_usd`` (the summary's) / ``unallocated_gpu_hours``: paid-for capacity no job held (the
      platform's);
    - ``held_util_pct``: the summary's ``mean_util_pct`` (GPUs a job held);
    - ``capacity_util_pct``: held utilization spread over held + unallocated GPU-hours
      (analytics.whatif.capacity_utilization_pct); None where the view sees no capacity (a team filter)."""
    s = summary(con, filters=filters, settings=settings, as_of=as_of)
    waste = s["waste"]
    cap = unallocated(con, filters=filters, settings=settings, as_of=as_of)
    un_hours = float(cap["unallocated_gpu_hours"].fill_null(0).sum()) if cap.height else None
    team_waste = s["team_waste_usd"]
    jobs_spend = s["spend_usd"] - s["unheld_capacity_usd"]
    return s | {
        "team_waste_pct": 100.0 * team_waste / jobs_spend if abs(jobs_spend) >= 0.005 else None,
        "badput_usd": waste["failed_usd"],
        "unallocated_gpu_hours": un_hours,
        "held_util_pct": s["mean_util_pct"],
        "capacity_util_pct": (
            None
            if un_hours is None
            else capacity_utilization_pct(s["mean_util_pct"], float(s["gpu_hours"]), un_hours)
        ),
    }


def team_rows(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters,
    settings: Settings,
    as_of: dt.datetime | None = None,
) -> pl.DataFrame:
    """One row per team of the period (TEAM_COLUMNS up to util_pct), largest spend first, then the capacity
    no job held as the row ``unallocated`` (last; no waste % or utilization of a team). The rows' spend sums
    to the headline's. Jobs without a team are the row "(none)"; telemetry no job claims, "unattributed"."""
    jobs = with_job_of(con, job_waste(con, filters=filters, settings=settings, as_of=as_of))
    parts = [pl.col(p).fill_null(0).sum() for p in TEAM_WASTE_PARTS]
    teams = (
        jobs.with_columns(pl.col("team").fill_null("(none)"))
        .group_by("team")
        .agg(
            job_count().alias("jobs"),
            pl.col("gpu_hours").sum().alias("gpu_hours"),
            pl.col("cost_usd").fill_null(0).sum().alias("spend_usd"),
            pl.sum_horizontal(*parts).alias("team_waste_usd"),
            (pl.col("effective_gpu_hours").sum() / pl.col("util_covered_hours").sum() * 100.0).alias(
                "util_pct"
            ),
        )
        .with_columns(
            pl.when(pl.col("spend_usd").abs() >= 0.005)
            .then(100.0 * pl.col("team_waste_usd") / pl.col("spend_usd"))
            .alias("waste_pct"),
            pl.col("util_pct").fill_nan(None),
        )
        .sort(["spend_usd", "team"], descending=[True, False])
    )
    cap = unallocated(con, filters=filters, settings=settings, as_of=as_of)
    un_usd = float(cap["unallocated_usd"].fill_null(0).sum()) if cap.height else 0.0
    if un_usd:
        capacity = pl.DataFrame(
            {
                "team": [UNALLOCATED],
                "jobs": [0],
                "gpu_hours": [0.0],
                "spend_usd": [un_usd],
                "team_waste_usd": [None],
                "util_pct": [None],
                "waste_pct": [None],
            },
            schema=teams.schema,
        )
        teams = pl.concat([teams, capacity])
    return teams.select("team", "jobs", "gpu_hours", "spend_usd", "team_waste_usd", "waste_pct", "util_pct")


def with_changes(now: pl.DataFrame, before: pl.DataFrame | None) -> pl.DataFrame:
    """``now``'s team rows with the period before's spend and the changes (TEAM_COLUMNS); a team new in this
    period has a spend before of 0 (it spent nothing then) and no waste or utilization change."""
    if before is None:
        return now.with_columns(
            pl.lit(None, pl.Float64).alias(c)
            for c in ("spend_before_usd", "spend_change_usd", "waste_pct_change_pts", "util_change_pts")
        )
    old = before.select(
        "team",
        pl.col("spend_usd").alias("spend_before_usd"),
        pl.col("waste_pct").alias("_waste_before"),
        pl.col("util_pct").alias("_util_before"),
    )
    return (
        now.join(old, on="team", how="left")
        .with_columns(pl.col("spend_before_usd").fill_null(0.0))
        .with_columns(
            (pl.col("spend_usd") - pl.col("spend_before_usd")).alias("spend_change_usd"),
            (pl.col("waste_pct") - pl.col("_waste_before")).alias("waste_pct_change_pts"),
            (pl.col("util_pct") - pl.col("_util_before")).alias("util_change_pts"),
        )
        .drop("_waste_before", "_util_before")
    )


def has_data(head: dict[str, Any]) -> bool:
    """A period holds data when a job ran in it or capacity was paid for."""
    return bool(head["jobs"] or abs(head["spend_usd"]) >= 0.005)


def overview(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters,
    previous: Filters | None,
    settings: Settings,
) -> Overview:
    """The Overview of ``filters`` against ``previous`` (the period of equal length before it; None: none)."""
    now = headline(con, filters=filters, settings=settings)
    rows = team_rows(con, filters=filters, settings=settings)
    before = rows_before = None
    if previous is not None:
        before = headline(con, filters=previous, settings=settings)
        if has_data(before):
            rows_before = team_rows(con, filters=previous, settings=settings)
        else:
            before = None
    return Overview(filters, previous, now, before, with_changes(rows, rows_before), demo_ledger(con))
