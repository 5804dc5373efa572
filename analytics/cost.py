"""What each job cost: GPUs × hours × the price in force for its GPU model, pricing tier, cluster and date.

Price rules (docs/metrics.md, "Cost"):
- the price in force is gpuledger/ledger/prices.py's one rule (docs/metrics.md "Cost"): a row is in force
  from its ``effective_from`` day on, never before, until the next row of the same model, tier and cluster;
  each moment pays the most preferred row in force then among the cluster's own rows of the asked tier, the
  generic ones, then the cluster's own on_demand rows and the generic on_demand ones (``price_tier``: the
  asked tier where the model has rows of it there, else on_demand); only time before all of them is priced
  as on the earliest row's day (traces from 2020 are priced at today's sheet rather than not at all), so a
  row dated after the data changes nothing in it;
- prices come from the shipped sheet, from sources that declare their own (``stage_prices``: the demo's
  on-prem rate) and from the user's settings; for the same model, tier, cluster and day the settings win,
  then the source, then the sheet;
- a GPU model with no price at all leaves ``cost_usd`` NULL: such GPU-hours are reported as unpriced,
  never as $0;
- a job spanning a price change is split at the change;
- only the part of a job inside the view's date range counts; running jobs are costed up to the ledger's
  data horizon;
- shared GPUs: when the allocations of several jobs name one physical GPU at the same time and their
  declared fractions (the allocation's gpu_count: 1 for a whole card, gpu_milli / 1000 or a MIG share for
  less) sum to more than one GPU, each GPU-second is split among them — by their processes' SM utilization
  where it is known for that second (nvidia-smi pmon, table process_shares), else in proportion to what
  each declared (all whole cards: equally) — so the shares of one GPU-second sum to one and the jobs together
  are billed for one GPU. What a job declared beyond its share is ``oversubscribed_gpu_hours``: reported, not
  billed (:data:`SHARED_SEGMENTS_SQL`). Fractions that fit in one GPU are each job's own and are billed as
  declared;
- telemetry-only cards (samples, but no allocation names the card, one of its MIG instances or its host, and
  no sample of any of them carries a known job) are costed as pseudo-jobs ``unattributed:<card>`` (user and
  team "unattributed", kind "other", 1 GPU, on_demand for the card's model) held from the first sample of
  the card or any of its instances in the ledger to the end of the last one (its ts + interval_s), a view
  taking the part inside it as for any job (:func:`pseudo_cards_sql`), so a lone
  nvidia-smi log still shows what its idle time cost, and a MIG card is billed once, not once per instance
  (and once more for the card when nvidia-smi -q -x lists it too). A card is ``coalesce(parent_gpu_id,
  gpu_id)``: a MIG instance counts as its card (:data:`TELEMETRY_ONLY_GPUS_SQL`).
"""

from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from analytics.filters import Filters, horizon
from analytics.job_count import job_count, with_job_of
from analytics.query import frame
from analytics.shared import materialized
from gpuledger.ledger.mig import GPU_SLICES_SQL
from gpuledger.ledger.prices import PRICE_PERIODS_CTE, price_cluster_sql, price_tier_sql
from gpuledger.ledger.shares import SHARED_SEGMENTS_SQL as SHARED_SEGMENTS_SQL
from gpuledger.ledger.shares import SHARES_COLUMNS
from gpuledger.ledger.sql import PSEUDO_PREFIX

ALL_FILTERS = Filters()  # the whole ledger

JOB_COST_COLUMNS = {
    "job_id": "job id",
    "cluster": "",
    "user_name": "",
    "team": "",
    "project": "",
    "name": "",
    "kind": "training | fine-tune | inference | interactive | other",
    "gpu_model": "catalog model",
    "gpu_count": "GPUs held (fractional for shared GPUs)",
    "pricing_tier": "tier the job asked for",
    "price_tier": "tier whose price was used (on_demand when the asked tier has no price)",
    "state": "",
    "start_ts": "UTC",
    "end_ts": "UTC, NULL while running",
    "span_start": "start of the part inside the view (UTC)",
    "span_end": "end of the part inside the view (UTC)",
    "hours": "wall hours inside the view",
    "gpu_hours": "gpu_count × hours, less oversubscribed_gpu_hours (a shared GPU's time beyond the job's share)",
    "oversubscribed_gpu_hours": "GPU-hours the job declared on GPUs whose jobs declared more than one GPU "
    "in total, beyond its share of each GPU-second (reported, not billed; negative where per-process SM "
    "utilization gave it more than it declared)",
    "cost_usd": "NULL when the GPU model has no price",
}


UNATTRIBUTED = "unattributed"

# GPUs whose telemetry no job record claims, decided per physical card (``card`` = coalesce(parent_gpu_id,
# gpu_id): a MIG instance counts as its card): no allocation names the card or any of its instances (or, for
# host-only allocations, the host of one of them), and no sample of any of them carries the id of a known job.
# The samples of such a card's GPU rows belong to its one pseudo-job (:func:`pseudo_jobs_sql`). A card some
# of whose instances a job holds is not telemetry-only: its other instances' time is unallocated capacity
# (analytics/waste.py), never a pseudo-job beside the job.
#
# One row per such GPU with samples: gpu_id, card, and the share of its card the GPU's samples stand for,
# card_share = card_units / card_slices: 1 for the card itself (and for a second view of the whole card, a
# W&B series of it); for a MIG instance its slices over the card's (gpuledger/ledger/mig.py sizes them). Whole
# slices are kept apart (3 of 7) so that sums weighted by them are exact where the samples' are
# (analytics/utilization.py divides a job's sums by the card's slices once); a card without MIG instances is
# 1 of 1.
TELEMETRY_ONLY_GPUS_SQL = rf"""
    WITH gc AS (SELECT gpu_id, coalesce(parent_gpu_id, gpu_id) AS card, host FROM gpus),
    -- apart, not one EXISTS with OR: each is then a hash semi-join, not a nested loop over every
    -- (GPU, allocation) pair (1,232 GPUs × 66 k allocations: 0.2 s a page)
    claimed AS (
        SELECT card FROM gc WHERE gpu_id IN (SELECT gpu_id FROM allocations WHERE gpu_id IS NOT NULL)
        UNION SELECT card FROM gc WHERE card IN (SELECT gpu_id FROM allocations WHERE gpu_id IS NOT NULL)
        UNION SELECT card FROM gc WHERE host IN (SELECT host FROM allocations WHERE gpu_id IS NULL)
        UNION SELECT card FROM gc
              WHERE gpu_id IN (SELECT m.gpu_id FROM samples_day m JOIN jobs jj ON jj.job_id = m.job_id)
    ),
    sized AS (
        SELECT z.gpu_id, gc.card, z.instance, z.slices, z.slice_units
        FROM ({GPU_SLICES_SQL}) z JOIN gc USING (gpu_id)
        WHERE gc.card NOT IN (SELECT card FROM claimed)
          AND z.gpu_id IN (SELECT gpu_id FROM samples_day)
    ),
    units AS (SELECT gpu_id, card, bool_or(instance) OVER (PARTITION BY card) AS mig, slice_units, slices FROM sized)
    SELECT gpu_id, card,
           CASE WHEN mig THEN slice_units ELSE 1.0 END AS card_units,
           CASE WHEN mig THEN slices ELSE 1.0 END AS card_slices,
           CASE WHEN mig THEN slice_units / slices ELSE 1.0 END AS card_share
    FROM units
"""


def pseudo_cards_sql() -> str:
    """Rows shaped like ``jobs`` for every telemetry-only card: one per card, however many of its GPU rows (the
    card, its MIG instances) report. No parameters.

    A card's pseudo-job is held from its first sample in the ledger to its last sample's end (read from the
    per-day rollup: first sample, and max(ts + interval_s), of each GPU-day), whatever the view; a view takes
    the part inside it as it does any job's, so disjoint views add up to their union also where the card fell
    silent across their boundary (the view's own first-to-last samples would leave such a silence out of both
    days and bill it in the whole)."""
    return f"""
        SELECT '{PSEUDO_PREFIX}' || t.card AS job_id, 'telemetry' AS source, any_value(g.cluster) AS cluster,
               '{UNATTRIBUTED}' AS user_name, '{UNATTRIBUTED}' AS team, NULL::VARCHAR AS project,
               '{PSEUDO_PREFIX}' || t.card AS name, 'other' AS kind, any_value(g.model) AS gpu_model,
               1.0::DOUBLE AS gpu_count, 'on_demand' AS pricing_tier, NULL::TIMESTAMP AS submit_ts,
               min(s.first_ts) AS start_ts, max(s.max_end_ts) AS end_ts,
               'UNKNOWN' AS state, NULL::VARCHAR AS exit_reason, NULL::TIMESTAMP AS last_checkpoint_ts,
               NULL::BIGINT AS ingest_id
        FROM samples_day s JOIN ({telemetry_only_gpus_sql()}) t USING (gpu_id) LEFT JOIN gpus g USING (gpu_id)
        GROUP BY t.card"""


def pseudo_jobs_sql(lo: dt.datetime, hi: dt.datetime) -> tuple[str, list[object]]:
    """:func:`pseudo_cards_sql`'s pseudo-jobs whose span overlaps [lo, hi)."""
    return f"SELECT * FROM ({pseudo_cards_sql()}) WHERE start_ts < ?::TIMESTAMP AND end_ts > ?::TIMESTAMP", [
        hi,
        lo,
    ]


def shared_segments_sql() -> str:
    """The stored split of every shared card (``gpu_shares``, gpuledger/ledger/shares.py: kept up to date at
    every landing) as a sub-query: job_id, gpu_id, s_from, s_to, share, cut."""
    return f"SELECT {SHARES_COLUMNS} FROM gpu_shares"


def telemetry_only_gpus_sql() -> str:
    """:data:`TELEMETRY_ONLY_GPUS_SQL` as a sub-query (computed once per sharing block, analytics.shared)."""
    return materialized(("telemetry_only_gpus",), TELEMETRY_ONLY_GPUS_SQL, [])[0]


def shared_cut_sql(alias: str, lo: str | None = None, hi: str | None = None) -> str:
    """GPU-seconds the row ``alias`` (job_id, span_start, span_end) declared beyond its shares of shared GPUs
    inside [``lo``, ``hi``) (SQL expressions; default its span); reads the CTE ``shared``
    (:data:`SHARED_SEGMENTS_SQL`)."""
    lo = lo or f"{alias}.span_start"
    hi = hi or f"{alias}.span_end"
    return f"""coalesce((SELECT sum(c.cut * greatest(0, epoch(least(c.s_to, {hi}) - greatest(c.s_from, {lo}))))
                         FROM shared c WHERE c.job_id = {alias}.job_id), 0)"""


def billed_cost_sql(alias: str) -> str:
    """SQL aggregate: the cost of the rows ``alias`` (job_id, gpu_count, span_start, span_end, a job's span or a
    piece of it) joined to the price periods ``p`` they overlap: in each price period, what the row declared
    less its cut of shared GPUs inside that period (:func:`shared_cut_sql`), × the price in force then.

    A shared GPU's cut is priced when it happened, never at a rate averaged over the row's span: a job whose
    card was shared only before a price change at midnight pays the cut at the old price, so a span priced
    whole (a month's bill) equals the same span cut at the change (the summary's price pieces) or at every
    midnight (the days) to the cent. Before, the span's priced cost was scaled by one ``1 − cut/declared``
    (a month's bill lost 31 ¢ against its summary on a MIG card shared across a price change)."""
    lo = f"greatest({alias}.span_start, p.p_from)"
    hi = f"least({alias}.span_end, p.p_to)"
    return f"""sum(({alias}.gpu_count * epoch({hi} - {lo}) - {shared_cut_sql(alias, lo, hi)}) / 3600.0
                   * p.usd_per_gpu_hour)"""


def job_costs_sql(
    filters: Filters, as_of: dt.datetime | None, *, unattributed: bool = True
) -> tuple[str, list[object]]:
    """The SQL (and parameters) of :func:`job_costs`, reusable as a sub-query by other analytics."""
    where, params = filters.job_where("j")
    lo = filters.lo or dt.datetime(1970, 1, 1)
    hi = filters.hi or dt.datetime(9999, 1, 1)
    as_of = as_of or dt.datetime(9999, 1, 1)
    if unattributed:
        pseudo, pseudo_params = pseudo_jobs_sql(lo, hi)
        source = f"(SELECT * FROM jobs UNION ALL BY NAME ({pseudo}))"
    else:
        source, pseudo_params = "jobs", []
    sql = f"""
    WITH shared AS ({shared_segments_sql()}),
    j AS (
        SELECT j.*,
               greatest(j.start_ts, ?::TIMESTAMP) AS span_start,
               least(coalesce(j.end_ts, greatest(?::TIMESTAMP, j.start_ts)), ?::TIMESTAMP) AS span_end
        FROM {source} j
        WHERE j.start_ts IS NOT NULL AND {where}
    ),
    jv AS (SELECT * FROM j WHERE span_end > span_start),
    jt AS (SELECT jv.*, {price_tier_sql("jv", "jv.pricing_tier")} AS price_tier FROM jv),
    jc AS (
        SELECT jt.*, {price_cluster_sql("jt", "jt.price_tier")} AS price_cluster,
               {shared_cut_sql("jt")} AS cut_s,
               jt.gpu_count * epoch(jt.span_end - jt.span_start) AS declared_s
        FROM jt
    ),
    {PRICE_PERIODS_CTE.strip()},
    priced AS (
        SELECT jc.job_id, {billed_cost_sql("jc")} AS cost_usd
        FROM jc JOIN periods p
          ON p.gpu_model = jc.gpu_model AND p.tier = jc.price_tier
         AND p.cluster IS NOT DISTINCT FROM jc.price_cluster
         AND p.p_from < jc.span_end AND p.p_to > jc.span_start
        GROUP BY jc.job_id
    )
    SELECT jc.job_id, jc.cluster, jc.user_name, jc.team, jc.project, jc.name, jc.kind, jc.gpu_model,
           jc.gpu_count, jc.pricing_tier, jc.price_tier, jc.state, jc.start_ts, jc.end_ts,
           jc.span_start, jc.span_end,
           epoch(jc.span_end - jc.span_start) / 3600.0 AS hours,
           (jc.declared_s - jc.cut_s) / 3600.0 AS gpu_hours,
           jc.cut_s / 3600.0 AS oversubscribed_gpu_hours,
           -- a shared GPU's time beyond the job's share is not billed (billed_cost_sql)
           priced.cost_usd
    FROM jc LEFT JOIN priced USING (job_id)
    """
    key = ("job_costs", filters, as_of, unattributed)
    return materialized(key, sql, [lo, as_of, hi, *pseudo_params, *params])


def job_costs(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = ALL_FILTERS,
    as_of: dt.datetime | None = None,
    unattributed: bool = True,
) -> pl.DataFrame:
    """One row per job overlapping the view: hours, GPU-hours and dollars inside it (JOB_COST_COLUMNS).

    Includes the ``unattributed:<card>`` pseudo-jobs of telemetry-only cards unless ``unattributed`` is
    False.
    """
    as_of = as_of or horizon(con)
    sql, params = job_costs_sql(filters, as_of, unattributed=unattributed)
    return frame(con, f"SELECT * FROM ({sql}) jc ORDER BY jc.start_ts, jc.job_id", params)


COST_BY = {
    "user": "user_name",
    "team": "team",
    "cluster": "cluster",
    "gpu_model": "gpu_model",
    "week": "week",
}


def cost_by(
    con: duckdb.DuckDBPyConnection,
    *,
    by: str,
    filters: Filters = ALL_FILTERS,
    as_of: dt.datetime | None = None,
) -> pl.DataFrame:
    """Job cost rolled up by ``user``, ``team``, ``cluster``, ``gpu_model`` or ``week`` (ISO week of each
    job's in-view start). Columns: key, jobs, gpu_hours, cost_usd (priced jobs), unpriced_gpu_hours."""
    if by not in COST_BY:
        raise ValueError(f"unknown grouping {by!r}; use one of {', '.join(COST_BY)}")
    jobs = with_job_of(con, job_costs(con, filters=filters, as_of=as_of)).with_columns(
        pl.col("span_start").dt.strftime("%G-W%V").alias("week")
    )
    return (
        jobs.with_columns(pl.col(COST_BY[by]).fill_null("(none)").alias("key"))
        .group_by("key")
        .agg(
            job_count().alias("jobs"),
            pl.col("gpu_hours").sum(),
            pl.col("cost_usd").sum(),
            pl.col("gpu_hours").filter(pl.col("cost_usd").is_null()).sum().alias("unpriced_gpu_hours"),
        )
        .sort(["cost_usd", "key"], descending=[True, False])
    )
