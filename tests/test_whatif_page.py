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
from tests.conftest import ROOT

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
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/whatif.py")
    at.run()
    assert not at.exception, at.exception
    return at


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
    assert spend.delta == f"-${saved:,.2f} vs now"
