"""The minute rollup's two forms give the same rows (gpuledger/ledger/rollup_columns.py ``_minute_sql``).

Where most GPU-minutes hold one sample (a cadence of a minute or more), a sample alone in its minute is
written as its own row with no GROUP BY, and the rest are grouped; otherwise everything is grouped. The
choice is a guess about speed (``_mostly_alone``), so both must give every column of every row alike, on
cadences on both sides of a minute, irregular gaps, NULL readings, idle runs and two jobs taking turns on
one GPU (where a sample of the other job in the same minute must keep a sample out of the one-row form).
That the rollup equals the raw-sample path with the one-row form in use is tests/analytics/test_fast_path.py's
check (its 45-s series hold fewer than 1.5 samples per minute).
"""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest

from gpuledger.ledger import rollup
from gpuledger.ledger.db import memory_ledger
from tests.analytics.build import T0, alloc, gpu, ingest, job, series, set_test_prices

TH = dict(idle_util_pct=5.0, idle_min_minutes=30.0, target_util_pct=60.0)


def turns() -> list[dict[str, object]]:
    """Two jobs on n4:0, 40 s apart in turn: j3 at 0, 80, 160 … s and j4 at 40, 120, 200 … s."""
    return [
        {
            "ts": T0 + dt.timedelta(seconds=40 * i),
            "gpu_id": "n4:0",
            "job_id": "j3" if i % 2 == 0 else "j4",
            "util_pct": [90.0, 3.0, 50.0][i % 3],
            "power_w": 250.0 + i,
            "interval_s": 80.0,
        }
        for i in range(180)
    ]


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    c = memory_ledger()
    set_test_prices(c)
    ingest(
        c,
        jobs=[job("j1", 0, 120), job("j2", 0, 120), job("j3", 0, 120), job("j4", 0, 120)],
        allocations=[
            alloc("j1", "n1:0", 0, 120),
            alloc("j2", "n2:0", 0, 120),
            alloc("j3", "n4:0", 0, 120),
            alloc("j4", "n4:0", 0, 120),
        ],
        gpus=[gpu("n1:0"), gpu("n2:0"), gpu("n3:0"), gpu("n4:0")],
    )
    gaps = [50.0, 70.0, 65.0, 130.0, 55.0]  # n3:0: irregular, one minute with no sample at all
    irregular, t = [], 0.0
    for i in range(60):
        irregular.append({"ts": T0 + dt.timedelta(seconds=t), "gpu_id": "n3:0", "util_pct": 1.0 + i % 40})
        t += gaps[i % len(gaps)]
    utils = [80.0] * 20 + [1.0] * 40 + [None] * 5 + [95.0, 2.0] * 20  # an idle run of 40 min, NULLs
    ingest(
        c,
        samples=series("n1:0", 0, utils, step_s=60.0, power_w=300.0, mem_used_mib=20_000.0)
        + series("n2:0", 0, [60.0, 2.0, 2.0] * 90, step_s=20.0, power_w=200.0)
        + irregular
        + turns(),
    )
    yield c


def minute_rows(con: duckdb.DuckDBPyConnection) -> list[tuple[object, ...]]:
    return con.execute("SELECT * FROM samples_minute ORDER BY minute, gpu_id, job_id").fetchall()


def test_one_row_minutes_and_grouped_minutes_are_the_same_rows(con, monkeypatch) -> None:
    forms = {}
    for alone in (True, False):
        monkeypatch.setattr(rollup, "_mostly_alone", lambda *_a, alone=alone: alone)
        rollup.rebuild_rollup(con, **TH)
        forms[alone] = minute_rows(con)
    assert forms[True] == forms[False]
    ns = {row[3] for row in forms[True]}  # n: the samples in each minute row
    assert 1 in ns and max(ns) >= 3, "both forms must have had rows to write"


def test_the_guess_follows_samples_per_gpu_minute(con) -> None:
    """Counted by hand: n1:0 sends 105 samples in 105 minutes, n2:0 270 in 90."""
    rollup.rebuild_rollup(con, **TH)
    seen = {}
    for gpus, expect in ((["n1:0"], True), (["n2:0"], False)):
        ids = ", ".join(f"'{g}'" for g in gpus)
        con.execute(
            f"""CREATE OR REPLACE TEMP TABLE rollup_m AS
                SELECT gpu_id, date_trunc('minute', min(ts)) AS m_lo,
                       date_trunc('minute', max(ts)) + INTERVAL 1 MINUTE AS m_hi_end
                FROM samples WHERE gpu_id IN ({ids}) GROUP BY gpu_id"""
        )
        seen[gpus[0]] = rollup._mostly_alone(con, [T0, T0 + dt.timedelta(days=1)])
        assert seen[gpus[0]] is expect
