"""Shared fixtures: a real DuckDB ledger (in memory or in a temp file) and the real datasets folder."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import io
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

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


DEMO_DAYS = 2  # the smallest demo fleet (every planted scenario once), to keep the suite quick


@contextlib.contextmanager
def run_folder() -> Iterator[Path]:
    """A folder for what this test run builds once, locked while the block runs: the xdist workers of one
    run share it (the same PYTEST_XDIST_TESTRUNUID), so the first that needs a thing builds it and the
    others copy it. Locks do not nest: call the builders below with the folder this block gives."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", f"pid{os.getpid()}")
    folder = Path(tempfile.gettempdir()) / f"gpuledger-ledger-template-{run}"
    with (folder.parent / f"{folder.name}.lock").open("w") as lock:  # an empty file, left behind
        fcntl.flock(lock, fcntl.LOCK_EX)
        folder.mkdir(exist_ok=True)
        yield folder


def _remove_run_folder() -> None:
    with run_folder() as folder:
        shutil.rmtree(folder, ignore_errors=True)  # a worker that needs a template later builds it again


def built_once(folder: Path, name: str, build: Callable[[str], None]) -> Path:
    """``folder/name``, made by ``build(path)`` the first time this run asks (``folder`` locked by
    :func:`run_folder`); whole or absent, so a worker that died mid-build leaves nothing half-made."""
    path = folder / name
    if not path.exists():
        building = folder / f"building-{name}"
        building.unlink(missing_ok=True)
        build(str(building))
        building.rename(path)
        atexit.register(_remove_run_folder)
    return path


def demo_template(folder: Path) -> Path:
    """The 2-day demo ledger (``build_demo(days=2)``, default settings), built once per test run.

    ``build_demo`` takes its settings as an argument (defaults here), never from GPULEDGER_SETTINGS, so a
    byte copy of this file is what building the demo in the test itself would give (tests/test_demo.py
    builds it afresh and compares every table with a copy)."""

    def build(path: str) -> None:
        from gpuledger.demo.build import build_demo
        from gpuledger.ledger.db import writer

        with writer(path) as con:
            build_demo(con, days=DEMO_DAYS)

    return built_once(folder, "demo.duckdb", build)


def copy_demo(dest: Path | str) -> str:
    """A ledger file at ``dest`` holding the 2-day demo (a copy of :func:`demo_template`)."""
    with run_folder() as folder:
        shutil.copyfile(demo_template(folder), dest)
    return str(dest)


@pytest.fixture
def demo_db(tmp_path: Path) -> str:
    """A ledger file of this test's own holding the 2-day demo fleet."""
    return copy_demo(tmp_path / "demo.duckdb")


def filled_once(
    factory: pytest.TempPathFactory, fill: Callable[[duckdb.DuckDBPyConnection], None]
) -> Callable[[str], str]:
    """For a module-scoped fixture: a ledger file written once by ``fill(con)`` (a writer's connection), and
    the function that copies it to a test's own path. A closed writer leaves one checkpointed file, so a
    copy holds what filling the test's own file would (about half a second per test saved, measured)."""
    from gpuledger.ledger.db import writer

    template = factory.mktemp("ledger-template") / "ledger.duckdb"
    with writer(str(template)) as con:
        fill(con)

    def copy(dest: str) -> str:
        shutil.copyfile(template, dest)
        return dest

    return copy


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


@contextlib.contextmanager
def filled_ledger(
    folder: Path, fill: Callable[[duckdb.DuckDBPyConnection], object], settings_toml: str = ""
) -> Iterator[str]:
    """A ledger file in ``folder`` filled by ``fill`` (on a writer), its settings file holding
    ``settings_toml``, synced, and GPULEDGER_DB / GPULEDGER_SETTINGS pointing at both for the block: what the
    CLI (:func:`gpuledger`) and the pages (:func:`app_page`) read."""
    from gpuledger.ledger.db import sync_reference, writer
    from gpuledger.ledger.settings import load_settings

    db = str(folder / "ledger.duckdb")
    toml = folder / "s.toml"
    toml.write_text(settings_toml, encoding="utf-8")
    with writer(db) as con:
        fill(con)
    sync_reference(db, load_settings(toml))
    mp = pytest.MonkeyPatch()
    mp.setenv("GPULEDGER_DB", db)
    mp.setenv("GPULEDGER_SETTINGS", str(toml))
    try:
        yield db
    finally:
        mp.undo()


def app_page(page: str, **query: list[str]) -> Any:
    """One run of ``page`` (e.g. ``pages/guard.py``) through app.py in Streamlit's AppTest, with ``query``
    as the URL's query parameters; fails the test on an exception the page raised."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    at.switch_page(page)
    at.run()
    assert not at.exception, at.exception
    return at


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


# `make test` runs the suite in two pytest-xdist workers (``-n 2 --dist loadscope --no-loadscope-reorder``),
# scheduled by :class:`BrowserLanes` below: a worker takes a test module whole, so a module-scoped service or
# server (Prometheus, a Slurm cluster, the signed-in dashboard) starts once, not once per worker, and the
# browser modules run in two lanes, so however many workers there are, at most two Chromiums (and two
# dashboard servers) paint at a time. Measured on 2 cores (whole suite, one run each): 641 s with two
# workers, 620 s with three and 633 s with four; after the browser tests began to reuse one tab, 555 s with
# two and 576 s with three. The suite is CPU-bound, so more workers only add their own start-up; two stay.
# (``--dist loadgroup`` with xdist_group marks did nothing here: xdist 3.8 writes the group into
# ``item._nodeid``, which pytest 9 no longer reads.)
# Modules are handed out in the order below, longest first; the rest follow in file order. The Prometheus
# module comes second, before browser lane B: both lanes' first servers copy the demo ledger template, which
# the first worker builds (~10 s) while the other would wait on its lock; Prometheus needs no template.
# With --dist loadscope a worker takes the next module when it is almost done with its own, so the run ends
# when the last long module does: the modules known to run over ~10 s are named here, so that those handed
# out last are short. The last in file order, tests/ledger/ and the top-level tests/test_*.py, were timed one
# by one for this (2026-12-06, on a loaded machine): the unnamed ones ran 0-9 s each. The other times are
# from `make test --durations=80` and single-module runs.
_LONGEST_FIRST = (
    "tests/browser/test_product_pages.py",
    "tests/live/test_prometheus_collector.py",
    "tests/browser/test_auth.py",
    "tests/browser/test_exposure.py",
    "tests/browser/test_pages.py",
    "tests/browser/test_writers_and_readers.py",
    "tests/analytics/test_fast_path.py",
    "tests/analytics/test_money_properties.py",  # 16 examples: about 60 s
    "tests/test_fuzz.py",
    "tests/test_json_zero.py",
    "tests/test_report.py",
    "tests/test_demo.py",
    "tests/test_pages_apptest.py",
    "tests/collectors/test_wandb_job_second_view.py",
    "tests/live/test_nvml_sampler.py",
    "tests/install/test_wheel.py",
    "tests/live/test_slurm_attribution.py",
    "tests/browser/test_upload.py",
    "tests/live/test_slurm_collector.py",
    "tests/analytics/test_waste_by_week.py",
    "tests/test_gpu_option.py",
    "tests/test_report_mail.py",
    "tests/test_access.py",
    "tests/test_real_files_cli.py",
    "tests/analytics/test_observed_runs.py",
    "tests/analytics/test_money_properties.py",
    "tests/analytics/test_recommend.py",
    "tests/test_notify.py",
    "tests/live/test_prometheus_pushdown.py",
    "tests/test_overview_page.py",
    "tests/test_check.py",
)

# The two browser lanes, about even in time (worker seconds measured in `make test`); a browser module not
# named here joins lane B. Within a lane modules run in the order of _LONGEST_FIRST.
_LANE_A = (
    "tests/browser/test_product_pages.py",
    "tests/browser/test_pages.py",
    "tests/browser/test_upload.py",
    "tests/browser/test_dashboard_command.py",
)
BROWSER = "tests/browser/"


def lane(module: str) -> str | None:
    """The browser lane a test module runs in, or None for a module any worker may take."""
    if not module.startswith(BROWSER):
        return None
    return "browser lane A" if module in _LANE_A else "browser lane B"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    ranks = [rank.get(Path(str(item.fspath)).relative_to(ROOT).as_posix(), len(rank)) for item in items]
    order = sorted(range(len(items)), key=lambda i: ranks[i])  # stable: file order within a rank
    items[:] = [items[i] for i in order]


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under ``--dist loadscope``: :class:`BrowserLanes` (the browser modules in two lanes)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class BrowserLanes(LoadScopeScheduling):
        """Load-scope scheduling whose unit is a test module, except that the browser modules form two units
        (the lanes): a worker that takes a lane runs its modules one after the other, so however many
        workers there are, no more than two drive a browser at once."""

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return lane(module) or super()._split_scope(nodeid)

    return BrowserLanes(config, log)
