"""The what-if held to the same ledger repriced in SQL, and no negative money: ``gpuledger check``'s invariants.

The what-if reprices jobs in Python (:class:`gpuledger.ledger.prices.PriceBook`: a page holds a few thousand
jobs in a frame). :func:`repriced_sql` reprices the same jobs inside one query with the SQL form of the same
rule (``PRICE_PERIODS_CTE``), as the job costs are billed: the ledger's jobs with their model or tier swapped,
each GPU-second at the row in force then. The two must agree job by job; a disagreement means the two forms of
the price in force have drifted apart, or a change priced one day at another day's row (issue 41: the latest
row applied to every day).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import duckdb
import polars as pl

from analytics.cost import billed_cost_sql, job_costs_sql, shared_segments_sql
from analytics.filters import Filters, horizon
from analytics.query import frame
from gpuledger.ledger.cte import Cte, with_ctes
from gpuledger.ledger.prices import PRICE_PERIODS_CTE, price_cluster_sql, price_tier_sql
from gpuledger.ledger.settings import Settings

ALL = Filters()
TOLERANCE_USD = 0.01  # a cent over the whole comparison: float sums of the same dollars in another order


# each job's dollars at its swapped key, each price period's declared time less its own cut at that period's rate
NEW_COST_SQL = f"""
        SELECT kc.job_id, kc.span_start, {billed_cost_sql("kc")} AS cost_usd
        FROM kc JOIN periods p
          ON p.gpu_model = kc.gpu_model AND p.tier = kc.key_tier AND p.cluster IS NOT DISTINCT FROM kc.key_cluster
         AND p.p_from < kc.span_end AND p.p_to > kc.span_start
        GROUP BY kc.job_id, kc.span_start"""

# each job's span cut at every UTC midnight inside it (prices take effect at midnights: one rate a day)
DAY_PIECES_SQL = """
        SELECT jc.* REPLACE (greatest(jc.span_start, d.day) AS span_start,
                             least(jc.span_end, d.day + INTERVAL 1 DAY) AS span_end)
        FROM jc, LATERAL (SELECT unnest(generate_series(date_trunc('day', jc.span_start),
                                                        jc.span_end - INTERVAL 1 MICROSECOND,
                                                        INTERVAL 1 DAY)) AS day) d
        WHERE jc.span_end > jc.span_start"""


def repriced_sql(
    filters: Filters,
    as_of: dt.datetime | None,
    *,
    model: str | None = None,
    tier: str | None = None,
    by_day: bool = False,
) -> tuple[str, list[object]]:
    """Each job of the view, priced or not (job_id, team, cluster, booked_model, gpu_model, pricing_tier,
    gpu_hours, cost_usd) and ``new_usd``: the same ledger re-billed with ``model`` (default: its own) asked at
    ``tier`` (default: its own), each GPU-second it is billed for at the price in force then on its cluster
    (analytics.cost.billed_cost_sql, the bill's own form); NULL where that is unpriced. ``key_tier``: the tier
    of the key (on_demand where the model has no row of the asked tier there). ``by_day``: one row per job
    and UTC day it ran (``span_start`` the day's piece; ``cost_usd`` and ``gpu_hours`` stay the job's)."""
    jobs_sql, jobs_params = job_costs_sql(filters, as_of)
    source = "dj" if by_day else "jc"
    moved = f"""
        SELECT job_id, team, cluster, gpu_count, gpu_hours, cost_usd, span_start, span_end,
               gpu_model AS booked_model, coalesce(?::VARCHAR, gpu_model) AS gpu_model,
               coalesce(?::VARCHAR, pricing_tier) AS pricing_tier
        FROM {source} WHERE span_end > span_start"""
    select = """
        SELECT kc.job_id, kc.span_start, kc.team, kc.cluster, kc.booked_model, kc.gpu_model, kc.pricing_tier,
               kc.key_tier, kc.gpu_hours, kc.cost_usd, nu.cost_usd AS new_usd
        FROM kc LEFT JOIN nu USING (job_id, span_start)"""
    return with_ctes(
        [
            Cte("jc", jobs_sql, tuple(jobs_params)),
            Cte("shared", shared_segments_sql()),
            Cte("dj", DAY_PIECES_SQL),
            Cte("moved", moved, (model, tier)),
            Cte("kt", f"SELECT m.*, {price_tier_sql('m', 'm.pricing_tier')} AS key_tier FROM moved m"),
            Cte("kc", f"SELECT kt.*, {price_cluster_sql('kt', 'kt.key_tier')} AS key_cluster FROM kt"),
            PRICE_PERIODS_CTE,
            Cte("nu", NEW_COST_SQL),
        ],
        select,
    )


def repriced(
    con: duckdb.DuckDBPyConnection,
    filters: Filters = ALL,
    *,
    model: str | None = None,
    tier: str | None = None,
    by_day: bool = False,
) -> pl.DataFrame:
    """:func:`repriced_sql` as a frame."""
    sql, params = repriced_sql(filters, horizon(con), model=model, tier=tier, by_day=by_day)
    return frame(con, sql, params)


def spot_saving_sql(con: duckdb.DuckDBPyConnection, team: str, settings: Settings, filters: Filters) -> float:
    """What moving ``team`` to spot saves, from :func:`repriced` day by day: each day of each of its jobs on
    elastic capacity whose model has a spot row for its cluster, where spot makes that day cheaper than the
    same day re-billed as booked, that day's cost − its spot cost (a day unpriced as booked adds its spot
    cost). The what-if chooses price piece by price piece (analytics.whatif.cheaper_pieces); one row is in
    force all day, so a day chooses as its piece does."""
    from analytics.whatif import ELASTIC_TIERS, SPOT

    keys = ["job_id", "span_start"]
    new = repriced(con, filters, tier=SPOT, by_day=True).filter(pl.col("team") == team)
    was = repriced(con, filters, by_day=True).select(*keys, pl.col("new_usd").alias("was_usd"))
    out = 0.0
    for j in new.join(was, on=keys, how="left").iter_rows(named=True):
        cost, day_new, day_was = j["cost_usd"], j["new_usd"], j["was_usd"]
        if j["key_tier"] != SPOT or day_new is None or (j["gpu_hours"] or 0) <= 0:
            continue
        if (cost is not None and cost <= 0) or settings.cluster_tier(j["cluster"]) not in ELASTIC_TIERS:
            continue
        if day_was is not None and day_new >= day_was * (1 - 1e-9):
            continue
        out += (day_was or 0.0) - day_new  # a day unpriced as booked is billed on spot: it adds
    return out


def model_saving_sql(con: duckdb.DuckDBPyConnection, old: str, new: str, filters: Filters) -> float | None:
    """What running ``old``'s jobs on ``new`` saves, from :func:`repriced` (None when ``new`` prices none)."""
    moved = repriced(con, filters, model=new).filter(
        (pl.col("booked_model") == old)
        & (pl.col("gpu_hours") > 0)
        & (pl.col("cost_usd").is_null() | (pl.col("cost_usd") > 0))
    )
    priced = moved.filter(pl.col("new_usd").is_not_null())
    if moved.height and not priced.height:
        return None
    return float((priced["cost_usd"].fill_null(0.0) - priced["new_usd"]).sum()) if priced.height else 0.0


def negative_money(summary: dict[str, Any], jobs: pl.DataFrame) -> list[str]:
    """Every negative dollar or GPU-hour in the view's summary and its jobs' rows, one line each."""
    out = [
        f"summary: {k} is {v:,.2f}"
        for k, v in (
            ("spend_usd", summary["spend_usd"]),
            ("gpu_hours", summary["gpu_hours"]),
            *summary["waste"].items(),
        )
        if v is not None and v < -1e-9
    ]
    cols = [c for c in jobs.columns if c.endswith("_usd") or c in ("gpu_hours", "idle_gpu_hours")]
    for c in cols:
        if jobs.schema[c].is_numeric():
            for r in jobs.filter(pl.col(c) < -1e-9).select("job_id", c).head(20).iter_rows():
                out.append(f"job {r[0]}: {c} is {r[1]:,.2f}")
    return out
