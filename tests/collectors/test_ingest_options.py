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
import pytest

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


# --job on a telemetry file (issue 35): job r-1 from a jobs table, 10:00-11:00, no GPU named; a GPU's
# nvidia-smi log of 10:00-11:59, one sample a minute at 50 %
JOBS = "job_id,user,team,start,end,gpu_model,gpu_count,state,cluster\n" + (
    "r-1,alice,nlp,2025-03-01T10:00:00Z,2025-03-01T11:00:00Z,H100-SXM-80GB,1,COMPLETED,c1\n"
)


def _gpu_log(minutes: int = 120) -> str:
    head = "timestamp, index, name, utilization.gpu [%]\n"
    return head + "".join(
        f"2025/03/01 {10 + m // 60:02d}:{m % 60:02d}:00.000, 0, NVIDIA H100 80GB HBM3, 50 %\n"
        for m in range(minutes)
    )


def test_job_ties_a_telemetry_file_s_samples_inside_the_job_s_span(ledger, tmp_path):
    from analytics.summary import summary
    from tests.analytics.build import set_test_prices

    set_test_prices(ledger)  # H100 $4/GPU-h
    ingest_file(ledger, write(tmp_path, "jobs.csv", JOBS), opts=IngestOptions(tz="UTC"))
    ingest_file(
        ledger, write(tmp_path, "gpu.csv", _gpu_log()), opts=IngestOptions(tz="UTC", host="g1", job_id="r-1")
    )
    # the 60 samples of 10:00-10:59 are r-1's, the 60 after its end nobody's
    assert ledger.execute("SELECT job_id, count(*) FROM samples GROUP BY 1 ORDER BY 1").fetchall() == [
        ("r-1", 60),
        (None, 60),
    ]
    s = summary(ledger)
    # r-1's hour is measured from its own card ($4, 50 % < the 60 % target: under-used 1/6, productive 5/6);
    # the card is claimed, so no unattributed pseudo-job bills the same hour again (before: r-1 unmeasured
    # $4 + unattributed:g1:0 2 h $8)
    assert s["waste"]["unmeasured_usd"] == pytest.approx(0.0)
    assert s["waste"]["underused_usd"] == pytest.approx(4.0 * (60 - 50) / 60)
    assert s["waste"]["productive_usd"] == pytest.approx(4.0 * 50 / 60)
    assert s["jobs"] == 1  # r-1 alone: no pseudo-job


def test_job_naming_no_job_or_missing_the_file_is_refused_naming_the_jobs(tmp_path):
    db = str(tmp_path / "l.duckdb")
    assert _cli("ingest", "--db", db, "--tz", "UTC", str(write(tmp_path, "jobs.csv", JOBS))).returncode == 0
    log = str(write(tmp_path, "gpu.csv", _gpu_log()))
    for job_id, why in (("r-2", "no such job in the ledger"), ("r-1", None)):
        args = ("ingest", "--db", db, "--tz", "UTC", "--host", "g1", "--job", job_id, log)
        if why is None:  # r-1 exists but ran 10:00-11:00: a log of 12:00-12:59 misses it
            late = _gpu_log(180).splitlines()
            log = str(write(tmp_path, "late.csv", "\n".join([late[0], *late[121:]]) + "\n"))
            args = (*args[:-1], log)
            why = "none of the file's samples"
        result = _cli(*args)
        assert result.returncode == 1, result.stdout
        assert result.stderr.startswith("error: ") and why in result.stderr and "r-1" in result.stderr
        assert "Traceback" not in result.stderr
    con = duckdb.connect(db, read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM samples").fetchall() == [(0,)]  # nothing written
    finally:
        con.close()


def test_the_formats_that_read_job_themselves_are_parsers():
    from collectors.job_option import OWN_JOB_OPTION
    from collectors.registry import PARSERS

    assert set(OWN_JOB_OPTION) <= set(PARSERS)
