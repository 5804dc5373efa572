"""A version-4 ledger gains the version-5 records of who else holds a row (gpuledger/ledger/schema.py
SCHEMA_V5) on its next open, empty, with its rows untouched; --replace then works on it."""

from __future__ import annotations

import duckdb

from collectors.base import IngestOptions, ingest_file
from gpuledger.ledger.db import writer
from gpuledger.ledger.schema import MIGRATIONS, SCHEMA_VERSION, current_version
from tests.conftest import write

NEW_TABLES = ("held_rows", "ingest_sources", "checkpoint_placements")
HEADER = "JobIDRaw|Cluster|JobName|User|Account|State|Start|End|Elapsed|AllocTRES|NodeList"


def row(n: int) -> str:
    return f"{n}|ci|train|bob|cv|COMPLETED|2025-03-0{n}T10:00:00|2025-03-0{n}T11:00:00|01:00:00|gres/gpu:h100=1,gres/gpu=1|g01"


def _v4_ledger(path: str) -> None:
    """What gpuledger wrote before version 5: its migrations only, and one job of ingest 1."""
    con = duckdb.connect(path)
    for statements in MIGRATIONS[:4]:
        for sql in statements:
            con.execute(sql)
    con.execute("INSERT OR REPLACE INTO schema_meta VALUES ('schema_version', '4')")
    con.execute("SELECT nextval('ingest_seq')")
    con.execute(
        """INSERT INTO ingests VALUES (1, '/old/jobs.txt', '/old/jobs.txt', 'sha-old', 'sacct', '{}', '{}',
                                       TIMESTAMP '2026-11-01')"""
    )
    con.execute(
        """INSERT INTO jobs (job_id, source, kind, gpu_count, pricing_tier, state, ingest_id)
           VALUES ('ci/9', 'sacct', 'other', 1, 'on_demand', 'COMPLETED', 1)"""
    )
    con.close()


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {
        r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE NOT temporary").fetchall()
    }


def test_a_version_4_ledger_gains_empty_holder_tables_and_keeps_its_rows(db_path, tmp_path):
    _v4_ledger(db_path)
    with duckdb.connect(db_path) as old:
        assert not set(NEW_TABLES) & _tables(old)
    with writer(db_path) as con:
        assert current_version(con) == SCHEMA_VERSION == 6
        assert set(NEW_TABLES) <= _tables(con)
        assert [con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in NEW_TABLES] == [0, 0, 0]
        assert con.execute("SELECT job_id, ingest_id FROM jobs").fetchall() == [("ci/9", 1)]
        # and it records holders from now on: job 2 sent by two dumps, the second replaced without it
        d1 = write(tmp_path, "d1.txt", f"{HEADER}\n{row(1)}\n{row(2)}\n")
        d2 = write(tmp_path, "d2.txt", f"{HEADER}\n{row(2)}\n{row(3)}\n")
        opts = IngestOptions(tz="UTC")
        assert [ingest_file(con, d, opts=opts).ingest_id for d in (d1, d2)] == [2, 3]
        write(tmp_path, "d2.txt", f"{HEADER}\n{row(3)}\n")
        ingest_file(con, d2, opts=IngestOptions(tz="UTC", replace=True))
        assert con.execute("SELECT job_id FROM jobs ORDER BY 1").fetchall() == [
            ("ci/1",),
            ("ci/2",),
            ("ci/3",),
            ("ci/9",),
        ]
    with writer(db_path) as con:  # a second open applies nothing again
        assert current_version(con) == SCHEMA_VERSION
