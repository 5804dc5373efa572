"""``gpuledger export --parquet DIR``: day-partitioned Parquet that other engines read back unchanged."""

from __future__ import annotations

import json

import duckdb

from collectors.base import IngestOptions, land, next_ingest_id, record_ingest, run_in_transaction
from gpuledger.cli.main import main
from gpuledger.ledger.db import writer


def _seed(db_path: str) -> None:
    """Two days of samples for two GPUs through the one write path (stage → land), plus one job holding GPU-a 23:00-01:00."""
    with writer(db_path) as con:

        def work() -> None:
            con.execute(
                """CREATE TEMP TABLE stage_samples AS SELECT * FROM (VALUES
                    (TIMESTAMP '2025-03-01 23:58:00', 'GPU-a', 60.0::FLOAT, 10.0::FLOAT),
                    (TIMESTAMP '2025-03-01 23:59:00', 'GPU-a', 60.0::FLOAT, 20.0::FLOAT),
                    (TIMESTAMP '2025-03-02 00:00:00', 'GPU-a', 60.0::FLOAT, 30.0::FLOAT),
                    (TIMESTAMP '2025-03-01 12:00:00', 'GPU-b', 60.0::FLOAT, NULL::FLOAT),
                    (TIMESTAMP '2025-03-02 12:00:00', 'GPU-b', 60.0::FLOAT, 90.0::FLOAT)
                   ) t(ts, gpu_id, interval_s, util_pct)"""
            )
            con.execute(
                """CREATE TEMP TABLE stage_jobs AS SELECT 'j1' AS job_id, 'jobs_csv' AS source, 1.0 AS gpu_count,
                   TIMESTAMP '2025-03-01 23:00:00' AS start_ts, TIMESTAMP '2025-03-02 01:00:00' AS end_ts"""
            )
            con.execute(
                """CREATE TEMP TABLE stage_allocations AS SELECT 'j1' AS job_id, 'GPU-a' AS gpu_id,
                   TIMESTAMP '2025-03-01 23:00:00' AS start_ts, TIMESTAMP '2025-03-02 01:00:00' AS end_ts"""
            )
            ingest_id = next_ingest_id(con)
            rows = land(con, ingest_id, IngestOptions())
            record_ingest(
                con,
                ingest_id,
                path="test://seed",
                source_key="seed",
                sha256="x",
                fmt="test",
                rows=rows,
                skipped={},
            )

        run_in_transaction(con, work)  # type: ignore[arg-type]


def test_export_writes_day_partitions_that_read_back(db_path, tmp_path, capsys):
    _seed(db_path)
    out = tmp_path / "lake"
    for _ in range(2):  # a second export replaces the first, it does not add to it
        assert main(["export", "--parquet", str(out), "--db", db_path, "--json"]) == 0
        report = {t["table"]: t for t in json.loads(capsys.readouterr().out)["tables"]}
        assert (report["samples"]["rows"], report["samples"]["days"]) == (5, 2)
    days = sorted(p.name for p in (out / "samples").iterdir())
    assert days == ["day=2025-03-01", "day=2025-03-02"]
    con = duckdb.connect()
    per_day = con.execute(
        f"""SELECT day::VARCHAR, count(*), sum(util_pct), count(util_pct)
            FROM read_parquet('{out}/samples/*/*.parquet', hive_partitioning = true) GROUP BY day ORDER BY day"""
    ).fetchall()
    # 2025-03-01: GPU-a 23:58 (10) and 23:59 (20), GPU-b 12:00 (NULL stays NULL); 2025-03-02: 30 and 90
    assert per_day == [("2025-03-01", 3, 30.0, 2), ("2025-03-02", 2, 120.0, 2)]
    jobs = con.execute(f"SELECT job_id, gpu_count FROM '{out}/jobs.parquet'").fetchall()
    assert jobs == [("j1", 1.0)]
    # GPU-a's three samples fall in j1's allocation: attributed at landing, kept by the export
    attributed = con.execute(
        f"SELECT count(*) FROM read_parquet('{out}/samples/*/*.parquet') WHERE job_id = 'j1'"
    ).fetchall()
    assert attributed == [(3,)]
    minutes = con.execute(
        f"SELECT count(*) FROM read_parquet('{out}/samples_minute/*/*.parquet', hive_partitioning = true)"
    ).fetchall()
    assert minutes == [(5,)]  # five distinct GPU-minutes


def test_export_into_a_file_path_is_a_one_line_error(db_path, tmp_path, capsys):
    _seed(db_path)
    target = tmp_path / "taken"
    target.write_text("x")
    assert main(["export", "--parquet", str(target), "--db", db_path]) == 1
    assert capsys.readouterr().err == f"error: {target}: exists and is not a folder\n"
