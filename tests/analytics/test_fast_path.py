"""The fast path (rollups maintained at ingest, gpuledger/ledger/rollup.py) gives exactly the raw-sample figures.

Each ledger is built through the real write path; every figure is computed twice, by the oracle
(``source=ORACLE``, window functions over samples: tests/analytics/oracle.py) and from the rollups (the
production path), and must agree to 1e-6. The idle seconds are also worked out by hand, so a rollup that
agreed with a broken oracle would still fail.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest

from analytics.filters import Filters
from analytics.job_signals import job_signals
from analytics.jobs import jobs_table
from analytics.recommend import recommendations
from analytics.shared import sharing
from analytics.summary import summary
from analytics.telemetry_source import ROLLUPS, TelemetrySource, require_rollup
from analytics.utilization import utilization_by
from analytics.waste import waste_totals
from collectors.base import delete_ingests
from gpuledger.ledger import rollup, rollup_sequence
from gpuledger.ledger.db import memory_ledger, writer
from gpuledger.ledger.errors import RollupMismatch
from gpuledger.ledger.rollup import ensure_rollup, stored_thresholds, thresholds
from gpuledger.ledger.settings import Settings
from tests.analytics.build import T0, alloc, gpu, ingest, job, series, set_test_prices
from tests.analytics.oracle import ORACLE
from tests.analytics.parity import close, raw_equals_fast, same

DAY1 = Filters(since=T0.date() + dt.timedelta(days=1), until=T0.date() + dt.timedelta(days=1))
DEFAULT = Settings()
VIEWS = [Filters(), Filters(since=T0.date(), until=T0.date()), DAY1, Filters(teams=("nlp",))]


def assert_fast_equals_raw(con: duckdb.DuckDBPyConnection, settings: Settings = DEFAULT) -> None:
    require_rollup(con, settings)  # built for these thresholds, else RollupMismatch
    # one sharing block, as a page load is: the per-job costs both paths read are computed once per view
    with sharing(con):
        for f in VIEWS:
            raw_equals_fast(con, f, settings)


def idle_hours(con: duckdb.DuckDBPyConnection, settings: Settings = DEFAULT) -> float:
    return summary(con, settings=settings)["idle_gpu_hours"]


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    c = memory_ledger()
    set_test_prices(c)
    yield c
    c.close()


# One GPU, one 3-hour job, a sample every 45 s (so runs start and end inside minutes). Part A: 40 busy
# samples, then 28 idle ones; part B continues with 28 idle, then busy. Each half is 28 × 45 = 1,260 s, under
# the 30-minute minimum; together 2,520 s make one idle stretch only if the run is seen across ingests.
A = series("n1:0", 0, [80.0] * 40 + [1.0] * 28, step_s=45.0, power_w=300.0, mem_used_mib=20000.0)
B = series("n1:0", 68 * 0.75, [2.0] * 28 + [90.0, 5.0] * 30, step_s=45.0, power_w=310.0, mem_used_mib=21000.0)


def jobs_and_gpu(con: duckdb.DuckDBPyConnection) -> None:
    ingest(con, jobs=[job("j1", 0, 180)], allocations=[alloc("j1", "n1:0", 0, 180)], gpus=[gpu("n1:0")])


@pytest.mark.parametrize("order", ["A then B", "B then A"])
def test_idle_run_across_ingests_and_minutes(con: duckdb.DuckDBPyConnection, order: str) -> None:
    jobs_and_gpu(con)
    for part in (A, B) if order == "A then B" else (B, A):
        ingest(con, samples=part)
    assert idle_hours(con) == pytest.approx(56 * 45 / 3600)  # 2,520 s
    assert_fast_equals_raw(con)


def test_a_gap_splits_the_run(con: duckdb.DuckDBPyConnection) -> None:
    jobs_and_gpu(con)
    ingest(con, samples=A)
    # the same idle half again, but 10 minutes late: a gap, so two runs of 1,260 s: no stretch
    ingest(con, samples=series("n1:0", 68 * 0.75 + 10, [2.0] * 28 + [90.0] * 10, step_s=45.0))
    assert idle_hours(con) == 0.0
    assert_fast_equals_raw(con)


def test_replaced_ingest_rerolls_the_runs_it_touched(con: duckdb.DuckDBPyConnection) -> None:
    jobs_and_gpu(con)
    ingest(con, samples=A)
    b = ingest(con, samples=B)
    assert idle_hours(con) == pytest.approx(2520 / 3600)
    con.execute("BEGIN TRANSACTION")
    delete_ingests(con, [b], idle_util_pct=5.0)
    con.execute("COMMIT")
    assert idle_hours(con) == 0.0  # A's 1,260 s alone are too short
    assert_fast_equals_raw(con)
    busy = [{**s, "util_pct": 50.0} for s in B]
    ingest(con, samples=busy)
    assert idle_hours(con) == 0.0
    assert_fast_equals_raw(con)


def test_a_threshold_change_rebuilds_the_rollup(con: duckdb.DuckDBPyConnection) -> None:
    jobs_and_gpu(con)
    ingest(con, samples=A)
    ingest(con, samples=B)
    shorter = Settings(idle_min_minutes=10.0, target_util_pct=80.0)
    with pytest.raises(RollupMismatch, match=r"\(5.0, 30.0, 60.0\).*\(5.0, 10.0, 80.0\)"):
        summary(con, settings=shorter)  # built with 30 min / 60 %: the figures would be wrong
    th = thresholds(5.0, 10.0, 80.0)
    assert ensure_rollup(con, th)
    assert stored_thresholds(con) == th
    assert idle_hours(con, shorter) == pytest.approx(2520 / 3600)
    assert_fast_equals_raw(con, shorter)
    # an ingest built with other thresholds than the stored ones rebuilds rather than mixing
    ingest(con, samples=series("n1:0", 200, [0.0] * 5))
    assert stored_thresholds(con) == thresholds(5.0, 30.0, 60.0)
    with pytest.raises(RollupMismatch):
        idle_hours(con, shorter)


ROLLUP_TABLES = (*rollup.ROLLUP_TABLES, "observed_runs")


def rollup_rows(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[object, ...]]]:
    return {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in ROLLUP_TABLES}


@pytest.mark.parametrize("order", ["in time order", "latest first"])
def test_long_intervals_reach_across_ingests_days_apart(con: duckdb.DuckDBPyConnection, order: str) -> None:
    """An incremental refresh reads only samples near its window (rollup._minute_windows): a sample that
    stands for up to a day, a day before the new ones, still links to them. The rollup after the ingests
    must equal one rebuilt from every sample, and the fast path the raw one."""
    ingest(
        con, jobs=[job("j1", 0, 6 * 1440)], allocations=[alloc("j1", "n1:0", 0, 6 * 1440)], gpus=[gpu("n1:0")]
    )
    hourly = series("n1:0", 0, [1.0] * 30, step_s=3600.0, interval_s=3600.0, power_w=100.0)
    # busy (no idle run widens the window back to it), and 22 h before ``later``: its 80,000 s reach 33.3 h
    # on, so ``later``'s first sample (3 %) is contiguous with it, a swing from 90 %
    long = series("n1:0", 30 * 60, [90.0], interval_s=80_000.0, power_w=90.0)
    later = series("n1:0", 30 * 60 + 22 * 60, [3.0] * 10 + [60.0] * 5, step_s=600.0, interval_s=600.0)
    far = series("n1:0", 5 * 1440, [0.0] * 4, step_s=60.0)
    parts = [hourly, long, later, far]
    for part in parts if order == "in time order" else parts[::-1]:
        ingest(con, samples=part)
    incremental = rollup_rows(con)
    assert incremental["idle_runs"], "the hand-made series has idle runs"
    con.execute("BEGIN TRANSACTION")
    rollup.rebuild_rollup(con, idle_util_pct=5.0)
    con.execute("COMMIT")
    assert rollup_rows(con) == incremental
    assert_fast_equals_raw(con)


def test_midnight_running_jobs_and_telemetry_only_gpus(con: duckdb.DuckDBPyConnection) -> None:
    # j2 idles 40 min across midnight (a view of day 1 sees its second half only); j3 runs at the horizon;
    # n9:0 has telemetry but no job (its pseudo-job idles 45 min); n2:0 reports memory size and DCGM fields.
    ingest(
        con,
        jobs=[job("j2", 23 * 60, 25 * 60, team="cv"), job("j3", 24 * 60, None, kind="interactive")],
        allocations=[alloc("j2", "n2:0", 23 * 60, 25 * 60), alloc("j3", "n3:0", 24 * 60, None)],
        gpus=[gpu("n2:0"), gpu("n3:0"), gpu("n9:0")],
    )
    ingest(
        con,
        samples=series(
            "n2:0",
            23 * 60,
            [70.0] * 40 + [0.0] * 40 + [95.0, 3.0] * 20,  # idle 23:40-00:20
            mem_total_mib=81559.0,
            mem_used_mib=1000.0,
            sm_active_pct=30.0,
            tensor_active_pct=2.0,
            temp_c=86.0,
            throttle_reasons=0x20,
            energy_j=1.0e6,
        ),
    )
    ingest(con, samples=series("n3:0", 24 * 60, [0.0] * 90 + [40.0] * 10, power_w=100.0))
    ingest(con, samples=series("n9:0", 24 * 60 + 5, [1.0] * 45 + [60.0] * 5))
    # Every sample stands for 60 s. j3 is held from 00:00 to the horizon, the end of its last sample (01:39 +
    # 60 s = 01:40): 100 min, all covered by its 100 samples, so its 90 idle minutes count whole (until
    # 2026-12-06 the horizon was the last sample's start: 99 held minutes, the idle clamped to 90 × 99/100)
    j3_idle_min = 90
    assert idle_hours(con) == pytest.approx((40 + j3_idle_min + 45) / 60)
    # day 1 alone: j2's run counts (it lasts 40 min in all) but only its 20 minutes after midnight
    assert summary(con, filters=DAY1)["idle_gpu_hours"] == pytest.approx((20 + j3_idle_min + 45) / 60)
    assert_fast_equals_raw(con)


def test_two_day_demo(demo_db: str) -> None:
    with writer(demo_db) as con:
        views = [Filters(), Filters(since=dt.date(2026, 11, 22), until=dt.date(2026, 11, 22))]
        require_rollup(con, Settings())
        with sharing(con):
            _two_day_demo_views(con, views)


def _two_day_demo_views(con: duckdb.DuckDBPyConnection, views: list[Filters]) -> None:
    for f in views:
        kw = {"filters": f}
        assert close(summary(con, source=ORACLE, **kw), summary(con, **kw))
        same(jobs_table(con, source=ORACLE, **kw), jobs_table(con, **kw))
        for by in ("team", "day"):
            same(
                utilization_by(con, by=by, source=ORACLE, **kw),
                utilization_by(con, by=by, **kw),
            )
        same(recommendations(con, source=ORACLE, **kw), recommendations(con, **kw))
    raw_parts = waste_totals(con, source=ORACLE)
    fast_parts = waste_totals(con)
    assert close(raw_parts, fast_parts)
    assert fast_parts["idle_allocated_usd"] > 0  # the planted idle notebooks are there


def spy_on_poll_sequencing(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """What each call of rollup_sequence._sequence_polls answers ("view", "table", or None: sorted), in order."""
    taken: list[str | None] = []
    real = rollup_sequence._sequence_polls

    def spy(*args: object) -> str | None:
        taken.append(real(*args))  # type: ignore[arg-type]
        return taken[-1]

    monkeypatch.setattr(rollup_sequence, "_sequence_polls", spy)
    return taken


def three_jobs_on_two_gpus(con: duckdb.DuckDBPyConnection, energy_step_j: float | None = None) -> list[dict]:
    """Ingest j1 (n1:0, 0-70 min), j2 (n1:0, 70-160), j3 (n1:1, 0-150) and return the two GPUs' samples
    (every 60 s, 150 each) in poll order: n1:0, n1:1, n1:0, ... n1:0 is busy 30 min, idle 40, then swings
    90/3 %; n1:1 busy 100 min, then idle 50. n1:0's energy counter stays at 1 MJ, or climbs by
    ``energy_step_j`` a sample."""
    ingest(
        con,
        jobs=[job("j1", 0, 70), job("j2", 70, 160), job("j3", 0, 150, team="cv")],
        allocations=[alloc("j1", "n1:0", 0, 70), alloc("j2", "n1:0", 70, 160), alloc("j3", "n1:1", 0, 150)],
        gpus=[gpu("n1:0"), gpu("n1:1")],
    )
    util0 = [80.0] * 30 + [1.0] * 40 + [90.0, 3.0] * 40
    util1 = [50.0] * 100 + [0.0] * 50
    a = series("n1:0", 0, util0, power_w=300.0, energy_j=1.0e6, mem_used_mib=2000.0, mem_total_mib=81559.0)
    if energy_step_j is not None:
        a = [{**row, "energy_j": 1.0e6 + energy_step_j * i} for i, row in enumerate(a)]
    b = series("n1:1", 0, util1, power_w=200.0, temp_c=86.0, throttle_reasons=0x20)
    return [row for pair in zip(a, b, strict=True) for row in pair]


def test_polls_of_two_gpus_roll_up_without_a_sort_and_equal_the_raw_path(
    con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two GPUs polled together every 60 s, in one ingest, rows in poll order: the rollup reads their
    neighbours N = 2 rows away (rollup_sequence._sequence_polls) instead of sorting, while jobs change on one GPU.
    n1:0: j1 (0-70 min) busy 30 min then idle 40 min (a stretch), j2 (70-160, telemetry until 150) swinging
    90/3 %; n1:1: j3 (0-150) busy 100 min, then idle 50 min (a stretch). Idle = (40 + 50) min = 1.5 h. (The
    teams' spends differ, 160 vs 150 GPU-minutes, so tables ordered by spend have one order.)"""
    polls = three_jobs_on_two_gpus(con)
    taken = spy_on_poll_sequencing(monkeypatch)
    ingest(con, samples=polls)
    assert taken and all(taken), "poll-ordered samples of one ingest should roll up without a sort"
    assert idle_hours(con) == pytest.approx((40 + 50) / 60)
    assert_fast_equals_raw(con)


def test_polls_with_one_job_per_gpu_roll_up_from_a_streaming_view_and_equal_the_raw_path(
    con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same polls, but each GPU held by one job for all its telemetry: no sample's previous sample is
    another job's, so rollup_sequence._sequence_polls answers "view" (idle runs and minutes read the streaming
    windows; no sample is copied into a temporary table). n1:0: j1 busy 30 min, idle 40 min (a stretch),
    then 80 min swinging 90/3 % (1-min idle runs, no stretch); n1:1: j3 busy 100 min, idle 50 min (a
    stretch). Idle = (40 + 50) min = 1.5 h."""
    ingest(
        con,
        jobs=[job("j1", 0, 160), job("j3", 0, 150, team="cv")],
        allocations=[alloc("j1", "n1:0", 0, 160), alloc("j3", "n1:1", 0, 150)],
        gpus=[gpu("n1:0"), gpu("n1:1")],
    )
    util0 = [80.0] * 30 + [1.0] * 40 + [90.0, 3.0] * 40
    util1 = [50.0] * 100 + [0.0] * 50
    a = series("n1:0", 0, util0, power_w=300.0, energy_j=1.0e6, mem_used_mib=2000.0, mem_total_mib=81559.0)
    b = series("n1:1", 0, util1, power_w=200.0, temp_c=86.0, throttle_reasons=0x20)
    polls = [row for pair in zip(a, b, strict=True) for row in pair]
    taken = spy_on_poll_sequencing(monkeypatch)
    ingest(con, samples=polls)
    assert taken == ["view"]
    assert idle_hours(con) == pytest.approx((40 + 50) / 60)
    assert_fast_equals_raw(con)


def test_landed_rows_that_are_not_whole_polls_are_sorted_not_streamed(
    con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rollup_sequence._sequence_polls checks the poll layout it relies on rather than trusting the landing: here
    the landing lands whole polls and then one of n1:0's samples (minute 20) goes, so from there on the row
    N = 2 further is the other GPU's. Its timestamps still rise every N rows, so only the GPU check sees it;
    the rollup must then sort (answer None) and equal one rebuilt from the samples."""
    from collectors import landing

    real = landing._land_polls

    def land_then_lose_a_sample(c: duckdb.DuckDBPyConnection, *args: object) -> dict[str, int]:
        counts = real(c, *args)  # type: ignore[arg-type]
        c.execute("DELETE FROM samples WHERE gpu_id = 'n1:0' AND ts = ?", [T0 + dt.timedelta(minutes=20)])
        return counts

    monkeypatch.setattr(landing, "_land_polls", land_then_lose_a_sample)
    polls = three_jobs_on_two_gpus(con)
    taken = spy_on_poll_sequencing(monkeypatch)
    ingest(con, samples=polls)
    assert taken == [None]
    streamed = rollup_rows(con)
    con.execute("BEGIN TRANSACTION")
    rollup.rebuild_rollup(con, idle_util_pct=5.0)
    con.execute("COMMIT")
    assert rollup_rows(con) == streamed
    assert_fast_equals_raw(con)


@pytest.mark.parametrize("split_min", [70, 85, 100])
def test_polls_onto_the_polls_before_roll_up_without_a_sort_and_equal_a_rebuild(
    con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch, split_min: int
) -> None:
    """The same two GPUs' polls in two ingests, the second starting where the first ended (one more day
    onto a ledger). The second's window reaches back into the first's last polls: those few are
    sequenced by the sort (rollup_sequence._sequence_prior) and the rest streams, so _sequence_polls still answers.
    At 70 min n1:0 changes job right at the boundary (j1 → j2); at 85 min its last sample before the
    boundary is busy (no idle run widens the window back to it) and its energy counter, whose steps are
    not power × 60 s, now reads the first new sample; at 100 min n1:1's idle stretch (100-150 min) starts
    at it. Both must roll up as a rebuild from every sample does, and the fast path equal the raw one."""
    polls = three_jobs_on_two_gpus(con, energy_step_j=20_000.0)  # not power × 60 s: the counter must win
    ingest(con, samples=polls[: 2 * split_min])
    taken = spy_on_poll_sequencing(monkeypatch)
    ingest(con, samples=polls[2 * split_min :])
    assert taken and all(taken), "the second ingest's polls should roll up without a sort"
    assert idle_hours(con) == pytest.approx((40 + 50) / 60)
    incremental = rollup_rows(con)
    con.execute("BEGIN TRANSACTION")
    rollup.rebuild_rollup(con, idle_util_pct=5.0)
    con.execute("COMMIT")
    assert rollup_rows(con) == incremental
    assert_fast_equals_raw(con)


@pytest.mark.parametrize("source", [ORACLE, ROLLUPS], ids=["oracle", "rollups"])
def test_a_running_job_s_sample_at_the_horizon_counts_in_its_signals_as_in_its_utilization(
    source: TelemetrySource,
) -> None:
    """A running job's span ends at the data horizon, its own last sample. That sample counts in the job's
    signals as it does in its utilization and waste (one set of samples per job), from the rollup as from
    the samples: 59 samples at 10 % and the last at 100 % average 11.5 %, not 10 %."""
    from analytics.filters import Filters
    from analytics.utilization import job_utilization

    con = memory_ledger()
    ingest(
        con,
        jobs=[job("run", 0, None)],
        allocations=[alloc("run", "h:0", 0, None)],
        samples=series("h:0", 0, [10.0] * 59 + [100.0]),
    )
    sig = job_signals(con, filters=Filters(), source=source).to_dicts()
    util = job_utilization(con, filters=Filters(), source=source).to_dicts()
    con.close()
    assert [r["job_id"] for r in sig] == ["run"]
    assert sig[0]["n_samples"] == 60
    assert sig[0]["mean_util_pct"] == pytest.approx((59 * 10 + 100) / 60)
    assert util[0]["mean_util_pct"] == pytest.approx(sig[0]["mean_util_pct"])
