"""Run one upload's analysis in a worker process, within a time and a memory limit.

Why: parsing runs Python and DuckDB on bytes anyone signed in can send. In the server's own process a
pathological file held it for minutes (a 150 KB jobs CSV with a 150,000-letter cell: 177 s), and every
other browser's page waited with it, health check included. In a worker the server's thread only waits on a
pipe; the worker runs at a lower CPU priority (``nice`` +10), and is killed past ``dashboard.upload_seconds``
(wall clock) or past ``dashboard.upload_worker_mb`` of resident memory (polled from /proc on Linux; elsewhere
only DuckDB's own ``dashboard.upload_memory_mb`` applies). A killed upload leaves nothing behind: its ledger
is in the worker's memory and its temp folder is the caller's, removed here.

The worker is a fresh ``python -m gpuledger.upload._child`` (not multiprocessing): a forked or spawned child
would run the parent's ``__main__`` again, which inside Streamlit is the page script. The call and its answer
travel pickled over the worker's stdin and stdout.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from collectors.gpu_facts import GpuFacts
from gpuledger.ledger.filenames import inside
from gpuledger.ledger.settings import Settings
from gpuledger.upload.analysis import UploadResult, analyse_file

R = TypeVar("R")
POLL_S = 0.05  # how often the memory is read and the clock checked
UPLOAD_FOLDER = "upload"


class WorkerLimit(Exception):
    """The worker went past a limit and was killed: ``kind`` is "time" or "memory", ``limit`` its value."""

    def __init__(self, kind: str, limit: float) -> None:
        super().__init__(f"past the {kind} limit ({limit:g})")
        self.kind, self.limit = kind, limit


class WorkerFailed(Exception):
    """The worker raised, or died without an answer (killed from outside, out of memory in the kernel)."""


def rss_mb(pid: int) -> float | None:
    """Resident memory of process ``pid`` in MiB (Linux /proc), or None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
            pages = int(fh.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _worker_env() -> dict[str, str]:
    """The server's environment, with its import path: the worker imports the same gpuledger."""
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths))


def run_limited(fn: Callable[..., R], args: tuple[Any, ...], *, seconds: float, memory_mb: float) -> R:
    """``fn(*args)`` in a worker process (``fn``, ``args`` and the answer must pickle). Raises WorkerLimit
    after killing a worker that ran past ``seconds`` or held more than ``memory_mb``, and WorkerFailed when
    the worker raised or died. The caller's thread only waits: it holds no lock."""
    payload = pickle.dumps((fn, args))
    deadline = time.monotonic() + seconds
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuledger.upload._child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=_worker_env(),
    )
    sent: bytes | None = payload
    try:
        while True:
            try:
                out, _ = proc.communicate(input=sent, timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                sent = None  # given once; communicate() goes on writing it
            if time.monotonic() > deadline:
                raise WorkerLimit("time", seconds)
            used = rss_mb(proc.pid)
            if used is not None and used > memory_mb:
                raise WorkerLimit("memory", memory_mb)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if proc.returncode != 0 or not out:
        raise WorkerFailed(f"the worker stopped without an answer (exit code {proc.returncode})")
    kind, value = pickle.loads(out)
    if kind != "ok":
        raise WorkerFailed(value)
    return value  # type: ignore[no-any-return]


def analyse_isolated(
    name: str,
    data: bytes,
    s: Settings,
    *,
    cluster: str | None = None,
    tz: str | None = None,
    gpu: GpuFacts | None = None,
) -> UploadResult:
    """The Upload page's analysis of ``data`` (uploaded as ``name``) in a worker within the settings'
    limits; a worker past a limit, or one that failed, becomes an UploadResult with the error sentence."""
    with tempfile.TemporaryDirectory(prefix="gpuledger-upload-") as tmp:
        # a fixed folder name, not the random temp one: the worker moves the copy into a folder named after
        # the run the file names (gpuledger/upload/naming.py), or after the uploaded file, before ingesting
        path = inside(Path(tmp) / UPLOAD_FOLDER, name, fallback="upload")
        path.parent.mkdir()
        path.write_bytes(data)
        try:
            return run_limited(
                analyse_file,
                (str(path), name, s, cluster, tz, gpu),
                seconds=s.upload_seconds,
                memory_mb=s.upload_worker_mb,
            )
        except WorkerLimit as hit:
            return UploadResult(name, error=limit_sentence(name, hit), what_next=LIMIT_NEXT)
        except WorkerFailed as exc:
            return UploadResult(
                name, error=f"{name}: reading it failed unexpectedly ({exc})", what_next=LIMIT_NEXT
            )


LIMIT_NEXT = (
    "Read it with `gpuledger ingest FILE` on the server (no upload limits there), or ask an admin to raise "
    "the limit in the settings."
)


def limit_sentence(name: str, hit: WorkerLimit) -> str:
    """What the page says about an upload stopped at a limit (the settings key that sets it included)."""
    if hit.kind == "time":
        return (
            f"{name}: reading it took longer than the upload's time limit ({hit.limit:g} s, "
            "dashboard.upload_seconds in the settings), so it was stopped"
        )
    return (
        f"{name}: reading it needed more than the upload's memory limit ({hit.limit:,.0f} MB, "
        "dashboard.upload_worker_mb in the settings), so it was stopped"
    )
