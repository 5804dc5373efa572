"""Users ranked by the waste teams control (analytics/waste_users.py, issue 44 item 5) on a hand-built ledger
(H100 at the test sheet's $4.00/GPU-h; cluster c1 declares 3 H100s, so capacity no job held exists and must
not become anyone's waste). Every figure is worked out by hand:

- alice: a1 1 GPU 00:00–02:00, 60 min at 90 % then 60 min at 0 % (one idle stretch: $4.00); a2 1 GPU
  00:00–01:00 at 90 % (no waste). Her waste $4.00, her costliest wasteful job a1.
- carol: c1 1 GPU 00:00–01:00 at 50 %, FAILED with no checkpoint: its whole hour is badput, $4.00; c2 1 GPU
  00:00–00:30 idle ($2.00: 30 min ≥ the 30-minute idle stretch). Her waste $6.00, costliest c1.
- dave: d1 1 GPU 00:00–01:00 at 90 %: no waste, so no row.
"""

from __future__ import annotations

import pytest

from analytics.waste_users import user_waste
from gpuledger.ledger.reference import load_reference
from gpuledger.ledger.settings import Capacity, ClusterSettings, Settings
from tests.analytics.build import H100, alloc, gpu, ingest, job, series, set_test_prices

SETTINGS = Settings(clusters={"c1": ClusterSettings(capacity=(Capacity(H100, 3),))})


@pytest.fixture
def con(ledger):
    load_reference(ledger, SETTINGS)
    set_test_prices(ledger)
    ingest(
        ledger,
        jobs=[
            job("a1", 0, 120),
            job("a2", 0, 60),
            job("c1", 0, 60, team="vision", user_name="carol", state="FAILED"),
            job("c2", 60, 90, team="vision", user_name="carol"),
            job("d1", 0, 60, user_name="dave"),
        ],
        allocations=[
            alloc("a1", "n1:0", 0, 120),
            alloc("a2", "n1:1", 0, 60),
            alloc("c1", "n1:2", 0, 60),
            alloc("c2", "n1:2", 60, 90),
            alloc("d1", "n2:0", 0, 60),
        ],
        samples=series("n1:0", 0, [90.0] * 60 + [0.0] * 60)
        + series("n1:1", 0, [90.0] * 60)
        + series("n1:2", 0, [50.0] * 60 + [0.0] * 30)
        + series("n2:0", 0, [90.0] * 60),
        gpus=[gpu("n1:0"), gpu("n1:1"), gpu("n1:2"), gpu("n2:0")],
    )
    return ledger


def test_users_come_largest_waste_first_with_their_costliest_wasteful_job(con):
    rows = user_waste(con, settings=SETTINGS).to_dicts()
    assert [r["user_name"] for r in rows] == ["carol", "alice"]  # dave wasted nothing; capacity is nobody's
    carol, alice = rows
    assert carol["team_waste_usd"] == pytest.approx(4.0 + 2.0)
    assert carol["failed_usd"] == pytest.approx(4.0) and carol["idle_allocated_usd"] == pytest.approx(2.0)
    assert (carol["top_job_id"], carol["top_job_waste_usd"]) == ("c1", pytest.approx(4.0))
    assert alice["team_waste_usd"] == pytest.approx(4.0)
    assert (alice["top_job_id"], alice["top_job_waste_usd"]) == ("a1", pytest.approx(4.0))
    assert user_waste(con, settings=SETTINGS, limit=1)["user_name"].to_list() == ["carol"]
