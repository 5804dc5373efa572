"""A month's bill against the month's summary where a shared card's cut and a price change meet (issue 41, the
random bills run's failing shape, reduced to what made it fail).

The captured shape (MONEY_RANDOM=1 of tests/budgets/test_money_shapes_bills.py): the 'none' bill of March summed
to 17969 ¢ while the month's summary said $180.00. Two jobs time-shared the 4g.40gb MIG instance of an H100 from
23:00 to 05:30 across the price change at midnight, one of them running on alone until 13:00. The summary cuts
every job at the price change (analytics/waste_jobs.py), the bill priced the month's span whole and took the
shared card's cut off as one fraction of it (``cost × (1 − cut/declared)``), so the cut, all of it before 05:30,
was priced at the span's average rate instead of the rate in force when it happened. Each price period now
bills its own declared time less its own cut (analytics/cost.py ``billed_cost_sql``), so any cut of a span
(month, week, day, price piece) adds up to the span.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest

from analytics.daily import spend_by_day, spend_by_period
from analytics.filters import Filters
from analytics.shared import sharing
from analytics.summary import summary
from analytics.waste import job_waste
from gpuledger.chargeback.bill import RULES, chargeback, month_bounds
from gpuledger.ledger.settings import Settings
from tests.analytics.build import H100, T0, ingest, job

CARD, I3G, I4G = "h0:0", "h0:0/1", "h0:0/2"
MIDNIGHT = T0 + dt.timedelta(days=1)  # 2025-03-04 00:00: the H100 goes from $7 to $14 an hour
D0, D1 = T0.date(), MIDNIGHT.date()


def _ledger(con: duckdb.DuckDBPyConnection) -> None:
    """One H100 in MIG mode (3g.40gb = 3/7 of the card, 4g.40gb = 4/7), no telemetry (so no capacity and no
    unallocated line: the jobs are the whole spend). H100 $7/h until 2025-03-04, $14/h from then.
    - s (cv): the 4g instance (gpu_count 4/7), day 0 23:00 → day 1 13:00 (14 h);
    - t (nlp): the same 4g instance (4/7), day 0 23:00 → day 1 05:30 (6.5 h)."""
    con.execute("DELETE FROM prices")
    for day, usd in ((dt.date(2025, 1, 1), 7.0), (D1, 14.0)):
        con.execute(
            "INSERT INTO prices VALUES (?, 'on_demand', NULL, ?, ?, 'test price', ?, 'sheet', NULL)",
            [H100, day, usd, day],
        )
    four = 4 / 7
    jobs = [
        job("s", 23 * 60, 37 * 60, team="cv", gpu_count=four),
        job("t", 23 * 60, 29 * 60 + 30, team="nlp", gpu_count=four),
    ]
    ingest(
        con,
        jobs=jobs,
        allocations=[
            {
                "job_id": j["job_id"],
                "host": "h0",
                "gpu_id": I4G,
                "gpu_count": four,
                "start_ts": j["start_ts"],
                "end_ts": j["end_ts"],
            }
            for j in jobs
        ],
        gpus=[
            {
                "gpu_id": gid,
                "host": "h0",
                "model": H100,
                "cluster": "c1",
                "parent_gpu_id": CARD,
                "mig_profile": profile,
            }
            for gid, profile in ((I3G, "3g.40gb"), (I4G, "4g.40gb"))
        ],
    )


# By hand. While both hold the 4g instance (23:00 → 05:30) its 4/7 of the card is split: 2/7 each, the other 2/7
# each declared is cut (not billed). s: 23:00-24:00 2/7 × 1 h × $7 = $2; 00:00-05:30 2/7 × 5.5 h × $14 = $22;
# 05:30-13:00 alone 4/7 × 7.5 h × $14 = $60: $84 (day 0 $2, day 1 $82). t: 2/7 × 1 × $7 + 2/7 × 5.5 × $14 =
# $2 + $22 = $24 (day 0 $2, day 1 $22). Spend $108. Before the fix the month's bill gave s
# (4/7 × 1 × 7 + 4/7 × 13 × 14) × (1 − (2/7 × 6.5) / (4/7 × 14)) = 108 × 43/56 = $82.93: 107 ¢ lost.
WANT = {"cv": 84.0, "nlp": 24.0}
WANT_DAYS = {(D0, "cv"): 2.0, (D0, "nlp"): 2.0, (D1, "cv"): 82.0, (D1, "nlp"): 22.0}


def test_the_bill_of_a_card_shared_across_a_price_change_is_the_summary(ledger) -> None:
    _ledger(ledger)
    first, last = month_bounds("2025-03")
    with sharing(ledger):
        month = summary(ledger, filters=Filters(first, last))
        jobs = {
            r["team"]: r["cost_usd"]
            for r in job_waste(ledger, filters=Filters(first, last)).iter_rows(named=True)
        }
        days = spend_by_day(ledger, by="team")
        whole = spend_by_period(ledger, [("m", Filters(first, last))], by="team", settings=Settings())
        for rule in RULES:
            bill = chargeback(ledger, "2025-03", share_idle=rule, settings=Settings())
            assert bill["fleet_spend_usd"] == 108.0, rule
            assert {r["team"]: r["used_usd"] for r in bill["rows"]} == WANT, rule
            assert sum(round(r["total_usd"] * 100) for r in bill["rows"]) == 10800, rule
    assert month["spend_usd"] == pytest.approx(108.0)
    assert jobs == pytest.approx(WANT)
    assert dict(zip(whole["key"], whole["spend_usd"], strict=True)) == pytest.approx(WANT)
    got_days = {(d, k): v for d, k, v in days.iter_rows()}
    assert got_days == pytest.approx(WANT_DAYS)
