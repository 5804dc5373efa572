"""What the dashboard's data functions (pages/_data.py) return where analytics has no type of its own:
frozen records of the analytics results a page shows together, so a page reads ``fleet.idle``, not a key."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import polars as pl


@dataclass(frozen=True)
class Choices:
    """What the sidebar filters can offer: the ledger's teams, clusters and first/last UTC day."""

    teams: tuple[str, ...]
    clusters: tuple[str, ...]
    first_day: dt.date | None
    last_day: dt.date | None


@dataclass(frozen=True)
class Fleet:
    """The Fleet page's view: GPUs with telemetry and their hosts (analytics.timeline.view_groups), the per-GPU
    heatmap (only up to pages/_data.FLEET_GROUP_PAST GPUs, else None: one row per host or cluster), idle GPUs, utilization by
    GPU model and by cluster (analytics.utilization.utilization_by)."""

    n_gpus: int
    n_hosts: int
    heatmap: pl.DataFrame | None
    idle: pl.DataFrame
    by_model: pl.DataFrame
    by_cluster: pl.DataFrame


@dataclass(frozen=True)
class Training:
    """unit_costs (analytics.unit_costs.job_unit_costs), batch (the larger_batch recommendations) and weekly
    (analytics.unit_costs.weekly_usd_per_mtok by team)."""

    unit_costs: pl.DataFrame
    batch: pl.DataFrame
    weekly: pl.DataFrame
