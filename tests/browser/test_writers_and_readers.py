"""Writers and readers at once (docs/concurrency.md): ``gpuledger ingest`` runs in another process while the
dashboard answers page loads. No page shows a lock error or an exception, and after the ingest commits the
next page load shows the new data — equal to ``gpuledger summary --json`` run afterwards."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from playwright.sync_api import Page

from tests.browser.conftest import ROOT, Server, assert_no_exception, open_page, screenshot
from tests.browser.test_pages import metric_value, money

# What a lock conflict would look like: DuckDB's own messages and gpuledger's DatabaseBusyError sentence.
LOCK_ERRORS = ("Could not set lock", "Conflicting lock", "held the database", "IO Error", "IOException")
N_JOBS = 20_000  # the ingest then holds the write lock for about a second on 2 cores


def generate_jobs(path: Path, n: int) -> None:
    """A jobs table of ``n`` one-hour 1 × H100 jobs of team "concurrency", written by DuckDB (no Python loop)."""
    duckdb.sql(
        f"""COPY (
              SELECT 'conc-' || i AS job_id, 'u' || (i % 7) AS user, 'concurrency' AS team, 'atlas' AS cluster,
                     'H100-SXM-80GB' AS gpu_model, 1 AS gpu_count,
                     strftime(TIMESTAMP '2026-11-21' + to_seconds(i * 3), '%Y-%m-%dT%H:%M:%SZ') AS start,
                     strftime(TIMESTAMP '2026-11-21 01:00' + to_seconds(i * 3), '%Y-%m-%dT%H:%M:%SZ') AS "end",
                     'COMPLETED' AS state, 'training' AS kind
              FROM range({n}) t(i)
            ) TO '{path}' (HEADER, DELIMITER ',')"""
    )


def test_pages_load_during_an_ingest_and_then_show_the_new_data(
    page: Page, server: Server, tmp_path: Path
) -> None:
    before = money(server.summary()["spend_usd"])  # the page showing it is checked after the ingest

    path = tmp_path / "many_jobs.csv"
    generate_jobs(path, N_JOBS)
    ingest = subprocess.Popen(
        [sys.executable, "-m", "gpuledger", "ingest", str(path), "--db", server.db],
        cwd=ROOT,
        env=server.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    loads_during = 0
    # Each load asks for a view no earlier load computed (another "until" day), so it misses the page cache
    # and really opens the ledger while the writer may hold it.
    views = [("", f"until=2026-11-{day}") for day in range(22, 10, -1)] + [("", "")]
    deadline = time.monotonic() + 240
    try:
        while ingest.poll() is None and time.monotonic() < deadline:
            url_path, query = views[loads_during % len(views)]
            open_page(page, server, url_path, query=query)
            assert_no_exception(page)
            body = page.get_by_test_id("stMain").inner_text()
            for sign in LOCK_ERRORS:
                assert sign not in body, body[:400]
            assert page.get_by_test_id("stAlertContentError").count() == 0
            loads_during += 1
        out, err = ingest.communicate(timeout=240)
    finally:
        if ingest.poll() is None:
            ingest.kill()
    assert ingest.returncode == 0, err
    assert f"{N_JOBS:,} jobs" in out
    assert loads_during >= 1, "no page load overlapped the ingest"

    open_page(page, server)
    screenshot(page, "overview-after-ingest")
    assert_no_exception(page)
    after = metric_value(page, "Spend")
    expected = server.summary()
    assert after == money(expected["spend_usd"])
    assert after != before
    concurrency = server.summary("--team", "concurrency")
    # by hand: 20,000 jobs × 1 GPU × 1 h × $2.99 (H100-SXM-80GB on demand) = $59,800
    assert concurrency["spend_usd"] == pytest.approx(N_JOBS * 1 * 1 * 2.99)
