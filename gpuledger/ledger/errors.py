"""Typed errors inside; the CLI and the pages turn them into one sentence.

``FormatError`` renders as ``FILE:LINE: reason`` (line omitted when unknown), which is what the CLI prints
after ``error: `` and what a page shows in ``st.error``.
"""

from __future__ import annotations

from pathlib import Path

from gpuledger.ledger.text import clip, neutral

# A reason longer than this is cut (with a count): every value a reason echoes is clipped where it is
# written (gpuledger.ledger.text.clip); this bounds a message that echoes many of them or a reader's text.
MAX_REASON_CHARS = 600


class LedgerError(Exception):
    """Base class: anything gpuledger reports to a user as one sentence."""


class FormatError(LedgerError):
    """A file that does not say what its format requires."""

    def __init__(self, path: str | Path, line: int | None, reason: str) -> None:
        self.path = str(path)
        self.line = line
        self.reason = clip(reason, MAX_REASON_CHARS)
        reason = self.reason
        # a file name is someone's text too: no control character of it reaches a terminal
        where = neutral(f"{self.path}:{line}" if line is not None else self.path)
        super().__init__(f"{where}: {reason}")


class UnknownFormatError(FormatError):
    """No parser accepted the file."""


class SettingsError(LedgerError):
    """An invalid settings file; the message names the key."""

    def __init__(self, path: str | Path, key: str, reason: str) -> None:
        self.path = str(path)
        self.key = key
        super().__init__(f"{path}: setting {key!r}: {reason}")


class DatabaseBusyError(LedgerError):
    """Another process held the database's write lock for longer than we were willing to wait."""


class CollectorError(LedgerError):
    """A live source (NVML, Prometheus, Slurm) could not be read."""


class RollupMismatch(LedgerError):
    """The rollups were built for other thresholds than the settings a figure is asked for.

    Every entry point syncs the ledger first (gpuledger.ledger.db.sync_reference rebuilds the rollups for the
    settings), so this is a caller that skipped the sync: a programming error, never a second path."""


# A write that fails for lack of room says so, whoever raised it (DuckDB's "Could not write file …: No space
# left on device", Python's OSError ENOSPC/EDQUOT, a file past ``ulimit -f``): once it was "a number too large
# to store", because "too large" matched the sentence for an integer overflow first.
DISK_FULL = (
    "disk full: no space left on the device to write to (free space on the ledger's disk and the temp "
    "folder, or point --db or TMPDIR at a disk with room); the ledger is left as it was"
)
FILE_SIZE_LIMIT = (
    "a file grew past the size this process may write (ulimit -f, or the file system's largest file); "
    "the ledger is left as it was"
)
_NO_SPACE_WORDS = ("No space left on device", "Disk quota exceeded", "ENOSPC", "EDQUOT")
_FILE_LIMIT_WORDS = ("File too large", "EFBIG", "File size limit exceeded")


def out_of_space(exc: BaseException | str) -> str | None:
    """DISK_FULL or FILE_SIZE_LIMIT when ``exc`` (an exception or its text) is a write that ran out of room;
    None otherwise."""
    import errno

    code = getattr(exc, "errno", None)
    if code in (errno.ENOSPC, errno.EDQUOT):
        return DISK_FULL
    if code == errno.EFBIG:
        return FILE_SIZE_LIMIT
    text = exc if isinstance(exc, str) else str(exc)
    if any(w in text for w in _NO_SPACE_WORDS):
        return DISK_FULL
    if any(w in text for w in _FILE_LIMIT_WORDS):
        return FILE_SIZE_LIMIT
    return None
