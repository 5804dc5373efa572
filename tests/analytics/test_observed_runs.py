"""observed_runs (gpuledger/ledger/observed.py): the capacity's reporting spans read from a few rows per GPU-day
equal the spans read from the minute rollup (the raw path), across gaps, midnights, MIG instances, later
ingests that fill a silence, views cut at midnight and every gap setting."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import duckdb
import pytest

import analytics.capacity as capacity
import analytics.waste as waste
from analytics.filters import Filters
from gpuledger.ledger.db import memory_ledger
from gpuledger.ledger.observed import observed_runs_ready, refresh_observed
from gpuledger.ledger.settings import Settings
from tests.analytics.build import T0, alloc, at, gpu, ingest, job, series, set_test_prices

DAY = 24 * 60


def _runs(con) -> list[tuple]:
    return con.execute(
        "SELECT gpu_id, day, first_minute, first_ts, end_ts FROM observed_runs ORDER BY ALL"
    ).fetchall()


def _fleet(con) -> None:
    """Three GPUs on c1 over two days: g0 reports every minute 22:00-26:00 (across midnight) with a
    90-s and a 3-min silence; g1 every 5 min with a 40-min silence; a MIG card m0 whose two instances
    report alternately (odd / even minutes); one job holds g0 for 2 h."""
    set_test_prices(con)
    g0 = (
        series("n1:0", 22 * 60, [50.0] * 60)  # 22:00-22:59
        + series("n1:0", 23 * 60 + 0.5, [0.0] * 1, step_s=60)  # 23:00:30 (a 90-s gap after 22:59)
        + series("n1:0", 23 * 60 + 4, [10.0] * 180)  # 23:04 .. 02:03 next day (a 3-min silence before)
    )
    g1 = series("n1:1", 20 * 60, [5.0] * 12, step_s=300) + series(
        "n1:1", 21 * 60 + 40, [5.0] * 40, step_s=300
    )
    mig = series("n2:0/1", 22 * 60, [30.0] * 60, step_s=120) + series(
        "n2:0/2", 22 * 60 + 1, [30.0] * 60, step_s=120
    )
    ingest(
        con,
        jobs=[job("j", 22 * 60, 24 * 60)],
        allocations=[alloc("j", "n1:0", 22 * 60, 24 * 60)],
        samples=g0 + g1 + mig,
        gpus=[
            gpu("n1:0"),
            gpu("n1:1"),
            gpu("n2:0"),
            {**gpu("n2:0/1"), "parent_gpu_id": "n2:0"},
            {**gpu("n2:0/2"), "parent_gpu_id": "n2:0"},
        ],
    )


@pytest.fixture(scope="module")
def fleet() -> Iterator[duckdb.DuckDBPyConnection]:
    """:func:`_fleet` built once for the 40 read-only comparisons (each built it anew: ~0.5 s apiece)."""
    con = memory_ledger()
    _fleet(con)
    yield con
    con.close()


def _both(con, filters: Filters, settings: Settings, monkeypatch) -> tuple:
    used = []
    real = capacity.observed_from_runs

    def spy(*args):
        used.append(real(*args))
        return used[-1]

    monkeypatch.setattr(capacity, "observed_from_runs", spy)
    fast = waste.unallocated(con, filters=filters, settings=settings)
    monkeypatch.setattr(capacity, "observed_from_runs", lambda *a: False)
    raw = waste.unallocated(con, filters=filters, settings=settings)
    monkeypatch.setattr(capacity, "observed_from_runs", real)
    return fast, raw, used


def test_runs_are_consecutive_minutes_cut_at_midnight(ledger):
    _fleet(ledger)
    assert observed_runs_ready(ledger)
    g0 = [r for r in _runs(ledger) if r[0] == "n1:0"]
    # 22:00-22:59 and 23:00 (23:00:30) are consecutive minutes: one run; 23:04-23:59; 00:00-01:59 next day
    assert [(r[2], r[3]) for r in g0] == [
        (at(22 * 60), at(22 * 60)),
        (at(23 * 60 + 4), at(23 * 60 + 4)),
        (at(DAY), at(DAY)),
    ]
    # ends: 23:00:30 + 60 s; 23:59 + 60 s (the day's last sample); the 180th sample from 23:04 is at
    # 23:04 + 179 min = 02:03 next day, + 60 s
    assert [r[4] for r in g0] == [at(23 * 60 + 1.5), at(24 * 60), at(26 * 60 + 4)]
    # g1 every 5 min: each sample its own run (12 + 40)
    assert sum(r[0] == "n1:1" for r in _runs(ledger)) == 52


@pytest.mark.parametrize("gap_minutes", [1.0, 1.5, 2.0, 4.0, 5.0, 30.0, 45.0, 90.0])
@pytest.mark.parametrize(
    "filters",
    [
        Filters(),
        Filters(since=T0.date() + dt.timedelta(days=1)),
        Filters(until=T0.date()),
        Filters(since=T0.date(), until=T0.date()),
        Filters(clusters=("c1",)),
    ],
)
def test_spans_from_runs_equal_spans_from_minutes(fleet, monkeypatch, filters, gap_minutes):
    settings = Settings(capacity_gap_minutes=gap_minutes)
    before = _runs(fleet)
    fast, raw, used = _both(fleet, filters, settings, monkeypatch)
    assert _runs(fleet) == before  # read-only: the module's ledger is the same for every case
    assert used == [gap_minutes >= 2.0]  # below two minutes the minute rows are read
    assert raw.height > 0
    assert fast.equals(raw)


def test_a_later_ingest_that_fills_a_silence_keeps_the_runs_equal_to_a_whole_build(ledger, monkeypatch):
    _fleet(ledger)
    # the 3-min silence of g0 (23:01-23:03) and the 40-min one of g1 are filled by a second ingest
    ingest(
        ledger,
        samples=series("n1:0", 23 * 60 + 1, [0.0] * 3) + series("n1:1", 21 * 60, [5.0] * 8, step_s=300),
    )
    incremental = _runs(ledger)
    refresh_observed(ledger, None)  # the whole build
    assert _runs(ledger) == incremental
    g0 = [r for r in incremental if r[0] == "n1:0"]
    assert [r[2] for r in g0] == [at(22 * 60), at(DAY)]  # 22:00-23:59 is one run now
    for gap in (2.0, 30.0):
        fast, raw, used = _both(ledger, Filters(), Settings(capacity_gap_minutes=gap), monkeypatch)
        assert used == [True]
        assert fast.equals(raw)


def test_a_view_not_cut_at_midnight_reads_the_minute_rows(ledger):
    _fleet(ledger)
    start, end = at(20 * 60), at(26 * 60)
    assert capacity.observed_from_runs(ledger, start, end, start, end, 1800.0)
    assert capacity.observed_from_runs(ledger, T0, at(DAY), start, end, 1800.0)
    # a window boundary inside a day that is neither the data's start nor its end would cut a run
    assert not capacity.observed_from_runs(ledger, at(23 * 60), end, start, end, 1800.0)
    assert not capacity.observed_from_runs(ledger, start, at(25 * 60), start, end, 1800.0)


def test_a_ledger_whose_runs_were_never_built_whole_reads_the_minute_rows(ledger):
    _fleet(ledger)
    ledger.execute("DELETE FROM schema_meta WHERE key = 'observed_runs'")
    assert not observed_runs_ready(ledger)
    # the next ingest builds them whole
    ingest(ledger, samples=series("n1:0", 3 * DAY, [1.0] * 5))
    assert observed_runs_ready(ledger)
    incremental = _runs(ledger)
    refresh_observed(ledger, None)
    assert _runs(ledger) == incremental


def test_two_jobs_in_one_minute_are_one_run() -> None:
    """Two jobs take turns on n1:0 every 20 s for an hour, so each minute has two minute rows (one per
    job): the GPU still reported every minute, one run. By hand: first minute T0, first sample T0, end =
    the last sample (59:40) + its 20 s = T0 + 60 min."""
    con = memory_ledger()
    set_test_prices(con)
    ingest(
        con,
        jobs=[job("a", 0, 60), job("b", 0, 60)],
        allocations=[alloc("a", "n1:0", 0, 60), alloc("b", "n1:0", 0, 60)],
        gpus=[gpu("n1:0")],
    )
    samples = [
        {"ts": T0 + dt.timedelta(seconds=20 * i), "gpu_id": "n1:0", "job_id": "ab"[i % 2], "util_pct": 50.0}
        for i in range(180)
    ]
    ingest(con, samples=samples)
    assert con.execute("SELECT count(*), count(DISTINCT minute) FROM samples_minute").fetchall() == [
        (120, 60)
    ]
    assert _runs(con) == [("n1:0", T0.date(), T0, T0, T0 + dt.timedelta(minutes=60))]
