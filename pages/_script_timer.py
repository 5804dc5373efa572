"""Time a page's script the way the server runs it: streamlit.testing's AppTest through app.py.

Used by bench/pages.py (issue 11: each page's script ≤ 1 s on the demo). It lives here because only app.py
and pages/ import streamlit (tests/test_layering.py). Not a page: app.py's navigation does not list it.
"""

from __future__ import annotations

import time
from pathlib import Path

import streamlit as st
from streamlit.testing.v1 import AppTest

APP = Path(__file__).resolve().parent.parent / "app.py"
# The registry of installed custom components. A server's Runtime scans the installed packages for them once,
# at start; each new AppTest scans again inside its first run (55-110 ms on this venv, measured), which no
# page load pays. So the first AppTest's registry is handed to the later ones (a private attribute of
# streamlit 1.67's AppTest; without it, every run scans again, as before).
_components: object | None = None


def clear_caches() -> None:
    """Forget every ``st.cache_data`` entry: the next run is what a first visitor after a flush waits for."""
    st.cache_data.clear()


def run_page(page: str, *, timeout_s: float = 600) -> tuple[float, str | None]:
    """Seconds of one script run of ``page`` (e.g. ``pages/fleet.py``) through app.py, and the message of
    the exception it raised (None when it ran clean)."""
    global _components
    at = AppTest.from_file(str(APP), default_timeout=timeout_s)
    if _components is not None and hasattr(at, "_bidi_component_manager"):
        at._bidi_component_manager = _components
    if page != "pages/overview.py":
        at.switch_page(page)
    began = time.perf_counter()
    at.run()
    seconds = time.perf_counter() - began
    _components = getattr(at, "_bidi_component_manager", None)
    return seconds, (at.exception[0].message if at.exception else None)
