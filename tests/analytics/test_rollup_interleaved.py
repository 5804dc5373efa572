"""The rollup links samples within a job even when two jobs' samples interleave on one GPU.

gpuledger/ledger/rollup.py sorts the samples once by (gpu_id, ts) and finds each sample's previous sample *of the
same job* from that order, with a fix-up where the GPU's previous sample belongs to another job. Here two
jobs share a GPU (a source that tags samples with their job, like dcgm's ``hpc_job``) and their samples
alternate every 10 s, so every previous same-job sample sits behind one of the other job: the fix-up is
what makes them contiguous. Expected figures are worked out by hand and by a plain-SQL window query.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest

from gpuledger.ledger.db import memory_ledger
from tests.analytics.build import T0, alloc, gpu, ingest, job, set_test_prices
from tests.analytics.test_fast_path import assert_fast_equals_raw, idle_hours

N = 120  # samples per job, 10 s apart and alternating: j1 at 0, 20, 40 … s; j2 at 10, 30, 50 … s
IV_S = 30.0  # interval_s each sample declares: the same-job predecessor 20 s back is within 1.5 × 30 s


def interleaved() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for i in range(N):
        rows.append(
            {
                "ts": T0 + dt.timedelta(seconds=20 * i),
                "gpu_id": "n1:0",
                "job_id": "j1",
                "util_pct": 1.0,  # idle the whole time
                "interval_s": IV_S,
            }
        )
        rows.append(
            {
                "ts": T0 + dt.timedelta(seconds=20 * i + 10),
                "gpu_id": "n1:0",
                "job_id": "j2",
                "util_pct": 90.0 if i % 2 == 0 else 5.0,  # swings between > 70 % and < 10 %
                "interval_s": IV_S,
            }
        )
    return rows


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    """The two jobs' records name no GPU: the labels alone say whose each sample is (no shared card)."""
    c = memory_ledger()
    set_test_prices(c)
    ingest(c, jobs=[job("j1", 0, 60), job("j2", 0, 60)], gpus=[gpu("n1:0")])
    ingest(c, samples=interleaved())
    yield c
    c.close()


@pytest.fixture
def shared_con() -> duckdb.DuckDBPyConnection:
    """The same samples, but both jobs' allocations name n1:0 for the hour: a shared card, whose samples
    count for each holder by its share (gpuledger/ledger/shares.py), the labels notwithstanding."""
    c = memory_ledger()
    set_test_prices(c)
    ingest(
        c,
        jobs=[job("j1", 0, 60), job("j2", 0, 60)],
        allocations=[alloc("j1", "n1:0", 0, 60), alloc("j2", "n1:0", 0, 60)],
        gpus=[gpu("n1:0")],
    )
    ingest(c, samples=interleaved())
    yield c
    c.close()


def test_idle_run_of_one_job_spans_the_other_jobs_samples(con: duckdb.DuckDBPyConnection) -> None:
    runs = con.execute(
        "SELECT job_id, run_s, first_ts, last_ts FROM idle_runs ORDER BY job_id, run_start"
    ).fetchall()
    # j1: one run of all 120 samples, 120 × 30 s = 3,600 s; j2's idle samples (5 %) are each alone: the
    # previous j2 sample (90 %) is busy, so 60 runs of one sample (30 s)
    j1 = [r for r in runs if r[0] == "j1"]
    assert [(r[1], r[2], r[3]) for r in j1] == [(3600.0, T0, T0 + dt.timedelta(seconds=20 * (N - 1)))]
    assert [r[1] for r in runs if r[0] == "j2"] == [30.0] * 60
    # 3,600 s ≥ 30 minutes: every j1 second is in an idle stretch; j2's are not. j1 holds its 1 GPU-h
    # alone (its record names no card), so its 3,600 s of samples are 1.0 idle GPU-hour
    assert idle_hours(con) == pytest.approx(3600 / 3600)


def test_pairs_and_swings_follow_the_job_not_the_gpu(con: duckdb.DuckDBPyConnection) -> None:
    got = dict(
        (r[0], (r[1], r[2]))
        for r in con.execute(
            "SELECT job_id, sum(pairs_n), sum(swings_n) FROM samples_minute GROUP BY job_id"
        ).fetchall()
    )
    # each job: 119 contiguous pairs (every sample but the first); j2 swings on every pair, j1 never
    assert got == {"j1": (119, 0), "j2": (119, 119)}
    # the same from a plain window over (gpu_id, job_id), independent of the rollup's one-sort fix-up
    plain = dict(
        (r[0], (r[1], r[2]))
        for r in con.execute(
            """
            SELECT job_id, count(*) FILTER (WHERE contiguous),
                   count(*) FILTER (WHERE contiguous AND ((util_pct < 10 AND prev > 70) OR (util_pct > 70 AND prev < 10)))
            FROM (SELECT job_id, util_pct, lag(util_pct) OVER w AS prev,
                         epoch(ts - lag(ts) OVER w) <= 1.5 * lag(interval_s) OVER w AS contiguous
                  FROM samples WINDOW w AS (PARTITION BY gpu_id, job_id ORDER BY ts))
            GROUP BY job_id
            """
        ).fetchall()
    )
    assert got == plain


def test_fast_path_equals_raw_samples(con: duckdb.DuckDBPyConnection) -> None:
    assert_fast_equals_raw(con)


def test_on_a_shared_card_the_card_s_own_sequence_decides(shared_con: duckdb.DuckDBPyConnection) -> None:
    """Where the jobs share the card, a sample is the card's reading, counted for both holders (½ each):
    the labels no longer cut the card's sequence in two. The card alternates 1 %, 90 %, 1 %, 5 %, ...: no
    idle stretch (every fourth sample is at 90 %), every sample after the first is a contiguous pair, and the
    swings are the card's (1 → 90 and 90 → 1)."""
    con = shared_con
    assert idle_hours(con) == 0.0
    card = con.execute(
        """SELECT count(*) FILTER (WHERE contiguous),
                  count(*) FILTER (WHERE contiguous AND ((util_pct < 10 AND prev > 70) OR (util_pct > 70 AND prev < 10)))
           FROM (SELECT util_pct, lag(util_pct) OVER w AS prev,
                        epoch(ts - lag(ts) OVER w) <= 1.5 * lag(interval_s) OVER w AS contiguous
                 FROM samples WINDOW w AS (PARTITION BY gpu_id ORDER BY ts))"""
    ).fetchall()[0]
    assert card == (2 * N - 1, 120)  # 239 pairs; 60 swings 1 → 90 and 60 swings 90 → 1
    got = dict(
        (r[0], (r[1], r[2], r[3]))
        for r in con.execute(
            "SELECT job_id, sum(pairs_n), sum(swings_n), sum(covered_s) FROM samples_minute GROUP BY job_id"
        ).fetchall()
    )
    # counts are the card's, for each holder; seconds are weighted: 240 samples × 30 s × ½
    assert got == {"j1": (*card, 240 * IV_S / 2), "j2": (*card, 240 * IV_S / 2)}
    assert_fast_equals_raw(con)
