"""The Guard page in real Chromium from a real Streamlit server, on the hand-worked ledger of
tests/guard/test_guard_page.py (five jobs, one policy, a warning and a cancel in ``guard_actions``): the replay's
metrics and the actions' line as a person sees them, no exception, no None or nan."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import (
    CHROMIUM,
    Server,
    _free_port,
    assert_clean,
    assert_no_exception,
    open_page,
    screenshot,
    served,
)
from tests.conftest import ROOT
from tests.guard.test_guard_page import guarded  # noqa: F401  (the ledger fixture)


@pytest.fixture(scope="module")
def guard_server(guarded: str) -> Iterator[Server]:  # noqa: F811
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed (/usr/bin/chromium); `make system-deps` installs it")
    from gpuledger.cli.commands.dashboard import streamlit_argv

    settings = str(Path(guarded).parent / "s.toml")
    env = dict(os.environ, GPULEDGER_DB=guarded, GPULEDGER_SETTINGS=settings, PYTHONPATH=str(ROOT))
    port = _free_port()
    log = Path(guarded).parent / "streamlit.log"
    argv = [*streamlit_argv(port), "--server.fileWatcherType", "none", "--server.runOnSave", "false"]
    with served(argv, port, guarded, env, log) as server:
        yield server
    text = log.read_text(errors="replace")
    for sign in ("Traceback", "Error", "Warning", "deprecated"):
        assert sign not in text, f"the streamlit server logged {sign!r}:\n{text[-3000:]}"


def test_the_guard_page_in_chromium(page: Page, guard_server: Server) -> None:
    open_page(page, guard_server, "guard")
    main = page.locator("[data-testid='stMain']")
    for text in (
        "Replay a policy over history",
        "What the guard did",
        "1 job cancelled, 3.0 GPU-hours, $12.00 saved",
    ):
        expect(main).to_contain_text(text, timeout=30_000)
    screenshot(page, "page-guard")
    assert_no_exception(page)
    values = {
        m.get_by_test_id("stMetricLabel").inner_text().strip(): m.get_by_test_id("stMetricValue")
        .inner_text()
        .strip()
        for m in page.get_by_test_id("stMetric").all()
    }
    assert values == {
        "Jobs warned": "3",
        "Jobs cancelled": "2",
        "GPU-hours saved": "5.5",
        "$ saved": "$22.00",
        "False alarms": "1",
    }
    assert_clean(main.inner_text())
