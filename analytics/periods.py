"""The view cut into periods, and each job's cost per period.

Two cuts of a view's dates share one shape, a list of (label, the view's filters narrowed to the period's
days): its ISO weeks (:func:`view_weeks`: the weekly bars and tables) and its price periods
(:func:`price_pieces`: each part priced at the price in force when its time was used). A list of periods
becomes SQL rows with :func:`buckets_sql`, and :func:`job_bucket_costs_sql` cuts every job at their bounds,
so one statement gives each (job, period) what :func:`analytics.cost.job_costs` gives for the view narrowed
to that period.
"""

from __future__ import annotations

import datetime as dt
import itertools

import duckdb

from analytics.cost import (
    billed_cost_sql,
    job_costs_sql,
    pseudo_cards_sql,
    shared_cut_sql,
    shared_segments_sql,
)
from analytics.filters import Filters
from gpuledger.ledger.cte import Cte, with_ctes
from gpuledger.ledger.prices import PRICE_PERIODS_CTE, price_cluster_sql, price_tier_sql

Period = tuple[str, Filters]  # a label (YYYY-Www, p0, ...) and the view narrowed to the period's days


def view_days(con: duckdb.DuckDBPyConnection, filters: Filters) -> tuple[dt.date, dt.date] | None:
    """The view's first and last UTC day: its dates, an open end taken as the ledger's first (last) day with a
    job or a sample; None when an open end meets an empty ledger."""
    first, last = filters.since, filters.until
    if first is None or last is None:
        lo, hi = con.execute(
            """SELECT least((SELECT min(start_ts) FROM jobs), (SELECT min(ts) FROM samples))::DATE,
                      greatest((SELECT max(coalesce(end_ts, start_ts)) FROM jobs),
                               (SELECT max(ts) FROM samples))::DATE"""
        ).fetchall()[0]
        first, last = first or lo, last or hi
    if first is None or last is None:
        return None
    return first, last


def view_weeks(con: duckdb.DuckDBPyConnection, filters: Filters) -> list[Period]:
    """The ISO weeks of the view, each as (``YYYY-Www``, the view's filters narrowed to that week).

    An open end of the view is the ledger's first (last) UTC day with a job or a sample; the first and last
    week are cut there, so the weeks together are exactly the view. Empty when the ledger is."""
    days = view_days(con, filters)
    if days is None:
        return []
    first, last = days
    out = []
    monday = first - dt.timedelta(days=first.isoweekday() - 1)
    while monday <= last:  # one row per week (a handful), not per job
        y, w, _ = monday.isocalendar()
        since, until = max(first, monday), min(last, monday + dt.timedelta(days=6))
        out.append((f"{y}-W{w:02d}", Filters(since, until, filters.teams, filters.clusters, filters.users)))
        monday += dt.timedelta(days=7)
    return out


def price_pieces(con: duckdb.DuckDBPyConnection, filters: Filters) -> list[Period]:
    """The view cut at every day a price row takes effect inside it (labels p0, p1, ...): one piece, the view
    itself, when no price changes inside it (the usual case: one query, no cutting)."""
    view = view_days(con, filters)
    if view is None:
        return [("p0", filters)]
    first, last = view
    days = [
        r[0]
        for r in con.execute(
            """SELECT DISTINCT effective_from FROM prices WHERE effective_from > $first AND effective_from <= $last
               ORDER BY 1""",
            {"first": first, "last": last},
        ).fetchall()
    ]
    if not days:
        return [("p0", filters)]
    bounds = [first, *days, last + dt.timedelta(days=1)]
    return [
        (f"p{i}", Filters(a, b - dt.timedelta(days=1), filters.teams, filters.clusters, filters.users))
        for i, (a, b) in enumerate(itertools.pairwise(bounds))
    ]


def buckets_sql(weeks: list[Period]) -> tuple[str, list[object]]:
    """The periods as SQL rows (week, w_lo, w_hi): [midnight of since, midnight after until). The label
    column is ``week`` whatever the cut (ISO weeks, price periods, capacity windows)."""
    rows = ", ".join("(?, ?::TIMESTAMP, ?::TIMESTAMP)" for _ in weeks)
    params: list[object] = [x for week, f in weeks for x in (week, f.lo, f.hi)]
    return f"SELECT * FROM (VALUES {rows}) v(week, w_lo, w_hi)", params


def job_bucket_costs_sql(
    filters: Filters, as_of: dt.datetime | None, buckets: tuple[str, list[object]]
) -> tuple[str, list[object]]:
    """job_costs columns (plus ``week``) per (job, bucket of :func:`buckets_sql`): each job's in-view span cut
    at the bucket bounds and priced per piece with the price periods of analytics/cost.py, so a piece costs
    what ``job_costs`` gives for the view narrowed to that bucket. Telemetry-only cards' pseudo-jobs
    (:func:`analytics.cost.pseudo_cards_sql`) are cut at the bucket bounds like any job."""
    real_sql, real_params = job_costs_sql(filters, as_of, unattributed=False)
    where, where_params = filters.job_where("pj")
    as_of_param = as_of or dt.datetime(9999, 1, 1)
    pieces = f"""
        SELECT r.job_id, wk.week, r.cluster, r.user_name, r.team, r.project, r.name, r.kind, r.gpu_model,
               r.gpu_count, r.pricing_tier, r.price_tier, r.state, r.start_ts, r.end_ts,
               greatest(r.span_start, wk.w_lo) AS span_start, least(r.span_end, wk.w_hi) AS span_end
        FROM real r JOIN wk ON r.span_start < wk.w_hi AND r.span_end > wk.w_lo
        UNION ALL BY NAME
        SELECT pj.* EXCLUDE (w_lo, w_hi), {price_tier_sql("pj", "pj.pricing_tier")} AS price_tier,
               greatest(pj.start_ts, pj.w_lo) AS span_start,
               least(coalesce(pj.end_ts, greatest(?::TIMESTAMP, pj.start_ts)), pj.w_hi) AS span_end
        FROM pseudo pj
        WHERE pj.start_ts IS NOT NULL AND {where}"""
    pc = f"""
        SELECT *, {price_cluster_sql("pieces", "pieces.price_tier")} AS price_cluster,
               {shared_cut_sql("pieces")} AS cut_s, gpu_count * epoch(span_end - span_start) AS declared_s
        FROM pieces WHERE span_end > span_start"""
    return with_ctes(
        [
            Cte("wk", buckets[0], tuple(buckets[1])),
            Cte("shared", shared_segments_sql()),
            Cte("real", real_sql, tuple(real_params)),
            Cte("pseudo", _pseudo_sql()),
            Cte("pieces", pieces, (as_of_param, *where_params)),
            Cte("pc", pc),
            PRICE_PERIODS_CTE,
            Cte("priced", PIECE_COSTS_SQL),
        ],
        PIECES_SELECT,
    )


def _pseudo_sql() -> str:
    """The telemetry-only cards' pseudo-jobs (analytics.cost.pseudo_cards_sql: each held from its first sample
    in the ledger to its last one's end) with every bucket of ``wk`` they overlap; built per statement: the
    telemetry-only GPUs may be a sharing block's temp table."""
    return f"""
        SELECT wk.week, pc.job_id, pc.cluster, pc.user_name, pc.team, pc.project, pc.name, pc.kind, pc.gpu_model,
               pc.gpu_count, pc.pricing_tier, pc.state, pc.start_ts, pc.end_ts, wk.w_lo, wk.w_hi
        FROM ({pseudo_cards_sql()}) pc JOIN wk ON pc.start_ts < wk.w_hi AND pc.end_ts > wk.w_lo"""


# each piece's cost over the price periods it crosses, each period's cut of shared GPUs at its own price
PIECE_COSTS_SQL = f"""
        SELECT pc.job_id, pc.week, {billed_cost_sql("pc")} AS cost_usd
        FROM pc JOIN periods p
          ON p.gpu_model = pc.gpu_model AND p.tier = pc.price_tier
         AND p.cluster IS NOT DISTINCT FROM pc.price_cluster
         AND p.p_from < pc.span_end AND p.p_to > pc.span_start
        GROUP BY pc.job_id, pc.week"""

PIECES_SELECT = """
    SELECT pc.* EXCLUDE (price_cluster, cut_s, declared_s),
           epoch(pc.span_end - pc.span_start) / 3600.0 AS hours,
           (pc.declared_s - pc.cut_s) / 3600.0 AS gpu_hours,
           pc.cut_s / 3600.0 AS oversubscribed_gpu_hours,
           priced.cost_usd
    FROM pc LEFT JOIN priced USING (job_id, week)
    """
