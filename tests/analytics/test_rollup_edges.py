"""Two edges of the rollup (gpuledger/ledger/rollup.py) that an incremental ingest and a rebuild must agree on
with the raw samples: the idle-run link (a sample joins the run before it only within 1.5 × the previous
sample's interval) and the minute window's upper edge (a refresh writes each GPU-minute once).

Both were one-line mutations the suite let through (issue 35: ``1.5 ×`` → ``2.5 ×`` in the idle-run link,
``<`` → ``<=`` at the minute window's end); each test below fails under its mutation. Expected figures are
worked by hand and by plain SQL over ``samples``.
"""

from __future__ import annotations

import duckdb
import pytest

from analytics.summary import summary
from gpuledger.ledger.db import memory_ledger
from gpuledger.ledger.rollup import rebuild_rollup
from tests.analytics.build import alloc, gpu, ingest, job, series, set_test_prices
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
    beyond 1.5 × 60 s, a gap. Each run is 25 min, under the 30-minute minimum: no idle stretch, 0 idle hours,
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
        assert summary(con, source=ORACLE)["idle_gpu_hours"] == pytest.approx(0.0)
        assert summary(con)["idle_gpu_hours"] == pytest.approx(0.0), state
        assert con.execute("SELECT count(*) FROM idle_runs WHERE run_s >= 1800").fetchall() == [(0,)], state


def test_idle_runs_within_the_tolerance_do_link_across_ingests(con) -> None:
    """The same with the second file starting 90 s after the first's last sample (1.5 × 60 s: linked): one
    run of 50 samples, 0-24 min and 25.5-49.5 min, each standing for 60 s: 50 idle minutes."""
    ingest(con, jobs=[job("j", 0, 60)], allocations=[alloc("j", "n1:0", 0, 60)], gpus=[gpu("n1:0")])
    ingest(con, samples=series("n1:0", 0, [0.0] * 25))
    ingest(con, samples=series("n1:0", 25.5, [0.0] * 25))
    for state in ("incremental", "rebuilt"):
        if state == "rebuilt":
            _rebuild(con)
        assert summary(con, source=ORACLE)["idle_gpu_hours"] == pytest.approx(50 / 60)
        assert summary(con)["idle_gpu_hours"] == pytest.approx(50 / 60), state


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
