"""What fires (docs/metrics.md, "Alerts"). Every rule judges the ledger as of a day (gpuledger/budgets/status.py
``as_of``) and gives alerts with a key that names one crossing, so the same crossing is sent once:

| rule | fires when | key |
|---|---|---|
| ``budget`` | a budget's spend so far reaches a threshold (the highest one reached) | budget|NAME|PERIOD|PCT |
| ``budget_forecast`` | its forecast reaches a threshold the spend has not | budget_forecast|NAME|PERIOD|PCT |
| ``spend_change`` | a team's (or the fleet's) spend in the last complete ISO week differs from its baseline (the mean week over the ``baseline_days`` before it) by ``spend_change_pct`` or more | spend_change|SCOPE|WEEK |
| ``waste_share`` | a team's waste (idle, under-used and failed time of its held GPUs) is over ``waste_share_pct`` of its spend in that week | waste_share|team:NAME|WEEK |
| ``unheld_capacity`` | a cluster's GPU model has ``unheld_min_usd`` or more of capacity no job held in that week, and had less the week before | unheld_capacity|cluster:C/MODEL|WEEK |
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

import duckdb
import polars as pl

from analytics.capacity import unallocated_periods
from analytics.daily import narrowed, spend_by_period
from analytics.filters import Filters
from analytics.money import usd
from analytics.waste import TEAM_WASTE_PARTS
from analytics.waste_weeks import job_waste_by_week
from gpuledger.budgets.periods import period_label
from gpuledger.budgets.status import AsOf, budget_rows, data_first_day
from gpuledger.ledger.settings import Settings
from gpuledger.reports.content import last_full_week, week_range

RULES = ("budget", "budget_forecast", "spend_change", "waste_share", "unheld_capacity")


@dataclass(frozen=True)
class Alert:
    key: str
    rule: str
    scope: str  # team:NAME, cluster:NAME, cluster:NAME/MODEL or fleet
    message: str
    team: str | None = None  # whose [reports.team_mail] is told
    notify: tuple[str, ...] = ()  # further addresses (a budget's own)
    covers: tuple[str, ...] = field(default=())  # lower crossings this one stands for (recorded as sent too)


def last_complete_week(day: dt.date) -> tuple[dt.date, dt.date]:
    """The ISO week ending on ``day`` when it is a Sunday, else the one before: the report's own rule
    (gpuledger/reports/content.py ``last_full_week``)."""
    return week_range(last_full_week(dt.datetime.combine(day, dt.time())))


def _week_label(monday: dt.date) -> str:
    return period_label(monday, "week")


def _spent_line(r: dict, top: str) -> str:
    return (
        f"{r['name']} has spent {usd(r['spent_usd'])} of its {r['period']}ly budget "
        f"{usd(r['budget_usd'])} for {r['period_label']} ({r['spent_pct']:.1f} %, threshold {top} %) "
        f"as of {r['as_of']}; forecast {usd(r['forecast_usd'])} by {r['period_end']}"
    )


def _forecast_line(r: dict, top: str) -> str:
    return (
        f"{r['name']} is forecast to spend {usd(r['forecast_usd'])} "
        f"({usd(r['forecast_low_usd'])}..{usd(r['forecast_high_usd'])}, 75 %) by {r['period_end']}: "
        f"{r['forecast_pct']:.1f} % of its {r['period']}ly budget {usd(r['budget_usd'])} "
        f"(threshold {top} %); spent {usd(r['spent_usd'])} as of {r['as_of']}"
    )


def _crossing(rule: str, r: dict, thresholds: list[float], line: Callable[[dict, str], str]) -> Alert:
    """One alert for the highest of ``thresholds`` a budget crossed; the lower ones it stands for are recorded
    as sent with it, so a budget that jumps past 80 % and 100 % on one day tells once."""
    base = f"{rule}|{r['name']}|{r['period_label']}"
    top = max(thresholds)
    return Alert(
        key=f"{base}|{top:g}",
        rule=rule,
        scope=r["name"],
        message=line(r, f"{top:g}"),
        team=r["target"] if r["scope"] == "team" else None,
        notify=tuple(r["notify"]),
        covers=tuple(f"{base}|{p:g}" for p in thresholds if p != top),
    )


def budget_alerts(con: duckdb.DuckDBPyConnection, settings: Settings, at: AsOf) -> list[Alert]:
    out = []
    for r in budget_rows(con, settings, at.day):
        crossed = r["crossed_pct"]
        ahead = [p for p in r["forecast_crossed_pct"] if p not in crossed]
        if crossed:
            out.append(_crossing("budget", r, crossed, _spent_line))
        if ahead:
            out.append(_crossing("budget_forecast", r, ahead, _forecast_line))
    return out


def spend_change_alerts(con: duckdb.DuckDBPyConnection, settings: Settings, at: AsOf) -> list[Alert]:
    monday, sunday = last_complete_week(at.day)
    days = settings.alerts.baseline_days
    base_first = monday - dt.timedelta(days=days)
    periods = [
        ("base", narrowed(Filters(), base_first, monday - dt.timedelta(days=1))),
        ("week", narrowed(Filters(), monday, sunday)),
    ]
    out = []
    week = _week_label(monday)
    data_start = data_first_day(con)
    if data_start is None or data_start > base_first:
        return []  # no whole baseline yet
    for by, prefix in (("team", "team:"), (None, "")):
        frame = spend_by_period(con, periods, by=by, settings=settings, as_of=at.moment)
        wide = frame.pivot(on="period", index="key", values="spend_usd").fill_null(0.0)
        if "week" not in wide.columns or "base" not in wide.columns:
            continue
        for key, base, now in wide.select("key", "base", "week").iter_rows():
            if by == "team" and key in ("unallocated", "(none)"):
                continue
            weekly = base * 7 / days
            if weekly <= 0:
                continue
            change = 100 * (now - weekly) / weekly
            if abs(change) >= settings.alerts.spend_change_pct:
                scope = f"{prefix}{key}" if by else "fleet"
                out.append(
                    Alert(
                        key=f"spend_change|{scope}|{week}",
                        rule="spend_change",
                        scope=scope,
                        message=(
                            f"{scope} spent {usd(now)} in {week}, {'+' if change > 0 else '−'}{abs(change):.1f} % "
                            f"against its baseline {usd(weekly)}/week (the {days} days before)"
                        ),
                        team=key if by else None,
                    )
                )
    return out


def waste_share_alerts(con: duckdb.DuckDBPyConnection, settings: Settings, at: AsOf) -> list[Alert]:
    monday, sunday = last_complete_week(at.day)
    jobs = job_waste_by_week(
        con, filters=narrowed(Filters(), monday, sunday), settings=settings, as_of=at.moment
    )
    if not jobs.height:
        return []
    teams = (
        jobs.filter(pl.col("team").is_not_null() & ~pl.col("team").is_in(["unallocated", "unattributed"]))
        .group_by("team")
        .agg(
            pl.col("cost_usd").sum().alias("spend"), pl.sum_horizontal(*TEAM_WASTE_PARTS).sum().alias("waste")
        )
    )
    week = _week_label(monday)
    out = []
    for team, spend, waste in teams.select("team", "spend", "waste").iter_rows():
        if spend > 0 and 100 * waste / spend > settings.alerts.waste_share_pct:
            out.append(
                Alert(
                    key=f"waste_share|team:{team}|{week}",
                    rule="waste_share",
                    scope=f"team:{team}",
                    message=(
                        f"team:{team}: {usd(waste)} of its {usd(spend)} in {week} was waste it controls "
                        f"(idle, under-used, failed: {100 * waste / spend:.1f} %, limit {settings.alerts.waste_share_pct:g} %)"
                    ),
                    team=team,
                )
            )
    return out


def unheld_alerts(con: duckdb.DuckDBPyConnection, settings: Settings, at: AsOf) -> list[Alert]:
    monday, sunday = last_complete_week(at.day)
    prev = monday - dt.timedelta(days=7)
    periods = [
        ("prev", narrowed(Filters(), prev, monday - dt.timedelta(days=1))),
        ("week", narrowed(Filters(), monday, sunday)),
    ]
    cap = unallocated_periods(con, periods, settings=settings, as_of=at.moment)
    if not cap.height:
        return []
    wide = (
        cap.with_columns(pl.col("gpu_model").fill_null("(unknown model)"))
        .group_by("cluster", "gpu_model", "period")
        .agg(pl.col("unallocated_usd").sum())
        .pivot(on="period", index=["cluster", "gpu_model"], values="unallocated_usd")
        .fill_null(0.0)
    )
    if "week" not in wide.columns:
        return []
    if "prev" not in wide.columns:
        wide = wide.with_columns(pl.lit(0.0).alias("prev"))
    week = _week_label(monday)
    limit = settings.alerts.unheld_min_usd
    out = []
    for cluster, model, before, now in wide.select("cluster", "gpu_model", "prev", "week").iter_rows():
        if now >= limit and before < limit:
            scope = f"cluster:{cluster}/{model}"
            out.append(
                Alert(
                    key=f"unheld_capacity|{scope}|{week}",
                    rule="unheld_capacity",
                    scope=scope,
                    message=(
                        f"{cluster}: {usd(now)} of {model} capacity no job held in {week} "
                        f"({usd(before)} the week before)"
                    ),
                )
            )
    return out


def judge(con: duckdb.DuckDBPyConnection, settings: Settings, at: AsOf) -> list[Alert]:
    """Every rule's alerts as of ``at``, in RULES order."""
    return [
        *budget_alerts(con, settings, at),
        *spend_change_alerts(con, settings, at),
        *waste_share_alerts(con, settings, at),
        *unheld_alerts(con, settings, at),
    ]
