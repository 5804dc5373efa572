"""Each ISO week's listed problems and each problem's targeted waste, read from analytics.recommend.

Two lists per week (Monday 00:00 to the next Monday, UTC), both from
:func:`analytics.recommend.recommendations` over the whole fleet for that week, so a key means one thing
whichever team or page asks:

- **listed**: the list a lead sees (one item per problem, its best action, at least the default
  ``min_usd_per_week``): which problems exist that week, their predicted $/week and their team;
- **targeted waste**: every rule's own item (``problems=False``, no floor): for each key, the dollars its
  rule says the change would have saved on that week's jobs (``saving_usd``, at each job's own rate, so
  at the price in force). This is the waste the item targets, by the same definition every week; the
  measured saving (gpuledger/items/measure.py) compares it before and after a change. One kind's waste is
  not its rule's saving: ``stop_idle_notebooks`` saves only the idle time past the auto-stop's minutes,
  while the habit it targets is all of the user's notebooks' idle time; its waste is the idle dollars of
  that user's interactive jobs by ``reclaim_idle``'s rule (:func:`notebook_idle`), so a habit fixed by any
  means (an auto-stop, stopping the notebook by hand) measures what it removed.

Weeks: the complete ISO weeks from the first job's to the data horizon's (the first counts when the first
job starts on its Monday, the last when the horizon reaches its Sunday, as the weekly report's last full
week), at most ``SCAN_WEEKS`` of them.

Cost: the scan pays the rules once per week. Both lists of a week come from one pass
(:func:`analytics.recommend.recommendation_lists`), the rules' reads of the whole ledger (every run, every
job's checkpoint and busy share, the price book, the recurrence history) are made once per scan
(analytics.shared.ledger_frame, ledger_prices, memo), and every week's unallocated capacity comes from one
statement (analytics.capacity.prefetch_unallocated); what is left is per week (the view's costs, signals and
waste). The 28-day demo (4 weeks, 3,552 jobs; 2026-12-07, a loaded 2-core machine at load 7-8, base and this
code alternating, medians of 3 scans per process): the scan 2.98-3.44 s -> 1.76-2.04 s (4 processes each;
170 statements -> 84); the Recommendations page script cold (bench/pages.py --no-data) 3.28-3.94 s ->
2.25-2.68 s, still over the 1 s target. So a scan is computed once per ledger state and settings and kept
beside the ledger file (gpuledger/items/sidecar.py), where every later process (a cold page, the report, the
CLI) reads it; ``gpuledger demo`` leaves it there for the demo.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from typing import Any

import duckdb
import polars as pl

from analytics.capacity import prefetch_unallocated
from analytics.filters import Filters, horizon
from analytics.problems import OPERATORS
from analytics.recommend import KIND_LABELS, Listing, recommendation_lists
from analytics.shared import sharing
from gpuledger.items import sidecar
from gpuledger.items.key import ItemKey, job_names, key_of
from gpuledger.ledger.settings import Settings

SCAN_WEEKS = 26  # two quarters: the quarter's measured savings and the weeks before its first change
WEEK = dt.timedelta(days=7)
SHOWN = Listing()  # the list a lead sees: one item per problem, the default floor
EVERY = Listing(min_usd_per_week=0.0, problems=False)  # every rule's own item, no floor: the waste


@dataclass(frozen=True)
class Listed:
    """A problem as one week's list shows it."""

    key: ItemKey
    team: str | None  # None: an operators' item (analytics/problems.py owner_type "operators")
    user_name: str | None
    owner: str | None
    label: str
    action: str
    evidence: str
    usd_per_week: float | None  # None: a one-off
    saving_usd: float


@dataclass(frozen=True)
class WeekScan:
    """The scanned weeks (Mondays, oldest first), what each listed, and each key's targeted waste ($)."""

    weeks: tuple[dt.date, ...]
    horizon: dt.datetime | None
    listed: dict[dt.date, dict[str, Listed]] = field(default_factory=dict)
    waste: dict[dt.date, dict[str, float]] = field(default_factory=dict)

    def waste_of(self, key: str, week: dt.date) -> float:
        """The key's targeted waste in ``week`` ($; 0 when its rule found nothing there)."""
        return self.waste.get(week, {}).get(key, 0.0)


def monday(day: dt.date) -> dt.date:
    return day - dt.timedelta(days=day.weekday())


def complete_weeks(first: dt.date, as_of: dt.datetime) -> list[dt.date]:
    """Mondays of the complete ISO weeks the data cover: from ``first``'s week when the data start on its
    Monday (else the next week: a week the data enter on Thursday would hold half a week of waste and lower
    a before mean), up to ``as_of``'s week when ``as_of`` falls on its Sunday (else the week before); the
    last SCAN_WEEKS of them."""
    day = as_of.date()
    last = monday(day) if day.isoweekday() == 7 else monday(day) - WEEK
    weeks = []
    w = first if first.isoweekday() == 1 else monday(first) + WEEK
    while w <= last:
        weeks.append(w)
        w += WEEK
    return weeks[-SCAN_WEEKS:]


def scan(con: duckdb.DuckDBPyConnection, *, settings: Settings | None = None) -> WeekScan:
    """The ledger's complete weeks, each with its listed problems and targeted waste (module docstring):
    read from the ledger's sidecar when this state was scanned before, else computed and kept there."""
    settings = settings or Settings()
    ledger = sidecar.ledger_file(con)
    key = sidecar.state_key(con, settings.fingerprint(), horizon(con)) if ledger else ""
    if ledger is not None:
        body = sidecar.load(ledger, key)
        if body is not None:
            try:
                return from_json(body)
            except (KeyError, TypeError, ValueError):
                pass  # an unreadable file is no file: computed again and rewritten below
    with sharing(con):  # the weeks' two lists share their reads (the horizon, the rollups' checks)
        sc = _scan(con, settings)
    if ledger is not None:
        sidecar.save(ledger, key, to_json(sc))
    return sc


def to_json(sc: WeekScan) -> dict[str, Any]:
    """``sc`` as plain JSON values (floats round-trip exactly)."""
    return {
        "weeks": [w.isoformat() for w in sc.weeks],
        "horizon": sc.horizon.isoformat() if sc.horizon else None,
        "listed": {
            w.isoformat(): {k: {**asdict(v), "key": asdict(v.key)} for k, v in items.items()}
            for w, items in sc.listed.items()
        },
        "waste": {w.isoformat(): dict(items) for w, items in sc.waste.items()},
    }


def from_json(body: dict[str, Any]) -> WeekScan:
    """The :class:`WeekScan` :func:`to_json` wrote."""
    day = dt.date.fromisoformat
    return WeekScan(
        weeks=tuple(day(w) for w in body["weeks"]),
        horizon=dt.datetime.fromisoformat(body["horizon"]) if body["horizon"] else None,
        listed={
            day(w): {k: Listed(**{**v, "key": ItemKey(**v["key"])}) for k, v in items.items()}
            for w, items in body["listed"].items()
        },
        waste={day(w): {k: float(usd) for k, usd in items.items()} for w, items in body["waste"].items()},
    )


def _scan(con: duckdb.DuckDBPyConnection, settings: Settings) -> WeekScan:
    as_of = horizon(con)
    first = con.execute(
        "SELECT min(start_ts) FROM jobs WHERE isfinite(start_ts) AND isfinite(coalesce(end_ts, start_ts))"
    ).fetchone()
    if as_of is None or first is None or first[0] is None:
        return WeekScan((), as_of)
    weeks = complete_weeks(first[0].date(), as_of)
    listed: dict[dt.date, dict[str, Listed]] = {}
    waste: dict[dt.date, dict[str, float]] = {}
    views = [Filters(since=w, until=w + dt.timedelta(days=6)) for w in weeks]
    # the capacity rule's unallocated capacity of every week in one statement, read by each week's pass
    prefetch_unallocated(con, views, settings=settings, as_of=as_of)
    for w, view in zip(weeks, views, strict=True):
        # one pass of the rules for both lists: the list a lead sees and every rule's own item
        shown, every = recommendation_lists(con, (SHOWN, EVERY), filters=view, settings=settings, as_of=as_of)
        names = job_names(
            con, [r for f in (shown, every) for r in f.filter(f["target_type"] == "job")["target"].to_list()]
        )
        week_listed: dict[str, Listed] = {}
        for r in shown.iter_rows(named=True):
            k = key_of(r, names)
            prior = week_listed.get(k.text)
            week_listed[k.text] = Listed(
                key=k,
                team=None if r["owner_type"] == OPERATORS else r["team"],
                user_name=r["user_name"],
                owner=r["owner"],
                label=KIND_LABELS.get(k.kind, k.kind),
                action=r["action"],
                evidence=r["evidence"],
                usd_per_week=_add(prior.usd_per_week if prior else None, r["usd_per_week"]),
                saving_usd=(prior.saving_usd if prior else 0.0) + float(r["saving_usd"] or 0.0),
            )
        week_waste: dict[str, float] = {}
        for r in every.iter_rows(named=True):
            k = key_of(r, names).text
            week_waste[k] = week_waste.get(k, 0.0) + float(r["saving_usd"] or 0.0)
        for k in [k for k in week_waste if k.startswith(f"{NOTEBOOKS}:")]:
            del week_waste[k]
        for user, usd in notebook_idle(con, every).items():
            week_waste[ItemKey(NOTEBOOKS, "user", user).text] = usd
        listed[w], waste[w] = week_listed, week_waste
    return WeekScan(tuple(weeks), as_of, listed, waste)


NOTEBOOKS = "stop_idle_notebooks"


def notebook_idle(con: duckdb.DuckDBPyConnection, every: pl.DataFrame) -> dict[str, float]:
    """User → the idle dollars of their interactive jobs in a week's every-rule list: ``reclaim_idle``'s
    saving on each such job (the user as analytics/advice_idle.py names it, ``(unknown)`` for none)."""
    idle = every.filter(pl.col("kind") == "reclaim_idle")
    per_job: dict[str, tuple[str, float]] = {}
    for user, ids, savings in idle.select("user_name", "job_ids", "job_saving_usd").iter_rows():
        for j, usd in zip(ids or (), savings or (), strict=False):
            per_job[str(j)] = (str(user) if user is not None else "(unknown)", float(usd or 0.0))
    if not per_job:
        return {}
    rows = con.execute(
        "SELECT job_id FROM jobs WHERE kind = 'interactive' AND job_id IN (SELECT unnest(?::VARCHAR[]))",
        [sorted(per_job)],
    ).fetchall()
    out: dict[str, float] = {}
    for (j,) in rows:
        user, usd = per_job[str(j)]
        out[user] = out.get(user, 0.0) + usd
    return out


def _add(a: float | None, b: float | None) -> float | None:
    """Two rows of one key in one week (one family's runs under two actions) add up; None stays a one-off."""
    if a is None and b is None:
        return None
    return (a or 0.0) + (b or 0.0)
