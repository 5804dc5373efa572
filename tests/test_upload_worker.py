"""The Upload page's worker process (gpuledger/upload/worker.py): a real process, really killed at its limits.

One upload must never stall the server other people's pages run in (issue 34: a 150 KB jobs CSV held the
server 177 s). The worker is a separate process; past its time or memory limit it is killed, and the page
gets a sentence naming the limit and the settings key, with nothing analysed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gpuledger.ledger.settings import Settings
from gpuledger.upload import WorkerFailed, WorkerLimit, analyse_isolated, run_limited
from tests._worker_targets import fail, hog, spin


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_worker_past_its_time_limit_is_killed_and_reported(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    with pytest.raises(WorkerLimit) as hit:
        run_limited(spin, (str(pid_file),), seconds=3.0, memory_mb=100_000)
    took = time.monotonic() - started
    assert (hit.value.kind, hit.value.limit) == ("time", 3.0)
    assert 3.0 <= took < 13.0  # the limit, plus one poll and the kill (slack for a loaded 2-core machine)
    assert pid_file.exists(), "the worker never ran: the limit stopped nothing"
    assert gone(int(pid_file.read_text()))  # killed and reaped, not left spinning


def test_a_worker_past_its_memory_limit_is_killed_and_reported(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with pytest.raises(WorkerLimit) as hit:
        run_limited(hog, (str(pid_file), 600), seconds=60.0, memory_mb=300)
    assert (hit.value.kind, hit.value.limit) == ("memory", 300)
    if pid_file.exists():  # killed after it held the memory (it may be killed while still filling it)
        assert gone(int(pid_file.read_text()))


def test_a_worker_that_raises_is_reported_not_hidden() -> None:
    with pytest.raises(WorkerFailed, match="ValueError: a bug in the analysis"):
        run_limited(fail, (), seconds=60.0, memory_mb=100_000)


def test_an_upload_stopped_at_its_time_limit_says_so_and_analyses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.01 s is less than any worker needs to start: the upload is stopped, the page's sentence names the
    limit and its settings key, and the upload's temp folder is gone with it."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    data = b"job_id,gpu_model,gpu_count,start,end\nj1,T4,1,2025-01-01 00:00,2025-01-01 01:00\n"
    result = analyse_isolated("jobs.csv", data, Settings(upload_seconds=0.01))
    assert result.error == (
        "jobs.csv: reading it took longer than the upload's time limit (0.01 s, dashboard.upload_seconds in "
        "the settings), so it was stopped"
    )
    assert result.what_next is not None and "gpuledger ingest FILE" in result.what_next
    assert result.summary is None and result.jobs is None and result.ingest is None
    assert list(tmp_path.iterdir()) == []  # the uploaded copy is removed with its worker
