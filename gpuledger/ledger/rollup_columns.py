"""What a ``samples_minute`` row holds, as SQL: each column's aggregate over the samples of one
(minute, GPU, job) (:func:`_minute_sql`, grouped or, where most minutes hold one sample, row by row), and how
``samples_day`` and ``samples_hour`` re-aggregate minute rows (:func:`aggregates`: ``DAY_AGGREGATES``,
``HOUR_AGGREGATES``).
The refresh that runs this SQL is gpuledger/ledger/rollup.py.
"""

from __future__ import annotations

from gpuledger.ledger.rollup_thresholds import Thresholds
from gpuledger.ledger.sample_time import contiguous_sql, sample_end_sql
from gpuledger.ledger.sample_use import covered_s_sql, underused_s_sql
from gpuledger.ledger.shares import fan_out_sql
from gpuledger.ledger.thresholds import DEFAULT

# the signal thresholds counted into the rollup's minutes (dips, bursts, throttling, heat)
TH = DEFAULT


def _minute_columns(th: Thresholds) -> list[tuple[str, str, str, str]]:
    """A minute row's columns past its key, as (aggregate, expression over ``f``, column, cast): one list
    for both forms of :func:`_minute_sql`. ``first`` is ``arg_min(expression, ts)``."""
    idle, _, target = th
    return [
        ("count", "*", "n", "INTEGER"),
        ("sum", "interval_s", "covered_s", ""),
        ("sum", "util / 100.0 * interval_s", "util_s", ""),
        ("sum", covered_s_sql("util", "interval_s"), "util_cov_s", ""),
        ("sum", f"CASE WHEN util <= {idle} THEN interval_s END", "idle_s", ""),
        ("max", "util", "util_max", ""),
        ("max", "mem_used", "mem_used_max_mib", ""),
        ("max", "mem_total_mib", "mem_total_mib", ""),
        ("sum", "power_w * interval_s", "power_j", ""),
        ("sum", "CASE WHEN power_w IS NOT NULL THEN interval_s END", "power_cov_s", ""),
        ("sum", "sm / 100.0 * interval_s", "sm_active_s", ""),
        ("sum", "tensor / 100.0 * interval_s", "tensor_active_s", ""),
        ("sum", "CASE WHEN sm IS NOT NULL OR tensor IS NOT NULL THEN interval_s END", "prof_cov_s", ""),
        ("min", "ts", "first_ts", ""),
        ("max", "ts", "last_ts", ""),
        ("max", sample_end_sql(), "max_end_ts", ""),
        ("sum", "CASE WHEN in_idle THEN interval_s END", "idle_run_s", ""),
        ("sum", underused_s_sql("util", "interval_s", "in_idle", target), "underused_s", ""),
        ("sum", "CASE WHEN sm IS NOT NULL THEN interval_s END", "sm_cov_s", ""),
        ("sum", "CASE WHEN tensor IS NOT NULL THEN interval_s END", "tensor_cov_s", ""),
        ("max", "mem_used / mem_total_mib", "memk_frac_max", ""),
        ("sum", "mem_used / mem_total_mib * interval_s", "memk_frac_s", ""),
        ("sum", "CASE WHEN mem_used IS NOT NULL AND mem_total_mib > 0 THEN interval_s END", "memk_cov_s", ""),
        ("max", "CASE WHEN mem_total_mib IS NULL THEN mem_used END", "memu_max_mib", ""),
        ("sum", "CASE WHEN mem_total_mib IS NULL THEN mem_used * interval_s END", "memu_s", ""),
        (
            "sum",
            "CASE WHEN mem_used IS NOT NULL AND mem_total_mib IS NULL THEN interval_s END",
            "memu_cov_s",
            "",
        ),
        ("count", "CASE WHEN mem_total_mib IS NULL THEN 1 END", "n_no_total", "INTEGER"),
        ("sum", "e_j", "energy_j", ""),
        ("sum", "CASE WHEN e_j IS NOT NULL THEN interval_s END", "energy_cov_s", ""),
        ("count", "util", "util_n", "INTEGER"),
        ("count", f"CASE WHEN util < {TH.dip_util_pct} THEN 1 END", "dip_n", "INTEGER"),
        ("count", f"CASE WHEN util > {TH.burst_util_pct} THEN 1 END", "burst_n", "INTEGER"),
        ("count", "throttle_reasons", "throttle_n", "INTEGER"),
        (
            "count",
            f"CASE WHEN throttle_reasons & {TH.power_thermal_mask}::UBIGINT <> 0 THEN 1 END",
            "throttled_n",
            "INTEGER",
        ),
        ("count", "temp_c", "temp_n", "INTEGER"),
        ("count", f"CASE WHEN temp_c >= {TH.hot_temp_c} THEN 1 END", "hot_n", "INTEGER"),
        ("max", "temp_c", "temp_max_c", ""),
        ("sum", "pair", "pairs_n", "INTEGER"),
        ("sum", "swing", "swings_n", "INTEGER"),
        ("first", "pair", "first_pair", "INTEGER"),
        ("first", "swing", "first_swing", "INTEGER"),
    ]


def _of_one(aggregate: str, expr: str) -> str:
    """An aggregate over one row, as a plain expression: the value itself, or for a count 1 or 0."""
    if aggregate != "count":
        return f"({expr})"
    return "1" if expr == "*" else f"(({expr}) IS NOT NULL)"


def _weighted(aggregate: str, expr: str, cast: str) -> str:
    """A column's expression over a fanned-out sample of a shared card (:func:`_minute_sql` ``shared``):
    sums of seconds and quantities (no cast) weighted by the holder's share; counts, maxima, firsts and
    the integer pair/swing sums are the card's own, for every holder."""
    return f"({expr}) * share_w" if aggregate == "sum" and not cast else expr


def _minute_sql(th: Thresholds, alone: bool | None = None, *, shared: bool = False) -> str:
    """The minute rows of the samples in ``rollup_seq`` inside each GPU's [m_lo, m_hi_end); parameters:
    the overall [min m_lo, max m_hi_end). A sample is inside an idle stretch when it is idle and lies in a
    run (``idle_runs``, already refreshed) of at least idle_min_minutes: an equi-join on (GPU, job, day)
    with a range test, against the long runs only.

    ``alone``: None rolls up every sample with one GROUP BY. True takes only the samples ``alone`` in their
    minute (no earlier sample of the same job and no later sample of the GPU in it: a cadence of a minute
    or more), whose minute row is the sample's own values, with no hash table; False rolls up the rest.
    True and False together give the same rows as None: ``alone`` says of a sample that its (minute,
    gpu_id, job_id) holds no other, so the two never split a group.

    ``shared`` (grouped form only): the batch holds shared cards (gpuledger/ledger/shares.py): after its
    idle-stretch flag is set on the card's own sequence, each sample of a shared stretch becomes one row per
    holding job, its sums weighted by that job's share (:func:`_weighted`). ``pj_ts`` is the previous sample of
    the same job (:func:`_sequence`) and ``next_ts`` the GPU's next one, of any job, so a sample of
    another job in the minute can only make ``alone`` false, never true wrongly.

    The one-row form comes out as read, unsorted: in time order from a streaming view (_sequence_polls),
    by GPU then time from a sorted batch. Sorting it cost more than the rest of the step (the 7-day demo
    at 60 s: 4.3 s against 1.7 s); zone maps on those rows then prune by GPU, not by minute.
    """
    idle, min_minutes, _ = th
    min_s = min_minutes * 60.0
    if alone:
        select = ", ".join(
            f"{_of_one(a, e)}{f'::{c}' if c else ''} AS {col}" for a, e, col, c in _minute_columns(th)
        )
        tail = "WHERE alone"
    else:
        cols = [(a, _weighted(a, e, c) if shared else e, col, c) for a, e, col, c in _minute_columns(th)]
        select = ", ".join(
            f"{'arg_min' if a == 'first' else a}({e}{', ts' if a == 'first' else ''}){f'::{c}' if c else ''} AS {col}"
            for a, e, col, c in cols
        )
        tail = f"{'WHERE NOT alone' if alone is False else ''} GROUP BY minute, gpu_id, job_id"
    return f"""
    WITH kept AS (
        SELECT q.*,
               -- a sample's energy (analytics/energy.py; the oracle: tests/analytics/oracle.py)
               (CASE WHEN q.energy_j IS NOT NULL AND q.next_energy_j >= q.energy_j
                          AND {contiguous_sql("epoch(q.next_ts - q.ts)", "q.iv")}
                     THEN q.next_energy_j - q.energy_j
                     ELSE q.power_w * q.iv END) AS e_j,
               q.pj_ts IS NOT NULL AND {contiguous_sql("epoch(q.ts - q.pj_ts)", "q.pj_iv")} AS contiguous,
               coalesce(date_trunc('minute', q.pj_ts) < date_trunc('minute', q.ts), true)
                   AND coalesce(date_trunc('minute', q.next_ts) > date_trunc('minute', q.ts), true) AS alone
        FROM rollup_seq q JOIN rollup_m w ON q.gpu_id = w.gpu_id AND q.ts >= w.m_lo AND q.ts < w.m_hi_end
        WHERE q.ts >= ? AND q.ts < ?
    ),
    runs AS (
        SELECT r.gpu_id, coalesce(r.job_id, chr(0)) AS jkey, r.day, r.first_ts, r.last_ts FROM idle_runs r
        WHERE r.run_s >= {min_s} AND r.gpu_id IN (SELECT gpu_id FROM rollup_m)
    ),
    f AS (
        SELECT k.ts, k.gpu_id, k.job_id, k.iv AS interval_s, k.util, k.mem_used, k.mem_total_mib, k.power_w,
               k.sm, k.tensor, k.temp_c, k.throttle_reasons, k.e_j, k.alone,
               r.gpu_id IS NOT NULL AS in_idle,
               (k.contiguous AND k.util IS NOT NULL AND k.pj_util IS NOT NULL)::INTEGER AS pair,
               (k.contiguous AND ((k.util < {TH.dip_util_pct} AND k.pj_util > {TH.burst_util_pct})
                                  OR (k.util > {TH.burst_util_pct} AND k.pj_util < {TH.dip_util_pct})))::INTEGER
                   AS swing
        FROM kept k LEFT JOIN runs r
          ON k.util <= {idle} AND k.gpu_id = r.gpu_id AND k.jkey = r.jkey AND k.ts::DATE = r.day
         AND k.ts >= r.first_ts AND k.ts <= r.last_ts
    )
    SELECT date_trunc('minute', ts) AS minute, gpu_id, job_id, {select}
    FROM {f"({fan_out_sql('f')})" if shared else "f"}
    {tail}
    {"" if alone else "ORDER BY minute, gpu_id"}
    """


_SUMS = [
    "covered_s",
    "util_s",
    "util_cov_s",
    "idle_s",
    "power_j",
    "power_cov_s",
    "sm_active_s",
    "tensor_active_s",
    "prof_cov_s",
    "idle_run_s",
    "underused_s",
    "sm_cov_s",
    "tensor_cov_s",
    "memk_frac_s",
    "memk_cov_s",
    "memu_s",
    "memu_cov_s",
    "energy_j",
    "energy_cov_s",
]
_COUNTS = [
    "n",
    "n_no_total",
    "util_n",
    "dip_n",
    "burst_n",
    "throttle_n",
    "throttled_n",
    "temp_n",
    "hot_n",
    "pairs_n",
    "swings_n",
]
_MAXES = [
    "util_max",
    "mem_used_max_mib",
    "mem_total_mib",
    "last_ts",
    "max_end_ts",
    "memk_frac_max",
    "memu_max_mib",
    "temp_max_c",
]


def aggregates(grain: str) -> str:
    """The select list re-aggregating minute rows (``m``) into the rollup of ``grain`` (``"day"``:
    ``samples_day``, ``"hour"``: ``samples_hour``): sums of the sums, counts and maxima, and each group's
    first sample's values.

    The hours' sums are compensated (DuckDB's fsum, Kahan-Babuska): an hour re-aggregated by an incremental
    refresh reads its minute rows in another order than a rebuild does, and a plain sum then differed in the
    last bits (1457.9999999999973 against 1458.0 for one GPU-hour of util_s). The days keep plain sums."""
    sums = {"day": "sum", "hour": "fsum"}
    if grain not in sums:
        raise ValueError(f"unknown grain {grain!r}; use one of {', '.join(sums)}")
    return ", ".join(
        [f"{sums[grain]}(m.{c}) AS {c}" for c in _SUMS]
        + [f"sum(m.{c})::INTEGER AS {c}" for c in _COUNTS]
        + [f"max(m.{c}) AS {c}" for c in _MAXES]
        + [
            "min(m.first_ts) AS first_ts",
            "arg_min(m.first_pair, m.minute) AS first_pair",
            "arg_min(m.first_swing, m.minute) AS first_swing",
        ]
    )


DAY_AGGREGATES = aggregates("day")
HOUR_AGGREGATES = aggregates("hour")
