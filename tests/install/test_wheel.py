"""The wheel works outside the checkout: built here, installed into a fresh venv, run from an empty folder.

The fresh venv gets gpuledger from the wheel alone (``--no-deps --no-index``); its third-party libraries come
from the test venv through a ``.pth`` line, so the test needs no network and checks what the wheel itself
carries: the packages, the reference data, app.py and pages/. A ``.pth`` path is added to sys.path without
its own .pth files being run, so the checkout's editable install cannot leak in.
"""

from __future__ import annotations

import json
import os
import site
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("wheel")
    dist = work / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(dist)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next(dist.glob("gpuledger-*.whl"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "test-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    pip = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert pip.returncode == 0, pip.stderr[-2000:]
    home = work / "home"
    empty = work / "empty"
    empty.mkdir()
    return {"venv": venv, "home": home, "cwd": empty, "purelib": Path(purelib), "wheel": wheel}


def _env(inst: dict[str, Path]) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("GPULEDGER_", "XDG_", "PYTHON"))}
    return keep | {"HOME": str(inst["home"])}


def _run(inst: dict[str, Path], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(inst["venv"] / "bin" / "gpuledger"), *args],
        capture_output=True,
        text=True,
        cwd=inst["cwd"],
        env=_env(inst),
        check=False,
        timeout=timeout,
    )


def test_the_wheel_carries_the_dashboard_and_the_reference_data(installed: dict[str, Path]) -> None:
    import zipfile

    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for path in (
        "gpuledger/_bundle/app.py",
        "gpuledger/_bundle/pages/overview.py",
        "gpuledger/_bundle/data/gpu_catalog.toml",
        "gpuledger/_bundle/data/prices.toml",
        "gpuledger/_bundle/data/favicon.png",
        "analytics/waste.py",
        "collectors/base.py",
        "gpuledger/ledger/schema.py",
    ):
        assert path in names, path
    assert not any(n.startswith("tests/") for n in names)


def test_demo_summary_and_info_from_an_empty_folder(installed: dict[str, Path]) -> None:
    info = _run(installed, "info", "--json")
    assert info.returncode == 0, info.stderr
    data = json.loads(info.stdout)
    ledger = installed["home"] / ".local" / "share" / "gpuledger" / "gpuledger.duckdb"
    assert data["mode"] == "installed"
    assert data["ledger"]["path"] == str(ledger) and data["ledger"]["origin"] == "user data dir"
    assert data["shipped_data"].startswith(str(installed["purelib"]))
    demo = _run(installed, "demo", "--days", "2")
    assert demo.returncode == 0, demo.stderr
    assert ledger.exists()
    summary = _run(installed, "summary", "--json")
    assert summary.returncode == 0, summary.stderr
    s = json.loads(summary.stdout)
    assert s["jobs"] > 0 and s["spend_usd"] > 0
    # the installed package is the one that ran, not the checkout
    where = subprocess.run(
        [
            str(installed["venv"] / "bin" / "python"),
            "-c",
            "import gpuledger, analytics; print(gpuledger.__file__, analytics.__file__)",
        ],
        capture_output=True,
        text=True,
        cwd=installed["cwd"],
        env=_env(installed),
        check=True,
    ).stdout
    assert str(ROOT) not in where and str(installed["purelib"]) in where


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_installed_dashboard_serves(installed: dict[str, Path]) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [str(installed["venv"] / "bin" / "gpuledger"), "dashboard", "--no-demo", "--port", str(port)],
        cwd=installed["cwd"],
        env=_env(installed),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                    assert r.read() == b"ok"
                    break
            except OSError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "the installed dashboard did not become healthy in 90 s"
                time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
            assert r.status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
