"""Shared fixtures: a real DuckDB ledger (in memory or in a temp file) and the real datasets folder."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import duckdb
import pytest

from gpuledger.ledger.db import memory_ledger

ROOT = Path(__file__).resolve().parent.parent
DATASETS = Path(os.environ.get("GPULEDGER_DATASETS", ROOT.parent / "shared" / "datasets"))


@pytest.fixture
def ledger() -> Iterator[duckdb.DuckDBPyConnection]:
    """An empty in-memory ledger with the current schema, catalog and default prices."""
    con = memory_ledger()
    yield con
    con.close()


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    """A path for a ledger file of this test's own (created on first use)."""
    return str(tmp_path / "ledger.duckdb")


@pytest.fixture(autouse=True, scope="session")
def _no_user_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suite never reads or writes the machine's own ~/.config/gpuledger or ~/.local/share/gpuledger."""
    home = tmp_path_factory.mktemp("xdg")
    saved = {k: os.environ.get(k) for k in ("XDG_CONFIG_HOME", "XDG_DATA_HOME")}
    os.environ["XDG_CONFIG_HOME"] = str(home / "config")
    os.environ["XDG_DATA_HOME"] = str(home / "data")
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


_ENV_KEYS = ("GPULEDGER_DB", "GPULEDGER_SETTINGS", "TZ")


@pytest.fixture(autouse=True)
def _no_env_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test (or a fixture) that sets GPULEDGER_* or TZ leaves the environment as it found it."""
    before = {k: os.environ.get(k) for k in _ENV_KEYS}
    yield
    for key, value in before.items():
        if os.environ.get(key) != value:
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def datasets_required() -> bool:
    """Under CI (``CI=true``) a missing ../shared/datasets is a failure, not a skip: CI must test the real files."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def dataset(relative: str) -> Path:
    """A real file from ../shared/datasets; the test skips, saying why, when the folder is absent (fails in CI)."""
    path = DATASETS / relative
    if not path.exists():
        if datasets_required():
            pytest.fail(f"CI=true but the real dataset is missing: {path}", pytrace=False)
        pytest.skip(
            f"real dataset not available here: {path} (../shared/datasets is only on the dev/CI machines)"
        )
    return path


def gpuledger(*args: str, env: Mapping[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
    """``gpuledger ARGS`` run by the command's own ``main()`` in this process, its output captured.

    The same code a user's command runs, without a new interpreter importing polars, DuckDB and the analytics
    again (about a second a call, measured). ``env`` applies to this call only (None unsets a variable). An
    exception is not caught: it fails the test, as its traceback would reach a user. Tests about the process
    itself (an exit status seen by a shell, what a crash prints) start a real one.
    """
    from gpuledger.cli.main import main

    saved = {k: os.environ.get(k) for k in env or {}}
    out, err = io.StringIO(), io.StringIO()

    def put(values: Mapping[str, str | None]) -> None:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    put(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse: usage errors (2) and --help (0)
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        put(saved)
    return subprocess.CompletedProcess(["gpuledger", *args], code, out.getvalue(), err.getvalue())


def write(tmp_path: Path, name: str, text: str) -> Path:
    """Write a small hand-made fixture file exactly as given (no trailing newline added)."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# `make test` runs the suite in two pytest-xdist workers (``-n 2 --dist loadscope --no-loadscope-reorder``):
# a worker takes a test module whole, so a module-scoped service or server (Prometheus, a Slurm cluster, the
# signed-in dashboard) starts once, not once per worker. Modules are handed out in the order below, longest
# first, so the two workers finish close together; the rest follow in file order.
# (``--dist loadgroup`` with xdist_group marks did nothing here: xdist 3.8 writes the group into
# ``item._nodeid``, which pytest 9 no longer reads, so every test went to whichever worker was free.)
_LONGEST_FIRST = (
    "tests/browser/test_product_pages.py",
    "tests/browser/test_auth.py",
    "tests/browser/test_exposure.py",
    "tests/browser/test_pages.py",
    "tests/live/test_prometheus_collector.py",
    "tests/browser/test_writers_and_readers.py",
    "tests/analytics/test_fast_path.py",
    "tests/test_report.py",
    "tests/test_demo.py",
    "tests/live/test_nvml_sampler.py",
    "tests/install/test_wheel.py",
    "tests/live/test_slurm_attribution.py",
    "tests/browser/test_upload.py",
    "tests/live/test_slurm_collector.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    ranks = [rank.get(Path(str(item.fspath)).relative_to(ROOT).as_posix(), len(rank)) for item in items]
    order = sorted(range(len(items)), key=lambda i: ranks[i])  # stable: file order within a rank
    items[:] = [items[i] for i in order]
