"""One vocabulary on every face (issue 44 item 1): for week 2026-W47 of a demo fleet, the Overview, the Waste
page, the report (HTML, Markdown, plain text, JSON), ``summary --json`` and ``notify --dry-run`` give the same
waste teams control, capacity no job held and unmeasured, and the same changes against 2026-W46.

The expected figures are not read from any face: they are summed here from the per-job parts
(``analytics.waste.job_waste``: idle while allocated + under-used + failed) and the capacity rows
(``analytics.waste.unallocated``) of each week, with polars sums of our own.

The fleet is the demo's 2 days ending before 2026-11-17: Sunday 2026-11-15 (W46) and Monday 2026-11-16
(W47), so each week holds one day of jobs and of capacity no job held.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator

import polars as pl
import pytest
from streamlit.testing.v1 import AppTest

from analytics.filters import Filters
from analytics.money import MINUS, usd
from gpuledger.ledger.db import reader, writer
from tests.conftest import ROOT, gpuledger

W47 = Filters(since=dt.date(2026, 11, 16), until=dt.date(2026, 11, 22))
W46 = Filters(since=dt.date(2026, 11, 9), until=dt.date(2026, 11, 15))
WEEK = ("--week", "2026-W47")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from gpuledger.demo.build import build_demo

    tmp = tmp_path_factory.mktemp("vocabulary")
    db = str(tmp / "demo.duckdb")
    with writer(db) as con:
        build_demo(con, days=2, end=dt.date(2026, 11, 17))
    (tmp / "none.toml").write_text("")
    mp = pytest.MonkeyPatch()
    mp.setenv("GPULEDGER_DB", db)
    mp.setenv("GPULEDGER_SETTINGS", str(tmp / "none.toml"))
    yield db
    mp.undo()


def _figures(db: str, filters: Filters) -> dict[str, float]:
    from analytics.waste import job_waste, unallocated

    with reader(db) as con:
        jobs = job_waste(con, filters=filters)
        cap = unallocated(con, filters=filters)
    team = jobs.select(
        pl.sum_horizontal(
            pl.col("idle_allocated_usd").fill_null(0),
            pl.col("underused_usd").fill_null(0),
            pl.col("failed_usd").fill_null(0),
        ).sum()
    ).item()
    return {
        "team_waste_usd": float(team),
        "unheld_capacity_usd": float(cap["unallocated_usd"].fill_null(0).sum()) if cap.height else 0.0,
        "unmeasured_usd": float(jobs["unmeasured_usd"].fill_null(0).sum()),
    }


@pytest.fixture(scope="module")
def expected(fleet: str) -> dict[str, tuple[float, float]]:
    """key → (W47's figure, W47 − W46), computed from the parts."""
    now, before = _figures(fleet, W47), _figures(fleet, W46)
    out = {k: (now[k], now[k] - before[k]) for k in now}
    # the fleet is worth the test: every figure and change is a real amount
    assert all(abs(v) >= 1.0 for v, _ in [out["team_waste_usd"], out["unheld_capacity_usd"]]), out
    assert all(abs(d) >= 0.01 for _, d in [out["team_waste_usd"], out["unheld_capacity_usd"]]), out
    return out


def _signed(d: float) -> str:
    """A change of money as the report, the CLI and the notices print it: +$1.00 / −$1.00."""
    return ("+" if d > 0 else MINUS) + f"${abs(d):,.2f}"


def _plain(text: str) -> str:
    return re.sub(r"<[^>]+>", "", text).replace("\\", "")


def test_summary_json_names_the_three_figures_apart(fleet: str, expected: dict) -> None:
    s = json.loads(
        gpuledger("summary", "--json", "--since", "2026-11-16", "--until", "2026-11-22", "--db", fleet).stdout
    )
    assert "waste_usd" not in s
    for key, (value, _) in expected.items():
        assert s[key] == pytest.approx(value, abs=0.005), key
    # the parts they are made of travel beside them
    assert s["unheld_capacity_usd"] == pytest.approx(s["waste"]["unallocated_usd"])


def test_the_report_json_carries_the_figures_and_their_changes(fleet: str, expected: dict) -> None:
    done = gpuledger("report", *WEEK, "--format", "json", "--db", fleet)
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout)
    assert "waste_usd" not in r["headline"] and "waste_usd" not in r["change"]
    for key, (value, change) in expected.items():
        assert r["headline"][key] == pytest.approx(value, abs=0.005), key
        assert r["change"][key] == pytest.approx(change, abs=0.005), key
    for row in r["by_team"] + r["by_gpu_model"]:
        assert "waste_usd" not in row and "team_waste_usd" in row


@pytest.mark.parametrize("form", ["html", "md", "txt"])
def test_every_report_format_says_the_same(fleet: str, expected: dict, form: str) -> None:
    done = gpuledger("report", *WEEK, "--format", form, "--db", fleet)
    assert done.returncode == 0, done.stderr
    text = _plain(done.stdout)
    for key, words in (
        ("team_waste_usd", "Waste teams control"),
        ("unheld_capacity_usd", "Capacity no job held"),
        ("unmeasured_usd", "Unmeasured (no telemetry)"),
    ):
        value, change = expected[key]
        line = next(ln for ln in text.splitlines() if words in ln and usd(value) in ln)
        assert _signed(change) in line or _signed(change) in text, (key, line)
    assert "$-" not in text


def test_notify_dry_run_says_the_same(fleet: str, expected: dict) -> None:
    done = gpuledger("notify", "--dry-run", *WEEK, "--db", fleet)
    assert done.returncode == 0, done.stderr
    for key, words in (
        ("team_waste_usd", "Waste teams control"),
        ("unheld_capacity_usd", "Capacity no job held"),
    ):
        value, change = expected[key]
        line = next(ln for ln in done.stdout.splitlines() if ln.strip().startswith(words))
        assert usd(value) in line and f"{_signed(change)} " in line, line


def _page(page: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.query_params["since"] = "2026-11-16"
    at.query_params["until"] = "2026-11-22"
    at.run()
    if page != "pages/overview.py":
        at.switch_page(page)
        at.run()
    assert not at.exception, at.exception
    return at


@pytest.mark.parametrize(
    ("page", "labels"),
    [
        (
            "pages/overview.py",
            {
                "team_waste_usd": "Waste teams control",
                "unheld_capacity_usd": "Capacity no job held (platform)",
            },
        ),
        (
            "pages/waste.py",
            {"team_waste_usd": "Waste teams control", "unheld_capacity_usd": "Capacity no job held"},
        ),
    ],
)
def test_the_pages_say_the_same(fleet: str, expected: dict, page: str, labels: dict[str, str]) -> None:
    at = _page(page)
    for key, label in labels.items():
        value, change = expected[key]
        m = next(m for m in at.metric if m.label == label)
        assert m.value == usd(value), (page, key)
        # st.metric reads a leading ASCII '-' as "down": its delta keeps it
        assert str(m.delta).startswith(_signed(change).replace(MINUS, "-")), (page, key, m.delta)
    if page == "pages/overview.py":  # the top actions as two short lists: for the teams, for the platform
        shown = [m.value for m in at.markdown]
        assert "**For the teams**" in shown and "**For the platform**" in shown
        after = shown[shown.index("**For the platform**") + 1 :]
        assert after and "the cluster's operators" in after[0]  # a capacity item names its operators


def test_a_range_without_data_says_so_and_names_the_range_the_data_cover(fleet: str) -> None:
    done = gpuledger("summary", "--since", "2026-12-01", "--db", fleet)
    assert done.returncode == 0
    # the demo's 2 days: 2026-11-15 and 2026-11-16
    assert (
        "no data in 2026-12-01 – latest (UTC days); the ledger's data cover 2026-11-15 – 2026-11-16"
        in done.stderr
    )
    week = gpuledger("jobs", "--since", "2026-11-16", "--until", "2026-11-22", "--db", fleet)
    assert "period: 2026-11-16 – 2026-11-22 (UTC days)" in week.stderr


def test_no_dollar_minus_on_the_cli_or_in_the_report(fleet: str) -> None:
    """One money format (analytics.money.usd): a negative amount reads −$3.20, never $-3.20."""
    from analytics.money import signed_usd

    assert (
        usd(-3.2) == f"{MINUS}$3.20" and signed_usd(-3.2) == f"{MINUS}$3.20" and signed_usd(3.2) == "+$3.20"
    )
    assert usd(-0.001) == "$0.00" and usd(None) == "n/a" and usd(-1234.5, 0) == f"{MINUS}$1,234"
    for args in (
        ("summary",),
        ("jobs", "--limit", "20"),
        ("recommend",),
        ("recommend", "--total"),
        ("whatif", "--spot", "llm-core"),
        ("report", *WEEK, "--format", "txt"),
        ("notify", "--dry-run", *WEEK),
    ):
        done = gpuledger(*args, "--db", fleet)
        assert done.returncode == 0, (args, done.stderr)
        assert "$-" not in done.stdout and "-$" not in done.stdout.replace("--", ""), args


def test_a_jobs_page_gives_the_saving_the_recommendations_list_gives(fleet: str) -> None:
    """One number per action (issue 44 item 3): the job's page shows the item of the view's list, not a rate
    over the job's own days (which made a one-day job's saving 7 × the list's)."""
    recs = json.loads(
        gpuledger(
            "recommend", "--json", "--since", "2026-11-16", "--until", "2026-11-22", "--db", fleet
        ).stdout
    )
    item = next(r for r in recs if r["target_type"] == "job" and len(r["job_ids"]) == 1)
    job = item["job_ids"][0]
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    for k, v in (("since", "2026-11-16"), ("until", "2026-11-22"), ("job", job)):
        at.query_params[k] = v
    at.run()
    at.switch_page("pages/jobs.py")
    at.query_params["job"] = job
    at.run()
    assert not at.exception, at.exception
    want = (
        f"{usd(item['usd_per_week'])}/week"
        if item["usd_per_week"] is not None
        else f"{usd(item['saving_usd'])} once"
    )
    shown = [
        m.value
        for m in at.markdown
        if m.value.startswith("**") and " · " in m.value and "confidence" in m.value
    ]
    assert any(want in v for v in shown), (want, shown)
