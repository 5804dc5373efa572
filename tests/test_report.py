"""The weekly report: self-contained, and its numbers identical to ``gpuledger summary --json``."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from analytics.filters import Filters
from collectors.base import ingest_file
from gpuledger.ledger.db import writer
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.settings import Settings
from gpuledger.reports.weekly import build_report, last_full_week, week_range
from tests.conftest import ROOT

JOBS = ROOT / "tests" / "fixtures" / "dashboard" / "jobs.csv"


@pytest.fixture
def ledger_file(db_path: str) -> str:
    with writer(db_path) as con:
        ingest_file(con, JOBS)
    return db_path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuledger", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    ("week", "monday", "sunday"),
    [
        ("2026-W47", dt.date(2026, 11, 16), dt.date(2026, 11, 22)),
        ("2026-W01", dt.date(2025, 12, 29), dt.date(2026, 1, 4)),  # ISO week 1 starts in the old year
        ("2020-W53", dt.date(2020, 12, 28), dt.date(2021, 1, 3)),
    ],
)
def test_week_range_is_monday_to_sunday(week, monday, sunday):
    assert week_range(week) == (monday, sunday)


@pytest.mark.parametrize("bad", ["2026-47", "2026-W99", "W47", "2026-w47x"])
def test_week_range_rejects_what_is_not_an_iso_week(bad):
    with pytest.raises(LedgerError, match="--week"):
        week_range(bad)


def test_last_full_week_ends_on_or_before_the_data():
    assert last_full_week(dt.datetime(2026, 11, 25, 12)) == "2026-W47"  # a Wednesday: W47 ended Sunday
    assert last_full_week(dt.datetime(2026, 11, 22, 23)) == "2026-W47"  # a Sunday: its own week


def test_html_report_is_self_contained_and_matches_summary(ledger_file, tmp_path: Path):
    out = tmp_path / "w47.html"
    done = cli("report", "--week", "2026-W47", "--out", str(out), "--db", ledger_file)
    assert done.returncode == 0, done.stderr
    html = out.read_text()
    summary = json.loads(
        cli("summary", "--json", "--since", "2026-11-16", "--until", "2026-11-22", "--db", ledger_file).stdout
    )
    # by hand, week 2026-11-16..22 holds the whole fixture: H100 (8 × 10 + 1 × 12 + 4 × 24 = 188 GPU-h)
    # at $2.99 = $562.12, L4 2 × 6 h at $0.71 = $8.52, A10G 1 × 12 h at $1.006 = $12.07: $582.71
    assert summary["spend_usd"] == pytest.approx(188 * 2.99 + 2 * 6 * 0.71 + 12 * 1.006)
    assert f"${summary['spend_usd']:,.2f}" in html
    assert f"${summary['waste_usd']:,.2f}" in html
    assert f"{summary['gpu_hours']:,.1f}" in html
    assert "$8.52" in html  # dash-3 FAILED training: its whole cost is failed_usd
    assert "week 2026-W47" in html
    total = json.loads(
        cli(
            "recommend",
            "--total",
            "--json",
            "--since",
            "2026-11-16",
            "--until",
            "2026-11-22",
            "--db",
            ledger_file,
        ).stdout
    )
    assert (
        f"{total['items']:,} together: ${total['total_usd_per_week']:,.2f} / week" in html
    )  # the CLI's figure
    # self-contained: no scripts, no external resources
    assert "<script" not in html.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<style>" in html


def test_markdown_report_and_team_filter(ledger_file):
    with writer(ledger_file) as con:  # build_report works on any connection
        text = build_report(
            con,
            filters=Filters(since=dt.date(2026, 11, 16), until=dt.date(2026, 11, 22), teams=("vision",)),
            settings=Settings(),
            fmt="md",
        )
    assert text.startswith("# GPU cost report, week 2026-W47")
    assert "| Spend | $20.59 |" in text  # dash-3 2 × 6 h × $0.71 + dash-4 12 h × $1.006
    assert "teams: vision" in text
    assert "nlp" not in text


def test_format_follows_the_out_suffix(ledger_file, tmp_path: Path):
    out = tmp_path / "report.md"
    assert cli("report", "--week", "2026-W47", "--out", str(out), "--db", ledger_file).returncode == 0
    assert out.read_text().startswith("# GPU cost report")


def test_week_and_since_together_is_a_usage_error(ledger_file):
    done = cli("report", "--week", "2026-W47", "--since", "2026-11-16", "--db", ledger_file)
    assert done.returncode == 2
    assert "either --week or --since/--until" in done.stderr


def test_bad_week_is_one_error_line(ledger_file):
    done = cli("report", "--week", "2026-47", "--db", ledger_file)
    assert done.returncode == 1
    assert done.stderr.strip() == "error: --week: not an ISO week like 2026-W47: '2026-47'"
