"""An idle stretch never crosses a change of the samples' own job id, also on a telemetry-only card
(docs/metrics.md, "Idle stretches"), whose pseudo-job still owns every second and dollar of the card.

Until 2026-12-06 the raw-sample path made all job ids of a telemetry-only GPU one pseudo-job and found idle
stretches over the GPU's whole sequence, while the rollup keys idle runs by the samples' own job id; the
analytics then fell back to raw samples for the whole ledger whenever such a GPU existed. One rule now, the
rollup's: worked by hand below, and the plain-SQL oracle (tests/analytics/oracle.py) agrees.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest

from analytics.filters import Filters
from analytics.job_signals import idle_stretches, job_signals
from analytics.summary import summary
from analytics.utilization import job_totals
from gpuledger.ledger.db import memory_ledger
from gpuledger.ledger.settings import Settings
from tests.analytics.build import T0, gpu, ingest, series, set_test_prices
from tests.analytics.oracle import ORACLE
from tests.analytics.parity import raw_equals_fast

PSEUDO = "unattributed:n9:0"


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    """n9:0: no allocation claims it, and its samples name jobs the ledger has no record of (a source's job
    label), one a minute, 60 s each: job x1 busy 10 min (80 %) then idle 25 min (0 %), then job x2 idle
    35 min (0 %) then busy 10 min (80 %). The idle minutes 10-70 are one contiguous run of the GPU, cut at
    minute 35 where the job id changes."""
    c = memory_ledger()
    set_test_prices(c)
    ingest(c, gpus=[gpu("n9:0")])
    ingest(
        c,
        samples=series("n9:0", 0, [80.0] * 10 + [0.0] * 25, job_id="x1")
        + series("n9:0", 35, [0.0] * 35 + [80.0] * 10, job_id="x2"),
    )
    yield c
    c.close()


def test_the_idle_run_is_cut_where_the_job_id_changes(con: duckdb.DuckDBPyConnection) -> None:
    # x1's 25 idle minutes are under the 30-minute minimum; x2's 35 are a stretch: 35 min = 2,100 s,
    # minutes 35-70 (the GPU's whole idle run, minutes 10-70, would have been 60 min)
    for source in (ORACLE, None):
        kw = {"source": source} if source else {}
        stretches = idle_stretches(con, **kw).to_dicts()
        assert stretches == [
            {
                "job_id": PSEUDO,
                "gpu_id": "n9:0",
                "start_ts": T0 + dt.timedelta(minutes=35),
                "end_ts": T0 + dt.timedelta(minutes=70),
                "idle_s": 2100.0,
            }
        ], source
        (tot,) = job_totals(con, **kw).to_dicts()
        assert tot["job_id"] == PSEUDO
        assert tot["sampled_s"] == 80 * 60.0  # the pseudo-job owns all 80 minutes
        assert tot["idle_s"] == 2100.0
        # x1's short idle run is under-used instead: 25 min × (60 − 0) / 60 = 1,500 s (the busy 80 % is not)
        assert tot["underused_s"] == pytest.approx(1500.0)
        (sig,) = job_signals(con, **kw).to_dicts()
        assert (sig["idle_s"], sig["idle_stretches"]) == (2100.0, 1)
        assert summary(con, **kw)["idle_gpu_hours"] == pytest.approx(35 / 60)


def test_the_rollups_equal_the_oracle_on_every_figure(con: duckdb.DuckDBPyConnection) -> None:
    for f in (Filters(), Filters(since=T0.date(), until=T0.date())):
        raw_equals_fast(con, f, Settings())
