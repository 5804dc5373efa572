"""The one way a name someone else chose becomes a file or folder name: a single safe path component.

Upload names come from a browser, run names and output folders from inside an uploaded log, team names from
the ledger; any of them may be ``..``, an absolute path, hold a NUL or a slash, run to thousands of characters
or be a name Windows keeps for a device (``CON``, ``NUL``, ``COM1``). Every place that puts such a name into a
path calls :func:`safe_component` (or :func:`inside`, which also joins it to its folder and checks the result),
so no name can climb out of its folder, replace it, or make the write fail (issue 43: a log naming its run
``..`` was moved into the server's ``$TMPDIR`` and never removed).
"""

from __future__ import annotations

from pathlib import Path

MAX_BYTES = 200  # in UTF-8, under every common file system's 255, with room for a suffix added later
KEPT = "._-"  # besides letters and digits; anything else becomes "_"
# names Windows reserves for devices, with any extension (CON.txt is CON); compared case-insensitively
WINDOWS_RESERVED = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
    | {f"{dev}{n}" for dev in ("COM", "LPT") for n in [*"123456789", "¹", "²", "³"]}
)


def safe_component(name: str, *, fallback: str = "file") -> str:
    """``name`` as one plain file name: its last path part (a browser or a log may send ``a/b.csv`` or
    ``C:\\x\\b.csv``), letters, digits and ``._-`` kept, anything else (NUL, spaces, quotes) as ``_``, no
    leading or trailing dot, at most MAX_BYTES bytes of UTF-8 (the suffix kept, parsers sniff by it), a Windows
    device name prefixed with ``_``. A name with nothing left (``..``, ``.``, ``/``, empty) is ``fallback``.
    The result is never ``.`` or ``..``, never empty and never holds a separator."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    clean = "".join(c if c.isalnum() or c in KEPT else "_" for c in base).strip(".")
    if not clean.strip("._-"):
        clean = safe_fallback(fallback)
    if len(clean.encode()) > MAX_BYTES:
        stem, dot, suffix = clean.rpartition(".")
        clean, suffix = (stem, f".{suffix[:16]}") if dot and stem else (clean, "")
        while len((clean + suffix).encode()) > MAX_BYTES:
            clean = clean[:-1]
        clean = clean.rstrip(".") + suffix
    if clean.split(".", 1)[0].upper() in WINDOWS_RESERVED:
        clean = "_" + clean
    return clean


def safe_fallback(fallback: str) -> str:
    """The fallback itself held to the same rule (a caller's constant, but checked all the same)."""
    clean = "".join(c if (c.isascii() and c.isalnum()) or c in "_-" else "_" for c in fallback)
    return clean.strip("_")[:64] or "file"


def inside(folder: str | Path, name: str, *, fallback: str = "file") -> Path:
    """``folder / safe_component(name)``; raises ValueError if that is not directly inside ``folder`` (it
    cannot be: the check guards this module against its own future edits)."""
    root = Path(folder)
    path = root / safe_component(name, fallback=fallback)
    if path.parent != root or path.name in ("", ".", "..") or len(path.parts) != len(root.parts) + 1:
        raise ValueError(f"{name!r} does not name a file inside {root}")
    return path
