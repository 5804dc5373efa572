"""Chargeback (gpuledger/chargeback/bill.py): lines add up to the fleet's spend to the cent under every rule."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuledger.chargeback.bill import chargeback, rgu_weights, split_cents
from gpuledger.ledger.settings import Settings
from tests.budgets.ledgers import two_days
from tests.conftest import gpuledger


@pytest.fixture
def con(ledger):
    two_days(ledger)  # March 2025: nlp $32, cv $5, capacity nobody held $80 (tests/budgets/ledgers.py)
    return ledger


def _lines(bill):
    return {r["team"]: (r["used_usd"], r["shared_usd"], r["total_usd"]) for r in bill["rows"]}


def test_none_keeps_the_pool_as_its_own_line(con):
    bill = chargeback(con, "2025-03", share_idle="none", settings=Settings())
    assert _lines(bill) == {"cv": (5.0, 0.0, 5.0), "nlp": (32.0, 0.0, 32.0), "unallocated": (80.0, 0.0, 80.0)}
    assert bill["fleet_spend_usd"] == 117.0


def test_proportional_shares_the_pool_by_used_dollars(con):
    # $80 × 32/37 = $69.189… → $69.19; $80 × 5/37 = $10.810… → $10.81 (the two add up to $80.00)
    bill = chargeback(con, "2025-03", share_idle="proportional", settings=Settings())
    assert _lines(bill) == {"cv": (5.0, 10.81, 15.81), "nlp": (32.0, 69.19, 101.19)}
    assert round(sum(r["total_usd"] for r in bill["rows"]), 2) == 117.0


def test_even_splits_the_pool_among_the_teams_that_used_any(con):
    bill = chargeback(con, "2025-03", share_idle="even", settings=Settings())
    assert _lines(bill) == {"cv": (5.0, 40.0, 45.0), "nlp": (32.0, 40.0, 72.0)}


def test_a_team_filter_keeps_the_teams_line_as_in_the_whole_bill(con):
    for rule in ("none", "proportional", "even"):
        whole = _lines(chargeback(con, "2025-03", share_idle=rule, settings=Settings()))
        only = _lines(chargeback(con, "2025-03", share_idle=rule, settings=Settings(), teams=("nlp",)))
        assert only == {"nlp": whole["nlp"]}


def test_a_month_without_data_is_empty(con):
    bill = chargeback(con, "2025-05", share_idle="none", settings=Settings())
    assert bill["rows"] == [] and bill["fleet_spend_usd"] == 0.0


@given(st.integers(0, 10**9), st.lists(st.floats(0.0, 1e6, allow_nan=False), min_size=1, max_size=30))
def test_split_cents_adds_up_exactly_and_each_part_is_within_a_cent(total, weights):
    if not any(weights):
        weights = [1.0, *weights]
    parts = split_cents(total, weights)
    assert sum(parts) == total
    whole = sum(weights)
    for p, w in zip(parts, weights, strict=True):
        assert abs(p - total * w / whole) < 1 + 1e-6 * total


def test_rgu_of_the_reference_is_four_and_others_by_their_peaks(con):
    w = rgu_weights(con)
    assert w["A100-40GB"] == pytest.approx(4.0)
    # A100-80GB: same fp16 and fp32, twice the memory: 4 × (1 + 1 + 2) / 3
    assert w["A100-80GB"] == pytest.approx(16 / 3)


def test_cli_formats_add_up(tmp_path, con):
    db = str(tmp_path / "l.duckdb")
    con.execute(f"ATTACH '{db}' AS f")
    con.execute("COPY FROM DATABASE memory TO f")
    con.execute("DETACH f")
    for rule in ("none", "proportional", "even"):
        out = gpuledger(
            "chargeback", "--db", db, "--month", "2025-03", "--share-idle", rule, "--format", "json"
        )
        assert out.returncode == 0, out.stderr
        bill = json.loads(out.stdout)
        assert round(sum(r["total_usd"] for r in bill["rows"]), 2) == bill["fleet_spend_usd"] == 117.0
    csv_out = gpuledger("chargeback", "--db", db, "--month", "2025-03", "--format", "csv")
    assert csv_out.stdout.splitlines()[0] == "team,used_usd,shared_usd,total_usd,gpu_units"
    html_out = gpuledger("chargeback", "--db", db, "--month", "2025-03", "--format", "html")
    assert "$101.19" in html_out.stdout and "$117.00" in html_out.stdout
    bad = gpuledger("chargeback", "--db", db, "--month", "2025-13")
    assert bad.returncode == 1 and bad.stderr.startswith("error: --month")
