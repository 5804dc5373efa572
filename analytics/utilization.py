"""How much of the GPU time a job held was used: per sample → per GPU, job, user, team, cluster, day, week.

Definitions (docs/metrics.md, "Utilization"):
- a sample counts for the job it is attributed to (``samples.job_id``, stamped at ingest), so a job's mean is
  over the GPUs it held, never over its whole host; telemetry-only cards count for their
  ``unattributed:<card>`` pseudo-job (analytics/cost.py), each sample weighted by the share of the card its
  GPU row stands for (1 for a whole card, 3/7 for a 3g MIG instance of an A100), so the instances of one card
  add up to at most that card. The weight is kept as whole slices (``card_u``: 3 of ``card_per`` 7) and
  each job's sums are divided by the slices once, so raw samples and rollups sum the same exact numbers
  (time-weighted percentiles and means need no division at all);
- a sample stands for ``interval_s`` seconds; means are time-weighted: ``Σ util_pct × interval_s / Σ
  interval_s`` over samples with a reading;
- held time with no reading is *unknown*, neither idle nor busy: ``unknown_share`` reports it;
- an *idle stretch* is a maximal run of consecutive samples of one GPU within one job, each at
  ``util_pct ≤ idle_util_pct`` with no sample gap in between (the next sample comes within 1.5 ×
  ``interval_s``), lasting ``≥ idle_min_minutes`` in total. Membership is decided on the job's whole run
  of samples, then the part inside the view is counted, so a stretch does not vanish at a day boundary.

Two sources give the same figures (docs/metrics.md, "Fast path"): raw samples (:func:`flagged_samples_sql`,
one window pass over the view's jobs' samples) and the rollups maintained at ingest (gpuledger/ledger/rollup.py:
per-minute sums incl. idle-stretch seconds, and a per-day utilization histogram). ``source="auto"`` reads the
rollups whenever they were built with the settings' thresholds (:func:`fast_path`), else raw samples.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

import duckdb
import polars as pl

from analytics.cost import job_costs_sql, telemetry_only_gpus_sql
from analytics.filters import Filters, horizon
from analytics.query import frame
from analytics.shared import memo
from gpuledger.ledger.rollup import rollup_matches, thresholds
from gpuledger.ledger.sample_time import contiguous_sql
from gpuledger.ledger.settings import Settings
from gpuledger.ledger.shares import fan_out_sql
from gpuledger.ledger.sql import pseudo_job_sql

ALL_FILTERS = Filters()  # the whole ledger
DEFAULT_SETTINGS = Settings()

Source = Literal["auto", "raw"]

# Per-job sums over the job's samples inside the view; both sources produce exactly these columns.
TOTAL_COLUMNS = {
    "job_id": "job (or unattributed:<card> pseudo-job)",
    "n_samples": "samples",
    "sampled_s": "Σ interval_s of all samples",
    "util_cov_s": "Σ interval_s of samples with a utilization reading (covered time)",
    "util_s": "Σ util_pct/100 × interval_s (busy GPU-seconds)",
    "idle_s": "Σ interval_s of samples inside idle stretches",
    "underused_s": "Σ interval_s × (target − util)/target over samples below target, outside idle stretches",
    "util_max_pct": "highest sample utilization",
    "mem_used_max_mib": "highest memory used",
    "mem_frac_max": "highest memory used / card memory",
    "mem_frac_s": "Σ mem_used/card × interval_s",
    "mem_cov_s": "Σ interval_s of samples with memory used and a known card size",
    "sm_active_s": "Σ sm_active_pct/100 × interval_s",
    "sm_cov_s": "Σ interval_s of samples with SM-active",
    "tensor_active_s": "Σ tensor_active_pct/100 × interval_s",
    "tensor_cov_s": "Σ interval_s of samples with tensor-active",
    "energy_j": "Σ per-sample energy (counter Δ, else power × interval)",
    "energy_cov_s": "Σ interval_s of samples with an energy figure",
}


def view_bounds(filters: Filters) -> tuple[dt.datetime, dt.datetime]:
    return filters.lo or dt.datetime(1970, 1, 1), filters.hi or dt.datetime(9999, 1, 1)


def sample_energy_sql(alias: str = "") -> str:
    """Energy a sample stands for, in J: the counter's rise to the next sample of its GPU when both read
    it, the next comes without a gap and the counter did not reset; else power_w × interval_s; else NULL.
    Expects columns energy_j, next_energy_j, next_ts, ts, interval_s, power_w."""
    a = f"{alias}." if alias else ""
    return f"""(CASE WHEN {a}energy_j IS NOT NULL AND {a}next_energy_j >= {a}energy_j
                  AND {contiguous_sql(f"epoch({a}next_ts - {a}ts)", f"{a}interval_s")}
             THEN {a}next_energy_j - {a}energy_j
             ELSE {a}power_w * {a}interval_s END)"""


def flagged_samples_sql(
    filters: Filters, settings: Settings, as_of: dt.datetime | None
) -> tuple[str, list[object]]:
    """Raw samples of the view's jobs inside the view, one row each, with ``in_idle`` (idle-stretch
    membership), ``energy_sample_j`` and ``mem_total_mib`` resolved (sample, else GPU, else catalog), and
    ``card_u`` / ``card_per``: the slices of its card the sample stands for, and the card's slices (a
    telemetry-only MIG card's GPU rows: analytics.cost's ``card_units`` / ``card_slices``; every other sample
    1 / 1), so a job's sum of x is Σ x × card_u / card_per. Idle stretches and gaps are read in the samples'
    own time (``interval_s``); only the sums are weighted.

    A shared card's sample counts for each job holding it (gpuledger/ledger/shares.py ``fan_out_sql``):
    ``share_w`` is the job's share (1 elsewhere), already folded into ``card_u``; its idle-stretch flag is
    the card's own sequence's (the sample's stamped job)."""
    jobs_sql, jobs_params = job_costs_sql(filters, as_of)
    lo, hi = view_bounds(filters)
    idle = float(settings.idle_util_pct)
    min_s = float(settings.idle_min_minutes) * 60.0
    sql = f"""
    WITH vj AS (SELECT job_id FROM ({jobs_sql})),
    tele AS ({telemetry_only_gpus_sql()}),
    seq AS (
        SELECT s.ts, s.gpu_id, s.interval_s::DOUBLE AS interval_s, s.util_pct::DOUBLE AS util_pct,
               s.mem_used_mib::DOUBLE AS mem_used_mib,
               coalesce(s.mem_total_mib, g.memory_total_mib, c.memory_mib) AS mem_total_mib,
               s.sm_active_pct::DOUBLE AS sm_active_pct, s.tensor_active_pct::DOUBLE AS tensor_active_pct,
               s.power_w::DOUBLE AS power_w, s.energy_j, s.throttle_reasons, s.temp_c,
               {pseudo_job_sql("t", "s.job_id")} AS job_id,
               coalesce(t.card_units, 1.0) AS card_u, coalesce(t.card_slices, 1.0) AS card_per,
               lead(s.ts) OVER w AS next_ts, lead(s.energy_j) OVER w AS next_energy_j
        FROM samples s LEFT JOIN tele t USING (gpu_id) LEFT JOIN gpus g USING (gpu_id)
             LEFT JOIN gpu_catalog c ON c.model = g.model
        WINDOW w AS (PARTITION BY s.gpu_id ORDER BY s.ts)
    ),
    mine AS (  -- the view's jobs' samples, and every sample of a shared card (counted for its holders below)
        SELECT *, {sample_energy_sql()} AS energy_sample_j FROM seq
        WHERE job_id IN (SELECT job_id FROM vj) OR gpu_id IN (SELECT gpu_id FROM gpu_shares)
    ),
    marked AS (
        SELECT *, coalesce(util_pct <= {idle}, false) AS is_idle,
               CASE WHEN util_pct <= {idle} AND lag(util_pct) OVER w <= {idle}
                         AND {contiguous_sql("epoch(ts - lag(ts) OVER w)", "lag(interval_s) OVER w")}
                    THEN 0 ELSE 1 END AS new_run
        FROM mine WINDOW w AS (PARTITION BY gpu_id, job_id ORDER BY ts)
    ),
    runs AS (
        SELECT *, sum(new_run) OVER (PARTITION BY gpu_id, job_id ORDER BY ts ROWS UNBOUNDED PRECEDING) AS run_no
        FROM marked
    ),
    flagged AS (
        SELECT * EXCLUDE (new_run, run_no, next_ts, next_energy_j),
               is_idle AND sum(interval_s) OVER (PARTITION BY gpu_id, job_id, run_no) >= {min_s} AS in_idle
        FROM runs
    )
    SELECT * REPLACE (card_u * share_w AS card_u) FROM ({fan_out_sql("flagged")})
    WHERE ts >= ?::TIMESTAMP AND ts < ?::TIMESTAMP AND job_id IN (SELECT job_id FROM vj)
    """
    return sql, [*jobs_params, lo, hi]


Buckets = tuple[
    str, list[object]
]  # SQL of rows (week VARCHAR, w_lo TIMESTAMP, w_hi TIMESTAMP) and its params


def _raw_totals_sql(
    filters: Filters, settings: Settings, as_of: dt.datetime | None, buckets: Buckets | None = None
) -> tuple[str, list[object]]:
    flagged, params = flagged_samples_sql(filters, settings, as_of)
    target = float(settings.target_util_pct)
    if buckets is None:
        source, keys = f"({flagged})", "job_id"
    else:
        source = f"({flagged}) f JOIN ({buckets[0]}) wk ON f.ts >= wk.w_lo AND f.ts < wk.w_hi"
        keys = "job_id, wk.week"
        params = [*params, *buckets[1]]
    sql = f"""
    SELECT {keys},
           count(*) AS n_samples,
           sum(interval_s * card_u) / max(card_per) AS sampled_s,
           coalesce(sum(interval_s * card_u) FILTER (WHERE util_pct IS NOT NULL) / max(card_per), 0) AS util_cov_s,
           sum(util_pct / 100.0 * interval_s * card_u) / max(card_per) AS util_s,
           coalesce(sum(interval_s * card_u) FILTER (WHERE in_idle) / max(card_per), 0) AS idle_s,
           coalesce(sum(interval_s * card_u * ({target} - util_pct) / {target})
                    FILTER (WHERE util_pct < {target} AND NOT in_idle) / max(card_per), 0) AS underused_s,
           max(util_pct)::DOUBLE AS util_max_pct,
           max(mem_used_mib)::DOUBLE AS mem_used_max_mib,
           max(mem_used_mib / mem_total_mib) AS mem_frac_max,
           sum(mem_used_mib / mem_total_mib * interval_s * card_u) / max(card_per) AS mem_frac_s,
           sum(interval_s * card_u) FILTER (WHERE mem_used_mib IS NOT NULL AND mem_total_mib > 0) / max(card_per)
               AS mem_cov_s,
           sum(sm_active_pct / 100.0 * interval_s * card_u) / max(card_per) AS sm_active_s,
           sum(interval_s * card_u) FILTER (WHERE sm_active_pct IS NOT NULL) / max(card_per) AS sm_cov_s,
           sum(tensor_active_pct / 100.0 * interval_s * card_u) / max(card_per) AS tensor_active_s,
           sum(interval_s * card_u) FILTER (WHERE tensor_active_pct IS NOT NULL) / max(card_per) AS tensor_cov_s,
           sum(energy_sample_j * card_u) / max(card_per) AS energy_j,
           sum(interval_s * card_u) FILTER (WHERE energy_sample_j IS NOT NULL) / max(card_per) AS energy_cov_s
    FROM {source}
    GROUP BY ALL
    """
    return sql, params


def job_totals_sql(
    con: duckdb.DuckDBPyConnection,
    filters: Filters,
    settings: Settings,
    as_of: dt.datetime | None,
    source: Source = "auto",
) -> tuple[str, list[object]]:
    """SQL giving TOTAL_COLUMNS per job of the view.

    ``source``: "raw" reads samples; "auto" reads the rollups when :func:`fast_path` allows (same figures).
    """
    if use_rollup(con, settings, source):
        return _fast_totals_sql(filters, as_of, "job_id")
    return _raw_totals_sql(filters, settings, as_of)


def fast_path(con: duckdb.DuckDBPyConnection, settings: Settings) -> bool:
    """True when the rollups give exactly the raw-sample figures under ``settings``: they were built with
    its thresholds, and no telemetry-only GPU carries samples of several job ids (raw samples make those one
    pseudo-job, whose idle runs the rollup, keyed by the samples' own job id, would split; the GPUs of one
    card are apart in both, so a card's several GPU rows do not matter). Asked once per
    sharing block (analytics/shared.py: every per-job function of a page asks)."""
    return bool(memo(con, ("fast_path", settings.fingerprint()), lambda: _fast_path(con, settings)))


def _fast_path(con: duckdb.DuckDBPyConnection, settings: Settings) -> bool:
    th = thresholds(settings.idle_util_pct, settings.idle_min_minutes, settings.target_util_pct)
    if not rollup_matches(con, th):
        return False
    # the day rows hold the same (GPU, job id) pairs as the minute rows they re-aggregate, in 1/1,440 the
    # rows (a 1,232-GPU month: 0.23 s over samples_minute, every page's first question)
    mixed = con.execute(
        f"""SELECT count(*) FROM (
                SELECT gpu_id FROM samples_day
                WHERE gpu_id IN (SELECT gpu_id FROM ({telemetry_only_gpus_sql()}))
                GROUP BY gpu_id HAVING count(DISTINCT coalesce(job_id, chr(0))) > 1)"""
    ).fetchall()[0][0]
    return not mixed


def use_rollup(con: duckdb.DuckDBPyConnection, settings: Settings, source: Source) -> bool:
    if source not in ("auto", "raw"):
        raise ValueError(f"unknown source {source!r}; use auto or raw")
    return source == "auto" and fast_path(con, settings)


def minute_view_sql(filters: Filters, as_of: dt.datetime | None) -> tuple[str, list[object]]:
    """CTEs ``mvj`` (job ids of the view) and ``mm``: the day rollup rows of the view's jobs inside the view, with
    telemetry-only cards' rows under their pseudo-job with their weights ``card_u`` / ``card_per`` (as
    :func:`flagged_samples_sql` weights each sample; sum them with :func:`fast_totals`), and ``card_mib`` (the
    GPU's memory, else the catalog's) for samples that did not report mem_total. Views start and end at
    midnight, so days cut them exactly."""
    jobs_sql, jobs_params = job_costs_sql(filters, as_of)
    lo, hi = view_bounds(filters)
    sql = f"""
    mvj AS (SELECT job_id FROM ({jobs_sql})),
    mtele AS ({telemetry_only_gpus_sql()}),
    mv AS (
        SELECT m.* REPLACE ({pseudo_job_sql("t", "m.job_id")} AS job_id),
               coalesce(t.card_units, 1.0) AS card_u, coalesce(t.card_slices, 1.0) AS card_per,
               coalesce(g.memory_total_mib, c.memory_mib) AS card_mib
        FROM samples_day m LEFT JOIN mtele t ON t.gpu_id = m.gpu_id LEFT JOIN gpus g ON g.gpu_id = m.gpu_id
             LEFT JOIN gpu_catalog c ON c.model = g.model
        WHERE m.day >= ?::DATE AND m.day < ?::DATE
    ),
    mm AS (SELECT * FROM mv WHERE job_id IN (SELECT job_id FROM mvj))"""
    return sql, [*jobs_params, lo, hi]


def _both(a: str, b: str) -> str:
    """a + b where NULL + x = x and NULL + NULL = NULL (sums over two disjoint sets of samples)."""
    return f"CASE WHEN {a} IS NULL AND {b} IS NULL THEN NULL ELSE coalesce({a}, 0) + coalesce({b}, 0) END"


def fast_totals(*, per_row: bool = False) -> str:
    """TOTAL_COLUMNS (after the key) as aggregates over ``mm`` rows, each sum over time weighted by the
    rows' slices (``card_u``) and divided once by the card's (``card_per``, the same for every row of a job,
    or of a GPU). ``per_row``: divide row by row instead, for groups that mix jobs (a day, a week)."""
    w, d = ("card_u / card_per", "") if per_row else ("card_u", " / max(card_per)")
    return f"""
           sum(n)::BIGINT AS n_samples,
           sum(covered_s * {w}){d} AS sampled_s,
           coalesce(sum(util_cov_s * {w}){d}, 0) AS util_cov_s,
           sum(util_s * {w}){d} AS util_s,
           coalesce(sum(idle_run_s * {w}){d}, 0) AS idle_s,
           coalesce(sum(underused_s * {w}){d}, 0) AS underused_s,
           max(util_max)::DOUBLE AS util_max_pct,
           max(mem_used_max_mib)::DOUBLE AS mem_used_max_mib,
           greatest(max(memk_frac_max), max(memu_max_mib / card_mib)) AS mem_frac_max,
           {_both(f"sum(memk_frac_s * {w})", f"sum(memu_s * {w} / card_mib)")}{d} AS mem_frac_s,
           {_both(f"sum(memk_cov_s * {w})", f"sum(memu_cov_s * {w}) FILTER (WHERE card_mib > 0)")}{d} AS mem_cov_s,
           sum(sm_active_s * {w}){d} AS sm_active_s,
           sum(sm_cov_s * {w}){d} AS sm_cov_s,
           sum(tensor_active_s * {w}){d} AS tensor_active_s,
           sum(tensor_cov_s * {w}){d} AS tensor_cov_s,
           sum(energy_j * {w}){d} AS energy_j,
           sum(energy_cov_s * {w}){d} AS energy_cov_s"""


FAST_TOTALS = fast_totals()  # per job, or per (job, bucket)


def _fast_totals_sql(filters: Filters, as_of: dt.datetime | None, key: str) -> tuple[str, list[object]]:
    ctes, params = minute_view_sql(filters, as_of)
    sql = f"WITH {ctes} SELECT {key} AS job_id, {FAST_TOTALS} FROM mm GROUP BY 1"
    return sql, params


def job_bucket_totals_sql(
    con: duckdb.DuckDBPyConnection,
    filters: Filters,
    settings: Settings,
    as_of: dt.datetime | None,
    buckets: Buckets,
    source: Source = "auto",
) -> tuple[str, list[object]]:
    """TOTAL_COLUMNS per (job, bucket): the view's samples cut by the buckets' [w_lo, w_hi) (midnights), with
    a ``week`` column naming the bucket. Each (job, bucket) row equals :func:`job_totals_sql`'s row of that
    job for the view narrowed to the bucket (idle-stretch membership is decided on the job's whole run in both
    sources, so cutting does not change it)."""
    if not use_rollup(con, settings, source):
        return _raw_totals_sql(filters, settings, as_of, buckets)
    ctes, params = minute_view_sql(filters, as_of)
    sql = f"""
    WITH {ctes}
    SELECT mm.job_id, wk.week, {FAST_TOTALS}
    FROM mm JOIN ({buckets[0]}) wk ON mm.day >= wk.w_lo::DATE AND mm.day < wk.w_hi::DATE
    GROUP BY ALL
    """
    return sql, [*params, *buckets[1]]


def job_totals(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
    source: Source = "auto",
) -> pl.DataFrame:
    """Per-job sample sums inside the view (TOTAL_COLUMNS); jobs without samples have no row."""
    as_of = as_of or horizon(con)
    sql, params = job_totals_sql(con, filters, settings, as_of, source)
    return frame(con, sql + " ORDER BY job_id", params)


JOB_UTIL_COLUMNS = {
    "job_id": "",
    "held_gpu_h": "gpu_count × hours held inside the view",
    "covered_gpu_h": "GPU-hours with a utilization reading (clamped to held)",
    "unknown_share": "1 − covered / held: held time without telemetry (0–1; NULL when nothing was held)",
    "mean_util_pct": "time-weighted mean utilization over the held GPUs (NULL without readings)",
    "p50_util_pct": "median sample utilization (time-weighted)",
    "p95_util_pct": "95th percentile sample utilization (time-weighted)",
    "effective_gpu_h": "Σ util × interval / 3600: GPU-hours of actual work",
    "idle_gpu_h": "GPU-hours in idle stretches",
    "peak_mem_frac": "highest memory used / card memory (0–1)",
    "mean_mem_frac": "time-weighted mean memory used / card memory (0–1)",
    "peak_mem_mib": "highest memory used, MiB",
    "sm_active_pct": "time-weighted SM-active (NULL where the source has none)",
    "tensor_active_pct": "time-weighted tensor-pipe-active (NULL where the source has none)",
}


def job_utilization(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
    percentiles: bool = True,
    source: Source = "auto",
) -> pl.DataFrame:
    """One row per job of the view (JOB_UTIL_COLUMNS). Percentiles come from the per-day utilization
    histogram on the fast path, else from raw samples; ``percentiles=False`` leaves them NULL."""
    as_of = as_of or horizon(con)
    jobs_sql, jobs_params = job_costs_sql(filters, as_of)
    fast = use_rollup(con, settings, source)
    totals_sql, totals_params = job_totals_sql(con, filters, settings, as_of, "auto" if fast else "raw")
    if percentiles and fast:
        pct_sql, fparams = _fast_percentiles_sql(filters, as_of)
    elif percentiles:
        flagged, fparams = flagged_samples_sql(filters, settings, as_of)
        # Time-weighted percentiles: the first sample (by util) whose cumulative time reaches the share.
        pct_sql = f"""
        SELECT job_id,
               min(util_pct) FILTER (WHERE cum_s >= 0.5 * tot_s)::DOUBLE AS p50_util_pct,
               min(util_pct) FILTER (WHERE cum_s >= 0.95 * tot_s)::DOUBLE AS p95_util_pct
        FROM (SELECT job_id, util_pct,
                     sum(interval_s * card_u) OVER (PARTITION BY job_id ORDER BY util_pct
                                               ROWS UNBOUNDED PRECEDING) AS cum_s,
                     sum(interval_s * card_u) OVER (PARTITION BY job_id) AS tot_s
              FROM ({flagged}) WHERE util_pct IS NOT NULL)
        GROUP BY job_id
        """
    else:
        pct_sql, fparams = (
            "SELECT NULL::VARCHAR AS job_id, NULL::DOUBLE AS p50_util_pct, NULL::DOUBLE AS p95_util_pct",
            [],
        )
    sql = f"""
    WITH jc AS ({jobs_sql}), t AS ({totals_sql}), p AS ({pct_sql}),
    h AS (SELECT jc.job_id, jc.gpu_hours * 3600.0 AS held_s FROM jc)
    SELECT h.job_id,
           h.held_s / 3600.0 AS held_gpu_h,
           least(coalesce(t.util_cov_s, 0), h.held_s) / 3600.0 AS covered_gpu_h,
           CASE WHEN h.held_s > 0 THEN 1 - least(coalesce(t.util_cov_s, 0), h.held_s) / h.held_s END
               AS unknown_share,
           100.0 * t.util_s / nullif(t.util_cov_s, 0) AS mean_util_pct,
           p.p50_util_pct, p.p95_util_pct,
           t.util_s / 3600.0 AS effective_gpu_h,
           t.idle_s / 3600.0 AS idle_gpu_h,
           t.mem_frac_max AS peak_mem_frac,
           t.mem_frac_s / nullif(t.mem_cov_s, 0) AS mean_mem_frac,
           t.mem_used_max_mib AS peak_mem_mib,
           100.0 * t.sm_active_s / nullif(t.sm_cov_s, 0) AS sm_active_pct,
           100.0 * t.tensor_active_s / nullif(t.tensor_cov_s, 0) AS tensor_active_pct
    FROM h LEFT JOIN t USING (job_id) LEFT JOIN p USING (job_id)
    ORDER BY h.job_id
    """
    return frame(con, sql, [*jobs_params, *totals_params, *fparams])


def _fast_percentiles_sql(filters: Filters, as_of: dt.datetime | None) -> tuple[str, list[object]]:
    """p50/p95 per job from ``samples_util_hist``: the smallest reading whose cumulative seconds (readings
    ascending) reach the share, which is what the raw per-sample definition picks."""
    jobs_sql, jobs_params = job_costs_sql(filters, as_of)
    lo, hi = view_bounds(filters)
    sql = f"""
    WITH vj AS (SELECT job_id FROM ({jobs_sql})), tele AS ({telemetry_only_gpus_sql()}),
    hv AS (
        SELECT {pseudo_job_sql("t", "h.job_id")} AS job_id,
               h.util_pct, h.seconds * coalesce(t.card_units, 1.0) AS seconds
        FROM samples_util_hist h LEFT JOIN tele t ON t.gpu_id = h.gpu_id
        WHERE h.day >= ?::DATE AND h.day < ?::DATE
    ),
    hj AS (SELECT job_id, util_pct, sum(seconds) AS s FROM hv WHERE job_id IN (SELECT job_id FROM vj) GROUP BY ALL)
    SELECT job_id,
           min(util_pct) FILTER (WHERE cum_s >= 0.5 * tot_s)::DOUBLE AS p50_util_pct,
           min(util_pct) FILTER (WHERE cum_s >= 0.95 * tot_s)::DOUBLE AS p95_util_pct
    FROM (SELECT job_id, util_pct,
                 sum(s) OVER (PARTITION BY job_id ORDER BY util_pct ROWS UNBOUNDED PRECEDING) AS cum_s,
                 sum(s) OVER (PARTITION BY job_id) AS tot_s
          FROM hj)
    GROUP BY job_id
    """
    return sql, [*jobs_params, lo, hi]


GROUPS = {
    "team": "coalesce(jc.team, '(none)')",
    "user": "coalesce(jc.user_name, '(none)')",
    "cluster": "coalesce(jc.cluster, '(none)')",
    "gpu_model": "coalesce(jc.gpu_model, '(unknown)')",
    "job": "jc.job_id",
}

UTIL_BY_COLUMNS = {
    "key": "the group (team, user, cluster, GPU model, job, GPU id, day or ISO week)",
    "held_gpu_h": "allocated GPU-hours (jobs' gpu_count × hours inside the view)",
    "covered_gpu_h": "GPU-hours with a utilization reading",
    "unknown_share": "1 − covered / held",
    "mean_util_pct": "time-weighted mean utilization",
    "effective_gpu_h": "util-weighted GPU-hours",
    "idle_gpu_h": "GPU-hours in idle stretches",
    "peak_mem_frac": "highest memory used / card",
    "mean_mem_frac": "time-weighted memory used / card",
    "sm_active_pct": "time-weighted SM-active",
    "tensor_active_pct": "time-weighted tensor-active",
}


def utilization_by(
    con: duckdb.DuckDBPyConnection,
    *,
    by: str,
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
    source: Source = "auto",
) -> pl.DataFrame:
    """Utilization rolled up by ``team``, ``user``, ``cluster``, ``gpu_model``, ``job`` (job-level sums),
    or by ``gpu``, ``day``, ``week`` (sample-level: day/week from the sample time; held GPU-hours are then
    those of the samples' jobs split by the same calendar: a job's held time is cut at day boundaries).
    Columns: UTIL_BY_COLUMNS."""
    as_of = as_of or horizon(con)
    if by in GROUPS:
        jobs_sql, jobs_params = job_costs_sql(filters, as_of)
        totals_sql, totals_params = job_totals_sql(con, filters, settings, as_of, source)
        sql = f"""
        WITH jc AS ({jobs_sql}), t AS ({totals_sql})
        SELECT {GROUPS[by]} AS key,
               sum(jc.gpu_hours) AS held_gpu_h,
               sum(least(coalesce(t.util_cov_s, 0), jc.gpu_hours * 3600.0))
                   / 3600.0 AS covered_gpu_h,
               sum(t.util_s) / nullif(sum(t.util_cov_s), 0) * 100.0 AS mean_util_pct,
               sum(t.util_s) / 3600.0 AS effective_gpu_h,
               sum(t.idle_s) / 3600.0 AS idle_gpu_h,
               max(t.mem_frac_max) AS peak_mem_frac,
               sum(t.mem_frac_s) / nullif(sum(t.mem_cov_s), 0) AS mean_mem_frac,
               100.0 * sum(t.sm_active_s) / nullif(sum(t.sm_cov_s), 0) AS sm_active_pct,
               100.0 * sum(t.tensor_active_s) / nullif(sum(t.tensor_cov_s), 0) AS tensor_active_pct
        FROM jc LEFT JOIN t USING (job_id)
        GROUP BY ALL
        """
        params = [*jobs_params, *totals_params]
    elif by in ("gpu", "day", "week"):
        key = {
            "gpu": "gpu_id",
            "day": "strftime(ts, '%Y-%m-%d')",
            "week": "strftime(ts, '%G-W%V')",
        }[by]
        # Held time per calendar bucket: the jobs' spans cut at bucket boundaries (not the samples).
        held = _held_by_calendar_sql(by, filters, as_of) if by != "gpu" else None
        if use_rollup(con, settings, source):
            fast_key = key.replace("ts,", "day,")  # a sample's day and week are its rollup day's
            ctes, params = minute_view_sql(filters, as_of)
            sql = f"""
            WITH {ctes},
            tt AS (SELECT {fast_key} AS key, {fast_totals(per_row=True)} FROM mm GROUP BY 1),
            t AS (
                SELECT key, nullif(util_cov_s, 0) / 3600.0 AS covered_gpu_h,
                       util_s / nullif(util_cov_s, 0) * 100.0 AS mean_util_pct,
                       util_s / 3600.0 AS effective_gpu_h,
                       idle_s / 3600.0 AS idle_gpu_h,
                       mem_frac_max AS peak_mem_frac,
                       mem_frac_s / nullif(mem_cov_s, 0) AS mean_mem_frac,
                       100.0 * sm_active_s / nullif(sm_cov_s, 0) AS sm_active_pct,
                       100.0 * tensor_active_s / nullif(tensor_cov_s, 0) AS tensor_active_pct
                FROM tt
            )
            """
        else:
            flagged, params = flagged_samples_sql(filters, settings, as_of)
            sql = f"""
        WITH f AS ({flagged}),
        t AS (
            SELECT {key} AS key,
                   sum(interval_s * (card_u / card_per)) FILTER (WHERE util_pct IS NOT NULL) / 3600.0 AS covered_gpu_h,
                   sum(util_pct / 100.0 * interval_s * (card_u / card_per)) / nullif(sum(interval_s * (card_u / card_per)) FILTER (WHERE util_pct IS NOT NULL), 0) * 100.0 AS mean_util_pct,
                   sum(util_pct / 100.0 * interval_s * (card_u / card_per)) / 3600.0 AS effective_gpu_h,
                   coalesce(sum(interval_s * (card_u / card_per)) FILTER (WHERE in_idle), 0) / 3600.0 AS idle_gpu_h,
                   max(mem_used_mib / mem_total_mib) AS peak_mem_frac,
                   sum(mem_used_mib / mem_total_mib * interval_s * (card_u / card_per)) / nullif(sum(interval_s * (card_u / card_per)) FILTER (WHERE mem_used_mib IS NOT NULL AND mem_total_mib > 0), 0) AS mean_mem_frac,
                   100.0 * sum(sm_active_pct / 100.0 * interval_s * (card_u / card_per)) / nullif(sum(interval_s * (card_u / card_per)) FILTER (WHERE sm_active_pct IS NOT NULL), 0) AS sm_active_pct,
                   100.0 * sum(tensor_active_pct / 100.0 * interval_s * (card_u / card_per)) / nullif(sum(interval_s * (card_u / card_per)) FILTER (WHERE tensor_active_pct IS NOT NULL), 0) AS tensor_active_pct
            FROM f GROUP BY 1
        )
        """
        if held is None:
            sql += """
            SELECT key, t.covered_gpu_h AS held_gpu_h, t.covered_gpu_h, t.mean_util_pct, t.effective_gpu_h,
                   t.idle_gpu_h, t.peak_mem_frac, t.mean_mem_frac, t.sm_active_pct, t.tensor_active_pct
            FROM t
            """
        else:
            held_sql, held_params = held
            sql += f"""
            , h AS ({held_sql})
            SELECT key, coalesce(h.held_gpu_h, 0) AS held_gpu_h, coalesce(t.covered_gpu_h, 0) AS covered_gpu_h,
                   t.mean_util_pct, t.effective_gpu_h, t.idle_gpu_h, t.peak_mem_frac, t.mean_mem_frac,
                   t.sm_active_pct, t.tensor_active_pct
            FROM h FULL JOIN t USING (key)
            """
            params = [*params, *held_params]
    else:
        raise ValueError(f"unknown grouping {by!r}; use one of {', '.join([*GROUPS, 'gpu', 'day', 'week'])}")
    out = frame(con, f"SELECT * FROM ({sql}) ORDER BY key", params)
    return out.with_columns(
        pl.when(pl.col("held_gpu_h") > 0)
        .then(1 - pl.min_horizontal("covered_gpu_h", "held_gpu_h") / pl.col("held_gpu_h"))
        .otherwise(None)
        .alias("unknown_share")
    ).select(list(UTIL_BY_COLUMNS))


def _held_by_calendar_sql(by: str, filters: Filters, as_of: dt.datetime | None) -> tuple[str, list[object]]:
    """Held GPU-hours of the view's jobs cut at UTC day (or ISO week) boundaries."""
    jobs_sql, params = job_costs_sql(filters, as_of)
    unit, fmt = ("day", "%Y-%m-%d") if by == "day" else ("week", "%G-W%V")
    sql = f"""
    SELECT strftime(b, '{fmt}') AS key,
           sum(jc.gpu_count * epoch(least(jc.span_end, b + INTERVAL 1 {unit})
                                    - greatest(jc.span_start, b))) / 3600.0 AS held_gpu_h
    FROM ({jobs_sql}) jc,
         LATERAL (SELECT unnest(generate_series(date_trunc('{unit}', jc.span_start),
                                                jc.span_end - INTERVAL 1 MICROSECOND,
                                                INTERVAL 1 {unit})) AS b)
    GROUP BY 1
    """
    return sql, params
