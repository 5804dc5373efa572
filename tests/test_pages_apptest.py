"""A quick in-process smoke test of every page (streamlit.testing AppTest), on a small hand-written ledger.

The browser tests (tests/browser/) drive the real server in Chromium; this one runs in a second and catches
a page that raises before the slower suite starts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from collectors.base import ingest_file
from gpuledger.ledger.db import writer
from tests.conftest import ROOT

JOBS = ROOT / "tests" / "fixtures" / "dashboard" / "jobs.csv"
PAGES = {
    "pages/overview.py": "Overview",
    "pages/waste.py": "Waste",
    "pages/jobs.py": "Jobs",
    "pages/fleet.py": "Fleet",
    "pages/recommendations.py": "Recommendations",
    "pages/training.py": "Training",
    "pages/upload.py": "Upload a file",
    "pages/reports.py": "Weekly report",
    "pages/whatif.py": "What if",
    "pages/settings.py": "Settings",
}


@pytest.fixture(scope="module")
def small_ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("apptest")
    db = str(tmp / "ledger.duckdb")
    with writer(db) as con:
        ingest_file(con, JOBS)
    settings = tmp / "settings.toml"
    settings.write_text("")
    mp = pytest.MonkeyPatch()
    mp.setenv("GPULEDGER_DB", db)
    mp.setenv("GPULEDGER_SETTINGS", str(settings))
    yield db
    mp.undo()


def run_page(page: str, query: dict[str, list[str]] | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for key, values in (query or {}).items():
        at.query_params[key] = values
    at.run()
    if page != "pages/overview.py":
        at.switch_page(page)
        at.run()
    return at


@pytest.mark.parametrize("page", list(PAGES))
def test_page_runs_without_exception(small_ledger: str, page: str) -> None:
    at = run_page(page)
    assert not at.exception, at.exception
    assert at.title[0].value == PAGES[page]
    assert not [w.value for w in at.warning if "not available" in w.value]


def test_overview_shows_the_fixture_spend(small_ledger: str) -> None:
    at = run_page("pages/overview.py")
    spend = next(m for m in at.metric if m.label == "Spend")
    # by hand from tests/fixtures/dashboard/jobs.csv: H100 8×10 + 1×12 + 4×24 = 188 GPU-h × $2.99 = $562.12,
    # L4 2×6 h = $8.52, A10G 1×12 h = $12.07 (the shipped on-demand prices): $582.71
    assert spend.value == "$582.71"


def test_the_sidebar_counts_the_ledger_in_words(small_ledger: str) -> None:
    at = run_page("pages/overview.py")
    captions = [c.value for c in at.sidebar.caption if c.value.startswith("Ledger")]
    # the fixture: 5 jobs (tests/fixtures/dashboard/jobs.csv), no telemetry, one ingest: singular, not "1 ingests"
    assert captions == ["Ledger `ledger.duckdb`: 5 jobs, 0 samples from 1 ingest."], captions


def test_query_string_sets_the_filters(small_ledger: str) -> None:
    at = run_page("pages/overview.py", {"team": ["vision"]})
    spend = next(m for m in at.metric if m.label == "Spend")
    assert spend.value == "$20.59"  # dash-3 $8.52 + dash-4 $12.072 (1 × 12 h A10G at $1.006)


def test_empty_ledger_shows_how_to_load_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPULEDGER_DB", str(tmp_path / "empty.duckdb"))
    monkeypatch.setenv("GPULEDGER_SETTINGS", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    at = run_page("pages/overview.py")
    assert not at.exception
    assert "gpuledger demo" in at.info[0].value


def test_the_reports_page_default_week_comes_from_the_summary_horizon(small_ledger: str) -> None:
    """The Reports page reads the data horizon alone (pages/_data.as_of), not a whole summary: the same
    ``as_of`` string, so the same default week as ``gpuledger report``."""
    import datetime as dt

    from analytics.summary import summary
    from gpuledger.ledger.db import data_version, reader
    from gpuledger.reports.weekly import last_full_week
    from pages import _data

    with reader(small_ledger) as con:
        expected = summary(con)["as_of"]
    got = _data._as_of(small_ledger, data_version(small_ledger))
    assert got == expected and got is not None
    at = run_page("pages/reports.py")
    assert not at.exception, at.exception
    week = next(s for s in at.selectbox if s.key == "report_week")
    default = last_full_week(dt.datetime.fromisoformat(expected))
    assert week.value == (default if default in week.options else week.options[0])


class _Logged:
    """A reader connection that keeps the text of every statement it runs (and is otherwise the connection)."""

    def __init__(self, con: object, log: list[str]) -> None:
        self._con, self._log = con, log

    def execute(self, sql: str, *args: object, **kw: object) -> object:
        self._log.append(str(sql))
        return self._con.execute(sql, *args, **kw)

    def __getattr__(self, name: str) -> object:
        return getattr(self._con, name)


@pytest.mark.parametrize("page", ["pages/jobs.py", "pages/fleet.py"])
def test_a_page_run_computes_the_views_per_job_costs_once(
    small_ledger: str, page: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each data function of a page opens the ledger version's sharing block (analytics/shared.py), so the
    view's per-job costs (analytics.cost.job_costs_sql, whose body starts ``WITH shared AS``) are one
    statement per page run, however many analytics calls read them. The Jobs page's table had run them
    three times (job waste, utilization, unit costs: 1.18 of its 1.95 s on a 50 M-sample ledger) and the
    Fleet page's twice."""
    import gpuledger.ledger.db as db
    from pages._script_timer import clear_caches

    log: list[str] = []
    opened = db._open_reader
    monkeypatch.setattr(db, "_open_reader", lambda *a, **k: _Logged(opened(*a, **k), log))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page(page)
    clear_caches()
    log.clear()
    at.run()  # this page alone, every cache cleared
    assert not at.exception, at.exception
    costs = [s for s in log if "WITH shared AS" in s]
    assert len(costs) == 1, [" ".join(s.split())[:80] for s in costs]
