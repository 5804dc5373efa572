"""The weekly alert rules (gpuledger/alerts/rules.py) on a two-week ledger worked out by hand."""

from __future__ import annotations

import datetime as dt

import pytest

from gpuledger.alerts.rules import judge, last_complete_week
from gpuledger.budgets.status import as_of
from gpuledger.ledger.budget_settings import AlertSettings
from gpuledger.ledger.settings import Settings
from tests.analytics.build import T0, alloc, gpu, ingest, job, series
from tests.budgets.ledgers import daily_jobs, day


@pytest.fixture
def con(ledger):
    """nlp: $20 a day (00:00-05:00, one H100) through 2025-W10 and W11, no telemetry (unmeasured, not waste).
    cv: one H100 job on W11's Wednesday 10:00-12:00 whose card h1:0 reports 0 % the whole time: $8, all idle.
    c1 declares 2 H100 from W11's Monday: the capacity window ends at the horizon, Sunday 05:00 (6 days 5 h =
    149 h × 2 = 298 GPU-h), less nlp's 7 × 5 h and cv's 2 h held = 261 GPU-h × $4 = $1,044 no job held in W11;
    none in W10."""
    daily_jobs(ledger, 2, [1, 1])
    ledger.execute(
        "INSERT INTO capacity VALUES ('c1', 'H100-SXM-80GB', 2, ?, NULL, 0)", [T0 + dt.timedelta(days=7)]
    )
    start = (9 * 1440) + 600
    ingest(
        ledger,
        jobs=[job("cv1", start, start + 120, team="cv", user_name="bob")],
        allocations=[alloc("cv1", "h1:0", start, start + 120)],
        gpus=[gpu("h1:0")],
        samples=series("h1:0", start, [0.0] * 120),
    )
    return ledger


def test_last_complete_week():
    assert last_complete_week(dt.date(2025, 3, 16)) == (dt.date(2025, 3, 10), dt.date(2025, 3, 16))
    assert last_complete_week(dt.date(2025, 3, 15)) == (dt.date(2025, 3, 3), dt.date(2025, 3, 9))


def test_waste_share_and_new_unheld_capacity_fire_for_the_week(con):
    settings = Settings(alerts=AlertSettings(baseline_days=7))
    alerts = {a.key: a for a in judge(con, settings, as_of(con, day(13)))}
    assert "waste_share|team:cv|2025-W11" in alerts
    assert "waste_share|team:nlp|2025-W11" not in alerts  # unmeasured is not waste
    assert "$8.00 of its $8.00" in alerts["waste_share|team:cv|2025-W11"].message
    unheld = alerts["unheld_capacity|cluster:c1/H100-SXM-80GB|2025-W11"]
    assert "$1,044.00" in unheld.message and "($0.00 the week before)" in unheld.message
    # baseline: W10's $140; W11: nlp $140 (no change), the fleet $140 + $8 + $1,044 (> +20 %)
    assert "spend_change|team:nlp|2025-W11" not in alerts
    assert "spend_change|fleet|2025-W11" in alerts
    assert "spend_change|team:cv|2025-W11" not in alerts  # no baseline spend: no change to measure


def test_limits_hold_them_back(con):
    quiet = Settings(
        alerts=AlertSettings(
            baseline_days=7, waste_share_pct=100.0, unheld_min_usd=2000.0, spend_change_pct=1000.0
        )
    )
    assert judge(con, quiet, as_of(con, day(13))) == []
