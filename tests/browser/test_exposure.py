"""The dashboard is safe to expose: the measured cases of issue 9, each against a real server in Chromium.

- ``gpuledger dashboard`` listens on 127.0.0.1 (a connection to this machine's outside address is refused);
  ``--host 0.0.0.0`` serves everywhere and warns when no sign-in is configured;
- user strings (team, user, job and file names) never become links, markup or colour directives, on any
  page, however they are written: ``[click me](https://evil.example)``, ``www.…``, ``<script>``, emails;
- the Jobs page's CSV download neutralizes every text cell that starts with ``= + - @``, tab or CR, and
  Streamlit's own table export (which cannot) is not offered;
- uploads over ``dashboard.max_upload_mb`` are refused, and the uploader says the limit;
- an error inside a page shows one sentence with the next step, never a traceback or a server path; the
  traceback is in the server log.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import socket
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import (
    FIXTURES,
    ROOT,
    Server,
    _build_ledger,
    _free_port,
    assert_no_exception,
    navigate,
    open_page,
    screenshot,
    served,
    wait_for_app,
)

EVIL_TEAM = "[click me](https://evil.example)"
WWW_TEAM = "www.evil.example"
HTML_TEAM = '<a href="https://evil.example">plot link</a><b>bold</b>'  # plotly renders such tags in labels
HEADER = "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state,kind,name"
# one field per cell, quoted for CSV; every text a spreadsheet or Markdown could run is here
EVIL_ROWS = [
    ["evil-1", "<script>alert(1)</script>", EVIL_TEAM, "atlas", "H100-SXM-80GB", "1",
     "2026-11-18T00:00:00Z", "2026-11-18T05:00:00Z", "COMPLETED", "training", '=HYPERLINK("https://evil.example","x")'],
    ["evil-2", "@SUM(A1)", WWW_TEAM, "atlas", "H100-SXM-80GB", "1",
     "2026-11-18T00:00:00Z", "2026-11-18T03:00:00Z", "FAILED", "training", "+cmd|' /C calc'!A0"],
    ["evil-3", "-2+3", ":red[loud] mail@evil.example", "atlas", "H100-SXM-80GB", "1",
     "2026-11-18T00:00:00Z", "2026-11-18T02:00:00Z", "COMPLETED", "training", "\tpadded"],
    ["evil-4", "mallory", HTML_TEAM, "atlas", "H100-SXM-80GB", "1",
     "2026-11-18T00:00:00Z", "2026-11-18T01:00:00Z", "COMPLETED", "training", "<i>job</i>"],
]  # fmt: skip
PAGES = [  # training first: opened by its own URL (the others by their links)
    "training",
    "",
    "waste",
    "jobs",
    "fleet",
    "recommendations",
    "reports",
]


def outside_address() -> str | None:
    """This machine's address on its outbound interface (no packet is sent), or None when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
        except OSError:
            return None
        ip = s.getsockname()[0]
    return None if ip.startswith("127.") or ip == "0.0.0.0" else ip


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=3):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def exposed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``gpuledger dashboard --host 0.0.0.0`` without sign-in, a 1 MB upload limit, and a ledger whose team,
    user and job names are hostile (plus the demo fleet and tests/fixtures/dashboard/jobs.csv)."""
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("Debian chromium is not installed (/usr/bin/chromium)")
    from collectors.ingest import ingest_file
    from gpuledger.ledger.db import writer

    tmp = tmp_path_factory.mktemp("exposed")
    db = str(tmp / "ledger.duckdb")
    settings = tmp / "settings.toml"
    settings.write_text("[dashboard]\nmax_upload_mb = 1\n")
    evil = tmp / "evil_jobs.csv"
    with evil.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(HEADER.split(","))
        w.writerows(EVIL_ROWS)
    with pytest.MonkeyPatch.context() as mp:  # the in-process demo build reads the same settings
        mp.setenv("GPULEDGER_SETTINGS", str(settings))
        _build_ledger(db)
        with writer(db) as con:
            ingest_file(con, evil)
    port = _free_port()
    env = dict(os.environ, GPULEDGER_SETTINGS=str(settings), PYTHONPATH=str(ROOT))
    log = tmp / "dashboard.log"
    argv = [sys.executable, "-m", "gpuledger", "dashboard", "--no-demo", "--host", "0.0.0.0"]
    argv += ["--port", str(port), "--db", db]
    with served(argv, port, db, env, log) as server:
        yield server


def number(text: str) -> bool:
    """A number cell (a negative cost is a number, not a formula, to a spreadsheet too)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def visible(page: Page) -> str:
    """Main area and sidebar text as a person reads it (word joiners are invisible)."""
    parts = [page.get_by_test_id("stMain").inner_text()]
    if page.get_by_test_id("stSidebar").count():
        parts.append(page.get_by_test_id("stSidebar").inner_text())
    return "\n".join(parts).replace("\u2060", "")


# ---------------------------------------------------------------- where it listens


def test_the_dashboard_listens_on_loopback_only(server: Server) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    assert reachable("127.0.0.1", port)
    ip = outside_address()
    if ip is None:
        pytest.skip("this machine has no address besides loopback")
    assert not reachable(ip, port), f"the dashboard answers on {ip}:{port}"


def test_host_flag_exposes_it_with_a_warning(exposed: Server) -> None:
    log = exposed.log.read_text()
    assert (
        "warning: listening on 0.0.0.0 without sign-in: anyone who can reach port "
        f"{exposed.url.rsplit(':', 1)[1]} sees every team's spend. Configure [auth] and [access] in the "
        "settings (docs/settings.md)." in log
    )
    assert "without sign-in)" in log
    ip = outside_address()
    if ip is not None:
        assert reachable(ip, int(exposed.url.rsplit(":", 1)[1]))


# ---------------------------------------------------------------- user strings


def test_user_strings_are_never_links_or_markup(
    exposed: Server, page: Page, subtests: pytest.Subtests
) -> None:
    """Hostile team names in the URL, on every page: the first opened by its own URL, the others reached by
    their sidebar links (which keep the view's query string, so each page draws the same names)."""
    query = urllib.parse.urlencode([("team", EVIL_TEAM), ("team", WWW_TEAM), ("team", HTML_TEAM)])
    open_page(page, exposed, PAGES[0], query)
    for path in PAGES:
        with subtests.test(page=path or "overview"):
            if path != PAGES[0]:
                navigate(page, path)
            teams = urllib.parse.parse_qs(urllib.parse.urlsplit(page.url).query).get("team", [])
            assert sorted(teams) == sorted([EVIL_TEAM, WWW_TEAM, HTML_TEAM]), page.url
            _assert_names_are_text(page, path)


def _assert_names_are_text(page: Page, path: str) -> None:
    assert_no_exception(page)
    page.wait_for_function(  # plotly draws after the script run; its links are SVG <a xlink:href>
        """() => [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
                 .every(e => e.querySelector('.main-svg'))""",
        timeout=20_000,
    )
    # a link of the dashboard's own (another page, with the view's filters in its query string) is fine;
    # a link that leaves it, or a mailto:/javascript: one, is what a hostile name must never make
    links = page.evaluate(
        """() => [...document.querySelectorAll('a')]
                 .map(a => a.getAttribute('href') || a.getAttribute('xlink:href') || '')
                 .filter(h => {
                     if (/^(mailto|javascript):/i.test(h)) return true;
                     let u; try { u = new URL(h, location.href); } catch (e) { return /evil/i.test(h); }
                     return u.host !== location.host && /evil/i.test(u.host + u.pathname);
                 })"""
    )
    assert links == []
    assert page.locator("[data-testid='stMain'] b:has-text('bold'), svg b, svg i").count() == 0
    assert page.locator("script:has-text('alert(1)')").count() == 0
    assert page.locator("[data-testid='stMain'] h1").count() <= 1  # no heading smuggled in by a name
    if path == "":
        text = visible(page)
        # the filter caption shows both names exactly as typed
        assert f"teams: {HTML_TEAM}, {EVIL_TEAM}, {WWW_TEAM}" in text, text[:2000]
        screenshot(page, "exposure-overview-hostile-teams")


def test_the_upload_banner_shows_the_file_name_as_text(server: Server, page: Page) -> None:
    name = "[click me](javascript:alert(1)) www.evil.example mail@evil.example jobs.csv"
    open_page(page, server, "upload")
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(
        files=[{"name": name, "mimeType": "text/csv", "buffer": (FIXTURES / "jobs.csv").read_bytes()}]
    )
    page.wait_for_selector("[data-testid='stAlert']", timeout=60_000)
    wait_for_app(page)
    banner = page.get_by_test_id("stAlert").first
    assert f"Read {name} as jobs_csv" in banner.inner_text().replace("\u2060", "")
    assert banner.locator("a").count() == 0
    assert page.locator("a[href*='evil'], a[href^='javascript:'], a[href^='mailto:']").count() == 0


# ---------------------------------------------------------------- downloads


def test_the_jobs_csv_neutralizes_formulas(exposed: Server, page: Page) -> None:
    open_page(page, exposed, "jobs")
    # Streamlit's own export writes cells as they are: it is not offered
    page.get_by_test_id("stDataFrame").first.hover()
    page.wait_for_timeout(500)
    assert page.get_by_role("button", name="Download as CSV").count() == 0
    with page.expect_download() as info:
        page.get_by_role("button", name="Download these jobs (CSV, every column)").click()
    rows = list(csv.DictReader(io.StringIO(Path(info.value.path()).read_text(encoding="utf-8-sig"))))
    by_id = {r["job_id"]: r for r in rows}
    assert by_id["evil-1"]["name"] == "'" + EVIL_ROWS[0][10]
    assert by_id["evil-1"]["user_name"] == "<script>alert(1)</script>"  # text, not a formula: as it is
    assert by_id["evil-2"]["user_name"] == "'@SUM(A1)"
    assert by_id["evil-2"]["name"] == "'+cmd|' /C calc'!A0"
    assert by_id["evil-3"]["user_name"] == "'-2+3"
    assert (
        by_id["evil-3"]["name"] == " padded"
    )  # a tab lands as a space (collectors/names.py): nothing to neutralize
    risky = ("=", "+", "-", "@", "\t", "\r")
    unsafe = [
        (r["job_id"], k, v) for r in rows for k, v in r.items() if v.startswith(risky) and not number(v)
    ]
    assert unsafe == []
    expected = json.loads(exposed.cli("jobs", "--json").stdout)
    assert sorted(by_id) == sorted(j["job_id"] for j in expected)  # every job of the view, once


# ---------------------------------------------------------------- uploads


def test_the_default_upload_limit_is_100_mb(server: Server, page: Page) -> None:
    open_page(page, server, "upload")
    assert "100MB per file" in page.get_by_test_id("stFileUploader").inner_text()


def test_an_upload_over_the_limit_is_refused(exposed: Server, page: Page) -> None:
    open_page(page, exposed, "upload")
    assert "1MB per file" in page.get_by_test_id("stFileUploader").inner_text()
    big = (FIXTURES / "jobs.csv").read_bytes() + b"#" * (1536 * 1024)
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(
        files=[{"name": "big_jobs.csv", "mimeType": "text/csv", "buffer": big}]
    )
    # Streamlit refuses it in the browser: the widget names the limit, no script run reads the file
    expect(page.get_by_test_id("stFileUploader")).to_contain_text(
        re.compile(r"File must be 1(\.0)? ?MB or smaller")
    )
    wait_for_app(page)
    text = page.get_by_test_id("stMain").inner_text()
    assert "Read big_jobs.csv" not in text


# ---------------------------------------------------------------- errors (last: it breaks the ledger)


def test_an_error_shows_a_sentence_and_logs_the_traceback(exposed: Server, page: Page) -> None:
    from gpuledger.ledger.db import writer

    with writer(exposed.db) as con:  # a ledger an analysis cannot read: the Fleet heatmap's column is gone
        con.execute("ALTER TABLE samples_hour RENAME COLUMN util_s TO util_s_gone")
    open_page(page, exposed, "fleet")
    assert page.get_by_test_id("stException").count() == 0
    error = page.get_by_test_id("stAlertContentError")
    assert error.count() >= 1
    assert "This page could not be drawn" in error.first.inner_text()
    assert "Reload the page" in error.first.inner_text()
    body = visible(page)
    for leak in ("Traceback", 'File "', str(ROOT), "site-packages", "BinderException", "util_s_gone"):
        assert leak not in body, leak
    screenshot(page, "exposure-page-error")
    log = exposed.log.read_text(errors="replace")
    assert "the Fleet page failed" in log and "Traceback" in log and "util_s" in log
