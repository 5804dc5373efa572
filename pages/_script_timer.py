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


def clear_caches() -> None:
    """Forget every ``st.cache_data`` entry: the next run is what a first visitor after a flush waits for."""
    st.cache_data.clear()


def run_page(page: str, *, timeout_s: float = 600) -> tuple[float, str | None]:
    """Seconds of one script run of ``page`` (e.g. ``pages/fleet.py``) through app.py, and the message of
    the exception it raised (None when it ran clean)."""
    at = AppTest.from_file(str(APP), default_timeout=timeout_s)
    if page != "pages/overview.py":
        at.switch_page(page)
    began = time.perf_counter()
    at.run()
    seconds = time.perf_counter() - began
    return seconds, (at.exception[0].message if at.exception else None)
