"""Ingest options that are not about one format: --host for host-less logs, progress and --quiet, and
the bounded memory of writer connections."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import duckdb

from collectors.base import IngestOptions
from collectors.ingest import PROGRESS_MIN_BYTES, ingest_file, wants_progress
from gpuledger.ledger.db import writer
from tests.conftest import write

# two machines' logs: no uuid and no hostname column, so both name their GPUs by index only
NODE7 = (
    "timestamp, index, utilization.gpu [%]\n"
    "2025/03/01 00:00:00.000, 0, 10 %\n"
    "2025/03/01 00:00:00.000, 1, 20 %\n"
)
NODE8 = "timestamp, index, utilization.gpu [%]\n2025/03/01 00:00:00.000, 0, 90 %\n"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuledger", *args], capture_output=True, text=True, check=False
    )


def _gpus(con: duckdb.DuckDBPyConnection) -> list[tuple[object, ...]]:
    return con.execute("SELECT gpu_id, util_pct FROM samples ORDER BY gpu_id").fetchall()


def test_host_names_gpus_of_a_log_without_hostname(ledger, tmp_path):
    ingest_file(ledger, write(tmp_path, "a.csv", NODE7), opts=IngestOptions(tz="UTC", host="node7"))
    ingest_file(ledger, write(tmp_path, "b.csv", NODE8), opts=IngestOptions(tz="UTC", host="node8"))
    assert _gpus(ledger) == [("node7:0", 10.0), ("node7:1", 20.0), ("node8:0", 90.0)]
    assert ledger.execute("SELECT gpu_id, host, gpu_index FROM gpus ORDER BY gpu_id").fetchall() == [
        ("node7:0", "node7", 0),
        ("node7:1", "node7", 1),
        ("node8:0", "node8", 0),
    ]


def test_without_host_two_machines_collide(ledger, tmp_path):
    """What --host is for: both logs say GPU 0 at 00:00:00, so the second is taken for the same sample."""
    ingest_file(ledger, write(tmp_path, "a.csv", NODE7), opts=IngestOptions(tz="UTC"))
    second = ingest_file(ledger, write(tmp_path, "b.csv", NODE8), opts=IngestOptions(tz="UTC"))
    assert second.rows["samples"] == 0 and second.skipped["samples already in the ledger"] == 1
    assert _gpus(ledger) == [("localhost:0", 10.0), ("localhost:1", 20.0)]


def test_a_hostname_column_wins_over_host(ledger, tmp_path):
    text = "timestamp, hostname, index, utilization.gpu [%]\n2025/03/01 00:00:00.000, gpu-a, 3, 50 %\n"
    ingest_file(ledger, write(tmp_path, "h.csv", text), opts=IngestOptions(tz="UTC", host="node7"))
    assert _gpus(ledger) == [("gpu-a:3", 50.0)]


def test_cli_host(tmp_path):
    db = tmp_path / "ledger.duckdb"
    result = _cli(
        "ingest", "--db", str(db), "--tz", "UTC", "--host", "node7", str(write(tmp_path, "a.csv", NODE7))
    )
    assert result.returncode == 0, result.stderr
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert _gpus(con) == [("node7:0", 10.0), ("node7:1", 20.0)]
    finally:
        con.close()


def test_progress_only_on_a_terminal_for_big_files_unless_quiet():
    master, slave = pty.openpty()
    read_pipe, write_pipe = os.pipe()
    with open(slave, "w") as tty, open(write_pipe, "w") as piped:
        big = PROGRESS_MIN_BYTES
        assert wants_progress(IngestOptions(), big, (tty, tty))
        assert not wants_progress(IngestOptions(quiet=True), big, (tty, tty))
        assert not wants_progress(IngestOptions(), big - 1, (tty, tty))
        assert not wants_progress(IngestOptions(), big, (piped, tty))  # stdout piped: DuckDB draws there
        assert not wants_progress(IngestOptions(), big, (tty, piped))
    os.close(master)
    os.close(read_pipe)


def _big_smi_csv(path: Path, rows: int) -> Path:
    """An nvidia-smi log of ``rows`` lines (8 GPUs at 1 s), written by DuckDB, no Python loop per row."""
    duckdb.sql(
        f"""COPY (
              SELECT strftime(TIMESTAMP '2025-03-01' + INTERVAL (i // 8) SECOND, '%Y/%m/%d %H:%M:%S.%g')
                     || ', ' || (i % 8) || ', GPU-' || lpad((i % 8)::VARCHAR, 8, '0')
                     || '-1111-2222-3333-444455556666, NVIDIA H100 80GB HBM3, ' || (i % 101)
                     || ' %, ' || (1000 + i % 80000) || ' MiB, 81559 MiB, ' || (70 + i % 600) || '.25 W' AS line
              FROM range({rows}) t(i)
            ) TO '{path}' (FORMAT csv, HEADER false, QUOTE '', ESCAPE '', DELIMITER '\x01')"""
    )
    header = (
        "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB], "
        "power.draw [W]\n"
    )
    path.write_text(header + path.read_text())
    return path


def test_piped_ingest_of_a_big_file_prints_no_progress(tmp_path):
    path = _big_smi_csv(tmp_path / "big.csv", 40_000)
    assert path.stat().st_size >= PROGRESS_MIN_BYTES  # 40,000 lines of ~115 bytes
    result = _cli("ingest", "--db", str(tmp_path / "l.duckdb"), "--tz", "UTC", "--json", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    report = json.loads(result.stdout)  # nothing but the JSON report on stdout
    assert report[0]["rows"]["samples"] == 40_000
    assert "▕" not in result.stdout


def _limit(con: duckdb.DuckDBPyConnection) -> str:
    return con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]


def test_writers_have_a_bounded_buffer_pool(db_path, monkeypatch):
    """DuckDB's default pool is 80 % of RAM, and an ingest's memory grew with the file (docs/formats-telemetry)."""
    plain = duckdb.connect()
    default = _limit(plain)
    plain.execute("SET memory_limit = '300MB'")  # gpuledger.ledger.db.WRITER_MEMORY_LIMIT
    bounded = _limit(plain)  # DuckDB shows it as 286.1 MiB
    plain.execute("SET memory_limit = '3GB'")
    three_gb = _limit(plain)
    plain.close()
    assert bounded != default
    monkeypatch.delenv("GPULEDGER_MEMORY_LIMIT", raising=False)
    with writer(db_path) as con:
        assert _limit(con) == bounded
    monkeypatch.setenv("GPULEDGER_MEMORY_LIMIT", "3GB")
    with writer(db_path) as con:
        assert _limit(con) == three_gb


def test_options_from_settings_carry_every_threshold_and_tier():
    from collectors.base import IngestOptions
    from gpuledger.ledger.settings import ClusterSettings, Settings

    s = Settings(
        idle_util_pct=2.0,
        idle_min_minutes=45.0,
        target_util_pct=70.0,
        default_tier="spot",
        clusters={"lab": ClusterSettings(tier="on_prem"), "cloud": ClusterSettings()},
    )
    opts = IngestOptions.from_settings(s, cluster="lab", tz="UTC")
    assert (opts.idle_util_pct, opts.idle_min_minutes, opts.target_util_pct) == (2.0, 45.0, 70.0)
    assert opts.default_tier == "spot" and opts.cluster_tiers == (("lab", "on_prem"),)
    assert (opts.cluster, opts.tz) == ("lab", "UTC")
