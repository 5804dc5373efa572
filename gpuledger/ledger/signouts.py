"""Sign-outs the server remembers, so a sign-in cookie copied before "Sign out" is refused after it.

Streamlit keeps a sign-in in a signed cookie that holds the identity token's claims, valid 30 days, and its
sign-out only asks the browser to drop that cookie: a copy taken earlier (a shared machine, a proxy log, a
stolen backup) went on working for the rest of the 30 days (issue 43). Each sign-in's claims differ (``iat``,
``nonce``), so their hash names that one sign-in: "Sign out" records it here, and the dashboard treats a
cookie whose sign-in was recorded as no sign-in at all. Signing in again gives new claims and works.

The record is a text file, one ``HASH UNIX_TIME`` line per sign-out, in the user's data folder (beside the
default ledger); lines older than the cookie's own life are dropped when a new one is written. It is also
kept in memory, so a server whose data folder cannot be written still refuses the cookie until it restarts
(and a restart without ``auth.cookie_secret_env`` makes a new cookie key, which refuses every old cookie).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuledger.ledger.paths import user_data_dir

COOKIE_LIFE_S = 31 * 86400  # Streamlit's auth cookie lives 30 days; a day of slack
FILE_NAME = "signed-out.txt"
_LOCK = threading.Lock()
_MEMORY: set[str] = set()


def sign_in_key(claims: Mapping[str, Any]) -> str:
    """The hash of one sign-in's claims (everything the cookie holds but ``is_logged_in``)."""
    kept = {k: v for k, v in claims.items() if k != "is_logged_in"}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()


def store(folder: Path | None = None) -> Path:
    return (folder or user_data_dir()) / FILE_NAME


def _read(path: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        key, _, when = line.partition(" ")
        try:
            out[key] = float(when)
        except ValueError:
            continue
    return out


def record_sign_out(claims: Mapping[str, Any], folder: Path | None = None) -> None:
    """Remember that this sign-in ended (in memory, and in the file when it can be written)."""
    key = sign_in_key(claims)
    now = time.time()
    with _LOCK:
        _MEMORY.add(key)
        path = store(folder)
        kept = {k: t for k, t in _read(path).items() if now - t < COOKIE_LIFE_S}
        kept[key] = now
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text("".join(f"{k} {t:.0f}\n" for k, t in kept.items()), encoding="ascii")
            tmp.replace(path)
        except OSError:
            pass  # the memory copy still refuses the cookie on this server


def signed_out(claims: Mapping[str, Any], folder: Path | None = None) -> bool:
    """Whether this sign-in was ended by "Sign out" (here or on an earlier run of the server)."""
    key = sign_in_key(claims)
    if key in _MEMORY:
        return True
    return key in _read(store(folder))
