"""Provenance: which ingest brought each row, from which file and bytes, and what removing one leaves.

:func:`record_ingest` writes an ingest's row (path, source key, content hash, counts) after the landing, in
its transaction: the content hash (:func:`sha256_file`) makes re-ingesting the same bytes a no-op, and
``replace=True`` first removes what an earlier version of the same source brought in (:func:`withdraw_source`).

Removing an ingest never removes what another ingest still holds. A row has one ``ingest_id``, its owner;
``held_rows`` names the other ingests that hold it (a sample found already in the ledger, a job whose record
another ingest sent too), ``ingest_sources`` the other files found to be an ingest's bytes ("already
ingested"), ``checkpoint_placements`` the checkpoints a training log set on a job. :func:`delete_ingests`
hands a held row to its latest other holder and takes a withdrawn log's checkpoints back;
:func:`withdraw_source` (``--replace``) keeps an ingest another file holds. A fresh ingest with nothing
already in the ledger writes none of these.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from collectors.attempts import note_removed, renumber_attempts
from collectors.checkpoints import withdraw
from gpuledger.ledger.sample_time import reach_sql
from gpuledger.ledger.schema import INGESTED_TABLES

if TYPE_CHECKING:
    from collectors.contract import IngestOptions


def sha256_file(path: Path) -> str:
    """The file's SHA-256. ``hashlib.file_digest`` reads into one reused buffer and hashes without the GIL: a
    287 MB file alone in 0.20 s against 0.28 s for a loop of 1 MiB ``read`` calls (within noise for a whole
    ingest, where it runs beside DuckDB's stage)."""
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def delete_ingests(
    con: duckdb.DuckDBPyConnection,
    ingest_ids: list[int],
    *,
    idle_util_pct: float,
    idle_min_minutes: float = 30.0,
    target_util_pct: float = 60.0,
) -> None:
    """Remove everything these ingests brought in that no other ingest holds, and re-roll the GPU-minutes
    their removed samples touched.

    A row another ingest also holds (``held_rows``: a sample it found already in the ledger, a job it sent a
    record of) is not removed: it is handed to the latest such ingest, with the values it has, and a job's
    allocations and training rows from the same record go with it. A checkpoint a removed training log placed
    on a job is taken back (collectors/checkpoints.py :func:`~collectors.checkpoints.withdraw`)."""
    if not ingest_ids:
        return
    from gpuledger.ledger.rollup import refresh_windows, thresholds

    placeholders = ", ".join("?" for _ in ingest_ids)
    withdraw(con, ingest_ids)
    _hand_over(con, ingest_ids)
    note_removed(con, ingest_ids)  # a requeued job that loses an attempt is numbered again
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE replaced_windows AS
            SELECT gpu_id, min(ts) AS lo,
                   max({reach_sql("ts", "interval_s::DOUBLE")}) AS hi
            FROM samples WHERE ingest_id IN ({placeholders}) GROUP BY gpu_id""",
        ingest_ids,
    )
    for table in INGESTED_TABLES:
        con.execute(f"DELETE FROM {table} WHERE ingest_id IN ({placeholders})", ingest_ids)
    con.execute(f"DELETE FROM ingests WHERE ingest_id IN ({placeholders})", ingest_ids)
    renumber_attempts(con, None)
    # hi reaches past the last removed sample: the sample after it lost its predecessor (pairs, idle runs)
    refresh_windows(
        con,
        "SELECT * FROM replaced_windows",
        [],
        thresholds(idle_util_pct, idle_min_minutes, target_util_pct),
    )
    con.execute("DROP TABLE IF EXISTS temp.replaced_windows")


# Rows of a job's record besides the jobs row itself (land() replaces them with the job's newer record):
# handed over with the job.
JOB_RECORD_TABLES = ("allocations", "training_runs", "train_log")


def _hand_over(con: duckdb.DuckDBPyConnection, ingest_ids: list[int]) -> None:
    """Give each row these ingests own that a surviving ingest also holds to the latest such ingest (its
    ``ingest_id`` changes, nothing else), and drop that ingest's ``held_rows`` row: it owns the row now.
    Costs one probe of ``held_rows`` when no other ingest holds anything."""
    con.execute(
        "CREATE OR REPLACE TEMP TABLE removed_ingests AS SELECT unnest(?::BIGINT[]) AS ingest_id",
        [ingest_ids],
    )
    others = "h.ingest_id NOT IN (SELECT ingest_id FROM removed_ingests)"
    removed = "IN (SELECT ingest_id FROM removed_ingests)"
    if not con.execute(f"SELECT EXISTS (SELECT 1 FROM held_rows h WHERE {others})").fetchall()[0][0]:
        con.execute("DROP TABLE temp.removed_ingests")
        return
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE handed_samples AS
            SELECT h.row_key AS gpu_id, h.ts, max(h.ingest_id) AS to_id
            FROM held_rows h JOIN samples s ON s.gpu_id = h.row_key AND s.ts = h.ts
            WHERE h.table_name = 'samples' AND {others} AND s.ingest_id {removed}
            GROUP BY h.row_key, h.ts"""
    )
    lo, hi = con.execute("SELECT min(ts), max(ts) FROM handed_samples").fetchall()[0]
    if lo is not None:
        con.execute(
            f"""UPDATE samples SET ingest_id = t.to_id FROM handed_samples t
                WHERE samples.gpu_id = t.gpu_id AND samples.ts = t.ts AND samples.ingest_id {removed}
                  AND samples.ts BETWEEN ?::TIMESTAMP AND ?::TIMESTAMP""",
            [lo, hi],
        )
        con.execute(
            """DELETE FROM held_rows h USING handed_samples t
               WHERE h.table_name = 'samples' AND h.row_key = t.gpu_id AND h.ts = t.ts AND h.ingest_id = t.to_id"""
        )
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE handed_jobs AS
            SELECT j.job_id, j.ingest_id AS from_id, max(h.ingest_id) AS to_id
            FROM jobs j JOIN held_rows h ON h.table_name = 'jobs' AND h.row_key = j.job_id
            WHERE {others} AND j.ingest_id {removed}
            GROUP BY j.job_id, j.ingest_id"""
    )
    for table in ("jobs", *JOB_RECORD_TABLES):
        con.execute(
            f"""UPDATE {table} SET ingest_id = t.to_id FROM handed_jobs t
                WHERE {table}.job_id = t.job_id AND {table}.ingest_id = t.from_id"""
        )
    con.execute(
        """DELETE FROM held_rows h USING handed_jobs t
           WHERE h.table_name = 'jobs' AND h.row_key = t.job_id AND h.ingest_id = t.to_id"""
    )
    for t in ("removed_ingests", "handed_samples", "handed_jobs"):
        con.execute(f"DROP TABLE temp.{t}")


def withdraw_source(con: duckdb.DuckDBPyConnection, key: str, opts: IngestOptions) -> list[int]:
    """What ``--replace`` removes before the source ``key`` lands again: the ingests that only this source
    holds. Returns their ids.

    An ingest whose bytes another source also holds (``ingest_sources``: that file was reported as already
    ingested) stays, now that source's (its ``path`` and ``source_key``); a record that this source held
    another ingest's bytes is dropped. An ingest with the same bytes under another key is that source's and
    stays: the file lands again beside it, its rows already in the ledger held by both."""
    con.execute("DELETE FROM ingest_sources WHERE source_key = ?", [key])
    earlier = [
        int(r[0]) for r in con.execute("SELECT ingest_id FROM ingests WHERE source_key = ?", [key]).fetchall()
    ]
    kept = con.execute(
        """SELECT ingest_id, arg_min(path, seen_at), arg_min(source_key, seen_at) FROM ingest_sources
           WHERE ingest_id IN (SELECT unnest(?::BIGINT[])) GROUP BY ingest_id""",
        [earlier],
    ).fetchall()
    for ingest_id, path, source_key in kept:
        con.execute(
            "UPDATE ingests SET path = ?, source_key = ? WHERE ingest_id = ?", [path, source_key, ingest_id]
        )
        con.execute(
            "DELETE FROM ingest_sources WHERE ingest_id = ? AND source_key = ?", [ingest_id, source_key]
        )
    removed = [i for i in earlier if i not in {int(k[0]) for k in kept}]
    delete_ingests(
        con,
        removed,
        idle_util_pct=opts.idle_util_pct,
        idle_min_minutes=opts.idle_min_minutes,
        target_util_pct=opts.target_util_pct,
    )
    return removed


def record_source(con: duckdb.DuckDBPyConnection, ingest_id: int, path: str, key: str) -> None:
    """Record that the file ``path`` (source ``key``) holds the bytes of ingest ``ingest_id`` (it was
    reported as already ingested), unless that source holds them already; see :func:`withdraw_source`.
    Runs in the caller's transaction, or on its own."""
    con.execute(
        """INSERT INTO ingest_sources
           SELECT $id, $path, $key, $now
           WHERE NOT EXISTS (SELECT 1 FROM ingests WHERE source_key = $key
                               AND content_sha256 = (SELECT content_sha256 FROM ingests WHERE ingest_id = $id))
             AND NOT EXISTS (SELECT 1 FROM ingest_sources WHERE ingest_id = $id AND source_key = $key)""",
        {"id": ingest_id, "path": path, "key": key, "now": dt.datetime.now(dt.UTC).replace(tzinfo=None)},
    )


def record_ingest(
    con: duckdb.DuckDBPyConnection,
    ingest_id: int,
    *,
    path: str,
    source_key: str,
    sha256: str,
    fmt: str,
    rows: dict[str, int],
    skipped: dict[str, int],
) -> None:
    """Record the ingest's provenance (after :func:`land`, in its transaction), and drop what it makes
    redundant in ``held_rows`` (:func:`_prune_held`)."""
    con.execute(
        "INSERT INTO ingests VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            ingest_id,
            path,
            source_key,
            sha256,
            fmt,
            json.dumps(rows, sort_keys=True),
            json.dumps(skipped, sort_keys=True),
            dt.datetime.now(dt.UTC).replace(tzinfo=None),
        ],
    )
    _prune_held(con, ingest_id, source_key)


def _prune_held(con: duckdb.DuckDBPyConnection, ingest_id: int, source_key: str) -> None:
    """One holder per source is enough: an earlier ingest of the same source key no longer holds the rows
    this one holds or owns. ``--replace`` removes a source's ingests together, so its claim added nothing,
    and without this a log re-ingested as it grows (or a Slurm poll re-sending its running jobs) would add
    a ``held_rows`` row per sample (job) at every run. An ingest another file holds the bytes of
    (``ingest_sources``) keeps its claims: ``--replace`` of the key leaves it to that file. Costs one probe
    when no earlier ingest of the source holds anything (a new file, a collector's flushes)."""
    earlier = """SELECT ingest_id FROM ingests WHERE source_key = $key AND ingest_id <> $id
                   AND ingest_id NOT IN (SELECT ingest_id FROM ingest_sources)"""
    params = {"key": source_key, "id": ingest_id}
    if not con.execute(
        f"SELECT EXISTS (SELECT 1 FROM held_rows WHERE ingest_id IN ({earlier}))", params
    ).fetchall()[0][0]:
        return
    con.execute(
        f"""DELETE FROM held_rows WHERE table_name = 'jobs' AND ingest_id IN ({earlier})
              AND (row_key IN (SELECT job_id FROM jobs WHERE ingest_id = $id)
                   OR row_key IN (SELECT row_key FROM held_rows WHERE table_name = 'jobs' AND ingest_id = $id))""",
        params,
    )
    con.execute(
        f"""DELETE FROM held_rows h WHERE h.table_name = 'samples' AND h.ingest_id IN ({earlier})
              AND EXISTS (SELECT 1 FROM held_rows c WHERE c.ingest_id = $id AND c.table_name = 'samples'
                            AND c.row_key = h.row_key AND c.ts = h.ts)""",
        params,
    )


def next_ingest_id(con: duckdb.DuckDBPyConnection) -> int:
    return int(con.execute("SELECT nextval('ingest_seq')").fetchall()[0][0])
