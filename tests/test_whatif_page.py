"""The What-if page (AppTest): nothing chosen draws no delta, and its figures are ``gpuledger whatif``'s
(analytics.whatif.what_if_view) for the same view and changes (issue 37 item 7)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from analytics.filters import Filters
from analytics.whatif import what_if_view
from collectors.ingest import ingest_file
from gpuledger.ledger.db import reader, writer
from gpuledger.ledger.settings import Settings
from tests.conftest import ROOT, app_page

JOBS = ROOT / "tests" / "fixtures" / "dashboard" / "jobs.csv"


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    db = str(tmp_path / "ledger.duckdb")
    with writer(db) as con:
        ingest_file(con, JOBS)
    (tmp_path / "none.toml").write_text("")
    monkeypatch.setenv("GPULEDGER_DB", db)
    monkeypatch.setenv("GPULEDGER_SETTINGS", str(tmp_path / "none.toml"))
    return db


def run_whatif() -> AppTest:
    return app_page("pages/whatif.py")


def test_nothing_chosen_draws_no_delta(ledger: str) -> None:
    at = run_whatif()
    assert not [m.delta for m in at.metric if m.delta]  # was a red "↑ +$0.00 vs now" on each


def test_the_figures_are_gpuledger_whatifs(ledger: str) -> None:
    at = run_whatif()
    at.multiselect(key="whatif_spot").select("nlp").run()
    assert not at.exception, at.exception
    with reader(ledger) as con:
        cli = what_if_view(con, filters=Filters(), settings=Settings(), spot=("nlp",))
    spend = next(m for m in at.metric if m.label == "Spend")
    assert spend.value == f"${cli['with_changes']['spend_usd']:,.2f}"
    saved = cli["now"]["spend_usd"] - cli["with_changes"]["spend_usd"]
    assert saved > 0  # nlp's H100 jobs on atlas (on-demand by default) repriced at spot
    assert spend.delta.startswith(f"−${saved:,.2f} vs now (")  # −$ (U+2212), its $/week beside it


def test_a_model_swap_at_a_speed_up_in_one_unit_with_minus_dollars(ledger: str) -> None:
    """By hand: the fixture's H100 jobs are 8×10 + 1×12 + 4×24 = 188 GPU-h at the shipped on-demand $2.99 =
    $562.12, over 5 days (2026-11-16 00:00 to the last end, 11-21 00:00). On A100-80GB ($1.79) the catalog's
    bf16 peaks (dash-1 and dash-5 logged bf16) give 312 ÷ 989.4 = 0.32×."""
    at = run_whatif()
    at.selectbox(key="whatif_from").select("H100-SXM-80GB").run()
    at.selectbox(key="whatif_to").select("A100-80GB").run()
    assert not at.exception, at.exception
    box = at.number_input(key="whatif_speedup:H100-SXM-80GB:A100-80GB")
    assert box.value == pytest.approx(0.32)
    # half the speed: 376 GPU-h × $1.79 = $673.04, $110.92 more than now: a negative saving, −$ not $-
    box.set_value(0.5).run()
    text = " ".join(m.value for m in at.markdown)
    assert "−$110.92 out of the spend over the view (−$155.29/week)" in text  # −110.92 ÷ 5 × 7
    table = at.dataframe[0].value
    spend = table.iloc[0]
    assert spend["change"] == "+$110.92" and spend["change $/week"] == "+$155.29"
    assert table.iloc[7]["change"] == "+188.0"  # GPU-hours: 188 ÷ 0.5 − 188
    # twice the speed: 94 GPU-h × $1.79 = $168.26, $393.86 saved
    box.set_value(2.0).run()
    text = " ".join(m.value for m in at.markdown)
    assert "$393.86 out of the spend over the view ($551.40/week)" in text
    page = " ".join(str(e.value) for e in (*at.markdown, *at.caption, *at.metric))
    page += " ".join(str(m.delta) for m in at.metric)
    assert "$-" not in page


def test_take_all_is_a_checkbox_and_a_count_not_a_chip_per_item(ledger: str) -> None:
    at = run_whatif()
    n = len(at.multiselect(key="whatif_recs").options)
    assert n > 0
    at.checkbox(key="whatif_all").check().run()
    assert not at.exception, at.exception
    assert at.multiselect(key="whatif_recs").disabled  # no chips: the count says it
    assert any(f"{n:,} of {n:,} recommendations taken" in c.value for c in at.caption)
    assert any(m.label == "Spend" and m.delta for m in at.metric)
