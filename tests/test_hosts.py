"""The host check's rule (gpuledger/web/hosts.py) and its setting; the real server is tests/browser/test_hostile.py.

Also a guard on the Streamlit hook it rides on: ``gpuledger dashboard`` runs ``streamlit run pages/_serve.py``, and
only Streamlit's discovery of the ``st.App`` in pages/_serve.py puts the middleware in front of the app. If an
upgrade of Streamlit stops discovering it, pages/_serve.py would run as a plain script (no dashboard at all, or one
without the check): this test fails first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuledger.ledger.errors import SettingsError
from gpuledger.ledger.settings import load_settings
from gpuledger.web.hosts import allowed_hosts, host_name, refusal
from tests.conftest import ROOT


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ("127.0.0.1:8501", "127.0.0.1"),
        ("[::1]:8501", "::1"),
        ("::1", "::1"),
        ("LocalHost", "localhost"),
        ("gpu.example.com.:443", "gpu.example.com"),
        ("[::1", ""),
    ],
)
def test_host_name(value: str, name: str) -> None:
    assert host_name(value) == name


def test_the_names_allowed() -> None:
    assert allowed_hosts("127.0.0.1") == ("localhost", "127.0.0.1", "::1")
    assert allowed_hosts("0.0.0.0", ["gpu.example.com"]) == (
        "localhost",
        "127.0.0.1",
        "::1",
        "gpu.example.com",
    )
    assert allowed_hosts("10.1.2.3") == ("localhost", "127.0.0.1", "::1", "10.1.2.3")


@pytest.mark.parametrize(
    ("headers", "served"),
    [
        ([(b"host", b"127.0.0.1:8501")], True),
        ([(b"host", b"localhost:8501"), (b"origin", b"http://localhost:8501")], True),
        ([(b"host", b"evil.example:8501")], False),
        ([(b"host", b"127.0.0.1:8501"), (b"origin", b"http://evil.example")], False),
        ([(b"host", b"127.0.0.1:8501"), (b"origin", b"null")], False),
        ([(b"host", b"127.0.0.1.evil.example")], False),
        ([], False),  # HTTP/1.0 without Host
    ],
)
def test_refusal(headers: list[tuple[bytes, bytes]], served: bool) -> None:
    assert (refusal(headers, allowed_hosts("127.0.0.1")) is None) == served


def test_the_setting_is_read_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[dashboard]\nallowed_hosts = ["GPU.example.com"]\n')
    assert load_settings(path).allowed_hosts == ("gpu.example.com",)
    for bad in ('"gpu.example.com"', '["https://gpu.example.com"]', '["*.example.com"]', "[1]"):
        path.write_text(f"[dashboard]\nallowed_hosts = {bad}\n")
        with pytest.raises(SettingsError, match=r"dashboard\.allowed_hosts"):
            load_settings(path)


def test_streamlit_still_discovers_the_app_with_the_host_check() -> None:
    from streamlit.web.server.app_discovery import discover_asgi_app

    found = discover_asgi_app(ROOT / "pages" / "_serve.py")
    assert found.is_asgi_app and found.import_string == "_serve:app", found
