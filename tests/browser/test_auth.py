"""Sign-in for real: an OIDC provider (oidc-provider-mock) on 127.0.0.1, ``gpuledger dashboard`` started the way a
user starts it with ``[auth]`` and ``[access]`` in the settings, and Chromium signing in through the provider's
own authorization form.

- a visitor who has not signed in sees the sign-in page and nothing else, on every URL;
- the lead of one team ("speech") sees that team's spend, equal to ``gpuledger summary --team speech --json``,
  only that team in the sidebar, and a jobs download holding only that team's rows;
- an admin (through the provider's group claim) sees the whole fleet, equal to ``gpuledger summary --json``;
- someone the provider knows but ``[access]`` does not sees a sentence saying so, and no data;
- a provider that sends ``email_verified`` as the string ``"false"`` for a lead's address gets a page saying
  the email was not confirmed, and no data (issue 43, the "nOAuth" hole);
- "Sign out" ends the sign-in on the server: the cookie copied before it is refused afterwards (issue 43).

Screenshots (the sign-in page, a lead's Overview) go to test-artifacts/ and /tmp/shots/.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser.conftest import (
    ROOT,
    Server,
    _build_ledger,
    _free_port,
    navigate,
    screenshot,
    served,
    wait_for_app,
)

oidc_provider_mock = pytest.importorskip("oidc_provider_mock", reason="pip install oidc-provider-mock")
werkzeug_serving = pytest.importorskip("werkzeug.serving")

LEAD = "lucas@example.com"  # speech
ADMIN = "ops@example.com"  # an admin through the group claim
STRANGER = "guest@example.com"
SPOOF = "spoof"  # the provider's account that claims the lead's address without vouching for it


def money(value: float) -> str:
    return f"${value:,.2f}"


@pytest.fixture(scope="module")
def provider() -> Iterator[str]:
    """A real OpenID provider on 127.0.0.1 (discovery, authorization form, token endpoint, signed ID tokens)."""
    users = [
        oidc_provider_mock.User(
            sub=LEAD,
            claims={"email": LEAD, "email_verified": True, "name": "Lucas", "groups": ["speech-team"]},
        ),
        oidc_provider_mock.User(
            sub=ADMIN,
            claims={"email": ADMIN, "email_verified": True, "name": "Ops", "groups": ["gpu-platform"]},
        ),
        oidc_provider_mock.User(
            sub=STRANGER, claims={"email": STRANGER, "email_verified": True, "name": "Guest"}
        ),
        oidc_provider_mock.User(
            sub=SPOOF, claims={"email": LEAD, "email_verified": "false", "name": "Not Lucas"}
        ),
    ]
    app = oidc_provider_mock.app(user_claims=users)
    server = werkzeug_serving.make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(5)


@pytest.fixture(scope="module")
def signed_server(provider: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("Debian chromium is not installed (/usr/bin/chromium)")
    tmp = tmp_path_factory.mktemp("auth")
    db = str(tmp / "ledger.duckdb")
    port = _free_port()
    settings = tmp / "settings.toml"
    settings.write_text(
        f"""
[auth]
server_metadata_url = "{provider}/.well-known/openid-configuration"
client_id = "gpuledger-test"
redirect_uri = "http://127.0.0.1:{port}/oauth2callback"

[access]
admins = ["group:gpu-platform"]
[access.teams]
speech = ["{LEAD}"]
"""
    )
    env = dict(
        os.environ,
        GPULEDGER_SETTINGS=str(settings),
        GPULEDGER_OIDC_CLIENT_SECRET="test-client-secret",
        XDG_DATA_HOME=str(
            tmp / "data"
        ),  # where the server remembers sign-outs (gpuledger/ledger/signouts.py)
        PYTHONPATH=str(ROOT),
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )
    with pytest.MonkeyPatch.context() as mp:  # the in-process demo build reads the same settings
        mp.setenv("GPULEDGER_SETTINGS", str(settings))
        _build_ledger(db)
    log = tmp / "dashboard.log"
    argv = [sys.executable, "-m", "gpuledger", "dashboard", "--no-demo", "--port", str(port), "--db", db]
    with served(argv, port, db, env, log) as server:
        yield server
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[-3000:]
    assert "with sign-in" in text and "warning:" not in text  # loopback: no exposure warning


@pytest.fixture
def context_page(page: Page) -> Page:
    """The worker's tab with no cookie, so no sign-in (tests/browser/conftest.py ``page``), at 1400×1000."""
    page.set_viewport_size({"width": 1400, "height": 1000})
    return page


def sign_in(page: Page, server: Server, who: str) -> None:
    page.goto(server.url)
    page.get_by_role("button", name="Sign in").click(timeout=60_000)
    # the provider's own authorization form: one button per known user
    page.locator(f"button[name='sub'][value='{who}']").click(timeout=30_000)
    page.wait_for_url(f"{server.url}/**", timeout=30_000)
    page.wait_for_selector("[data-testid='stMetric']", timeout=60_000)
    wait_for_app(page)


def text(locator: Locator) -> str:
    """What a person reads: the word joiners that keep an email from becoming a link are invisible."""
    return locator.inner_text().replace("\u2060", "")


def metric_value(page: Page, label: str) -> str:
    metric = page.get_by_test_id("stMetric").filter(
        has=page.get_by_test_id("stMetricLabel").get_by_text(label, exact=True)
    )
    return metric.get_by_test_id("stMetricValue").inner_text().strip()


@pytest.mark.parametrize("path", ["", "jobs", "upload", "reports?team=speech"])
def test_a_visitor_sees_only_the_sign_in(signed_server: Server, context_page: Page, path: str) -> None:
    page = context_page
    page.goto(f"{signed_server.url}/{path}")
    page.get_by_text("Sign in to continue").wait_for(timeout=60_000)  # not a pause before the gate's run
    wait_for_app(page)
    main = text(page.get_by_test_id("stMain"))
    assert "Sign in to continue" in main, main
    assert page.get_by_role("button", name="Sign in").count() == 1
    assert "$" not in main and "speech" not in main
    assert page.get_by_test_id("stSidebar").count() == 0  # no navigation, no filters, no ledger caption
    assert page.get_by_test_id("stMetric").count() == 0
    assert page.get_by_test_id("stDataFrame").count() == 0
    if not path:
        screenshot(page, "auth-sign-in")


def test_a_lead_sees_only_their_team(signed_server: Server, context_page: Page) -> None:
    page = context_page
    sign_in(page, signed_server, LEAD)
    team = signed_server.summary("--team", "speech")
    fleet = signed_server.summary()
    assert 0 < team["spend_usd"] < fleet["spend_usd"]
    assert metric_value(page, "Spend") == money(team["spend_usd"])
    # a team view's waste is all the team's own: no capacity no job held is in it (issue 37's Overview)
    assert team["waste"]["unallocated_usd"] == 0
    assert metric_value(page, "Waste teams control") == money(team["team_waste_usd"])
    sidebar = text(page.get_by_test_id("stSidebar"))
    assert f"Signed in as {LEAD}: you see speech." in sidebar
    assert page.get_by_test_id("stSidebar").locator("a[href^='mailto:']").count() == 0  # shown, not linked
    screenshot(page, "auth-lead-overview")

    # the team picker offers only their team
    page.get_by_test_id("stSidebar").get_by_role("combobox").nth(1).click()
    options = page.get_by_role("option").all_inner_texts()
    assert options == ["speech"], options
    page.keyboard.press("Escape")

    # a shared link naming another team does not widen the view: it is answered exactly as a team no ledger
    # row has, with only the lead's own teams as the ones that exist (issue 43: no telling which exist)
    page.goto(f"{signed_server.url}/?team=robotics")
    main = page.get_by_test_id("stMain")
    expect(main).to_contain_text("no team 'robotics' in the ledger (teams: speech)", timeout=60_000)
    wait_for_app(page)
    missing = text(main)
    assert "llm-core" not in missing
    page.goto(f"{signed_server.url}/?team=llm-core")
    expect(main).to_contain_text("no team 'llm-core' in the ledger (teams: speech)", timeout=60_000)
    wait_for_app(page)
    assert text(main) == missing.replace("robotics", "llm-core")
    assert page.get_by_test_id("stMetric").count() == 0
    page.goto(signed_server.url)
    page.wait_for_selector("[data-testid='stMetric']", timeout=60_000)
    wait_for_app(page)

    # the jobs download holds only their team's jobs: as many as `gpuledger jobs --team speech`
    navigate(page, "jobs")  # by the sidebar, from the view the shared link opened
    with page.expect_download() as info:
        page.get_by_role("button", name="Download these jobs (CSV, every column)").click()
    rows = list(csv.DictReader(io.StringIO(Path(info.value.path()).read_text(encoding="utf-8-sig"))))
    assert rows and {r["team"] for r in rows} == {"speech"}
    expected = json.loads(signed_server.cli("jobs", "--json", "--team", "speech").stdout)
    assert sorted(r["job_id"] for r in rows) == sorted(j["job_id"] for j in expected)

    # the weekly report made from the page is the team's
    navigate(page, "reports")
    body = text(page.get_by_test_id("stMain"))
    assert "Teams: speech" in body and "--team speech" in body
    for other in ("llm-core", "vision", "applied-ml"):
        assert other not in body, other


def test_an_admin_sees_the_fleet(signed_server: Server, context_page: Page) -> None:
    page = context_page
    sign_in(page, signed_server, ADMIN)
    assert metric_value(page, "Spend") == money(signed_server.summary()["spend_usd"])
    assert f"Signed in as {ADMIN}: you see every team." in text(page.get_by_test_id("stSidebar"))


def test_someone_without_a_team_sees_no_data(signed_server: Server, context_page: Page) -> None:
    page = context_page
    page.goto(signed_server.url)
    wait_for_app(page)
    page.get_by_role("button", name="Sign in").click()
    page.locator(f"button[name='sub'][value='{STRANGER}']").click(timeout=30_000)
    page.wait_for_url(f"{signed_server.url}/**", timeout=30_000)
    page.get_by_text("no team is mapped to you").wait_for(timeout=60_000)
    main = text(page.get_by_test_id("stMain"))
    assert f"signed in as {STRANGER}" in main
    assert "$" not in main and page.get_by_test_id("stMetric").count() == 0


def test_an_email_the_provider_does_not_vouch_for_is_refused(
    signed_server: Server, context_page: Page
) -> None:
    """The provider says the lead's address with ``"email_verified": "false"`` (a string): no lead's view."""
    page = context_page
    page.goto(signed_server.url)
    wait_for_app(page)
    page.get_by_role("button", name="Sign in").click()
    page.locator(f"button[name='sub'][value='{SPOOF}']").click(timeout=30_000)
    page.wait_for_url(f"{signed_server.url}/**", timeout=30_000)
    page.get_by_text("did not confirm").wait_for(timeout=60_000)
    main = text(page.get_by_test_id("stMain"))
    assert "email_verified claim is 'false', not true" in main, main
    assert "$" not in main and page.get_by_test_id("stMetric").count() == 0
    assert page.get_by_test_id("stSidebar").count() == 0


def test_sign_out_ends_the_sign_in_on_the_server(signed_server: Server, context_page: Page) -> None:
    """A cookie copied while signed in works in another browser until "Sign out", and not after it."""
    page = context_page
    sign_in(page, signed_server, LEAD)
    copied = page.context.cookies()
    assert any(c["name"].startswith("_streamlit_user") for c in copied), copied
    browser = page.context.browser
    assert browser is not None
    thief = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        thief.add_cookies(copied)  # type: ignore[arg-type]
        other = thief.new_page()
        other.goto(signed_server.url)
        # the copy works while signed in: the lead's view
        expect(other.get_by_test_id("stSidebar")).to_contain_text("you see speech.", timeout=120_000)
        expect(other.get_by_test_id("stMetric").first).to_be_visible(timeout=60_000)
        other.goto("about:blank")

        page.get_by_role("button", name="Sign out").click()
        # the browser's cookie goes at /auth/logout (then the provider's own end-session page shows)
        page.wait_for_url(lambda url: "/auth/logout" not in url and "end_session" in url, timeout=60_000)
        assert not any(c["name"].startswith("_streamlit_user") for c in page.context.cookies())

        other.goto(signed_server.url)
        other.get_by_text("Sign in to continue").wait_for(timeout=60_000)
        wait_for_app(other)
        main = text(other.get_by_test_id("stMain"))
        assert "$" not in main and other.get_by_test_id("stMetric").count() == 0
        assert other.get_by_test_id("stSidebar").count() == 0
        assert any(c["name"].startswith("_streamlit_user") for c in thief.cookies())  # refused, not absent
    finally:
        thief.close()
    sign_in(page, signed_server, LEAD)  # a new sign-in works again
    assert metric_value(page, "Spend") == money(signed_server.summary("--team", "speech")["spend_usd"])
