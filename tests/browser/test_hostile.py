"""The dashboard answers only to its own host names and makes no request off this machine (issue 43).

- DNS rebinding: ``gpuledger dashboard`` serves HTTP and the WebSocket only to the host names the operator
  lists (localhost, 127.0.0.1, ::1, the bind address, ``dashboard.allowed_hosts``); a foreign ``Host`` or
  ``Origin`` gets 403, over HTTP and on the WebSocket upgrade. Chromium itself is pointed at the server under
  a foreign name (``--host-resolver-rules``, what a rebound DNS answer does) and gets the 403 page.
- Offline: loading pages in Chromium requests nothing outside 127.0.0.1 (on 0c9145f the favicon came from a
  font CDN).
"""

from __future__ import annotations

import base64
import http.client
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page

from tests.browser.conftest import (
    CHROMIUM,
    CHROMIUM_ARGS,
    ROOT,
    Server,
    _build_ledger,
    _free_port,
    navigate,
    open_page,
    served,
)

LISTED = "gpu.example.com"  # dashboard.allowed_hosts in the settings below
FOREIGN = "evil.example"


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``gpuledger dashboard`` as a user starts it, with one extra host name allowed in the settings."""
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed (/usr/bin/chromium)")
    tmp = tmp_path_factory.mktemp("hosts")
    db = str(tmp / "ledger.duckdb")
    settings = tmp / "settings.toml"
    settings.write_text(f'[dashboard]\nallowed_hosts = ["{LISTED}"]\n')
    env = dict(os.environ, GPULEDGER_SETTINGS=str(settings), PYTHONPATH=str(ROOT))
    env.pop("GPULEDGER_ALLOWED_HOSTS", None)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPULEDGER_SETTINGS", str(settings))
        _build_ledger(db)
    port = _free_port()
    log = tmp / "dashboard.log"
    argv = [sys.executable, "-m", "gpuledger", "dashboard", "--no-demo", "--port", str(port), "--db", db]
    with served(argv, port, db, env, log) as server:
        yield server
    assert "Traceback" not in log.read_text(errors="replace")


def _port(server: Server) -> int:
    return int(urlsplit(server.url).port or 0)


def _http(server: Server, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    con = http.client.HTTPConnection("127.0.0.1", _port(server), timeout=30)
    try:
        con.putrequest("GET", path, skip_host=True)
        for k, v in headers.items():
            con.putheader(k, v)
        con.endheaders()
        resp = con.getresponse()
        return resp.status, resp.read()
    finally:
        con.close()


def _upgrade(server: Server, host: str, origin: str | None) -> int:
    """The status line of a real WebSocket upgrade to Streamlit's stream (101 when accepted)."""
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        "GET /_stcore/stream HTTP/1.1",
        f"Host: {host}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        "Sec-WebSocket-Protocol: streamlit",
    ]
    if origin is not None:
        lines.append(f"Origin: {origin}")
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        status = sock.recv(4096).split(b"\r\n", 1)[0].decode()
    return int(status.split()[1])


@pytest.mark.parametrize(
    ("host", "origin", "status"),
    [
        ("127.0.0.1:{port}", None, 200),
        ("localhost:{port}", "http://localhost:{port}", 200),
        ("[::1]:{port}", None, 200),
        (f"{LISTED}:{{port}}", f"http://{LISTED}:{{port}}", 200),  # added by dashboard.allowed_hosts
        (f"{FOREIGN}:{{port}}", None, 403),  # a rebound name
        (f"{FOREIGN}", f"http://{FOREIGN}", 403),
        ("127.0.0.1:{port}", f"http://{FOREIGN}", 403),  # a foreign page's request
        ("127.0.0.1:{port}", "null", 403),
        (f"{LISTED}.evil.example:{{port}}", None, 403),  # a name is matched whole
        ("", None, 403),
    ],
)
def test_only_listed_hosts_and_origins_are_served_over_http_and_websocket(
    dashboard: Server, host: str, origin: str | None, status: int
) -> None:
    port = _port(dashboard)
    host, origin = host.format(port=port), origin.format(port=port) if origin else None
    headers = {"Host": host} | ({"Origin": origin} if origin else {})
    for path in ("/", "/settings", "/_stcore/health"):
        got, body = _http(dashboard, path, headers)
        assert got == status, (path, host, origin, got, body[:200])
    if status == 403:
        assert b"dashboard.allowed_hosts" in body
    assert _upgrade(dashboard, host, origin) == (101 if status == 200 else 403)


def test_chromium_reaching_the_server_under_a_foreign_name_gets_403(
    dashboard: Server, browser: Browser
) -> None:
    """The DNS-rebinding attack itself: the browser resolves evil.example to 127.0.0.1 and loads it (a second
    Chromium of the session's Playwright, started with the resolver rule)."""
    port = _port(dashboard)
    rebound = browser.browser_type.launch(
        executable_path=str(CHROMIUM),
        args=[*CHROMIUM_ARGS, f"--host-resolver-rules=MAP {FOREIGN} 127.0.0.1, MAP {LISTED} 127.0.0.1"],
    )
    try:
        page = rebound.new_page()
        resp = page.goto(f"http://{FOREIGN}:{port}/settings")
        assert resp is not None and resp.status == 403
        assert "Settings" not in page.content() and "$" not in page.inner_text("body")
        resp = page.goto(f"http://{LISTED}:{port}/")
        assert resp is not None and resp.status == 200  # the listed name is the dashboard
        page.wait_for_selector("[data-testid='stApp']", timeout=60_000)
    finally:
        rebound.close()


def test_a_page_load_requests_nothing_outside_this_machine(server: Server, page: Page) -> None:
    """Every request Chromium makes for three pages (documents, scripts, fonts, the favicon, the WebSocket)
    goes to 127.0.0.1."""
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url))
    page.on("websocket", lambda ws: seen.append(ws.url))
    open_page(page, server)
    navigate(page, "jobs")
    navigate(page, "settings")
    icon = page.locator("link[rel~='icon']").first.get_attribute("href") or ""
    page.goto("about:blank")
    outside = [
        u
        for u in seen
        if urlsplit(u).scheme not in ("data", "blob", "about") and urlsplit(u).hostname != "127.0.0.1"
    ]
    assert seen and outside == [], outside
    assert icon and (icon.startswith("/") or urlsplit(icon).hostname == "127.0.0.1"), icon
    assert Path(ROOT / "data" / "favicon.png").is_file()
