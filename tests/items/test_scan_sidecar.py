"""The week scan kept beside the ledger file (gpuledger/items/sidecar.py): read back exactly, found again only
for the same ledger state, settings and code, and never in the way when it is damaged or cannot be written.

``real_scan`` is the scan itself (tests/items/conftest.py memoizes the name ``scan`` for the other tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuledger.items import sidecar
from gpuledger.items.scan import from_json, to_json
from gpuledger.ledger.db import writer
from gpuledger.ledger.settings import Settings
from tests.analytics.build import alloc, gpu, ingest, job, series, set_test_prices
from tests.items.conftest import _real_scan as real_scan

WEEK_MIN = 7 * 24 * 60


def idle_week(con, job_id: str = "j1", gpu_id: str = "h1:0", start: float = 0.0) -> None:
    """A training job holding one H100 for the week of 2025-03-03 at 0 %: one reclaim_idle item."""
    ingest(
        con,
        jobs=[job(job_id, start, start + WEEK_MIN)],
        allocations=[alloc(job_id, gpu_id, start, start + WEEK_MIN)],
        samples=series(gpu_id, start, [0.0] * (WEEK_MIN // 10), step_s=600.0),
        gpus=[gpu(gpu_id)],
    )


@pytest.fixture
def ledger_file(tmp_path: Path) -> Path:
    path = tmp_path / "l.duckdb"
    with writer(str(path)) as con:
        set_test_prices(con)
        idle_week(con)
    return path


def files(ledger: Path) -> list[Path]:
    return sorted(sidecar.folder(ledger).glob("*.json"))


def test_the_first_scan_is_kept_and_the_next_one_reads_it_back_exactly(ledger_file: Path) -> None:
    with writer(str(ledger_file)) as con:
        first = real_scan(con)
    assert first.weeks and first.waste[first.weeks[0]]  # the idle week was scanned and found waste
    [kept] = files(ledger_file)
    assert from_json(json.loads(kept.read_text())) == first
    # the next call reads the file: a figure changed in it comes back (and nothing is recomputed)
    body = json.loads(kept.read_text())
    week = first.weeks[0].isoformat()
    key = next(iter(body["waste"][week]))
    body["waste"][week][key] = 12345.0
    kept.write_text(json.dumps(body))
    with writer(str(ledger_file)) as con:
        assert real_scan(con).waste[first.weeks[0]][key] == 12345.0


def test_new_data_other_settings_or_a_damaged_file_are_scanned_again(ledger_file: Path) -> None:
    with writer(str(ledger_file)) as con:
        first = real_scan(con)
    [kept] = files(ledger_file)
    body = json.loads(kept.read_text())
    week = first.weeks[0]
    key = next(iter(body["waste"][week.isoformat()]))
    body["waste"][week.isoformat()][key] = 12345.0
    kept.write_text(json.dumps(body))
    with writer(str(ledger_file)) as con:
        # another setting: another state, computed (not the doctored file's figure)
        other = real_scan(con, settings=Settings(usd_per_kwh=0.2))
        assert other.waste[week][key] != 12345.0
        # a second idle card the same week: another ledger state, its own waste
        idle_week(con, job_id="j2", gpu_id="h1:1")
        second = real_scan(con)
        assert second.waste[week][key] == pytest.approx(2 * first.waste[week][key])
    assert len(files(ledger_file)) == 3
    for f in files(ledger_file):
        f.write_text("{not json")
    with writer(str(ledger_file)) as con:
        assert real_scan(con) == second  # damaged: computed again, and rewritten
    assert (
        from_json(json.loads(max(files(ledger_file), key=lambda f: f.stat().st_mtime_ns).read_text()))
        == second
    )


def test_a_folder_that_cannot_be_written_costs_only_the_recomputation(ledger_file: Path) -> None:
    sidecar.folder(ledger_file).write_text("a file where the folder would be")
    with writer(str(ledger_file)) as con:
        first = real_scan(con)
        assert real_scan(con) == first
    assert sidecar.folder(ledger_file).is_file()


def test_only_the_newest_states_are_kept(ledger_file: Path) -> None:
    with writer(str(ledger_file)) as con:
        for usd in (0.10, 0.11, 0.12, 0.13, 0.14, 0.15):
            real_scan(con, settings=Settings(usd_per_kwh=usd))
    assert len(files(ledger_file)) == sidecar.KEEP


def test_an_in_memory_ledger_has_no_sidecar(ledger) -> None:
    set_test_prices(ledger)
    idle_week(ledger)
    assert sidecar.ledger_file(ledger) is None
    sc = real_scan(ledger)
    assert from_json(to_json(sc)) == sc
