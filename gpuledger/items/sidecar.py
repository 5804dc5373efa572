"""The items' week scan kept beside the ledger file, so a cold page, report or CLI call reads it instead of
recomputing every complete week (gpuledger/items/scan.py: ~0.45 s a week on the demo, 26 weeks at most).

A derived result, not ledger data: it lives in ``<ledger>.scans/`` next to the DuckDB file (never inside it,
so writing it neither takes the writer's lock nor changes the ledger's version that every page cache is keyed
on), one JSON file per state, written atomically (a temporary file, then a rename). Its name is the SHA-1 of
everything the scan depends on (:func:`state_key`): the ledger's content (its ingests, every job's fields
the rules read, the price rows, the sample count, the horizon), the settings' fingerprint and the source of
the code that computes it (analytics/, gpuledger/items/, gpuledger/ledger/), so a new ingest, a changed
setting or an upgraded gpuledger finds no file and computes afresh. A file that cannot be read or parsed is
treated as absent; a folder that cannot be written (a read-only volume) costs only the recomputation. An
in-memory ledger (the tests, the upload page) has no file and no sidecar.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import duckdb

KEEP = 4  # states kept per ledger: the newest files (one per settings fingerprint a team switches between)
CODE_DIRS = ("analytics", "gpuledger/items", "gpuledger/ledger")

# every input of the rules that a write outside an ingest could change (gpuledger check --fix edits jobs): each
# job's and price row's whole row (a row as a struct, hashed), the sample count
_STATE_SQL = """
SELECT (SELECT coalesce(max(ingest_id), 0) || '/' || count(*) FROM ingests),
       (SELECT count(*) || '/' || coalesce(bit_xor(hash(jobs)), 0) FROM jobs),
       (SELECT count(*) || '/' || coalesce(bit_xor(hash(prices)), 0) FROM prices),
       (SELECT count(*) FROM samples)
"""


@functools.cache
def code_fingerprint() -> str:
    """SHA-1 of the source files the scan's result depends on (read once per process, a few ms)."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha1()
    for d in CODE_DIRS:
        for f in sorted((root / d).glob("*.py")):
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def ledger_file(con: duckdb.DuckDBPyConnection) -> Path | None:
    """The file behind ``con``; None for an in-memory ledger."""
    row = con.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchone()
    return Path(row[0]) if row and row[0] else None


def state_key(con: duckdb.DuckDBPyConnection, *parts: object) -> str:
    """The SHA-1 naming this ledger state with ``parts`` (the settings' fingerprint, the horizon)."""
    state = con.execute(_STATE_SQL).fetchone()
    payload = json.dumps([list(state or ()), [str(p) for p in parts], code_fingerprint()])
    return hashlib.sha1(payload.encode()).hexdigest()


def folder(ledger: Path) -> Path:
    return ledger.with_name(ledger.name + ".scans")


def load(ledger: Path, key: str) -> dict[str, Any] | None:
    """The stored body for ``key``; None when there is none or it cannot be read."""
    try:
        body = json.loads((folder(ledger) / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def save(ledger: Path, key: str, body: dict[str, Any]) -> bool:
    """Write ``body`` for ``key`` atomically and keep the newest :data:`KEEP` files; False when the folder
    cannot be written (the caller has its result either way)."""
    d = folder(ledger)
    try:
        d.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(body, out)
        os.replace(tmp, d / f"{key}.json")
        files = sorted(d.glob("*.json"), key=lambda f: f.stat().st_mtime_ns, reverse=True)
        for old in files[KEEP:]:
            with contextlib.suppress(OSError):
                old.unlink()
    except OSError:
        return False
    return True
