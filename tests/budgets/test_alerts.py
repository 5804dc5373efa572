"""Alerts on a five-week ledger with planted crossings, sent to a real SMTP server and a real webhook server on
127.0.0.1: each crossing once, and a re-run sends nothing new.

The ledger (tests/budgets/ledgers.py daily_jobs): team nlp spends $20 a day for four weeks (2025-W10..W13),
then $40 a day in W14. Its budget: $200 a week, thresholds 50/80/100 %. Judged at the end of each day of W14
(forecasts by :func:`expected_forecast`, the documented method written out again here):
- Monday: spent $40; forecast $173.09 = 86.5 % → budget_forecast 80 (standing for 50 too);
- Tuesday: $80, forecast $199.67 (99.8 %): nothing new;
- Wednesday: $120 ≥ $100 → budget 50; forecast $221.34 ≥ $200 → budget_forecast 100;
- Thursday: $160 → budget 80; Friday: $200 → budget 100; Saturday: nothing new;
- Sunday: W14 is complete: $280 against the baseline $140/week (the 28 days before) = +100 % ≥ 20 %
  → spend_change for team:nlp and for the fleet (which is nlp's spend here).
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from tests.budgets.ledgers import daily_jobs, day
from tests.conftest import gpuledger
from tests.test_report_mail import smtp_server

SETTINGS = """
[[budget]]
team = "nlp"
amount_usd = 200
period = "week"
notify = ["lead@example.org"]

[alerts]
mail_to = ["admin@example.org"]

# the test price (tests/analytics/build.py) as the settings' own row: every CLI call syncs the price sheet
[[price]]
gpu_model = "H100-SXM-80GB"
tier = "on_demand"
usd_per_gpu_hour = 4.0
effective_from = 2025-01-01
source = "test"
"""

W14 = 28  # day index of W14's Monday

EXPECTED = {
    0: {"budget_forecast|team:nlp|2025-W14|80"},
    1: set(),
    2: {"budget|team:nlp|2025-W14|50", "budget_forecast|team:nlp|2025-W14|100"},
    3: {"budget|team:nlp|2025-W14|80"},
    4: {"budget|team:nlp|2025-W14|100"},
    5: set(),
    6: {"spend_change|team:nlp|2025-W14", "spend_change|fleet|2025-W14"},
}


class Hook(http.server.BaseHTTPRequestHandler):
    posts: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Hook.posts.append(json.loads(body))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[str]:
    Hook.posts = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def _template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The planted ledger, built once for the module and already synced with SETTINGS (the sync the first
    command on a fresh ledger would write): each test copies it, so each starts from the same file that
    building it in the test would give, without paying the build and the first sync again."""
    from gpuledger.ledger.db import sync_reference, writer
    from gpuledger.ledger.settings import load_settings

    folder = tmp_path_factory.mktemp("alerts-template")
    db, settings = folder / "l.duckdb", folder / "s.toml"
    settings.write_text(SETTINGS)
    with writer(str(db)) as con:
        daily_jobs(con, 5, [1, 1, 1, 1, 2])
    sync_reference(str(db), load_settings(str(settings)))
    return db, settings


@pytest.fixture
def planted(tmp_path, _template):
    db = tmp_path / "l.duckdb"
    shutil.copyfile(_template[0], db)
    settings = tmp_path / "s.toml"
    settings.write_text(SETTINGS)
    return str(db), str(settings)


def expected_forecast(spend: list[float], as_of: int, first: int, last: int) -> float:
    """docs/metrics.md's weekday_level forecast, written out: spent so far + each day left × the level × its
    weekday's rhythm. Rhythm: a weekday's mean over the last 28 days over their mean; level: the mean weighted
    0.2 / 0.8 (newest first) of the days since the data began (at most 56) divided by their rhythm. Day 0 is a
    Monday."""
    window = range(max(0, as_of - 27), as_of + 1)
    mean = sum(spend[d] for d in window) / len(window)
    rhythm = {}
    for wd in range(7):
        same = [spend[d] for d in window if d % 7 == wd]
        rhythm[wd] = sum(same) / len(same) / mean
    level = None
    for d in range(max(0, as_of - 55), as_of + 1):
        v = spend[d] / rhythm[d % 7]
        level = v if level is None else 0.2 * v + 0.8 * level
    return sum(spend[first : as_of + 1]) + sum(level * rhythm[d % 7] for d in range(as_of + 1, last + 1))


SPEND = [20.0] * 28 + [40.0] * 7


def test_the_hand_written_forecasts_cross_where_the_docstring_says():
    got = [round(expected_forecast(SPEND, W14 + d, W14, W14 + 6), 2) for d in range(3)]
    assert got == [173.09, 199.67, 221.34]


def _keys(payload: dict, group: str) -> set[str]:
    return {a["key"] for a in payload[group]}


def test_each_crossing_is_sent_once_by_mail_and_webhook(planted, webhook):
    db, settings = planted
    with smtp_server() as inbox:
        smtp = f"smtp://{inbox.host}:{inbox.port}"
        sent: list[str] = []
        for d, want in EXPECTED.items():
            args = [
                "alerts",
                "--db",
                db,
                "--settings",
                settings,
                "--as-of",
                day(W14 + d).isoformat(),
                "--json",
            ]
            out = gpuledger(*args, "--smtp", smtp, "--webhook", webhook)
            assert out.returncode == 0, out.stderr
            got = json.loads(out.stdout)
            assert _keys(got, "new") == want, d
            sent += sorted(want)
        assert sorted(p["key"] for p in Hook.posts) == sorted(sent)
        assert all(p["text"].startswith("gpuledger: ") for p in Hook.posts)
        # a mail per run with new alerts, to the admin; the budget's own address for the budget alerts
        admin = [m for _, rcpts, m in inbox.messages if rcpts == ["admin@example.org"]]
        lead = [m for _, rcpts, m in inbox.messages if rcpts == ["lead@example.org"]]
        assert len(admin) == sum(1 for w in EXPECTED.values() if w) == 5
        assert len(lead) == 4  # Monday, Wednesday, Thursday, Friday: the budget's
        assert "80 %" in lead[0].get_content() or "80 %" in str(lead[0])
        n_messages, n_posts = len(inbox.messages), len(Hook.posts)
        # a re-run of every day sends nothing new
        for d in EXPECTED:
            out = gpuledger(
                "alerts",
                "--db",
                db,
                "--settings",
                settings,
                "--as-of",
                day(W14 + d).isoformat(),
                "--json",
                "--smtp",
                smtp,
                "--webhook",
                webhook,
            )
            assert out.returncode == 0, out.stderr
            assert json.loads(out.stdout)["new"] == []
        assert (len(inbox.messages), len(Hook.posts)) == (n_messages, n_posts)


def test_dry_run_lists_and_records_nothing(planted):
    db, settings = planted
    for _ in range(2):
        out = gpuledger(
            "alerts",
            "--db",
            db,
            "--settings",
            settings,
            "--as-of",
            day(W14 + 4).isoformat(),
            "--dry-run",
            "--json",
        )
        assert out.returncode == 0, out.stderr
        # Friday: spent $200, every threshold reached by the spend itself, so no forecast alert stands apart
        assert _keys(json.loads(out.stdout), "new") == {"budget|team:nlp|2025-W14|100"}


def test_no_channel_is_one_error_and_records_nothing(planted):
    db, settings = planted
    out = gpuledger("alerts", "--db", db, "--settings", settings, "--as-of", day(W14 + 4).isoformat())
    assert out.returncode == 1 and out.stderr.startswith("error: no channel")
    again = gpuledger(
        "alerts",
        "--db",
        db,
        "--settings",
        settings,
        "--as-of",
        day(W14 + 4).isoformat(),
        "--dry-run",
        "--json",
    )
    assert json.loads(again.stdout)["already_sent"] == []


def test_a_failing_webhook_records_nothing(planted):
    db, settings = planted
    out = gpuledger(
        "alerts",
        "--db",
        db,
        "--settings",
        settings,
        "--as-of",
        day(W14).isoformat(),
        "--webhook",
        "http://127.0.0.1:9/x",
    )
    assert out.returncode == 1 and out.stderr.startswith("error: webhook 127.0.0.1:9")
    again = gpuledger(
        "alerts", "--db", db, "--settings", settings, "--as-of", day(W14).isoformat(), "--dry-run", "--json"
    )
    assert _keys(json.loads(again.stdout), "new") == EXPECTED[0]


def test_budgets_as_of_gives_the_hand_worked_figures(planted):
    db, settings = planted
    out = gpuledger(
        "budgets", "--db", db, "--settings", settings, "--as-of", day(W14 + 2).isoformat(), "--json"
    )
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert row["scope"] == "team" and row["name"] == "team:nlp"
    assert (row["period_start"], row["period_end"]) == (day(W14).isoformat(), day(W14 + 6).isoformat())
    want = round(expected_forecast(SPEND, W14 + 2, W14, W14 + 6), 2)
    assert (row["budget_usd"], row["spent_usd"], row["forecast_usd"]) == (200.0, 120.0, want)
    assert row["forecast_low_usd"] <= want <= row["forecast_high_usd"]
    assert row["forecast_low_usd"] >= 120.0
    assert row["status"] == "at_risk"
    fleet = gpuledger(
        "budgets",
        "--db",
        db,
        "--settings",
        settings,
        "--as-of",
        day(W14 + 6).isoformat(),
        "--forecast",
        "fleet",
        "--period",
        "week",
        "--json",
    )
    assert json.loads(fleet.stdout)[0]["forecast_usd"] == 280.0
    assert dt.date.fromisoformat(json.loads(fleet.stdout)[0]["as_of"]) == day(W14 + 6)


def test_the_weekly_report_carries_the_budgets_as_of_its_last_day(planted):
    db, settings = planted
    cli = gpuledger(
        "budgets", "--db", db, "--settings", settings, "--as-of", day(W14 + 6).isoformat(), "--json"
    )
    (want,) = json.loads(cli.stdout)
    out = gpuledger("report", "--db", db, "--settings", settings, "--week", "2025-W14", "--format", "json")
    assert out.returncode == 0, out.stderr
    (got,) = json.loads(out.stdout)["budgets"]
    assert got == want
    assert (got["spent_usd"], got["status"]) == (280.0, "over")
    html = gpuledger(
        "report", "--db", db, "--settings", settings, "--week", "2025-W14", "--format", "html"
    ).stdout
    assert "Budgets" in html and "team:nlp (2025-W14)" in html and "over budget" in html
    # a team's report shows its own budget; another team's shows none
    other = gpuledger(
        "report",
        "--db",
        db,
        "--settings",
        settings,
        "--week",
        "2025-W14",
        "--team",
        "nlp",
        "--format",
        "json",
    )
    assert json.loads(other.stdout)["budgets"] == [want]
