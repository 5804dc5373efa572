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
    # 3,600 s ≥ 30 minutes: every j1 second is in an idle stretch; j2's are not. Both jobs hold the one card
    # for the same hour, so each is billed half of it (the shared-GPU rule): j1 holds 1,800 GPU-s and its
    # 3,600 s of samples are clamped to that (f = 1,800 / 3,600), 0.5 idle GPU-hours
    assert idle_hours(con) == pytest.approx(3600 * (1800 / 3600) / 3600)


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
