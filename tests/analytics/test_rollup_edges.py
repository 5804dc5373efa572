"""The edges of the rollup's incremental refresh (gpuledger/ledger/rollup.py, rollup_columns.py,
rollup_sequence.py) that an incremental ingest and a rebuild must agree on with the raw samples: the idle-run
link (a sample joins the run before it only within 1.5 × the previous sample's interval), and each window's
ends (a refresh deletes and writes again exactly the minutes, hours, days, histogram rows and idle runs of its
window: each once).

Two were one-line mutations the suite let through (issue 35: ``1.5 ×`` → ``2.5 ×`` in the idle-run link,
``<`` → ``<=`` at the minute window's end). A survey of 33 one-character edges of the refresh (``<``/``<=``,
``>=``/``>``, ``BETWEEN`` against a half-open range, a window end's ``± 1 MINUTE``: bench/rollup_mutants.py) found
21 this module's first three tests let through; the cut, merge and silence tests below fail under each
of the 10 that change a figure. The 11 left change none, by construction:

- a bound ANDed with a tighter one: the literal global bounds (``minute < ?``) beside each GPU's own;
- ``least(lo, x)`` / ``greatest(hi, x)`` where ``x`` may equal ``lo`` / ``hi`` (the window widening's
  ``run_start < lo``, ``last_ts > hi``; the sample before a window, ``ts < lo``);
- a reach or look edge: sample_time.reach_us_sql is 1 s past the link tolerance, so a sample exactly at a
  reach (``run_reach_ts >= lo``, ``run_start <= reach_hi``, the sample before's reach, rollup_sequence's
  ``look_lo`` / ``look_hi``) links to nothing either way;
- a whole day or hour re-aggregated one bucket further (``(m_hi_end - 1 MINUTE)`` dropped): its minute rows
  are whole, so the rows are the same.

Expected figures are worked by hand and by plain SQL over ``samples``; the oracle shares GAP_TOLERANCE, so
each link test reads the product against the hand figures first.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest

from analytics.summary import summary
from gpuledger.ledger.db import memory_ledger
from gpuledger.ledger.rollup import rebuild_rollup
from tests.analytics.build import T0, alloc, gpu, ingest, job, series, set_test_prices
from tests.analytics.oracle import ORACLE


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    c = memory_ledger()
    set_test_prices(c)
    yield c
    c.close()


def _rebuild(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("BEGIN TRANSACTION")
    rebuild_rollup(con, idle_util_pct=5.0)
    con.execute("COMMIT")


def test_idle_runs_of_two_ingests_meeting_across_a_gap_of_two_cadences_stay_apart(con) -> None:
    """Job j holds n1:0 0-60 min. Ingest 1: 25 samples at 0 % a minute apart, 0-24 min; ingest 2: 25 more at
    0 % from 26 min. The first file's last sample stands for one cadence (60 s), so 26 min is 120 s after it:
    beyond 1.5 × 60 s, a gap: two runs of 25 × 60 = 1,500 s. Each is under the 30-minute minimum: no idle
    stretch, 0 idle hours,
    by raw samples, by the incremental rollup and by a rebuilt one (linked at 2.5 ×, one 50-min stretch:
    0.83 idle GPU-h)."""
    ingest(con, jobs=[job("j", 0, 60)], allocations=[alloc("j", "n1:0", 0, 60)], gpus=[gpu("n1:0")])
    ingest(con, samples=series("n1:0", 0, [0.0] * 25))
    ingest(con, samples=series("n1:0", 26, [0.0] * 25))
    # the gap the link tests: 120 s after a sample that stands for 60 s
    assert con.execute(
        "SELECT interval_s FROM samples WHERE gpu_id = 'n1:0' ORDER BY ts LIMIT 1 OFFSET 24"
    ).fetchall() == [(60.0,)]
    for state in ("incremental", "rebuilt"):
        if state == "rebuilt":
            _rebuild(con)
        # the product first: the oracle reads the same GAP_TOLERANCE, so only the hand figures judge the link
        runs = con.execute("SELECT run_start, run_s FROM idle_runs ORDER BY ALL").fetchall()
        assert runs == [(T0, 25 * 60.0), (T0 + dt.timedelta(minutes=26), 25 * 60.0)], state
        assert summary(con)["idle_gpu_hours"] == pytest.approx(0.0), state
        assert summary(con, source=ORACLE)["idle_gpu_hours"] == pytest.approx(0.0)


def test_idle_runs_within_the_tolerance_do_link_across_ingests(con) -> None:
    """The same with the second file starting 90 s after the first's last sample (1.5 × 60 s: linked): one
    run of 50 samples, 0-24 min and 25.5-49.5 min, each standing for 60 s: 50 idle minutes."""
    ingest(con, jobs=[job("j", 0, 60)], allocations=[alloc("j", "n1:0", 0, 60)], gpus=[gpu("n1:0")])
    ingest(con, samples=series("n1:0", 0, [0.0] * 25))
    ingest(con, samples=series("n1:0", 25.5, [0.0] * 25))
    for state in ("incremental", "rebuilt"):
        if state == "rebuilt":
            _rebuild(con)
        runs = con.execute("SELECT run_start, run_s FROM idle_runs ORDER BY ALL").fetchall()
        assert runs == [(T0, 50 * 60.0)], state
        assert summary(con)["idle_gpu_hours"] == pytest.approx(50 / 60), state
        assert summary(con, source=ORACLE)["idle_gpu_hours"] == pytest.approx(50 / 60)


# (first minute, samples) per GPU of each ingest, in landing order
SPLITS = [
    [{"n1:0": (0, 30), "n1:1": (0, 30)}, {"n1:0": (30, 30), "n1:1": (30, 30)}],
    [{"n1:0": (30, 30), "n1:1": (30, 30)}, {"n1:0": (0, 30), "n1:1": (0, 30)}],
    # the GPUs' re-rolled windows end at different minutes (00:31 and 00:46): the refresh reads up to the
    # later end, and the earlier GPU's sample at exactly its own window's end (00:31) lies outside its window
    [{"n1:0": (30, 30), "n1:1": (45, 15)}, {"n1:0": (0, 30), "n1:1": (0, 45)}],
]


@pytest.mark.parametrize("splits", SPLITS)
def test_a_multi_gpu_incremental_ingest_writes_each_gpu_minute_once(con, splits) -> None:
    """Job j holds n1:0 and n1:1 0-60 min, n1:0 at 90 %, n1:1 at 30 %, one sample a minute, landed by two
    ingests in the splits above. Every (minute, GPU, job) is one row of samples_minute (120 in all), and the
    mean utilization from the rollup is the samples' (90 + 30) / 2 = 60 % (a duplicated 90 % minute made it
    (61 × 90 + 60 × 30) / 121 = 60.50 %), incrementally and rebuilt."""
    cards = ("n1:0", "n1:1")
    ingest(
        con,
        jobs=[job("j", 0, 60, gpu_count=2.0)],
        allocations=[alloc("j", g, 0, 60) for g in cards],
        gpus=[gpu(g) for g in cards],
    )
    util = {"n1:0": 90.0, "n1:1": 30.0}
    for part in splits:
        ingest(con, samples=[s for g, (start, n) in part.items() for s in series(g, start, [util[g]] * n)])
    (plain,) = con.execute("SELECT sum(util_pct * interval_s) / sum(interval_s) FROM samples").fetchall()[0]
    assert plain == pytest.approx(60.0)
    for state in ("incremental", "rebuilt"):
        if state == "rebuilt":
            _rebuild(con)
        dupes = con.execute(
            """SELECT count(*) FROM (SELECT minute, gpu_id, job_id FROM samples_minute GROUP BY ALL
                                     HAVING count(*) > 1)"""
        ).fetchall()
        assert dupes == [(0,)], state
        assert con.execute("SELECT count(*) FROM samples_minute").fetchall() == [(120,)], state
        assert summary(con)["mean_util_pct"] == pytest.approx(plain), state
        assert summary(con, source=ORACLE)["mean_util_pct"] == pytest.approx(plain)


# Cuts of two GPUs' samples into ingests, as (GPU, first minute, last minute + 1) per ingest, in landing order:
# one cut inside n1:0's idle stretch before midnight, three ingests out of order, the GPUs cut at different
# minutes (just after midnight and inside n1:1's idle stretch) with the later part landing first.
START, END = 23 * 60, 26 * 60  # 23:00 on the first day to 02:00 on the second, one sample a minute
CUTS = [
    [[("n1:0", START, 1430), ("n1:1", START, 1430)], [("n1:0", 1430, END), ("n1:1", 1430, END)]],
    [
        [("n1:0", 1450, 1500), ("n1:1", 1450, 1500)],
        [("n1:0", START, 1450), ("n1:1", START, 1450)],
        [("n1:0", 1500, END), ("n1:1", 1500, END)],
    ],
    [[("n1:0", 1441, END), ("n1:1", 1519, END)], [("n1:0", START, 1441), ("n1:1", START, 1519)]],
]
KEYS = {
    "samples_minute": "minute, gpu_id, job_id",
    "samples_hour": "hour, gpu_id, job_id",
    "samples_day": "day, gpu_id, job_id",
    "samples_util_hist": "day, gpu_id, job_id, util_pct",
    "idle_runs": "gpu_id, job_id, run_start, day",
}
# each rollup's time bucket of a sample, for the plain-SQL sums over samples
BUCKET = {
    "samples_minute": "date_trunc('minute', ts)",
    "samples_hour": "date_trunc('hour', ts)",
    "samples_day": "ts::DATE",
}


def _util(gpu_id: str, minute: int) -> float:
    """n1:0 is idle 23:20-00:30 (70 min across midnight), else at 80 %; n1:1 idle 01:00-01:40, else at 40 %."""
    if gpu_id == "n1:0":
        return 0.0 if 1400 <= minute < 1470 else 80.0
    return 0.0 if 1500 <= minute < 1540 else 40.0


@pytest.mark.parametrize("cuts", CUTS)
def test_rollups_of_any_cut_into_ingests_hold_the_samples_once_per_minute_hour_and_day(con, cuts) -> None:
    """Job j holds n1:0 and n1:1 23:00-02:00 (across midnight), one sample a minute with a 300 W energy counter
    (18,000 J a minute), landed in the cuts above. Every minute, hour and day window the incremental refresh
    draws must re-roll exactly its own rows: one row per key in every rollup table, each bucket's covered
    seconds what plain SQL over ``samples`` gives, and by hand over the 2 × 180 samples of 60 s:

    - covered 21,600 s; energy 2 × 179 contiguous pairs × 18,000 J = 6,444,000 J; 2 × 179 = 358 pairs;
    - idle stretches: n1:0 70 samples from 23:20 (4,200 s: 2,400 s on the first day, 1,800 s on the second),
      n1:1 40 samples from 01:00 (2,400 s): 6,600 s = 1.8333 idle GPU-h;
    - mean utilization (110 × 80 + 140 × 40) / 360 = 40.0 %.

    Each edge of the refresh (``<`` against ``<=`` at a window's end, ``BETWEEN`` against a half-open range, the
    minute, day and hour a window ends in) either duplicates or drops a row here."""
    cards = ("n1:0", "n1:1")
    ingest(
        con,
        jobs=[job("j", START, END, gpu_count=2.0)],
        allocations=[alloc("j", g, START, END) for g in cards],
        gpus=[gpu(g) for g in cards],
    )
    for part in cuts:
        rows = []
        for g, lo, hi in part:
            for i, s in enumerate(series(g, lo, [_util(g, m) for m in range(lo, hi)])):
                rows.append({**s, "energy_j": 18_000.0 * (lo - START + i)})
        ingest(con, samples=rows)
    assert con.execute("SELECT count(*), sum(interval_s) FROM samples").fetchall() == [(360, 21_600.0)]
    for state in ("incremental", "rebuilt"):
        if state == "rebuilt":
            _rebuild(con)
        for table, key in KEYS.items():
            dupes = con.execute(
                f"SELECT count(*) FROM (SELECT {key} FROM {table} GROUP BY ALL HAVING count(*) > 1)"
            )
            assert dupes.fetchall() == [(0,)], (state, table)
        for table, bucket in BUCKET.items():
            t = table.removeprefix("samples_")
            off = con.execute(
                f"""SELECT count(*) FROM (SELECT gpu_id, {bucket} AS b, sum(interval_s) AS s FROM samples GROUP BY ALL) p
                    FULL JOIN (SELECT gpu_id, {t} AS b, sum(covered_s) AS s FROM {table} GROUP BY ALL) r
                      USING (gpu_id, b)
                    WHERE p.s IS DISTINCT FROM r.s"""
            ).fetchall()
            assert off == [(0,)], (state, table)
            got = con.execute(
                f"SELECT sum(covered_s), sum(energy_j), sum(pairs_n), sum(idle_run_s) FROM {table}"
            )
            assert got.fetchall() == [(21_600.0, 6_444_000.0, 358, 6_600.0)], (state, table)
        hist = con.execute(
            """SELECT count(*) FROM (SELECT ts::DATE AS day, gpu_id, util_pct, sum(interval_s) AS s FROM samples
                                     GROUP BY ALL) p
               FULL JOIN (SELECT day, gpu_id, util_pct, sum(seconds) AS s FROM samples_util_hist GROUP BY ALL) r
                 USING (day, gpu_id, util_pct)
               WHERE p.s IS DISTINCT FROM r.s"""
        ).fetchall()
        assert hist == [(0,)], state
        runs = con.execute(
            "SELECT gpu_id, run_start, run_s, day, idle_s FROM idle_runs WHERE run_s >= 1800 ORDER BY ALL"
        ).fetchall()
        first, second = dt.date(2025, 3, 3), dt.date(2025, 3, 4)
        at = lambda m: T0 + dt.timedelta(minutes=m)  # noqa: E731
        assert runs == [
            ("n1:0", at(1400), 4_200.0, first, 2_400.0),
            ("n1:0", at(1400), 4_200.0, second, 1_800.0),
            ("n1:1", at(1500), 2_400.0, second, 2_400.0),
        ], state
        got = summary(con)
        assert got["idle_gpu_hours"] == pytest.approx(6_600 / 3600), state
        assert got["mean_util_pct"] == pytest.approx((110 * 80 + 140 * 40) / 360), state


def test_a_merging_reingest_re_rolls_the_idle_runs_at_both_ends_of_its_window_once(con) -> None:
    """Job j holds n1:0 0-120 min. Ingest 1: a sample a minute, 0-39 min at 0 %, 40-69 min at 80 %, 70 min at
    0 % (its file's last sample: one cadence, 60 s). Ingest 2: the same samples with power, which fills the
    ledger rows: its window is re-rolled from 0 min (an idle run starts there) to 70 min (a one-sample run
    starts there). By hand, one row per run: 40 × 60 = 2,400 s from 0 min and 60 s from 70 min; idle
    stretches (30 min or more): 2,400 s = 0.6667 GPU-h. A window that left out either end (``BETWEEN`` as a
    half-open range) kept that run's old row beside the new one."""
    ingest(con, jobs=[job("j", 0, 120)], allocations=[alloc("j", "n1:0", 0, 120)], gpus=[gpu("n1:0")])
    utils = [0.0] * 40 + [80.0] * 30 + [0.0]
    ingest(con, samples=series("n1:0", 0, utils))
    ingest(con, samples=series("n1:0", 0, utils, power_w=300.0))
    assert con.execute("SELECT count(*) FROM samples WHERE power_w IS NULL").fetchall() == [(0,)]
    for state in ("incremental", "rebuilt"):
        if state == "rebuilt":
            _rebuild(con)
        runs = con.execute("SELECT run_start, run_s, idle_s FROM idle_runs ORDER BY ALL").fetchall()
        assert runs == [(T0, 2_400.0, 2_400.0), (T0 + dt.timedelta(minutes=70), 60.0, 60.0)], state
        assert summary(con)["idle_gpu_hours"] == pytest.approx(2_400 / 3600), state


def test_an_ingest_ending_before_a_silence_to_midnight_re_rolls_only_its_own_day_and_hour(con) -> None:
    """Job j holds n1:0 and n1:1 23:00-01:00, a sample a minute at 50 %. Ingest 1: n1:0 00:00-00:59 (60
    samples). Ingest 2: n1:0 23:00-23:49 (50 samples; the silence to 00:00, 11 min, is a gap: 23:49 stands for
    60 s) and n1:1 00:00-00:29 (30 samples). Ingest 2's window of n1:0 ends in the first day's 23:00 hour while
    n1:1's runs into the second day, so only n1:0's own bound keeps its second-day 00:00 minute out of the day,
    hour and histogram it re-rolls: re-aggregating it too (``<=`` at ``+ 1 DAY`` / ``+ 1 HOUR``) wrote n1:0's
    second-day rows twice. By hand, once per (bucket, GPU, job): n1:0 3,000 s on the first day and in its 23:00
    hour, 3,600 s on the second and in its 00:00 hour; n1:1 1,800 s on the second day and in its 00:00 hour."""
    cards = ("n1:0", "n1:1")
    ingest(
        con,
        jobs=[job("j", 1380, 1500, gpu_count=2.0)],
        allocations=[alloc("j", g, 1380, 1500) for g in cards],
        gpus=[gpu(g) for g in cards],
    )
    ingest(con, samples=series("n1:0", 1440, [50.0] * 60))
    ingest(con, samples=series("n1:0", 1380, [50.0] * 50) + series("n1:1", 1440, [50.0] * 30))
    first, second = dt.date(2025, 3, 3), dt.date(2025, 3, 4)
    h23, h0 = T0 + dt.timedelta(hours=23), T0 + dt.timedelta(hours=24)
    for state in ("incremental", "rebuilt"):
        if state == "rebuilt":
            _rebuild(con)
        days = con.execute("SELECT gpu_id, day, covered_s FROM samples_day ORDER BY ALL").fetchall()
        assert days == [("n1:0", first, 3_000.0), ("n1:0", second, 3_600.0), ("n1:1", second, 1_800.0)], state
        hours = con.execute("SELECT gpu_id, hour, covered_s FROM samples_hour ORDER BY ALL").fetchall()
        assert hours == [("n1:0", h23, 3_000.0), ("n1:0", h0, 3_600.0), ("n1:1", h0, 1_800.0)], state
        hist = con.execute(
            "SELECT gpu_id, day, util_pct, seconds FROM samples_util_hist ORDER BY ALL"
        ).fetchall()
        assert hist == [
            ("n1:0", first, 50.0, 3_000.0),
            ("n1:0", second, 50.0, 3_600.0),
            ("n1:1", second, 50.0, 1_800.0),
        ], state
        assert summary(con)["mean_util_pct"] == pytest.approx(50.0), state
