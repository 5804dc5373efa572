"""``gpuledger dashboard`` itself (the README's run command) on an empty ledger: it serves the app, a deep link
as the first request is routed through app.py, and the Overview tells the user how to load data instead of
drawing empty charts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from playwright.sync_api import Browser, expect

from tests.browser.conftest import ROOT, _free_port, _wait_healthy, screenshot, wait_for_app


def test_dashboard_command_serves_the_empty_state(browser: Browser, tmp_path: Path) -> None:
    port = _free_port()
    db = tmp_path / "empty.duckdb"
    log = tmp_path / "dashboard.log"
    env = dict(os.environ, GPULEDGER_SETTINGS=str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuledger",
                "dashboard",
                "--no-demo",
                "--port",
                str(port),
                "--db",
                str(db),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_healthy(f"http://127.0.0.1:{port}", proc, log)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        # A deep link (a shared URL) as the server's very first request: Streamlit would run pages/waste.py without
        # app.py (no sidebar filters, every module in the menu) unless the page reroutes (pages/_ui.py).
        page.goto(f"http://127.0.0.1:{port}/waste")
        # the first run can end before the router's rerun draws the page: wait for what that rerun shows
        expect(page.get_by_test_id("stMain")).to_contain_text("No data in the ledger yet", timeout=60_000)
        expect(page.get_by_test_id("stSidebar")).to_contain_text("From (UTC day)", timeout=60_000)
        wait_for_app(page)
        nav = page.get_by_test_id("stSidebarNav").inner_text()
        assert "Waste" in nav and "Overview" in nav, nav
        assert "_data" not in nav and "\nui\n" not in f"\n{nav}\n" and "app" not in nav.split("\n"), nav
        assert "From (UTC day)" in page.get_by_test_id("stSidebar").inner_text()
        assert "No data in the ledger yet" in page.get_by_test_id("stMain").inner_text()
        page.goto(f"http://127.0.0.1:{port}/")
        expect(page.get_by_test_id("stMain")).to_contain_text("gpuledger ingest FILE", timeout=60_000)
        wait_for_app(page)
        screenshot(page, "overview-empty")
        body = page.get_by_test_id("stMain").inner_text()
        assert "No data in the ledger yet" in body
        assert "gpuledger demo" in body and "gpuledger ingest FILE" in body
        assert page.locator("[data-testid='stException']").count() == 0
        page.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert db.exists()  # the command resolved and created the ledger it served
    assert f"serving {db}" in log.read_text()
