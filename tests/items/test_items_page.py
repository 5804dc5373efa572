"""The Recommendations page's items under sign-in (AppTest, ``at.user`` the simulated ``st.user``): a lead sees
and changes their own team's items only, and a form that offers another team's item (drawn here by pretending
the page may offer it: a forged form) records nothing, because the write asks the rule again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from gpuledger.items.key import item_id
from gpuledger.ledger.db import writer
from tests.items.weeks_ledger import build

ROOT = Path(__file__).resolve().parents[2]
ALICE = item_id("reclaim_idle:family:alice/notebook-idle")  # team nlp
BOB = item_id("reclaim_idle:family:bob/nb")  # team vision
SETTINGS = """
[auth]
server_metadata_url = "http://127.0.0.1:9/.well-known/openid-configuration"
client_id = "gpuledger"
[access]
admins = ["boss@example.com"]
[access.teams]
nlp = ["nina@example.com"]
vision = ["victor@example.com"]
"""
VICTOR = {"is_logged_in": True, "email": "victor@example.com", "email_verified": True}


@pytest.fixture
def signed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    db = str(tmp_path / "ledger.duckdb")
    with writer(db) as con:
        build(con)
    settings = tmp_path / "settings.toml"
    settings.write_text(SETTINGS)
    monkeypatch.setenv("GPULEDGER_DB", db)
    monkeypatch.setenv("GPULEDGER_SETTINGS", str(settings))
    yield db


def _page(user: dict[str, object]) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.user = user
    at.run()
    at.switch_page("pages/recommendations.py")
    at.run()
    assert not at.exception, at.exception
    return at


def _submit(at: AppTest, item: str, status: str) -> AppTest:
    at.selectbox(key="item_pick").set_value(item)
    at.selectbox(key="item_status").set_value(status)
    next(b for b in at.button if b.label == "Record change").click()
    at.run()
    return at


def _history(db: str) -> list[tuple[str, str, str]]:
    with duckdb.connect(db, read_only=True) as con:
        return con.execute(
            "SELECT item_id, status, changed_by FROM action_history ORDER BY change_id"
        ).fetchall()


def test_a_lead_changes_their_own_teams_item_and_sees_no_other(signed: str) -> None:
    at = _page(VICTOR)
    offered = at.selectbox(key="item_pick").options
    assert offered and all(o.startswith(BOB) for o in offered), offered
    _submit(at, BOB, "acknowledged")
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert _history(signed) == [(BOB, "acknowledged", "victor@example.com")]


def test_a_forged_form_for_another_teams_item_records_nothing(signed: str, monkeypatch) -> None:
    import pages._items as items_page

    monkeypatch.setattr(items_page, "teams_seen", lambda: None)  # the form is drawn with every item
    monkeypatch.setattr(items_page, "changeable", lambda its, scope: its)
    at = _page(VICTOR)
    _submit(at, ALICE, "done")
    assert any("may not change item" in e.value for e in at.error), [e.value for e in at.error]
    assert _history(signed) == []


def test_the_overview_shows_the_leads_actions_of_the_week(signed: str) -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.user = VICTOR
    at.run()
    assert not at.exception, at.exception
    captions = [c.value for c in at.caption if "Actions in" in c.value]
    # the last complete week is 2025-W15; victor's team (vision) has bob's notebook item, open since W10:
    # 6 weeks of 8 idle H100-hours each at the price in force
    assert captions and captions[0].startswith("Actions in 2025-W15: 0 new, 1 still open"), captions
    assert "Measured savings in 2025-Q2: $0.00" in captions[0]
