"""The Overview page (streamlit.testing AppTest) on a hand-written jobs table of three ISO weeks: it opens on the
last complete week against the week before, says when the ledger is the demo, keeps a team view whole, and
says so when the URL names a team the ledger does not have (issue 37)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from collectors.ingest import ingest_file
from gpuledger.ledger.db import writer
from tests.conftest import ROOT

HEADER = "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state,kind\n"
# 2026-W46 (Mon 11-09), 2026-W47 (Mon 11-16), and W48 in progress (the data ends Tue 11-24 12:00)
ROWS = [
    "a1,alice,nlp,atlas,H100-SXM-80GB,2,2026-11-10T00:00:00Z,2026-11-10T10:00:00Z,COMPLETED,training",
    "a2,alice,nlp,atlas,H100-SXM-80GB,1,2026-11-17T00:00:00Z,2026-11-17T12:00:00Z,COMPLETED,training",
    "v1,carol,vision,cirrus,L4,2,2026-11-18T00:00:00Z,2026-11-18T06:00:00Z,FAILED,training",
    "a3,alice,nlp,atlas,H100-SXM-80GB,1,2026-11-24T00:00:00Z,2026-11-24T12:00:00Z,COMPLETED,training",
]
H100 = 2.99  # the shipped on-demand prices ($/GPU-h)
L4 = 0.71


def build(tmp: Path, monkeypatch: pytest.MonkeyPatch, *, demo: bool = False) -> str:
    jobs = tmp / "jobs.csv"
    jobs.write_text(HEADER + "\n".join(ROWS) + "\n")
    db = str(tmp / "ledger.duckdb")
    with writer(db) as con:
        ingest_file(con, jobs)
        if demo:  # what gpuledger demo records (gpuledger/demo/build.py)
            con.execute(
                "INSERT INTO ingests VALUES (99, 'demo://fleet?days=28&seed=7&end=2026-11-23', 'demo', 'x', "
                "'demo', '{}', '{}', now()::TIMESTAMP)"
            )
    (tmp / "none.toml").write_text("")
    monkeypatch.setenv("GPULEDGER_DB", db)
    monkeypatch.setenv("GPULEDGER_SETTINGS", str(tmp / "none.toml"))
    return db


@pytest.fixture
def weeks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    yield build(tmp_path, monkeypatch)


def run(query: dict[str, list[str]] | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for key, values in (query or {}).items():
        at.query_params[key] = values
    at.run()
    assert not at.exception, at.exception
    return at


def metric(at: AppTest, label: str):
    return next(m for m in at.metric if m.label == label)


def test_it_opens_on_the_last_complete_week_against_the_week_before(weeks: str) -> None:
    at = run()
    assert any("**Week 2026-W47** (2026-11-16 – 2026-11-22, UTC)" in m.value for m in at.markdown)
    assert any("changes vs week 2026-W46 (2026-11-09 – 2026-11-15)" in m.value for m in at.markdown)
    # W47 by hand: a2 12 GPU-h of H100 at $2.99 = $35.88, v1 2 × 6 L4 GPU-h at $0.71 = $8.52; W46: a1 20 GPU-h
    # = $59.80; the jobs in W48 are outside it
    spend = metric(at, "Spend")
    assert spend.value == f"${12 * H100 + 12 * L4:,.2f}"
    assert spend.delta == "-$15.40 (-25.8 %)"  # $44.40 - $59.80, ÷ $59.80
    # v1 FAILED with no checkpoint: its whole $8.52 is badput, the waste teams control (no telemetry: no idle)
    assert metric(at, "Waste teams control").value == "$8.52"
    assert not [
        m for m in at.metric if "n/a" in str(m.delta)
    ]  # no "n/a (no data before)" on the default view
    assert not at.info  # not the demo


def test_the_sidebar_dates_choose_another_range(weeks: str) -> None:
    at = run({"since": ["2026-11-09"], "until": ["2026-11-24"]})
    assert metric(at, "Spend").value == f"${32 * H100 + 12 * L4 + 12 * H100:,.2f}"  # every job
    assert not any("Week 2026" in m.value for m in at.markdown)


def test_the_team_table_sums_to_the_spend_and_a_team_view_is_whole(weeks: str) -> None:
    at = run()
    rows = at.dataframe[0].value  # the team table comes first
    assert list(rows["Team"]) == ["nlp", "vision"]
    assert list(rows["Spend"]) == pytest.approx([12 * H100, 12 * L4])
    assert list(rows["Spend change"]) == ["-$23.92 (-40.0 %)", "new"]  # nlp $35.88 vs $59.80
    assert list(rows["Waste %"]) == ["0.0 %", "100.0 %"]
    at = run({"team": ["vision"]})
    assert metric(at, "Spend").value == "$8.52"
    labels = [m.label for m in at.metric]
    assert "Capacity no job held (platform)" not in labels and "Capacity utilization" not in labels
    # nothing cut off: no metric value longer than a card shows
    assert all(len(m.value) <= 18 for m in at.metric), [m.value for m in at.metric]
    assert list(at.dataframe[0].value["Team"]) == ["vision"]


def test_the_demo_says_so_with_its_dates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build(tmp_path, monkeypatch, demo=True)
    at = run()
    (banner,) = at.info
    assert "This is the demo fleet" in banner.value
    assert "28 days of generated data, 2026-10-26 – 2026-11-22 (UTC)" in banner.value


@pytest.mark.parametrize("page", ["overview", "jobs", "waste"])
def test_a_team_the_ledger_does_not_have_is_said_not_dropped(weeks: str, page: str) -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["team"] = ["robotics"]
    at.run()
    if page != "overview":
        at.switch_page(f"pages/{page}.py")
        at.run()
    assert not at.exception, at.exception
    (warning,) = at.warning
    assert "no team \\'robotics\\' in the ledger \\(teams\\: nlp\\, vision\\)" in warning.value
    assert not at.metric  # no figure of another view (the fleet's) under the warning
    # a second run (Streamlit has dropped the value from the URL by now) still says it
    at.run()
    assert at.warning and not at.metric
    # the button shows the view without the unknown name
    at.button(key="drop_unknown").click().run()
    assert not at.warning


def test_an_unknown_user_in_the_url_is_said(weeks: str) -> None:
    at = run({"user": ["zed"]})
    (warning,) = at.warning
    assert "no user \\'zed\\' in the ledger \\(users\\: alice\\, carol\\)" in warning.value
    at = run({"user": ["carol"]})  # a user the ledger has: the view is theirs
    assert not at.warning
    assert metric(at, "Spend").value == "$8.52"
