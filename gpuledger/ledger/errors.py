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
