"""Which host names the dashboard answers to: a defence against DNS rebinding.

The dashboard binds 127.0.0.1 so that only this machine reaches it, but a browser that loads a page from
``evil.example`` and then sees that name re-resolved to 127.0.0.1 sends the dashboard requests with
``Host: evil.example`` (and ``Origin: http://evil.example``), as the same origin as the attacker's page: it
read the whole fleet and the editable Settings page over HTTP and the WebSocket (issue 43). So every request
is checked here before Streamlit sees it: its ``Host`` must be one the operator lists, and an ``Origin``, when
the browser sends one, must name such a host too. Anything else gets 403 (HTTP) or a refused upgrade
(WebSocket, also 403).

The names allowed: ``localhost``, ``127.0.0.1``, ``::1``, the address the server binds (``--host``) and
``dashboard.allowed_hosts`` from the settings (the names people type to reach an exposed dashboard:
``gpu.example.com``). ``gpuledger dashboard`` hands the list to the server process in
``$GPULEDGER_ALLOWED_HOSTS``; this module is plain ASGI, so it imports no web framework.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

ENV = "GPULEDGER_ALLOWED_HOSTS"
ALWAYS = ("localhost", "127.0.0.1", "::1")
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def host_name(value: str) -> str:
    """``Host``/``Origin`` authority → the bare lower-case name: ``[::1]:8501`` → ``::1``,
    ``Example.COM.:80`` → ``example.com``; "" for something that is no host."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[1:end] if end > 0 else ""
    if value.count(":") > 1:  # a bare IPv6 address without brackets
        return value
    return value.split(":", 1)[0].rstrip(".")


def allowed_hosts(bind: str | None = None, extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The names served: ALWAYS, the bind address (unless it is a wildcard) and ``extra``."""
    names = list(ALWAYS)
    if bind and bind not in ("0.0.0.0", "::", ""):
        names.append(host_name(bind) if not bind.count(":") > 1 else bind.lower())
    names += [host_name(h) for h in extra]
    return tuple(dict.fromkeys(n for n in names if n))


def from_env(default_bind: str | None = None) -> tuple[str, ...]:
    """The list ``gpuledger dashboard`` passed (comma-separated), else ALWAYS and ``default_bind``."""
    raw = os.environ.get(ENV)
    if raw:
        return allowed_hosts(None, [h for h in raw.split(",") if h.strip()])
    return allowed_hosts(default_bind)


def refusal(headers: Iterable[tuple[bytes, bytes]], allowed: Iterable[str]) -> str | None:
    """Why a request with these headers is refused (None: it is served)."""
    ok = set(allowed)
    host = origin = None
    for key, value in headers:
        if key == b"host":
            host = value.decode("latin-1")
        elif key == b"origin":
            origin = value.decode("latin-1")
    if host is None or host_name(host) not in ok:
        return f"host {host!r} is not one this dashboard serves"
    if origin is not None:
        parts = urlsplit(origin.strip())
        if parts.scheme not in ("http", "https") or host_name(parts.netloc) not in ok:
            return f"origin {origin!r} is not one this dashboard serves"
    return None


class HostCheck:
    """ASGI middleware: HTTP and WebSocket requests whose Host (or Origin) is not allowed get 403."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str] | None = None) -> None:
        self.app = app
        self.allowed = tuple(allowed) if allowed is not None else from_env()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        why = refusal(scope.get("headers", ()), self.allowed)
        if why is None:
            await self.app(scope, receive, send)
            return
        body = f"403 Forbidden: {why}. Add it to dashboard.allowed_hosts (docs/settings.md).\n".encode()
        if scope["type"] == "websocket":
            # closing before accepting makes the server answer the upgrade with 403
            await send({"type": "websocket.close", "code": 1008, "reason": why[:120]})
            return
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
