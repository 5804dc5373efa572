"""Unallocated capacity: paid-for GPU time no job held, per cluster and GPU model (docs/metrics.md, "Waste",
``unallocated_usd``).

Capacity at each moment is the larger of the declared GPUs and the ones reporting telemetry
(analytics/observed_capacity.py); held time is every job's of that cluster and model; time is cut wherever a
level or a price changes. :func:`unallocated` gives the view's rows, :func:`unallocated_weeks` those of the
view and of each of its ISO weeks in one statement.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import duckdb
import polars as pl

from analytics.cost import job_costs_sql, shared_segments_sql
from analytics.filters import Filters, horizon
from analytics.observed_capacity import observed_from_runs, observed_spans_ctes
from analytics.periods import buckets_sql, job_bucket_costs_sql, view_weeks
from analytics.query import frame
from analytics.shared import active, keep, kept, memo, shared
from gpuledger.ledger.cte import Cte, with_ctes
from gpuledger.ledger.prices import PRICE_PERIODS_CTE, price_cluster_sql, price_tier_sql
from gpuledger.ledger.settings import Settings
from gpuledger.ledger.shares import HOLDS_SQL
from gpuledger.ledger.sql import PSEUDO_PREFIX

ALL_FILTERS = Filters()  # the whole ledger
DEFAULT_SETTINGS = Settings()
UNALLOCATED = "unallocated"

UNALLOCATED_COLUMNS = {
    "cluster": "",
    "gpu_model": "catalog model; NULL: capacity of GPUs whose model is not in the catalog",
    "tier": "tier whose price was used",
    "capacity_basis": "declared | observed | declared+observed: where the capacity came from",
    "declared_gpu_hours": "GPUs declared (settings or a trace's node list) × hours inside the window",
    "observed_gpu_hours": "GPU-hours the cluster's GPUs reported telemetry (first to last sample, broken at gaps)",
    "capacity_gpu_hours": "Σ over time of max(declared, observed) GPUs",
    "allocated_gpu_hours": "GPU-hours held by jobs of that cluster and model, up to the capacity at each moment",
    "unknown_model_gpu_hours": "capacity taken by the held time of the cluster's jobs with an unknown GPU model",
    "oversubscribed_gpu_hours": "held beyond the capacity at that moment (reported, never billed twice)",
    "unallocated_gpu_hours": "capacity − allocated − unknown-model, moment by moment, at least 0",
    "usd_per_gpu_hour": "the unallocated hours' mean price (NULL when the model has no price)",
    "unallocated_usd": "Σ unallocated GPU-hours × the price in force at that moment",
}


def _data_start(con: duckdb.DuckDBPyConnection) -> dt.datetime | None:
    """The ledger's first sample or job start; once per sharing block (:func:`memo`: each view's capacity
    asks, the items scan once a week)."""
    return memo(con, "data_start", lambda: _read_data_start(con))  # type: ignore[no-any-return]


def _read_data_start(con: duckdb.DuckDBPyConnection) -> dt.datetime | None:
    row = con.execute(
        "SELECT least((SELECT min(ts) FROM samples), (SELECT min(start_ts) FROM jobs))"
    ).fetchall()
    return row[0][0]


def _data_end(con: duckdb.DuckDBPyConnection, as_of: dt.datetime | None) -> dt.datetime | None:
    """The end of the capacity window: the horizon, or the end of the last sample (its ts + interval)."""
    (end,) = con.execute("SELECT max(max_end_ts) FROM samples_day").fetchall()[0]
    return max((t for t in (as_of, end) if t is not None), default=None)


@shared  # one computation per view inside a read-only batch (analytics/shared.py)
def unallocated(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
) -> pl.DataFrame:
    """Paid-for capacity nobody held, per cluster and GPU model (UNALLOCATED_COLUMNS).

    Capacity at each moment is the larger of the declared GPUs (``capacity`` table: the settings' ``[clusters.X]
    capacity``, ingest_id 0, replace a trace's node list for the same cluster and model) and the observed ones:
    the physical GPUs reporting telemetry then (analytics/observed_capacity.py). Held time is every job's (and
    pseudo-job's) of that cluster and model, whatever the team filter; held time of the cluster's jobs with an
    unknown GPU model is taken from the models' free capacity in proportion to it (reported as
    ``unknown_model_gpu_hours``; those jobs are unpriced, never unallocated). The window is the view's dates,
    bounded by the ledger's data (first job or sample .. horizon). Time is cut wherever a level or a price
    changes, so each stretch is priced at the price in force then. Clusters with ``billing = "per_job"`` have
    no rows. The result belongs to the team "unallocated": a team or user filter that does not name it gets
    no rows.
    """
    as_of = as_of or horizon(con)
    # computed already with the view's weeks (the Overview's and the Waste page's bars ask first): read there
    both = kept(unallocated_weeks, con, filters=filters, settings=settings, as_of=as_of)
    if both is not None and both[0] is not None:
        return both[0]
    built = (
        _unallocated_sql(filters, settings, as_of, _data_start(con), _data_end(con, as_of), con)
        if _sees_unallocated(filters)
        else None
    )
    if built is None:
        return pl.DataFrame(schema={c: pl.Float64 for c in UNALLOCATED_COLUMNS}).with_columns(
            pl.col("cluster", "gpu_model", "tier", "capacity_basis").cast(pl.Utf8)
        )
    return frame(con, *built)


def _sees_unallocated(filters: Filters) -> bool:
    """False when a team or user filter leaves out the team/user "unallocated"."""
    return not (
        (filters.teams and UNALLOCATED not in filters.teams)
        or (filters.users and UNALLOCATED not in filters.users)
    )


def _values_sql(rows: list[tuple[object, ...]], names: str, types: str) -> tuple[str, list[object]]:
    """Bound rows as a VALUES table; an empty list gives an empty table of the given column types."""
    if not rows:
        cols = ", ".join(
            f"NULL::{t} AS {n}" for n, t in zip(names.split(", "), types.split(", "), strict=True)
        )
        return f"SELECT {cols} WHERE false", []
    marks = "(" + ", ".join("?" for _ in rows[0]) + ")"
    return f"SELECT * FROM (VALUES {', '.join(marks for _ in rows)}) v({names})", [x for r in rows for x in r]


def _unallocated_sql(
    filters: Filters,
    settings: Settings,
    as_of: dt.datetime | None,
    start: dt.datetime | None,
    end: dt.datetime | None,
    con: duckdb.DuckDBPyConnection | None = None,
) -> tuple[str, list[object]] | None:
    """SQL (and params) of :func:`unallocated` for the view, given the ledger's data start and end
    (:func:`_data_end`); None when the capacity window is empty. Running jobs are held up to ``as_of``."""
    built = _unallocated_windows_sql(filters, [("", filters)], settings, as_of, start, end, con)
    if built is None:
        return None
    return f"SELECT * EXCLUDE (w_id) FROM ({built[0]}) ORDER BY cluster, coalesce(gpu_model, '')", built[1]


def _bounds(f: Filters, start: dt.datetime, end: dt.datetime) -> tuple[dt.datetime, dt.datetime] | None:
    """A window's (lo, hi): its dates within the ledger's data (first job or sample .. end); None if empty."""
    lo, hi = max(f.lo or start, start), min(f.hi or end, end)
    return (lo, hi) if hi > lo else None


def _unallocated_windows_sql(
    view: Filters,
    windows: list[tuple[str, Filters]],
    settings: Settings,
    as_of: dt.datetime | None,
    start: dt.datetime | None,
    end: dt.datetime | None,
    con: duckdb.DuckDBPyConnection | None = None,
) -> tuple[str, list[object]] | None:
    """UNALLOCATED_COLUMNS with ``w_id`` first, for each window (label, the view narrowed to its dates: the
    weeks of :func:`view_weeks`, or the view itself under the label ''), in one statement: the rows of a
    window equal :func:`unallocated` for its filters, each window computed on its own (capacity, held time
    and the cuts inside its own bounds), so windows may overlap (the view beside its weeks:
    :func:`unallocated_weeks`). None when every window is empty.

    Level changes per (window, cluster, model key): +n when GPUs are declared / start reporting / are taken
    by a job, −n when they stop. mkey '' is an unknown model (capacity of uncatalogued cards; jobs with no
    model). Every window, partition and cut carries w_id, so the windows never mix."""
    if start is None or as_of is None or end is None:
        return None
    bounds = []
    for label, f in windows:
        if (lh := _bounds(f, start, end)) is not None:
            bounds.append((label, f, *lh))
    if not bounds:
        return None
    gap_s = float(settings.capacity_gap_minutes) * 60.0
    # from the runs when they give the same spans: a few rows per GPU-day instead of one per minute
    from_runs = con is not None and all(
        observed_from_runs(con, lo, hi, start, end, gap_s) for _, _, lo, hi in bounds
    )
    windows_sql, window_params = _values_sql(
        [(label, lo, hi) for label, _, lo, hi in bounds], "w_id, lo, hi", "VARCHAR, TIMESTAMP, TIMESTAMP"
    )
    return with_ctes(
        [
            Cte("uw", windows_sql, tuple(window_params)),
            *observed_spans_ctes(
                from_runs=from_runs,
                lo=min(b[2] for b in bounds),
                hi=max(b[3] for b in bounds),
                gap_s=gap_s,
            ),
            Cte("decl", DECLARED_SQL),
            *_held_ctes(view, bounds, as_of),
            *_event_ctes(view.clusters, settings),
            *_price_ctes(settings),
            *_level_ctes(),
        ],
        UNALLOCATED_SELECT,
    )


# declared capacity inside each window: the settings' rows (ingest_id 0) replace a trace's node list for the
# same cluster and model
DECLARED_SQL = """
        SELECT w.w_id, c.cluster, c.gpu_model, c.gpu_count, greatest(c.start_ts, w.lo) AS t_from,
               least(coalesce(c.end_ts, w.hi), w.hi) AS t_to
        FROM capacity c CROSS JOIN uw w
        WHERE c.ingest_id = 0 OR NOT EXISTS (
                  SELECT 1 FROM capacity d
                  WHERE d.ingest_id = 0 AND d.cluster = c.cluster AND d.gpu_model = c.gpu_model)"""


def _held_ctes(
    view: Filters, bounds: list[tuple[str, Filters, dt.datetime, dt.datetime]], as_of: dt.datetime | None
) -> list[Cte]:
    """CTEs hj (each job's held span in each window), hold, seen, js, jl and held_ev: the held time as level
    changes, what is seen on reporting cards in their cluster and model, the rest in the job's (docs/metrics.md,
    "Unallocated capacity").

    Held time is every job's (whatever the team filter) inside each window. One window: the jobs of its dates
    (job_costs); several: each job cut at the windows' bounds and the telemetry-only GPUs' pseudo-jobs per
    window, as job_costs gives for each window's dates (analytics.periods.job_bucket_costs_sql)."""
    if len(bounds) == 1:
        label, f, _, _ = bounds[0]
        jobs_sql, jobs_params = job_costs_sql(Filters(since=f.since, until=f.until), as_of)
        held_jobs_sql, held_jobs_params = (
            f"SELECT ?::VARCHAR AS w_id, * FROM ({jobs_sql})",
            [label, *jobs_params],
        )
    else:
        dates = Filters(since=view.since, until=view.until)
        jobs_sql, jobs_params = job_bucket_costs_sql(
            dates, as_of, buckets_sql([(b[0], b[1]) for b in bounds])
        )
        held_jobs_sql, held_jobs_params = f"SELECT week AS w_id, * FROM ({jobs_sql})", jobs_params
    hj = f"""
        -- a running job holds its GPUs to the window's end (its cost stops at the horizon; the last
        -- sample's interval after it is not unallocated)
        SELECT j.w_id, j.job_id, j.cluster, j.gpu_model, j.gpu_count, greatest(j.span_start, w.lo) AS t_from,
               CASE WHEN j.end_ts IS NULL THEN w.hi ELSE least(j.span_end, w.hi) END AS t_to,
               j.end_ts IS NULL AS running, starts_with(j.job_id, '{PSEUDO_PREFIX}') AS pseudo
        FROM ({held_jobs_sql}) j JOIN uw w ON w.w_id = j.w_id"""
    return [
        Cte("hj", hj, tuple(held_jobs_params), materialized=True),
        Cte("hold", HOLD_SQL.format(shared=shared_segments_sql())),
        Cte("seen", SEEN_HELD_SQL, materialized=True),
        Cte("js", JOB_STREAM_SQL),
        Cte("jl", JOB_LEVEL_SQL),
        Cte("held_ev", HELD_EVENTS_SQL, materialized=True),
    ]


# Every hold of a GPU row by a job (gpuledger/ledger/shares.py HOLDS_SQL: allocations naming the GPU, host
# ties, each its fraction of a card), d > 0, and every stretch of a shared card's time the job declared beyond
# its share (``gpu_shares.cut``), d < 0: held time is what the job holds less what is cut.
HOLD_SQL = f"""
        SELECT job_id, gpu_id, d, a_from, a_to FROM ({HOLDS_SQL})
        UNION ALL
        SELECT job_id, gpu_id, -cut, s_from, s_to FROM ({{shared}}) WHERE job_id IS NOT NULL AND cut > 0"""

# The held time that is seen: each hold (and cut) of a job inside its window's span, on a physical card while
# that card reports (obs): its cluster and its observed model, whatever model the job booked, so a card is
# capacity once and its holders' time is taken from it (a job booked as an A100 on a card reporting a V100
# holds the V100). A running job's hold of a GPU runs to the window's end, as its held span does.
SEEN_HELD_SQL = """
        SELECT * FROM (
            SELECT hj.w_id, hj.job_id, o.cluster, coalesce(o.gpu_model, '') AS mkey, ho.d,
                   greatest(hj.t_from, ho.a_from, o.t_from) AS t_from,
                   least(hj.t_to, CASE WHEN hj.running AND ho.d > 0 THEN hj.t_to ELSE ho.a_to END, o.t_to) AS t_to
            FROM hj JOIN hold ho ON ho.job_id = hj.job_id
                 -- a hold may name a card only its MIG instances report (no GPU row of its own)
                 LEFT JOIN gpus g ON g.gpu_id = ho.gpu_id
                 JOIN obs o ON o.w_id = hj.w_id AND o.phys = coalesce(g.parent_gpu_id, ho.gpu_id)
            WHERE NOT hj.pseudo)
        WHERE t_to > t_from"""

# Each job's held time that is not seen, as changes of its level: its GPUs over its span, less the cuts inside
# it, less what is seen (a cut on a reporting card comes back: it is taken from the seen time instead). A
# silent node, a silent stretch of a card, GPUs beyond what the host reports are all unseen; a job on no
# reporting card is unseen whole.
JOB_STREAM_SQL = """
        SELECT w_id, job_id, t_from AS ts, gpu_count AS n FROM hj WHERE t_to > t_from AND NOT pseudo
        UNION ALL
        SELECT w_id, job_id, t_to, -gpu_count FROM hj WHERE t_to > t_from AND NOT pseudo
        UNION ALL
        SELECT hj.w_id, hj.job_id, greatest(hj.t_from, ho.a_from), ho.d
        FROM hj JOIN hold ho ON ho.job_id = hj.job_id
        WHERE ho.d < 0 AND NOT hj.pseudo AND least(hj.t_to, ho.a_to) > greatest(hj.t_from, ho.a_from)
        UNION ALL
        SELECT hj.w_id, hj.job_id, least(hj.t_to, ho.a_to), -ho.d
        FROM hj JOIN hold ho ON ho.job_id = hj.job_id
        WHERE ho.d < 0 AND NOT hj.pseudo AND least(hj.t_to, ho.a_to) > greatest(hj.t_from, ho.a_from)
        UNION ALL
        SELECT w_id, job_id, t_from, -d FROM seen
        UNION ALL
        SELECT w_id, job_id, t_to, d FROM seen"""

# A job's unseen level at each change, never below 0 (a job whose holds name more than its GPUs: what it
# holds on reporting cards is all seen and nothing is unseen), as the change from its previous level.
JOB_LEVEL_SQL = """
        SELECT w_id, job_id, ts, lvl - coalesce(lag(lvl) OVER (PARTITION BY w_id, job_id ORDER BY ts), 0) AS n
        FROM (SELECT w_id, job_id, ts,
                     greatest(0, round(sum(n) OVER (PARTITION BY w_id, job_id ORDER BY ts ROWS UNBOUNDED PRECEDING),
                                       9)) AS lvl
              FROM (SELECT w_id, job_id, ts, sum(n) AS n FROM js GROUP BY ALL))"""

# The held time as level changes (k 'h': held; 'u': GPUs only a job on no reporting card proves). Seen held
# time is held in the card's cluster and model; unseen held time in the job's own, where it also proves
# capacity: in a cluster without declared capacity the unseen GPUs exist while held, so the unseen time is
# billed by allocation and takes nothing from the reporting cards' free time. A job whose samples a source
# labelled but which holds no GPU row (a dcgm hpc_job label without an allocation) proves nothing: its
# samples' card is observed already. A telemetry-only card's pseudo-job holds its own card.
HELD_EVENTS_SQL = """
        SELECT w_id, cluster, mkey, 'h' AS k, t_from AS ts, d AS n FROM seen
        UNION ALL
        SELECT w_id, cluster, mkey, 'h', t_to, -d FROM seen
        UNION ALL
        SELECT hj.w_id, hj.cluster, coalesce(hj.gpu_model, ''), k.k, jl.ts, jl.n
        FROM jl JOIN hj ON hj.w_id = jl.w_id AND hj.job_id = jl.job_id
        CROSS JOIN (VALUES ('h'), ('u')) k(k)
        WHERE jl.n <> 0
          AND (k.k = 'h' OR hj.job_id IN (SELECT job_id FROM hold)
               OR hj.job_id NOT IN (SELECT job_id FROM samples_day WHERE job_id IS NOT NULL))
        UNION ALL
        SELECT w_id, cluster, coalesce(gpu_model, ''), 'h', t_from, gpu_count FROM hj WHERE pseudo AND t_to > t_from
        UNION ALL
        SELECT w_id, cluster, coalesce(gpu_model, ''), 'h', t_to, -gpu_count FROM hj WHERE pseudo AND t_to > t_from"""

# the level changes: 'd' declared, 'o' observed (reporting cards, telemetry-only cards while held), 'u' GPUs
# only held time on no reporting card proves, 'h' held (:data:`HELD_EVENTS_SQL`)
EVENTS_SQL = f"""
        SELECT w_id, cluster, coalesce(gpu_model, '') AS mkey, 'd' AS k, t_from AS ts, gpu_count AS n FROM decl
        WHERE t_to > t_from
        UNION ALL
        SELECT w_id, cluster, coalesce(gpu_model, ''), 'd', t_to, -gpu_count FROM decl WHERE t_to > t_from
        UNION ALL
        SELECT o.w_id, o.cluster, coalesce(o.gpu_model, ''), 'o', greatest(o.t_from, w.lo), 1.0
        FROM obs o JOIN uw w ON w.w_id = o.w_id
        WHERE least(o.t_to, w.hi) > greatest(o.t_from, w.lo)
        UNION ALL
        SELECT o.w_id, o.cluster, coalesce(o.gpu_model, ''), 'o', least(o.t_to, w.hi), -1.0
        FROM obs o JOIN uw w ON w.w_id = o.w_id
        WHERE least(o.t_to, w.hi) > greatest(o.t_from, w.lo)
        UNION ALL
        -- a telemetry-only card exists while its pseudo-job holds it: capacity as much as it is held, so it
        -- is billed once (as the pseudo-job) and takes nothing from the other cards' free time
        SELECT w_id, cluster, coalesce(gpu_model, ''), 'o', t_from, gpu_count FROM hj
        WHERE starts_with(job_id, '{PSEUDO_PREFIX}') AND t_to > t_from
        UNION ALL
        SELECT w_id, cluster, coalesce(gpu_model, ''), 'o', t_to, -gpu_count FROM hj
        WHERE starts_with(job_id, '{PSEUDO_PREFIX}') AND t_to > t_from
        UNION ALL
        SELECT w_id, cluster, mkey, k, ts, n FROM held_ev"""


def _event_ctes(clusters: tuple[str, ...], settings: Settings) -> list[Cte]:
    """CTEs ev0 (every level change), known, declared and ev: the changes of the clusters that count in each
    window (capacity known there: declared, or GPUs reporting), inside the view's ``clusters`` (all when
    empty), without the clusters billed per job, and without the 'u' changes where capacity is declared."""
    per_job_sql, per_job_params = _values_sql(
        [(name,) for name, body in settings.clusters.items() if body.billing == "per_job"],
        "cluster",
        "VARCHAR",
    )
    in_view = f"AND ev0.cluster IN ({', '.join('?' for _ in clusters)})" if clusters else ""
    ev = f"""
        SELECT ev0.* FROM ev0 JOIN known ON known.w_id = ev0.w_id AND known.cluster = ev0.cluster
        LEFT JOIN declared ON declared.w_id = ev0.w_id AND declared.cluster = ev0.cluster
        WHERE ev0.cluster IS NOT NULL {in_view}
          AND NOT (ev0.k = 'u' AND declared.cluster IS NOT NULL)
          AND ev0.cluster NOT IN (SELECT cluster FROM ({per_job_sql}))"""
    return [
        Cte("ev0", EVENTS_SQL, materialized=True),
        # a cluster counts (in a window) only where capacity is known there: declared, or GPUs reporting
        Cte("known", "SELECT DISTINCT w_id, cluster FROM ev0 WHERE k IN ('d', 'o')"),
        Cte("declared", "SELECT DISTINCT w_id, cluster FROM ev0 WHERE k = 'd'"),
        Cte("ev", ev, (*clusters, *per_job_params), materialized=True),
    ]


def _price_ctes(settings: Settings) -> list[Cte | str]:
    """CTEs cm0, cm1, cm (each window, cluster and model key with its price's tier and cluster) and periods.

    The tier is the cluster's (settings, else the default), on_demand when the model has no price for it;
    the cluster's own price rows when it has some."""
    tiers_sql, tier_params = _values_sql(
        [(name, settings.cluster_tier(name)) for name in settings.clusters],
        "cluster, tier",
        "VARCHAR, VARCHAR",
    )
    cm0 = f"""
        SELECT DISTINCT e.w_id, e.cluster, e.mkey, nullif(e.mkey, '') AS gpu_model,
               coalesce(t.tier, ?) AS asked_tier
        FROM ev e LEFT JOIN ({tiers_sql}) t ON t.cluster = e.cluster"""
    return [
        Cte("cm0", cm0, (settings.default_tier, *tier_params)),
        Cte("cm1", f"SELECT cm0.*, {price_tier_sql('cm0', 'cm0.asked_tier')} AS tier FROM cm0"),
        Cte(
            "cm",
            f"SELECT cm1.*, {price_cluster_sql('cm1', 'cm1.tier')} AS price_cluster FROM cm1",
            materialized=True,
        ),
        PRICE_PERIODS_CTE,
    ]


# the cut points (level changes, window bounds, price changes) and the stretches between them
CUT_SQL = """
        SELECT w_id, cluster, ts FROM ev
        UNION SELECT DISTINCT ev.w_id, ev.cluster, w.lo FROM ev JOIN uw w ON w.w_id = ev.w_id
        UNION SELECT DISTINCT ev.w_id, ev.cluster, w.hi FROM ev JOIN uw w ON w.w_id = ev.w_id
        UNION
        SELECT cm.w_id, cm.cluster, p.p_from
        FROM cm JOIN uw w ON w.w_id = cm.w_id JOIN periods p
          ON p.gpu_model = cm.gpu_model AND p.tier = cm.tier AND p.cluster IS NOT DISTINCT FROM cm.price_cluster
        WHERE p.p_from > w.lo AND p.p_from < w.hi"""

SEG_SQL = """
        SELECT w_id, cluster, ts AS seg_lo, lead(ts) OVER (PARTITION BY w_id, cluster ORDER BY ts) AS seg_hi
        FROM cut"""

SM_SQL = """
        SELECT s.w_id, s.cluster, cm.mkey, cm.gpu_model, s.seg_lo, epoch(s.seg_hi - s.seg_lo) / 3600.0 AS dur_h
        FROM seg s JOIN cm ON cm.w_id = s.w_id AND cm.cluster = s.cluster
        WHERE s.seg_hi IS NOT NULL AND s.seg_hi > s.seg_lo"""

# the levels at each stretch's start: running sums of the changes, each stretch a zero change placed
# after the changes at its own start time. The changes are summed per time first (k 'c'), so the
# window sorts one row per time, not one per job start and end (50 M-sample ledger: 0.17 -> 0.05 s)
RUN_SQL = """
        SELECT *, sum(dd) OVER w AS d, sum(od) OVER w AS o, sum(hd) OVER w AS h
        FROM (SELECT w_id, cluster, mkey, NULL::VARCHAR AS gpu_model, ts, 'c' AS k,
                     sum(CASE WHEN k = 'd' THEN n ELSE 0 END) AS dd, sum(CASE WHEN k IN ('o', 'u') THEN n ELSE 0 END) AS od,
                     sum(CASE WHEN k = 'h' THEN n ELSE 0 END) AS hd, NULL::DOUBLE AS dur_h
              FROM ev GROUP BY w_id, cluster, mkey, ts
              UNION ALL
              SELECT w_id, cluster, mkey, gpu_model, seg_lo, 'z', 0.0, 0.0, 0.0, dur_h FROM sm)
        WINDOW w AS (PARTITION BY w_id, cluster, mkey ORDER BY ts, k ROWS UNBOUNDED PRECEDING)"""

LV_SQL = """
        SELECT w_id, cluster, mkey, gpu_model, ts AS seg_lo, dur_h,
               greatest(d, 0) AS d, greatest(o, 0) AS o, greatest(h, 0) AS h
        FROM run WHERE k = 'z'"""

FR_SQL = """
        SELECT lv.*, greatest(d, o) AS cap,
               CASE WHEN mkey = '' THEN 0 ELSE least(h, greatest(d, o)) END AS alloc,
               CASE WHEN mkey = '' THEN greatest(d, o) ELSE greatest(0, greatest(d, o) - h) END AS free,
               CASE WHEN mkey <> '' AND greatest(d, o) > 0 THEN greatest(0, h - greatest(d, o)) ELSE 0 END
                   AS over_known,
               sum(CASE WHEN mkey = '' THEN h ELSE 0 END) OVER c AS unk,
               sum(CASE WHEN mkey = '' THEN greatest(d, o) ELSE greatest(0, greatest(d, o) - h) END) OVER c
                   AS free_all
        FROM lv WINDOW c AS (PARTITION BY w_id, cluster, seg_lo)"""

SH_SQL = """
        SELECT fr.*,
               CASE WHEN free_all > 0 THEN free * least(1.0, unk / free_all) ELSE 0 END AS taken,
               -- unknown-model held time beyond all free capacity: oversubscription, on the unknown row
               CASE WHEN mkey = '' AND unk > free_all THEN unk - free_all ELSE 0 END AS over_unknown
        FROM fr"""

PRICED_SQL = """
        SELECT sh.*, cm.tier, p.usd_per_gpu_hour AS price, (free - taken) * dur_h AS un_h
        FROM sh JOIN cm USING (w_id, cluster, mkey)
        LEFT JOIN periods p
          ON p.gpu_model = cm.gpu_model AND p.tier = cm.tier AND p.cluster IS NOT DISTINCT FROM cm.price_cluster
         AND p.p_from <= sh.seg_lo AND p.p_to > sh.seg_lo"""

# one row per (window, cluster, model key): UNALLOCATED_COLUMNS after w_id
UNALLOCATED_SELECT = """
    SELECT w_id, cluster, any_value(gpu_model) AS gpu_model, any_value(tier) AS tier,
           CASE WHEN fsum(d * dur_h) > 0 AND fsum(o * dur_h) > 0 THEN 'declared+observed'
                WHEN fsum(d * dur_h) > 0 THEN 'declared' WHEN fsum(o * dur_h) > 0 THEN 'observed' END
               AS capacity_basis,
           fsum(d * dur_h) AS declared_gpu_hours,
           fsum(o * dur_h) AS observed_gpu_hours,
           fsum(cap * dur_h) AS capacity_gpu_hours,
           fsum(alloc * dur_h) AS allocated_gpu_hours,
           fsum(taken * dur_h) AS unknown_model_gpu_hours,
           fsum((over_known + over_unknown) * dur_h) AS oversubscribed_gpu_hours,
           fsum(un_h) AS unallocated_gpu_hours,
           coalesce(fsum(un_h * price) / nullif(fsum(un_h) FILTER (WHERE price IS NOT NULL), 0),
                    fsum(price * dur_h) / nullif(fsum(dur_h) FILTER (WHERE price IS NOT NULL), 0))
               AS usd_per_gpu_hour,
           CASE WHEN count(price) = count(*) THEN fsum(un_h * price) END AS unallocated_usd
    FROM priced
    GROUP BY w_id, cluster, mkey
    HAVING fsum(cap * dur_h) > 0 OR fsum((over_known + over_unknown) * dur_h) > 0
    ORDER BY w_id, cluster, mkey
"""


def _level_ctes() -> list[Cte]:
    """CTEs cut, seg, sm (the stretches between level and price changes), run and lv (the levels at each
    stretch's start), fr and sh (free capacity, the unknown-model held time's share of it) and priced."""
    return [
        Cte("cut", CUT_SQL),
        Cte("seg", SEG_SQL),
        Cte("sm", SM_SQL),
        Cte("run", RUN_SQL),
        Cte("lv", LV_SQL),
        Cte("fr", FR_SQL),
        Cte("sh", SH_SQL),
        Cte("priced", PRICED_SQL),
    ]


@shared  # the bars by week, and the view's own capacity read from it (unallocated)
def unallocated_weeks(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
) -> tuple[pl.DataFrame | None, pl.DataFrame]:
    """(:func:`unallocated` of the view, UNALLOCATED_COLUMNS plus ``week`` for each of its ISO weeks), in one
    statement whose every partition carries its window (the observed spans, held jobs and prices computed
    once: on a 50 M-sample ledger 0.29 s for both against 0.30 s + 0.25 s apart). Each week's rows equal
    unallocated() for the view narrowed to that week.

    The view's own rows come along only where its window is the weeks' together: always, except an open
    view whose data ends after the midnight that ends its last day (a sample's interval across it, a later
    horizon), whose window runs to that end. Then the first is None (unallocated computes it alone)."""
    as_of = as_of or horizon(con)
    none = pl.DataFrame()
    start = _data_start(con) if _sees_unallocated(filters) else None
    end = _data_end(con, as_of)
    weeks = view_weeks(con, filters)
    if start is None or end is None or not weeks:
        return None, none
    whole = Filters(weeks[0][1].since, weeks[-1][1].until, filters.teams, filters.clusters, filters.users)
    same = (max(filters.lo or start, start), min(filters.hi or end, end)) == (
        max(whole.lo or start, start),
        min(whole.hi or end, end),
    )
    windows = [("", whole)] if same else []
    built = _unallocated_windows_sql(filters, windows + weeks, settings, as_of, start, end, con)
    if built is None:
        return None, none
    rows = frame(con, *built)
    view = None
    if same:
        view = (
            rows.filter(pl.col("w_id") == "")
            .drop("w_id")
            .sort(pl.col("cluster"), pl.col("gpu_model").fill_null(""), nulls_last=True)
        )
    return view, rows.filter(pl.col("w_id") != "").rename({"w_id": "week"})


def unallocated_periods(
    con: duckdb.DuckDBPyConnection,
    periods: list[tuple[str, Filters]],
    *,
    filters: Filters = ALL_FILTERS,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
) -> pl.DataFrame:
    """UNALLOCATED_COLUMNS plus ``period`` for each (label, the view narrowed to its dates) of ``periods``
    (days, months: any cut, see analytics/daily.py), in one statement; each period's rows equal
    :func:`unallocated` for its filters. Empty when the view cannot see capacity or the ledger is empty."""
    as_of = as_of or horizon(con)
    start = _data_start(con) if _sees_unallocated(filters) else None
    built = _unallocated_windows_sql(filters, periods, settings, as_of, start, _data_end(con, as_of), con)
    if built is None:
        return pl.DataFrame()
    return frame(con, *built).rename({"w_id": "period"})


def prefetch_unallocated(
    con: duckdb.DuckDBPyConnection,
    views: Sequence[Filters],
    *,
    settings: Settings = DEFAULT_SETTINGS,
    as_of: dt.datetime | None = None,
) -> None:
    """Inside a sharing block: :func:`unallocated` of each of ``views`` (views with dates that differ in
    nothing else) in one statement (:func:`unallocated_periods`: each window computed on its own), kept as
    each view's result (analytics.shared.keep), so the calls that follow read it. Nothing outside a block, or
    for views without both dates, of other teams, clusters or users, or an empty capacity window (those
    compute alone).

    Why: the items scan (gpuledger/items/scan.py) runs the rules on each week of the ledger, and the
    capacity rule asks for each week's unallocated capacity; one statement per week is mostly planning (the
    28-day demo: four weeks alone 0.79-0.87 s, in one statement 0.33 s, the same rows to the bit)."""
    if not active(con) or len(views) < 2 or not _sees_unallocated(views[0]):
        return
    first = views[0]
    if any(
        v.since is None
        or v.until is None
        or (v.teams, v.clusters, v.users) != (first.teams, first.clusters, first.users)
        for v in views
    ):
        return
    as_of = as_of or horizon(con)
    start, end = _data_start(con), _data_end(con, as_of)
    if start is None or end is None or as_of is None:
        return
    periods = [(str(i), v) for i, v in enumerate(views) if _bounds(v, start, end) is not None]
    if len(periods) < 2:
        return
    whole = Filters(
        min(v.since for _, v in periods),  # type: ignore[type-var]
        max(v.until for _, v in periods),  # type: ignore[type-var]
        first.teams,
        first.clusters,
        first.users,
    )
    rows = unallocated_periods(con, periods, filters=whole, settings=settings, as_of=as_of)
    if rows.is_empty() and "period" not in rows.columns:
        return
    for label, v in periods:
        # unallocated's own order (ORDER BY cluster, coalesce(gpu_model, ''), nulls last), as unallocated_weeks
        one = (
            rows.filter(pl.col("period") == label)
            .drop("period")
            .sort(pl.col("cluster"), pl.col("gpu_model").fill_null(""), nulls_last=True)
        )
        keep(unallocated, con, one, filters=v, settings=settings, as_of=as_of)
