"""Shared fixtures: a real DuckDB ledger (in memory or in a temp file) and the real datasets folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
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


def dataset(relative: str) -> Path:
    """A real file from ../shared/datasets; the test skips, saying why, when the folder is absent."""
    path = DATASETS / relative
    if not path.exists():
        pytest.skip(
            f"real dataset not available here: {path} (../shared/datasets is only on the dev/CI machines)"
        )
    return path


def write(tmp_path: Path, name: str, text: str) -> Path:
    """Write a small hand-made fixture file exactly as given (no trailing newline added)."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path
