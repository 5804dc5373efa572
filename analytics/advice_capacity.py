"""Advice on capacity: paid-for GPUs nobody held, and clusters that sit idle.

Kinds (docs/recommendations.md):

- ``release_capacity`` (a cluster and GPU model with declared capacity, analytics.waste.unallocated):
  the hourly distribution of held GPUs over the capacity window (each hour: Σ over the cluster's jobs of
  that model of GPUs × the share of the hour they held them); demand = its 95th percentile (nearest rank:
  the ⌈0.95·n⌉-th smallest of n hours; ``recommend.capacity_demand_percentile``); keep ⌈p95⌉ GPUs, release R = N − ⌈p95⌉ (N: the declared GPUs, or
  the physical ones seen in telemetry if more). saving = Σ over hours of min(R, N − held) (the released
  GPUs' unheld hours) × the capacity's price, at most the unallocated $. The action names the least busy
  hosts first (busy = their GPUs' Σ utilization × time ÷ (GPUs × window), :func:`host_busy`); the evidence
  names the hosts idle over 90 % of the view;
- ``offpeak_capacity`` (the same pair): the GPUs kept after that release that sat free for two hours or
  more in a row (:func:`offpeak_gpu_hours`): scale-down after ``recommend.scale_down_after_minutes`` idle minutes for nodes
  billed by the hour, or a preemptible backfill queue on owned nodes; saving = those GPU-hours × price, at
  most the unallocated $ the release leaves, at low confidence;
- ``scale_down_idle`` (a cluster): its jobs' measured GPUs were busy (their mean utilization, weighted by
  held GPU-time in the view) less than ``recommend.idle_cluster_busy_pct`` (10 %) of the time; scale-down
  after ``recommend.scale_down_after_minutes`` idle minutes for cloud nodes, and consolidating the rest onto fewer nodes:
  saving = the idle $ of its jobs (analytics.waste idle_allocated), the underused $ named as the part
  consolidation addresses.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math

import duckdb
import polars as pl

from analytics.advice_common import AdviceView, Found, Recommendation, plural, some
from analytics.filters import Filters
from analytics.shared import ledger_frame, memo
from analytics.waste import unallocated
from gpuledger.ledger.settings import Settings

KINDS = ("release_capacity", "offpeak_capacity", "scale_down_idle")


def advise(v: AdviceView, found: Found) -> Found:
    out: Found = []
    if v.want & {"release_capacity", "offpeak_capacity"}:
        out += capacity_items(v.con, filters=v.filters, settings=v.settings, as_of=v.as_of)
    if "scale_down_idle" in v.want:
        out += idle_cluster_items(v.con, v.view, v.waste, v.settings)
    return out


def nearest_rank(values: list[float], q: float) -> float:
    """The q-quantile by nearest rank: the ⌈q·n⌉-th smallest value (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(math.ceil(q * len(ordered)), 1) - 1]


def offpeak_gpu_hours(held: list[float], kept: float) -> float:
    """GPU-hours of ``kept`` GPUs free for at least two consecutive hours: Σ over hours h ≥ 1 of
    min(free(h − 1), free(h)), free = max(0, kept − held). A scale-down after 30 idle minutes reaches them
    from the second hour of a free stretch on (the first hour is left as the scale-down lag)."""
    free = [max(0.0, kept - h) for h in held]
    return sum(min(a, b) for a, b in itertools.pairwise(free))


Window = tuple[str, str | None, dt.datetime, dt.datetime]  # (cluster, GPU model, lo, hi)


def _windows_sql(windows: list[Window]) -> tuple[str, list[object]]:
    """The windows as SQL rows w(i, cluster, gpu_model, lo, hi), i = their index."""
    rows = ", ".join("(?::INTEGER, ?::VARCHAR, ?::VARCHAR, ?::TIMESTAMP, ?::TIMESTAMP)" for _ in windows)
    params: list[object] = [x for i, w in enumerate(windows) for x in (i, *w)]
    return f"SELECT * FROM (VALUES {rows}) v(i, cluster, gpu_model, lo, hi)", params


def host_busy(
    con: duckdb.DuckDBPyConnection, cluster: str, gpu_model: str, lo: dt.datetime, hi: dt.datetime
) -> list[tuple[str, int, float]]:
    """(host, physical GPUs, busy share) of the cluster's hosts with that model, least busy first: busy =
    Σ utilization × time of their GPUs' samples in [lo, hi) ÷ (GPUs × the window's seconds)."""
    return hosts_busy(con, [(cluster, gpu_model, lo, hi)])[0]


def hosts_busy(con: duckdb.DuckDBPyConnection, windows: list[Window]) -> list[list[tuple[str, int, float]]]:
    """:func:`host_busy` of each window, in one query (capacity_items asks for every cluster and model)."""
    out: list[list[tuple[str, int, float]]] = [[] for _ in windows]
    asked = [i for i, (_, _, lo, hi) in enumerate(windows) if (hi - lo).total_seconds() > 0]
    if not asked:
        return out
    w_sql, params = _windows_sql([windows[i] for i in asked])
    rows = con.execute(
        f"""
        WITH w AS ({w_sql}),
        g AS (SELECT w.i, gpus.gpu_id, gpus.host FROM gpus JOIN w
                ON gpus.cluster = w.cluster AND gpus.model = w.gpu_model
              WHERE gpus.parent_gpu_id IS NULL AND gpus.host IS NOT NULL),
        b AS (SELECT g.i, g.host, sum(s.util_s) AS busy_s
              FROM g JOIN w USING (i) JOIN samples_day s ON s.gpu_id = g.gpu_id
              WHERE s.day >= w.lo::DATE AND s.day <= w.hi::DATE GROUP BY g.i, g.host)
        SELECT g.i, g.host, count(*) AS n, coalesce(any_value(b.busy_s), 0) AS busy_s
        FROM g LEFT JOIN b USING (i, host) GROUP BY g.i, g.host
        """,
        params,
    ).fetchall()
    for k, h, n, busy in rows:
        _, _, lo, hi = windows[asked[k]]
        out[asked[k]].append((str(h), int(n), float(busy) / (n * (hi - lo).total_seconds())))
    return [sorted(hosts, key=lambda r: (r[2], r[0])) for hosts in out]


def hourly_held(
    con: duckdb.DuckDBPyConnection, cluster: str, gpu_model: str, lo: dt.datetime, hi: dt.datetime
) -> list[float]:
    """GPUs held in each whole hour of [lo, hi) by the jobs of ``cluster`` on ``gpu_model`` (every team)."""
    return hourly_held_many(con, [(cluster, gpu_model, lo, hi)])[0]


def hourly_held_many(con: duckdb.DuckDBPyConnection, windows: list[Window]) -> list[list[float]]:
    """:func:`hourly_held` of each window, in one query (capacity_items asks for every cluster and model:
    one statement each was 4-8 ms on the 28-day demo)."""
    out: list[list[float]] = [[] for _ in windows]
    if not windows:
        return out
    w_sql, params = _windows_sql(windows)
    # Each job's own hours (k: whole hours from the window's lo) summed per hour, then set on the window's
    # grid, rather than every hour of the grid joined to every job that overlaps it: the same sums, and on a
    # 50 M-sample ledger (5 windows of 672 h, 39 k jobs) 0.025 s instead of 0.09 s.
    rows = con.execute(
        f"""
        WITH w AS ({w_sql}),
        j AS (SELECT w.i, w.lo, jobs.gpu_count, greatest(jobs.start_ts, w.lo) AS s,
                     least(coalesce(jobs.end_ts, w.hi), w.hi) AS e
              FROM jobs JOIN w ON jobs.cluster = w.cluster AND jobs.gpu_model = w.gpu_model
              WHERE jobs.start_ts IS NOT NULL AND jobs.start_ts < w.hi AND coalesce(jobs.end_ts, w.hi) > w.lo),
        jh AS (SELECT i, lo, gpu_count, s, e,
                      unnest(range(floor(epoch(s - lo) / 3600)::BIGINT, ceil(epoch(e - lo) / 3600)::BIGINT)) AS k
               FROM j WHERE e > s),
        held AS (SELECT i, k, sum(gpu_count * greatest(0, epoch(least(e, lo + to_hours(k + 1))
                                                               - greatest(s, lo + to_hours(k))))) AS held_s
                 FROM jh GROUP BY i, k),
        hours AS (SELECT i, unnest(range(0, floor(epoch(hi - lo) / 3600)::BIGINT)) AS k FROM w)
        SELECT hours.i, hours.k, coalesce(held.held_s / 3600.0, 0)
        FROM hours LEFT JOIN held USING (i, k) ORDER BY hours.i, hours.k
        """,
        params,
    ).fetchall()
    for i, _, held in rows:
        out[i].append(float(held))
    return out


def _paid_gpus(con: duckdb.DuckDBPyConnection, pairs: list[tuple[str, str | None]]) -> list[float]:
    """GPUs paid for per (cluster, GPU model): the declared count, or the cluster's physical GPUs of that
    model seen in telemetry if more; one query for all the pairs, once per sharing block (:func:`memo`: the
    same pairs each week of the items scan)."""
    if not pairs:
        return []
    return list(memo(con, ("paid_gpus", tuple(pairs)), lambda: _read_paid_gpus(con, pairs)))


def _read_paid_gpus(con: duckdb.DuckDBPyConnection, pairs: list[tuple[str, str | None]]) -> list[float]:
    rows = ", ".join("(?::INTEGER, ?::VARCHAR, ?::VARCHAR)" for _ in pairs)
    params: list[object] = [x for i, (c, m) in enumerate(pairs) for x in (i, c, m)]
    got = con.execute(
        f"""SELECT w.i,
                   (SELECT max(gpu_count) FROM capacity c WHERE c.cluster = w.cluster AND c.gpu_model = w.gpu_model),
                   (SELECT count(*) FROM gpus g
                    WHERE g.cluster = w.cluster AND g.model = w.gpu_model AND g.parent_gpu_id IS NULL)
            FROM (VALUES {rows}) w(i, cluster, gpu_model) ORDER BY w.i""",
        params,
    ).fetchall()
    return [max(float(declared or 0), float(seen or 0)) for _, declared, seen in got]


def capacity_items(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters,
    settings: Settings,
    as_of: dt.datetime | None,
) -> list[Recommendation]:
    """release_capacity and offpeak_capacity items, per cluster and GPU model with unallocated $."""
    un = unallocated(con, filters=filters, settings=settings, as_of=as_of)
    if as_of is None:
        return []
    rows = [r for r in un.to_dicts() if r["unallocated_usd"] and r["usd_per_gpu_hour"]]
    # GPUs paid for, held per hour and host busy shares: one query each for all the rows, not per row
    paid = _paid_gpus(con, [(r["cluster"], r["gpu_model"]) for r in rows])
    todo: list[tuple[dict[str, object], float, Window]] = []
    for r, n in zip(rows, paid, strict=True):
        if not n:
            continue
        window_h = r["capacity_gpu_hours"] / n
        hi = min(filters.hi, as_of) if filters.hi else as_of
        lo = hi - dt.timedelta(hours=math.floor(window_h + 1e-6))  # float noise of the sum
        todo.append((r, n, (r["cluster"], r["gpu_model"], lo, hi)))
    helds = hourly_held_many(con, [w for _, _, w in todo])
    busy = hosts_busy(con, [w for _, _, w in todo])
    pct, busy_share = settings.capacity_demand_percentile, settings.idle_cluster_busy_pct / 100.0
    after = settings.scale_down_after_minutes
    items = []
    for (r, n, _), held, hosts in zip(todo, helds, busy, strict=True):
        p95 = nearest_rank(held, pct / 100.0)
        keep = math.ceil(p95 - 1e-9)
        release = max(int(n - keep), 0)
        price = r["usd_per_gpu_hour"]
        key = f"capacity:{r['cluster']}:{r['gpu_model']}"
        median = nearest_rank(held, 0.5)
        seen = (
            f"{r['cluster']} pays for {n:g} × {r['gpu_model']} (${price:.2f}/GPU-h); over the {len(held)} hours of "
            f"the view its jobs held a median {median:.1f} GPUs, {p95:.1f} at the {pct:g}th percentile and "
            f"{max(held, default=0):.1f} at most; {r['unallocated_gpu_hours']:,.0f} GPU-hours "
            f"(${r['unallocated_usd']:,.2f}) went unheld."
        )
        common = {
            "target_type": "cluster",
            "target": f"{r['cluster']}/{r['gpu_model']}",
            "user_name": None,
            "team": "unallocated",
            "job_ids": (key,),
            "job_cost_usd": (r["unallocated_usd"],),
            "lever": "time",
            "addresses": ("unallocated_usd",),
            "recurring": True,
        }
        released_free = sum(min(release, max(0.0, n - h)) for h in held)  # unheld hours of the released GPUs
        saving = min(released_free * price, r["unallocated_usd"]) if release else 0.0
        idle_hosts = [h for h, _, b in hosts if b < busy_share]
        if idle_hosts:
            seen += (
                f" {plural(len(idle_hosts), 'host')} sat idle over {100 - settings.idle_cluster_busy_pct:g} % "
                f"of the view ({some(idle_hosts)})."
            )
        pick, count = [], 0
        for h, g, b in hosts:  # the least busy hosts first, until they hold the GPUs to release
            if count >= release:
                break
            pick.append(f"{h} ({b * 100:.0f} % busy)")
            count += g
        if saving > 0:
            items.append(
                Recommendation(
                    kind="release_capacity",
                    evidence=f"{seen} {plural(release, 'GPU')} above the p{pct:g} demand cost ${saving:,.2f} in the view.",
                    action=(
                        f"Release {release} of the {n:g} {r['gpu_model']} on {r['cluster']} (keep {keep}, the p{pct:g} "
                        f"demand), or shrink the reservation to {keep}"
                        + (f"; the least busy nodes first: {some(pick, 4)}." if pick else ".")
                    ),
                    saving_usd=saving,
                    confidence="high" if len(held) >= 24 * 7 else "medium",
                    confidence_reasons=f"demand from {len(held)} hourly points"
                    + ("" if len(held) >= 24 * 7 else " (under a week: a weekly peak may be missing)"),
                    job_saving_usd=(saving,),
                    **common,
                )
            )
        off = offpeak_gpu_hours(held, n - release)
        off_usd = min(off * price, r["unallocated_usd"] - saving)
        if off_usd > 0:
            items.append(
                Recommendation(
                    kind="offpeak_capacity",
                    evidence=(
                        f"{seen} Below the p{pct:g} demand, {off:,.0f} GPU-hours stayed free for two hours or more in a row "
                        f"(${off_usd:,.2f} in the view)."
                    ),
                    action=(
                        f"Scale {r['cluster']}'s {r['gpu_model']} nodes down after {after:g} idle minutes "
                        "(cloud or hourly-reserved nodes), or open the off-peak hours to a preemptible backfill queue "
                        "(sweeps, evaluations, spot-tolerant training) on owned nodes."
                    ),
                    saving_usd=off_usd,
                    confidence="low",
                    confidence_reasons="scale-down saves only where nodes bill by the hour; backfill needs queued work",
                    job_saving_usd=(off_usd,),
                    **common,
                )
            )
    return items


def idle_cluster_items(
    con: duckdb.DuckDBPyConnection, view: pl.DataFrame, waste: pl.DataFrame, settings: Settings
) -> list[Recommendation]:
    """scale_down_idle items: clusters whose held GPU-time was busy under ``idle_cluster_busy_pct``.

    ``waste``: analytics.waste.job_waste rows of the view (idle_allocated_usd, underused_usd per job)."""
    # each job's busy share over all its days (samples_day), joined to the view's jobs: one statement and
    # one join, not a dict of every job's share filtered per cluster in Python
    busy = ledger_frame(  # all days of every job: once per sharing block (the items scan runs this weekly)
        con,
        """SELECT job_id, sum(util_s) / nullif(sum(util_cov_s), 0) AS busy FROM samples_day
           WHERE job_id IS NOT NULL GROUP BY job_id""",
    )
    parts = waste.select("job_id", "idle_allocated_usd", "underused_usd")
    jobs = (
        view.filter(pl.col("cost_usd").is_not_null() & (pl.col("held_gpu_s") > 0))
        .join(parts, on="job_id", how="left")
        .join(busy.with_columns(pl.col("job_id").cast(view.schema["job_id"])), on="job_id", how="left")
    )
    items = []
    for (cluster,), g in jobs.group_by("cluster"):
        if cluster is None:
            continue
        # measured GPU-time only (a job without telemetry says nothing about idleness)
        measured = g.filter(pl.col("busy").is_not_null())
        held = float(measured["held_gpu_s"].sum())
        if held <= 0:
            continue
        used = float((measured["busy"] * measured["held_gpu_s"]).sum())
        share_busy = used / held
        if share_busy >= settings.idle_cluster_busy_pct / 100.0:
            continue
        g = g.filter((pl.col("idle_allocated_usd").fill_null(0) + pl.col("underused_usd").fill_null(0)) > 0)
        if g.is_empty():
            continue
        ids = g["job_id"].to_list()
        idle = g["idle_allocated_usd"].fill_null(0).to_list()
        under = float(g["underused_usd"].fill_null(0).sum())
        saving = float(sum(idle))
        if saving <= 0:
            continue
        models = ", ".join(sorted({m for m in g["gpu_model"].to_list() if m}))
        evidence = (
            f"{cluster}'s GPUs ({models}) were busy {share_busy * 100:.0f} % of the {held / 3600:,.0f} GPU-hours "
            f"its jobs held in the view (idle {100 - share_busy * 100:.0f} %): ${saving:,.2f} in idle stretches and "
            f"${under:,.2f} more at low utilization."
        )
        action = (
            f"Scale {cluster}'s nodes down after {settings.scale_down_after_minutes:g} idle minutes and pack its jobs onto fewer "
            "nodes (or smaller GPUs)."
        )
        items.append(
            Recommendation(
                kind="scale_down_idle",
                target_type="cluster",
                target=cluster,
                user_name=None,
                team=None,
                evidence=evidence,
                action=action,
                saving_usd=saving,
                confidence="medium",
                confidence_reasons="measured utilization; the saving counts the idle stretches only",
                job_ids=tuple(ids),
                job_saving_usd=tuple(idle),
                job_cost_usd=tuple(g["cost_usd"].to_list()),
                lever="time",
                addresses=("idle_allocated_usd", "underused_usd"),
                recurring=True,
            )
        )
    return items
