"""Calls for tests/test_upload_worker.py to run in a real worker process. A module of its own that imports
nothing heavy, so the worker starts in a fraction of a second and the limits, not the imports, are timed."""

from __future__ import annotations

import os
import time
from pathlib import Path


def spin(pid_file: str) -> None:
    """Write this process's id, then burn CPU for ever (the worker the time limit must stop)."""
    Path(pid_file).write_text(str(os.getpid()))
    while True:
        pass


def hog(pid_file: str, mb: int) -> int:
    """Hold ``mb`` MB of touched memory, then wait (the worker the memory limit must stop)."""
    held = b"x" * (mb * 2**20)
    Path(pid_file).write_text(str(os.getpid()))
    time.sleep(60)
    return len(held)


def fail() -> None:
    raise ValueError("a bug in the analysis")
