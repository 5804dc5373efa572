"""A real ``streamlit run app.py`` on a free port over a temp ledger, driven by headless Debian Chromium.

One server and one browser per session keep the suite quick. The ledger holds a small demo fleet (when
gpuledger.demo.build is present) plus tests/fixtures/dashboard/jobs.csv, a hand-written jobs table whose numbers
the tests know. With ``GPULEDGER_SCREENSHOTS=1`` (``make screenshots``) every page the tests visit is saved in
test-artifacts/ (gitignored) for a human to look at; otherwise only the page of a failed test is (a full-page
screenshot costs Chromium more than the checks around it: the Product pages module ran 124 s with them, 96 s
without).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from tests.conftest import ROOT, built_once, demo_template, gpuledger, run_folder

CHROMIUM = Path("/usr/bin/chromium")
FIXTURES = ROOT / "tests" / "fixtures" / "dashboard"
ARTIFACTS = ROOT / "test-artifacts"
SCREENSHOTS = os.environ.get("GPULEDGER_SCREENSHOTS", "") not in ("", "0")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.browser)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed browser test leaves its page in test-artifacts/failed-TEST.png (before its fixtures close)."""
    report = yield
    if report.failed and call.when == "call":
        funcargs = getattr(item, "funcargs", {})
        for value in funcargs.values():
            if isinstance(value, Page) and not value.is_closed():
                name = "failed-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", item.name)
                with contextlib.suppress(Exception):  # the report matters more than the picture
                    screenshot(value, name, always=True)
                break
    return report


@dataclass(frozen=True)
class Server:
    url: str
    db: str
    env: dict[str, str]
    log: Path

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``gpuledger ARGS --db <this ledger>`` with this server's settings, by the command's own main() in
        this process (tests/conftest.py ``gpuledger``: the same code, without a new interpreter per call)."""
        mine = {k: v for k, v in self.env.items() if k.startswith("GPULEDGER_")}
        done = gpuledger(*args, "--db", self.db, env=mine)
        if check and done.returncode != 0:
            raise AssertionError(
                f"gpuledger {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}"
            )
        return done

    def summary(self, *filters: str) -> dict[str, object]:
        return json.loads(self.cli("summary", "--json", *filters).stdout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ledger_template(folder: Path) -> Path:
    """The 2-day demo fleet plus tests/fixtures/dashboard/jobs.csv, built once per test run (tests/conftest.py):
    every server's ledger starts as a byte copy of it, and each server then reads its own settings file."""

    def build(path: str) -> None:
        from collectors.ingest import ingest_file
        from gpuledger.ledger.db import writer

        shutil.copyfile(demo_template(folder), path)
        with writer(path) as con:
            ingest_file(con, FIXTURES / "jobs.csv")

    return built_once(folder, "dashboard.duckdb", build)


def _build_ledger(db: str) -> None:
    with run_folder() as folder:
        shutil.copyfile(_ledger_template(folder), db)


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(
        f"streamlit did not answer /_stcore/health in {timeout_s} s:\n{log.read_text()[-3000:]}"
    )


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed (/usr/bin/chromium); `make system-deps` installs it")
    from gpuledger.cli.commands.dashboard import streamlit_argv

    tmp = tmp_path_factory.mktemp("dashboard")
    db = str(tmp / "ledger.duckdb")
    settings = tmp / "settings.toml"
    settings.write_text("# defaults: the browser tests must not read a developer's data/settings.toml\n")
    env = dict(os.environ, GPULEDGER_DB=db, GPULEDGER_SETTINGS=str(settings), PYTHONPATH=str(ROOT))
    with pytest.MonkeyPatch.context() as mp:  # the in-process demo build reads the same settings; later
        mp.setenv("GPULEDGER_SETTINGS", str(settings))  # tests in this process must not
        _build_ledger(db)
    port = _free_port()
    log = tmp / "streamlit.log"
    argv = [*streamlit_argv(port), "--server.fileWatcherType", "none", "--server.runOnSave", "false"]
    with served(argv, port, db, env, log) as server:
        yield server
    # A page that failed quietly (a swallowed exception, a deprecation) still leaves a trace in the log.
    text = log.read_text(errors="replace")
    for sign in ("Traceback", "Error", "Warning", "deprecated"):
        assert sign not in text, f"the streamlit server logged {sign!r}:\n{text[-3000:]}"


@contextlib.contextmanager
def served(argv: list[str], port: int, db: str, env: dict[str, str], log: Path) -> Iterator[Server]:
    """A dashboard server started by ``argv`` on ``port`` (its output in ``log``), the :class:`Server` once its
    health check answers; stopped (terminated, killed after 10 s) when the block ends."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield Server(url, db, env, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed (/usr/bin/chromium); `make system-deps` installs it")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


# CSS animations and transitions off: what a test reads is the final state, and on 2 shared cores a headless
# Chromium spends much of a page load painting Streamlit's fades and spinners in software.
_NO_MOTION = """document.addEventListener('DOMContentLoaded', () => {
  const style = document.createElement('style');
  style.textContent = '*, *::before, *::after { animation: none !important; transition: none !important; }';
  document.head.appendChild(style);
});"""


def new_context(browser: Browser, **options: object) -> BrowserContext:
    """A fresh browser profile (no cookies, no cache) with motion off and reduced motion asked for."""
    context = browser.new_context(reduced_motion="reduce", **options)
    context.add_init_script(_NO_MOTION)
    return context


VIEWPORT = {"width": 1400, "height": 1600}


@pytest.fixture(scope="session")
def tab(browser: Browser) -> Iterator[Page]:
    """One browser tab per worker, handed to every test that asks for ``page``."""
    context = new_context(browser, viewport=VIEWPORT)
    pg = context.new_page()
    yield pg
    context.close()


@pytest.fixture
def page(tab: Page) -> Iterator[Page]:
    """The worker's tab, signed out (no cookies) at the default viewport; a test's first ``goto`` opens a new
    Streamlit session, and afterwards the tab leaves the app (about:blank), which ends that session.

    Why one tab and not a fresh profile per test: measured on the 2-day demo's Overview (server cache warm),
    a load cost Chromium 2.6 CPU-s in a tab that had loaded the app before, 5.2 CPU-s in a new tab of the same
    profile and 6.6-7.4 CPU-s in a new profile: a new tab starts a renderer that compiles Streamlit's scripts
    again. What a tab keeps between documents: cookies (cleared here), the app origin's localStorage (where
    Streamlit keeps the sidebar's state and width; cleared after each test) and the browser's caches.
    """
    tab.context.clear_cookies()
    tab.set_viewport_size(VIEWPORT)
    yield tab
    with contextlib.suppress(Exception):  # a test that broke the tab has already failed; the next one reloads
        if tab.url.startswith("http"):
            tab.evaluate("() => localStorage.clear()")
        tab.goto("about:blank", timeout=10_000)


def wait_for_app(page: Page, timeout_ms: int = 60_000) -> None:
    """Wait until the script run triggered by the last navigation or interaction has finished."""
    page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']", timeout=timeout_ms)
    painted(page)


# Quiet for 100 ms: no element of the app added, removed or changed its text for that long (at most 5 s).
# Some elements render a moment after the run's last delta (the Reports page's HTML preview); a fixed 300 ms
# pause here instead cost the browser modules about 50 s of waiting a run, and was still a guess.
_QUIET = """(ms) => new Promise(resolve => {
  const root = document.querySelector('[data-testid="stApp"]') || document.body;
  let timer = null;
  const observer = new MutationObserver(() => { clearTimeout(timer); timer = setTimeout(done, ms); });
  const cap = setTimeout(done, 5000);
  function done() { observer.disconnect(); clearTimeout(timer); clearTimeout(cap); resolve(true); }
  observer.observe(root, {childList: true, subtree: true, characterData: true});
  timer = setTimeout(done, ms);
})"""


def painted(page: Page, quiet_ms: int = 100) -> None:
    """Return once the page has stopped changing for ``quiet_ms`` (what it received is rendered)."""
    page.evaluate(_QUIET, quiet_ms)


def open_page(page: Page, server: Server, path: str = "", query: str = "") -> None:
    url = f"{server.url}/{path}" + (f"?{query}" if query else "")
    page.goto(url)
    wait_for_app(page)
    # a deep link as the server's first request reruns once through app.py (pages/_ui.require_router): the
    # first run can end before the rerun starts, so wait for the page's own title, then for that run's end
    page.wait_for_selector("[data-testid='stMain'] h1", timeout=60_000)
    wait_for_app(page)


# Each page's sidebar link (app.py's st.Page title) and the heading its script draws first.
NAV = {
    "": ("Overview", "Overview"),
    "waste": ("Waste", "Waste"),
    "jobs": ("Jobs", "Jobs"),
    "fleet": ("Fleet", "Fleet"),
    "recommendations": ("Recommendations", "Recommendations"),
    "whatif": ("What if", "What if"),
    "budgets": ("Budgets", "Budgets"),
    "training": ("Training", "Training"),
    "upload": ("Upload", "Upload a file"),
    "reports": ("Reports", "Weekly report"),
    "guard": ("Guard", "Guard"),
    "settings": ("Settings", "Settings"),
}


def choose(page: Page, box: str, option: str, *, exact: bool = True, typed: str | None = None) -> None:
    """Pick ``option`` in the select box labelled ``box`` as a person does: open it, type to narrow its list
    (``typed``, else the option itself: a long list is virtual, and a short list moves less), click the option,
    and see the box show it.

    On a loaded machine a box clicked while its page settles after a rerun can close before its list draws, or
    keep its list open with the click lost (both seen in CI); so each try ends only when the box shows the
    option, and up to three are made."""
    select = page.get_by_test_id("stSelectbox").filter(has_text=box)
    field = select.locator("input")
    wanted = page.get_by_role("option", name=option, exact=exact)
    for attempt in range(3):
        try:
            field.scroll_into_view_if_needed()
            field.click()
            field.fill(typed if typed is not None else option)
            wanted.click(timeout=10_000)
            expect(field).to_have_value(option, timeout=10_000)
            return
        except (AssertionError, PlaywrightError):
            if attempt == 2:
                raise
            page.keyboard.press("Escape")
            wait_for_app(page)


def navigate(page: Page, path: str) -> None:
    """Move to another page as a person does, by its sidebar link, and wait for that page's run to end.

    No reload: the browser keeps the app's scripts and the server the session (with the view's filters in the
    URL), so a move costs Chromium about a third of a fresh load. The new page's heading shows once its run
    has begun; only then is a "notRunning" state the end of that run, not the pause before it starts.
    """
    label, heading = NAV[path]
    page.get_by_test_id("stSidebarNav").get_by_text(label, exact=True).click()
    expect(page.locator("[data-testid='stMain'] h1").first).to_have_text(heading, timeout=60_000)
    wait_for_app(page)


def assert_no_exception(page: Page) -> None:
    boxes = page.locator("[data-testid='stException']")
    assert boxes.count() == 0, boxes.first.inner_text()
    # app.py turns a page's exception into this sentence (the traceback goes to the server log)
    failed = page.get_by_test_id("stAlertContentError").filter(has_text="This page could not be drawn")
    assert failed.count() == 0, "a page raised; its traceback is in the streamlit server log"


BAD_TEXT = re.compile(r"\bNone\b|\bnan\b|\bNaN\b|-0\.0\b|\$-\d")  # one money format: −$3.20


def assert_clean(text: str) -> None:
    found = BAD_TEXT.search(text)
    assert found is None, (
        f"{found.group(0)!r} on the page: …{text[max(0, found.start() - 80) : found.end() + 80]}…"
    )


def screenshot(page: Page, name: str, *, always: bool = False) -> Path | None:
    """Save the page as test-artifacts/NAME.png once its plotly charts have drawn (they render after the
    script run ends), when screenshots are asked for (``GPULEDGER_SCREENSHOTS=1``) or ``always``."""
    if not (SCREENSHOTS or always):
        return None
    page.wait_for_function(
        """() => [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
                 .every(e => e.querySelector('.main-svg'))""",
        timeout=20_000,
    )
    page.wait_for_timeout(400)  # data grids paint on a canvas a moment later
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
