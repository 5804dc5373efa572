"""Errors that say what happened (issue 43): a full disk, settings that are no settings file, exit codes.

On 0c9145f a write past ``ulimit -f`` said "a number too large to store" (the overflow sentence matched
"File too large"), ``--settings /dev/zero`` read until memory ran out, a settings FIFO hung, and a non-UTF-8
settings file or a directory gave "unexpected failure". Each case here runs the real command in a real
process (an exit status a shell sees) against a real file system: a small tmpfs where this runs as root, and
always a real ``RLIMIT_FSIZE`` set on the child process (what ``ulimit -f`` does).
"""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from collectors.reader_errors import describe_failure
from gpuledger.ledger.errors import DISK_FULL, FILE_SIZE_LIMIT, out_of_space
from tests.conftest import ROOT

HEADER = "job_id,user,team,cluster,state,gpu_model,gpu_count,start,end\n"


def _run(
    *args: str, limit_bytes: int | None = None, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    """``python -m gpuledger ARGS`` in a new process (its exit status as a shell sees it)."""

    def limit() -> None:
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run(
        [sys.executable, "-m", "gpuledger", *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), **env),
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit,
    )


def _jobs_csv(path: Path, rows: int) -> Path:
    with path.open("w") as fh:
        fh.write(HEADER)
        for i in range(rows):
            day = 1 + i % 5
            fh.write(
                f"j{i},u{i % 97},t{i % 13},c1,COMPLETED,A100-80GB,{1 + i % 8},2025-01-0{day} 00:00,"
                f"2025-01-0{day} 0{1 + i % 9}:30\n"
            )
    return path


def _jobs(db: Path) -> int:
    with duckdb.connect(str(db), read_only=True) as con:
        return int(con.execute("SELECT count(*) FROM jobs").fetchone()[0])  # type: ignore[index]


# ---------------------------------------------------------------- disk full


@pytest.mark.parametrize(
    ("exc", "said"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), DISK_FULL),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), DISK_FULL),
        (OSError(errno.EFBIG, "File too large"), FILE_SIZE_LIMIT),
        (duckdb.IOException('Could not write file "x.duckdb": No space left on device'), DISK_FULL),
        (duckdb.IOException('Could not write file "x.duckdb": File too large'), FILE_SIZE_LIMIT),
        (duckdb.ConversionException("Overflow in multiplication of INT32"), None),
    ],
    ids=["enospc", "edquot", "efbig", "duckdb-enospc", "duckdb-efbig", "overflow"],
)
def test_a_write_out_of_room_is_named_so(exc: BaseException, said: str | None) -> None:
    assert out_of_space(exc) == said
    reason = describe_failure("jobs.csv", exc).reason
    if said is None:
        assert reason == "a number too large to store"
    else:
        assert reason == said and "number" not in reason


def test_an_ingest_past_the_file_size_limit_says_so_and_leaves_the_ledger(tmp_path: Path) -> None:
    """A real RLIMIT_FSIZE (ulimit -f) on the writer: the ledger may grow to 2 MB, the ingest needs more."""
    db = tmp_path / "ledger.duckdb"
    small = _jobs_csv(tmp_path / "small.csv", 10)
    assert _run("ingest", str(small), "--db", str(db)).returncode == 0
    big = _jobs_csv(tmp_path / "big.csv", 200_000)
    done = _run("ingest", str(big), "--db", str(db), limit_bytes=2 * 2**20)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "grew past the size this process may write" in done.stderr
    assert "number too large" not in done.stderr and "Traceback" not in done.stderr
    assert _jobs(db) == 10  # the ledger as it was


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A 4 MB tmpfs (needs root: skipped elsewhere; the RLIMIT_FSIZE test above runs everywhere)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_an_ingest_onto_a_full_disk_says_disk_full_and_leaves_the_ledger(
    tmp_path: Path, small_disk: Path
) -> None:
    db = small_disk / "ledger.duckdb"
    assert _run("ingest", str(_jobs_csv(tmp_path / "small.csv", 10)), "--db", str(db)).returncode == 0
    big = _jobs_csv(tmp_path / "big.csv", 200_000)
    done = _run("ingest", str(big), "--db", str(db), TMPDIR=str(small_disk))
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "disk full" in done.stderr and "number too large" not in done.stderr, done.stderr
    assert _jobs(db) == 10


# ---------------------------------------------------------------- settings that are no settings file


def _settings_case(tmp_path: Path, case: str) -> str:
    if case == "dev-zero":
        return "/dev/zero"
    if case == "fifo":
        fifo = tmp_path / "settings.toml"
        os.mkfifo(fifo)  # nobody writes it: reading would wait forever
        return str(fifo)
    if case == "directory":
        (tmp_path / "settings.toml").mkdir()
        return str(tmp_path / "settings.toml")
    if case == "latin-1":
        (tmp_path / "settings.toml").write_bytes("[energy]\n# café\nusd_per_kwh = 0.2\n".encode("latin-1"))
        return str(tmp_path / "settings.toml")
    if case == "huge":
        (tmp_path / "settings.toml").write_bytes(b"# " + b"x" * (2 * 2**20) + b"\n")
        return str(tmp_path / "settings.toml")
    raise AssertionError(case)


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("dev-zero", "is a device, not a settings file"),
        ("fifo", "is a pipe, not a settings file"),
        ("directory", "is a directory, not a settings file"),
        ("latin-1", "line 2 holds a byte that is not UTF-8 text"),
        ("huge", "is larger than 1 MiB"),
    ],
)
def test_settings_that_are_no_settings_file_give_one_error_line(tmp_path: Path, case: str, said: str) -> None:
    path = _settings_case(tmp_path, case)
    done = _run("summary", "--db", str(tmp_path / "ledger.duckdb"), "--settings", path, timeout=60)
    assert done.returncode == 1  # README: 1 is bad data (the settings are data), 2 a usage error
    assert done.stderr == f"error: {path}: setting '(file)': {said}" + done.stderr.split(said, 1)[1], (
        done.stderr
    )
    assert said in done.stderr and done.stderr.count("\n") == 1 and "unexpected" not in done.stderr


def test_exit_codes_are_the_readmes(tmp_path: Path) -> None:
    """README: 0 ok, 1 bad data (one ``error:`` line), 2 usage."""
    db = str(tmp_path / "ledger.duckdb")
    assert _run("ingest", str(_jobs_csv(tmp_path / "ok.csv", 3)), "--db", db).returncode == 0
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "j1,u,t,c1,COMPLETED,A100-80GB,1,yesterday,2025-01-01 01:00\n")
    done = _run("ingest", str(bad), "--db", db)
    assert done.returncode == 1 and done.stderr.startswith(f"error: {bad}:2: "), done.stderr
    assert _run("summary", "--no-such-flag", "--db", db).returncode == 2


# ---------------------------------------------------------------- a ledger that is no DuckDB file


def _sqlite(path: Path) -> Path:
    import sqlite3

    con = sqlite3.connect(path)
    con.execute("CREATE TABLE jobs (job_id TEXT)")
    con.commit()
    con.close()
    return path


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("sqlite", "is not a DuckDB ledger (an SQLite database)"),
        ("text", "is not a DuckDB ledger (a file of another kind)"),
        ("empty", "is an empty file, not a DuckDB ledger"),
        ("folder", "is a folder, not a ledger file"),
        ("fifo", "is a pipe, not a ledger file"),
    ],
)
def test_a_ledger_that_is_no_duckdb_file_is_refused_before_duckdb_opens_it(
    tmp_path: Path, case: str, said: str
) -> None:
    """On 0c9145f an SQLite file as --db made DuckDB try to download sqlite_scanner from
    extensions.duckdb.org. The magic bytes are checked first; HOME is a fresh folder, and DuckDB's extension
    folder in it stays absent (nothing was fetched or installed)."""
    db = tmp_path / "ledger.duckdb"
    if case == "sqlite":
        _sqlite(db)
    elif case == "text":
        db.write_text("job_id,user\nj1,u\n")
    elif case == "empty":
        db.touch()
    elif case == "folder":
        db.mkdir()
    else:
        os.mkfifo(db)
    home = tmp_path / "home"
    home.mkdir()
    done = _run("summary", "--db", str(db), timeout=60, HOME=str(home), XDG_DATA_HOME=str(home))
    assert done.returncode == 1
    assert done.stderr == f"error: {db}: {said}" + done.stderr.split(said, 1)[1], done.stderr
    assert done.stderr.count("\n") == 1 and "download" not in done.stderr
    assert not (home / ".duckdb").exists()


def test_a_ledger_connection_never_installs_or_autoloads_an_extension(tmp_path: Path) -> None:
    from gpuledger.ledger.db import memory_ledger, writer

    with writer(str(tmp_path / "l.duckdb")) as con:
        assert con.execute(
            "SELECT current_setting('autoinstall_known_extensions'), current_setting('autoload_known_extensions')"
        ).fetchone() == (False, False)
    mem = memory_ledger()
    try:
        assert mem.execute("SELECT current_setting('autoinstall_known_extensions')").fetchone() == (False,)
    finally:
        mem.close()


def test_a_report_written_to_a_full_device_says_disk_full(tmp_path: Path) -> None:
    """/dev/full answers every write with ENOSPC: the report's one line says the disk is full."""
    db = str(tmp_path / "ledger.duckdb")
    assert _run("ingest", str(_jobs_csv(tmp_path / "ok.csv", 3)), "--db", db).returncode == 0
    done = _run("report", "--db", db, "--out", "/dev/full")
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: /dev/full: cannot write the report: disk full"), done.stderr
