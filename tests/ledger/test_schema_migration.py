"""A ledger written by an earlier gpuledger opens with this one: each migration after its version is applied once."""

from __future__ import annotations

import duckdb

from gpuledger.ledger.db import writer
from gpuledger.ledger.schema import MIGRATIONS, SCHEMA_VERSION, current_version


def _ledger_at(path: str, version: int) -> None:
    """A file at schema ``version``, built from that version's migrations only (what the older code wrote)."""
    con = duckdb.connect(path)
    for statements in MIGRATIONS[:version]:
        for sql in statements:
            con.execute(sql)
    con.execute("INSERT OR REPLACE INTO schema_meta VALUES ('schema_version', ?)", [str(version)])
    con.execute(
        "INSERT INTO processes (gpu_id, ts, pid, ingest_id) VALUES ('g0', TIMESTAMP '2026-11-01', 42, 1)"
    )
    con.close()


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    return {r[0] for r in con.execute(f"SELECT column_name FROM (DESCRIBE {table})").fetchall()}


def test_a_version_2_ledger_gains_the_per_process_shares_on_open(db_path):
    _ledger_at(db_path, 2)
    with duckdb.connect(db_path) as old:
        assert "sm_pct" not in _columns(old, "processes")
        assert not old.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'process_shares'"
        ).fetchone()[0]
    with writer(db_path) as con:
        assert current_version(con) == SCHEMA_VERSION == 6
        assert {"sm_pct", "mem_util_pct", "enc_pct", "dec_pct", "interval_s"} <= _columns(con, "processes")
        assert con.execute("SELECT count(*) FROM process_shares").fetchone()[0] == 0
        assert con.execute("SELECT pid, sm_pct FROM processes").fetchall() == [(42, None)]  # kept
    with writer(db_path) as con:  # a second open applies nothing again
        assert current_version(con) == SCHEMA_VERSION


def test_a_version_3_ledger_gets_its_hour_rollup_from_its_minute_rows(db_path):
    _ledger_at(db_path, 3)
    with duckdb.connect(db_path) as old:
        old.execute(
            """INSERT INTO samples_minute (minute, gpu_id, job_id, n, covered_s, util_s, util_cov_s)
               VALUES (TIMESTAMP '2026-11-01 10:00', 'g0', 'j1', 2, 60, 30, 60),
                      (TIMESTAMP '2026-11-01 10:59', 'g0', 'j1', 1, 30, 3, 30),
                      (TIMESTAMP '2026-11-01 11:00', 'g0', NULL, 2, 60, 0, 0)"""
        )
    with writer(db_path) as con:
        rows = con.execute(
            "SELECT hour, gpu_id, job_id, n, covered_s, util_s FROM samples_hour ORDER BY hour"
        ).fetchall()
    # by hand: 10:00 and 10:59 are one hour (3 samples, 90 s, 33 util-seconds); 11:00 another
    assert [r[3:] for r in rows] == [(3, 90.0, 33.0), (2, 60.0, 0.0)]
    assert [(r[0].hour, r[2]) for r in rows] == [(10, "j1"), (11, None)]
