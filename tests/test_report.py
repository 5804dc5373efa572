"""The weekly report: its content in every format, its numbers identical to ``gpuledger summary --json``
(this week and the previous one), one file per team, and hostile names inert everywhere."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from analytics.filters import Filters
from analytics.recommend import RECOMMENDATION_COLUMNS
from collectors.ingest import ingest_file
from gpuledger.ledger.db import writer
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.settings import Settings
from gpuledger.reports import fmt
from gpuledger.reports.content import collect, kind_label
from gpuledger.reports.weekly import FORMATS, build_report, last_full_week, render, week_range
from tests.conftest import ROOT, gpuledger

JOBS = ROOT / "tests" / "fixtures" / "dashboard" / "jobs.csv"
HEADER = JOBS.read_text().splitlines()[0]
# one run of dash-1's family (llama-7b on H100) the week before: 2 × 5 h × $2.99 = $29.90, 1e8 tokens
PREVIOUS_WEEK = (
    "prev-1,alice,nlp,atlas,H100-SXM-80GB,2,2026-11-10T00:00:00Z,2026-11-10T05:00:00Z,COMPLETED,training,"
    "llm-pretrain-b,llama-7b,7e9,bf16,adamw,8,4096,20000,24000,100000000"
)
SCRIPT = "<script>alert(1)</script>"
LINK = "[click](https://evil.example)"
HOSTILE = (
    f'evil-1,"{LINK}",{SCRIPT},atlas,H100-SXM-80GB,1,2026-11-18T00:00:00Z,2026-11-18T02:00:00Z,COMPLETED,'
    'training,"=HYPERLINK(""https://evil.example"")",,,,,,,,,'
)
WEEK = ("--since", "2026-11-16", "--until", "2026-11-22")


def _ledger(db_path: str, tmp_path: Path, *extra: str) -> str:
    with writer(db_path) as con:
        ingest_file(con, JOBS)
        if extra:
            more = tmp_path / "more.csv"
            more.write_text("\n".join([HEADER, *extra]) + "\n")
            ingest_file(con, more)
    return db_path


# Built once for the module: the tests below only read these ledgers (the report and summary commands).
@pytest.fixture(scope="module")
def ledger_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("report")
    return _ledger(str(tmp / "ledger.duckdb"), tmp, PREVIOUS_WEEK)


@pytest.fixture(scope="module")
def hostile_ledger(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("report-hostile")
    return _ledger(str(tmp / "ledger.duckdb"), tmp, HOSTILE)


cli = gpuledger  # the command's main() in this process (tests/conftest.py)


# ---------------------------------------------------------------- weeks


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


# ---------------------------------------------------------------- formatting


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (-0.001, "$0.00"),
        (-0.004999, "$0.00"),
        (0.0, "$0.00"),
        (-3.2, "\u2212$3.20"),
        (1019.07, "$1,019.07"),
        (None, "n/a"),
        (float("nan"), "n/a"),
    ],
)
def test_usd_never_prints_minus_zero(value, expected):
    assert fmt.usd(value) == expected


@pytest.mark.parametrize(
    ("now", "before", "money", "expected"),
    [
        (582.712, 29.9, True, "+$552.81 (+1,848.9 %)"),  # 552.812 / 29.9 = 18.4887
        (10.0, 10.004, True, "$0.00 (0.0 %)"),  # no sign on a change that rounds to zero
        (5.0, 0.0, True, "+$5.00"),  # no percentage of nothing
        (0.0, 0.0, False, "no change"),
        (1.0, None, True, "n/a (no figure for the previous period)"),
        (90.0, 100.0, False, "-10.0 (-10.0 %)"),
    ],
)
def test_change_against_the_previous_period(now, before, money, expected):
    assert fmt.change(now, before, money=money) == expected


def test_percent_has_one_format():
    assert fmt.pct(97.4123) == "97.4 %"
    assert fmt.pct(-0.04) == "0.0 %"
    assert fmt.share(1.7, 100) == "1.7 %"
    assert fmt.share(1, 0) == "n/a"


def test_kind_labels_are_words_not_codes():
    import analytics.recommend as recommend

    for kind in recommend.KINDS:
        label = kind_label(kind)
        assert "_" not in label and label != kind, (kind, label)
    assert kind_label("fewer_gpus") in ("Fewer GPUs", getattr(recommend, "KIND_LABELS", {}).get("fewer_gpus"))


# ---------------------------------------------------------------- numbers equal the CLI's


def test_json_headline_is_summary_json_for_the_week_and_the_one_before(ledger_file):
    done = cli("report", "--week", "2026-W47", "--format", "json", "--db", ledger_file)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    this_week = json.loads(cli("summary", "--json", *WEEK, "--db", ledger_file).stdout)
    before = json.loads(
        cli("summary", "--json", "--since", "2026-11-09", "--until", "2026-11-15", "--db", ledger_file).stdout
    )
    assert report["headline"] == this_week
    assert report["previous"] == before
    assert report["previous"].keys() == report["headline"].keys()
    # by hand: W47 holds the whole fixture: H100 (8 × 10 + 1 × 12 + 4 × 24 = 188 GPU-h) at $2.99, L4 2 × 6 h
    # at $0.71, A10G 12 h at $1.006; W46 holds prev-1 alone: 2 × 5 h at $2.99
    assert this_week["spend_usd"] == pytest.approx(188 * 2.99 + 2 * 6 * 0.71 + 12 * 1.006)
    assert before["spend_usd"] == pytest.approx(2 * 5 * 2.99)
    assert report["change"]["spend_usd"] == pytest.approx(188 * 2.99 + 12 * 0.71 + 12 * 1.006 - 29.9)
    assert report["change"]["jobs"] == 5 - 1
    # JSON is strict: no NaN / Infinity tokens
    json.loads(done.stdout, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


def test_html_report_is_mail_safe_and_matches_summary(ledger_file, tmp_path: Path):
    out = tmp_path / "w47.html"
    done = cli("report", "--week", "2026-W47", "--out", str(out), "--db", ledger_file)
    assert done.returncode == 0, done.stderr
    html = out.read_text()
    # what a reader sees: a figure's parts are nowrap spans (html.py), so compare the text between the tags
    seen = re.sub(r"<[^>]+>", "", html)
    summary = json.loads(cli("summary", "--json", *WEEK, "--db", ledger_file).stdout)
    assert f"${summary['spend_usd']:,.2f}" in html
    assert f"${summary['team_waste_usd']:,.2f}" in html
    assert f"{summary['gpu_hours']:,.1f}" in html
    assert "+$552.81 (+1,848.9 %)" in seen  # $582.71 against $29.90 the week before
    assert "$8.52" in html  # dash-3 FAILED training: its whole cost is failed_usd
    assert "week 2026-W47" in html
    total = json.loads(cli("recommend", "--total", "--json", *WEEK, "--db", ledger_file).stdout)
    assert f"Possible savings: ${total['total_usd_per_week']:,.2f} / week" in html  # the CLI's figure
    # mail clients: no scripts, no SVG, no <style> block, no external resources; styles inline
    low = html.lower()
    assert "<script" not in low and "<svg" not in low and "<style" not in low
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert 'style="' in html and "bgcolor=" in html  # bars are table cells with a colour
    # the definitions travel with the report; nothing points at docs the recipient does not have
    assert "docs/metrics.md" not in html
    assert "What the figures mean" in html
    assert "unbroken runs of at least 30 minutes at or below 5 % utilization" in html  # the settings in force
    # no "Unpriced GPU-hours 0.0" headline: everything here has a price
    assert "Unpriced" not in html and "without a price" not in html.split("What the figures mean")[0]
    assert "-0.0" not in html and "$-" not in html


def test_sections_come_in_the_issue_order(ledger_file):
    done = cli("report", "--week", "2026-W47", "--format", "md", "--db", ledger_file)
    text = done.stdout
    order = [
        "## Headline",
        "## Top 5 actions",
        "## Where the money went",
        "## Spend and waste by team",
        "## Users by the waste teams control",
        "## Spend and waste by GPU model",
        "## Costliest 10 jobs",
        "## Unit-cost trends of recurring run families",
        "## Energy and CO2e",
        "## Data-quality notes",
        "## What the figures mean",
    ]
    positions = [text.index(h) for h in order]
    assert positions == sorted(positions)


def test_trend_of_a_recurring_run_family(ledger_file):
    report = json.loads(cli("report", "--week", "2026-W47", "--format", "json", "--db", ledger_file).stdout)
    (trend,) = [t for t in report["trends"] if t["family"] == "llama-7b on H100-SXM-80GB"]
    assert trend["weeks"][-2:] == ["2026-W46", "2026-W47"]
    # by hand: W46 prev-1 $29.90 / 1e8 tokens × 1e6 = $0.299; W47 dash-1 8 × 10 h × $2.99 = $239.20 / 8.64e8
    assert trend["usd_per_mtok"][-2] == pytest.approx(29.9 / 100)
    assert trend["usd_per_mtok"][-1] == pytest.approx(239.2 / 864)
    # whisper-ft ran once only: not a recurring family
    assert not [t for t in report["trends"] if t["family"].startswith("whisper-large")]


def test_markdown_report_and_team_filter(ledger_file):
    with writer(ledger_file) as con:  # build_report works on any connection
        text = build_report(
            con,
            filters=Filters(since=dt.date(2026, 11, 16), until=dt.date(2026, 11, 22), teams=("vision",)),
            settings=Settings(),
            fmt="md",
        )
    assert text.startswith("# GPU cost report, week 2026-W47")
    assert "| Spend | \\$20.59 |" in text  # dash-3 2 × 6 h × $0.71 + dash-4 12 h × $1.006
    assert "teams\\: vision" in text or "teams: vision" in text
    assert "nlp" not in text and "alice" not in text
    assert "-0.0" not in text and "$-" not in text


def test_per_team_writes_one_file_per_team_with_only_its_jobs(ledger_file, tmp_path: Path):
    folder = tmp_path / "teams"
    done = cli(
        "report", "--week", "2026-W47", "--per-team", str(folder), "--format", "json", "--db", ledger_file
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["nlp.json", "speech.json", "vision.json"]
    vision = json.loads((folder / "vision.json").read_text())
    assert vision["headline"]["spend_usd"] == pytest.approx(2 * 6 * 0.71 + 12 * 1.006)
    assert vision["headline"]["filters"]["teams"] == ["vision"]
    # users ranked by their waste: carol's dash-3 FAILED ($8.52 badput); dave's dash-4 has no telemetry and did
    # not fail, so no waste and no row
    assert [(u["user_name"], u["top_job_id"]) for u in vision["by_user"]] == [("carol", "dash-3")]
    assert vision["by_user"][0]["team_waste_usd"] == pytest.approx(2 * 6 * 0.71)
    assert {j["job_id"] for j in vision["costliest_jobs"]} == {"dash-3", "dash-4"}
    nlp = json.loads((folder / "nlp.json").read_text())
    assert nlp["previous"]["spend_usd"] == pytest.approx(29.9)  # prev-1 was nlp's


@pytest.mark.parametrize("fmt_name", FORMATS)
def test_every_format_renders_and_follows_the_out_suffix(ledger_file, tmp_path: Path, fmt_name):
    out = tmp_path / f"report.{fmt_name}"
    done = cli("report", "--week", "2026-W47", "--out", str(out), "--db", ledger_file)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    first = {
        "html": "<!DOCTYPE html>",
        "md": "# GPU cost report",
        "txt": "GPU cost report",
        "csv": "section,name,figure",
        "json": "{",
    }
    assert text.startswith(first[fmt_name])


def test_csv_is_one_figure_a_row(ledger_file):
    rows = list(
        csv.DictReader(
            io.StringIO(cli("report", "--week", "2026-W47", "--format", "csv", "--db", ledger_file).stdout)
        )
    )
    spend = [r for r in rows if r["section"] == "headline" and r["figure"] == "spend_usd"]
    assert float(spend[0]["value"]) == pytest.approx(582.712)
    assert float(spend[0]["previous_value"]) == pytest.approx(29.9)
    team = {
        r["name"]: float(r["value"]) for r in rows if r["section"] == "team" and r["figure"] == "spend_usd"
    }
    assert team["vision"] == pytest.approx(20.592)


def test_week_and_since_together_is_a_usage_error(ledger_file):
    done = cli("report", "--week", "2026-W47", "--since", "2026-11-16", "--db", ledger_file)
    assert done.returncode == 2
    assert "either --week or --since/--until" in done.stderr


def test_bad_week_is_one_error_line(ledger_file):
    done = cli("report", "--week", "2026-47", "--db", ledger_file)
    assert done.returncode == 1
    assert done.stderr.strip() == "error: --week: not an ISO week like 2026-W47: '2026-47'"


# ---------------------------------------------------------------- hostile names


def _hostile_data(db: str):
    with writer(db) as con:
        data = collect(
            con,
            filters=Filters(since=dt.date(2026, 11, 16), until=dt.date(2026, 11, 22)),
            settings=Settings(),
        )
    # one action owned by the hostile user, so the actions table carries the names too
    rec = {c: None for c in RECOMMENDATION_COLUMNS} | {
        "kind": "fewer_gpus",
        "target_type": "job",
        "target": "evil-1",
        "user_name": LINK,
        "team": SCRIPT,
        "evidence": f"Job evil-1 ({LINK}) held 1 × H100.",
        "action": "Request 1 GPU.",
        "usd_per_week": 12.5,
        "confidence": "high",
    }
    return replace(data, recommendations=pl.DataFrame([rec], schema=RECOMMENDATION_COLUMNS))


def test_hostile_names_are_inert_in_markdown(hostile_ledger):
    text = render(_hostile_data(hostile_ledger), "md")
    assert "alert(1)" in text  # the name is shown...
    assert "<script" not in text.lower()  # ...never as a tag
    assert not re.search(r"(?<!\\)\[click(?<!\\)\]\(", text)  # brackets escaped: never a link
    assert "\\[click\\](https\\://evil.example)" in text
    assert "https://" not in text  # never an autolink
    assert kind_label("fewer_gpus") in text and "fewer_gpus" not in text


def test_hostile_names_are_inert_in_html(hostile_ledger):
    html = render(_hostile_data(hostile_ledger), "html")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script" not in html.lower()
    assert "<a " not in html.lower()


def test_the_page_preview_demotes_the_reports_own_headings_only(hostile_ledger):
    html = render(_hostile_data(hostile_ledger), "html")
    shown = fmt.demote_headings(html)
    # the report has one h1 (its title) and one h2 per section; in the page they are h2 and h3
    assert (html.count("<h1"), shown.count("<h1"), shown.count("<h2")) == (1, 0, 1)
    assert shown.count("<h3") == html.count("<h2") > 0 and shown.count("</h3>") == html.count("</h2>")
    assert re.sub(r"</?h[1-6]", "", shown) == re.sub(r"</?h[1-6]", "", html)  # nothing else changed
    assert fmt.demote_headings('<H1 style="x">t</H1><h6>s</h6> &lt;h1&gt;') == (
        '<h2 style="x">t</h2><h6>s</h6> &lt;h1&gt;'  # an escaped name is text, not a tag
    )


def test_hostile_names_are_inert_in_csv_json_and_text(hostile_ledger):
    data = _hostile_data(hostile_ledger)
    rows = list(csv.reader(io.StringIO(render(data, "csv"))))
    names = [r[3] for r in rows if r[0] == "job" and r[1] == "evil-1" and r[2] == "name"]
    assert names == ['\'=HYPERLINK("https://evil.example")']  # a spreadsheet shows it, never runs it
    assert not any(cell.startswith(("=", "+", "@")) for r in rows for cell in r)
    report = json.loads(render(data, "json"))
    assert {t["team"] for t in report["by_team"]} >= {SCRIPT}  # JSON carries the exact string, as data
    assert SCRIPT in render(data, "txt")  # plain text is never interpreted


def test_per_team_file_names_are_safe(hostile_ledger, tmp_path: Path):
    folder = tmp_path / "teams"
    done = cli(
        "report", "--week", "2026-W47", "--per-team", str(folder), "--format", "md", "--db", hostile_ledger
    )
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["nlp.md", "script-alert-1-script.md", "speech.md", "vision.md"]
    assert all(p.parent == folder for p in folder.iterdir())


def test_unpriced_gpu_hours_are_a_data_quality_note_not_a_headline(db_path, tmp_path: Path):
    # 2 GPUs × 3 h on a model the catalog and the price sheet do not know: 6.0 GPU-hours, never $0
    odd = "odd-1,zoe,nlp,atlas,Mystery GPU 9000,2,2026-11-18T00:00:00Z,2026-11-18T03:00:00Z,COMPLETED,training,odd,,,,,,,,,"
    db = _ledger(db_path, tmp_path, odd)
    done = cli("report", "--week", "2026-W47", "--format", "md", "--db", db)
    assert done.returncode == 0, done.stderr
    notes = done.stdout.split("## Data-quality notes")[1].split("## ")[0]
    assert (
        "- 6.0 GPU-hours ran on GPU models without a price (Mystery GPU 9000) and are not in the spend"
        in notes
    )
    assert "Unpriced" not in done.stdout.split("## Top 5 actions")[0]  # not a headline figure
    report = json.loads(cli("report", "--week", "2026-W47", "--format", "json", "--db", db).stdout)
    assert report["headline"]["unpriced_gpu_hours"] == pytest.approx(2 * 3)
    assert report["headline"]["spend_usd"] == pytest.approx(188 * 2.99 + 2 * 6 * 0.71 + 12 * 1.006)


def test_cancelled_spend_is_its_own_headline_figure_not_waste(tmp_path: Path):
    # a training run its user cancelled after 2 h on 1 H100 ($2.99/h), no telemetry: $5.98 cancelled, none of
    # it failed (before: the whole $5.98 was failed_usd, "a failed run")
    cancelled = (
        "can-1,alice,nlp,atlas,H100-SXM-80GB,1,2026-11-18T00:00:00Z,2026-11-18T02:00:00Z,CANCELLED,training,"
        "can-run,,,,,,,,,"
    )
    db = _ledger(str(tmp_path / "ledger.duckdb"), tmp_path, cancelled)
    alone = json.loads(cli("summary", "--json", *WEEK, "--team", "nlp", "--db", db).stdout)
    # with the fixture's notebook dash-2 that bob cancelled after 12 h: (2 + 12) × $2.99 = $41.86
    assert alone["cancelled_usd"] == pytest.approx((2 + 12) * 2.99)
    assert alone["waste"]["failed_usd"] == pytest.approx(0.0)  # dash-3 (FAILED) is team vision
    done = cli("report", "--week", "2026-W47", "--format", "md", "--db", db)
    assert done.returncode == 0, done.stderr
    headline = done.stdout.split("## ")[1]
    assert "Cancelled by their users (not waste)" in headline
    report = json.loads(cli("report", "--week", "2026-W47", "--format", "json", "--db", db).stdout)
    assert report["headline"]["cancelled_usd"] == pytest.approx((2 + 12) * 2.99)
