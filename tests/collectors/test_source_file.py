"""What cannot be read whole is refused with its line, never landed as a silent prefix (issue 34).

collectors/source_file.py: a regular file, no symlink loop, UTF-8 and not UTF-16/32, no NUL byte, no line
longer than DuckDB's reader takes, a header that fits the head, a gzip that is no bomb; and the ingest
report's bytes read equal the file's size.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from pathlib import Path

import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from collectors.source_file import HEAD_BYTES, MAX_LINE_BYTES, scan_source
from gpuledger.ledger.errors import FormatError
from tests.conftest import ROOT, gpuledger

UTC = IngestOptions(tz="UTC", host="n1", quiet=True)
JOBS = (
    "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state\n"
    "j1,alice,ml,c1,H100,1,2026-01-01T00:00:00,2026-01-01T01:00:00,COMPLETED\n"
)
SMI = (
    "timestamp, name, pci.bus_id, utilization.gpu [%], memory.used [MiB]\n"
    "2025/03/01 10:00:00.000, NVIDIA H100 80GB HBM3, 00000000:01:00.0, 50 %, 1000 MiB\n"
)


def _refused(ledger, path: Path, fmt: str = "auto") -> FormatError:
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, path, fmt=fmt, opts=UTC)
    assert ledger.execute("SELECT count(*) FROM ingests").fetchall() == [(0,)]  # nothing landed
    assert len(str(err.value).encode()) < 1000
    return err.value


@pytest.mark.parametrize(
    ("name", "text", "fmt"), [("jobs.csv", JOBS, "jobs_csv"), ("smi.csv", SMI, "nvidia_smi_csv")]
)
def test_a_good_row_then_an_unterminated_40_mb_last_line_is_refused_with_its_number(
    ledger, tmp_path, name, text, fmt
):
    # landed as "1 jobs" / "1 samples" before: DuckDB dropped a last line past its 32 MB buffer
    path = tmp_path / name
    with path.open("w") as fh:
        fh.write(text)
        fh.write("x" * 40_000_000)  # no line end
    err = _refused(ledger, path)
    assert err.line == 3 and f"line 3 is longer than {MAX_LINE_BYTES // 2**20} MiB" in err.reason


def test_a_long_line_mid_file_names_its_line(ledger, tmp_path):
    path = tmp_path / "jobs.csv"
    row = JOBS.splitlines()[1]
    path.write_text(
        JOBS + row.replace("alice", "a" * (MAX_LINE_BYTES + 10)) + "\n" + row.replace("j1", "j3") + "\n"
    )
    err = _refused(ledger, path)
    assert (err.line, err.reason.startswith("line 3 is longer than")) == (3, True), err


def test_a_line_just_under_the_limit_is_read(ledger, tmp_path):
    # the scan refuses only what the limit says: a 2 MiB - 1 byte line is left to the parser (a bad state)
    path = tmp_path / "jobs.csv"
    row = JOBS.splitlines()[1]
    long_row = row.replace("COMPLETED", "X" * (MAX_LINE_BYTES - len(row) + len("COMPLETED") - 1))
    assert len(long_row) == MAX_LINE_BYTES - 1
    path.write_text(JOBS + long_row + "\n")
    err = _refused(ledger, path)
    assert "is not a job state" in err.reason and err.line == 3, err


def test_a_gzip_of_one_good_row_then_nul_bytes_is_refused(ledger, tmp_path):
    # 1-10 GB of NULs landed "1 samples" before; here 200 MB (the scan stops at the first block)
    path = tmp_path / "smi.csv.gz"
    with gzip.open(path, "wb", compresslevel=1) as gz:
        gz.write(SMI.encode())
        block = b"\0" * 2**20
        for _ in range(200):
            gz.write(block)
    err = _refused(ledger, path)
    assert err.line == 3 and "NUL byte" in err.reason, err


def test_a_gzip_that_inflates_past_the_ratio_is_refused_before_it_is_all_read(ledger, tmp_path):
    path = tmp_path / "smi.csv.gz"
    row = SMI.splitlines()[1].encode() + b"\n"
    with gzip.open(path, "wb", compresslevel=9) as gz:
        gz.write(SMI.encode())
        gz.write(row * (64 * 2**20 // len(row)))  # 64 MB of one row: about 1:300
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, path, opts=IngestOptions(tz="UTC", quiet=True, max_gzip_ratio=100))
    assert "decompresses to more than 100 times its size" in err.value.reason
    # under a looser limit the scan reads it whole
    scan = scan_source(path, "nvidia_smi_csv", max_gzip_ratio=10_000)
    assert (scan.bytes_read, scan.text_bytes) == (
        path.stat().st_size,
        len(gzip.decompress(path.read_bytes())),
    )


def test_the_report_says_every_byte_of_the_file_was_read(ledger, tmp_path):
    plain = tmp_path / "jobs.csv"
    plain.write_text(JOBS)
    zipped = tmp_path / "smi.csv.gz"
    zipped.write_bytes(
        gzip.compress(SMI.encode()) + gzip.compress(SMI.replace("10:00:00", "10:00:05").encode())
    )
    for path in (plain, zipped):
        report = ingest_file(ledger, path, opts=UTC)
        assert report.bytes_read == path.stat().st_size == len(path.read_bytes())
        assert report.as_dict()["bytes_read"] == path.stat().st_size
    # both members of the concatenated gzip were read: two samples
    assert ledger.execute("SELECT count(*) FROM samples").fetchall() == [(2,)]


def test_a_truncated_gzip_is_refused(ledger, tmp_path):
    path = tmp_path / "smi.csv.gz"
    data = gzip.compress((SMI * 1).encode() + b"2025/03/01 10:00:05.000, x, y, 1 %, 2 MiB\n" * 5000)
    path.write_bytes(data[: len(data) // 2])
    err = _refused(ledger, path)
    assert "ends early" in err.reason or "damaged" in err.reason or "truncated" in err.reason, err


def test_a_header_wider_than_the_head_is_named(ledger, tmp_path):
    path = tmp_path / "jobs.csv"
    cols = ["job_id", "user", "team", "cluster", "gpu_model", "gpu_count", "start", "end", "state"]
    extra = [f"extra_column_{i}" for i in range(100_000)]
    path.write_text(
        ",".join(cols + extra)
        + "\n"
        + "j1,alice,ml,c1,H100,1,2026-01-01,2026-01-02,COMPLETED"
        + ",x" * len(extra)
        + "\n"
    )
    assert len(path.read_text().splitlines()[0]) > HEAD_BYTES
    err = _refused(ledger, path, fmt="jobs_csv")
    assert err.line == 1 and "header wider than can be read" in err.reason, err


@pytest.mark.parametrize(
    ("encoding", "bom", "said"),
    [
        ("utf-16", b"", "UTF-16 (little-endian, with a byte-order mark)"),  # Python writes a BOM
        ("utf-16-le", b"", "UTF-16 (little-endian)"),
        ("utf-16-be", b"", "UTF-16 (big-endian)"),
        ("utf-16-be", b"\xfe\xff", "UTF-16 (big-endian, with a byte-order mark)"),
        ("utf-32", b"", "UTF-32 (little-endian, with a byte-order mark)"),
        ("utf-32-le", b"", "UTF-32 (little-endian)"),
    ],
)
def test_utf16_and_utf32_are_named_with_what_to_do(ledger, tmp_path, encoding, bom, said):
    path = tmp_path / "jobs.csv"
    path.write_bytes(bom + JOBS.encode(encoding))
    err = _refused(ledger, path)
    assert err.reason == f"{said} text: save the file as UTF-8", err


def test_devices_fifos_and_symlink_loops_say_what_they_are(ledger, tmp_path):
    assert "not a regular file but a device" in _refused(ledger, Path("/dev/zero")).reason
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    # nothing writes to it: a reader that opened it would wait forever; the check never opens it
    assert "not a regular file but a FIFO (named pipe)" in _refused(ledger, fifo).reason
    loop = tmp_path / "loop.csv"
    loop.symlink_to(tmp_path / "loop.csv")
    assert "symbolic link loop" in _refused(ledger, loop).reason
    for fmt in ("jobs_csv", "auto"):
        assert _refused(ledger, tmp_path / "absent.csv", fmt).reason == "no such file"


def test_the_cli_refuses_with_exit_1_and_leaves_the_ledger_as_it_was(tmp_path):
    db = tmp_path / "l.duckdb"
    good = tmp_path / "good.csv"
    good.write_text(JOBS)
    assert gpuledger("ingest", str(good), "--db", str(db)).returncode == 0
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    bad = tmp_path / "bad.csv.gz"
    bad.write_bytes(gzip.compress(JOBS.replace("j1", "j2").encode() + b"\0" * 2**20))
    run = gpuledger("ingest", str(bad), "--db", str(db))
    assert run.returncode == 1
    assert (
        run.stderr.strip()
        == f"error: {bad}:3: a NUL byte: the decompressed data is not text here (a damaged or padded file?)"
    )
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


# ---------------------------------------------------------------- gzip padding and appended bytes (issue 48)


def _smi_rows(n: int) -> bytes:
    rows = "".join(
        f"2025/03/01 {10 + i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}.000, NVIDIA H100 80GB HBM3, "
        f"00000000:01:00.0, {i % 100} %, 1000 MiB\n"
        for i in range(n)
    )
    return (SMI.splitlines(keepends=True)[0] + rows).encode()


def test_zero_padding_after_a_gzip_is_skipped_as_python_gzip_skips_it(ledger, tmp_path):
    """Python's gzip reads a member, zeros, another member, zeros; DuckDB's reader refuses the zeros ("Input
    is not a GZIP stream"), so the ingest stages a copy without them. Every byte is still read and counted."""
    first, second = _smi_rows(3), _smi_rows(5).replace(b"2025/03/01", b"2025/03/02")
    data = gzip.compress(first) + b"\0" * 1000 + gzip.compress(second) + b"\0" * 4096
    assert gzip.decompress(data) == first + second  # the reference reading
    path = tmp_path / "padded.csv.gz"
    path.write_bytes(data)
    scan = scan_source(path, "nvidia_smi_csv")
    a = len(gzip.compress(first))
    b = a + 1000 + len(gzip.compress(second))
    assert scan.padding == ((a, a + 1000), (b, b + 4096))
    report = ingest_file(ledger, path, opts=UTC)
    assert report.bytes_read == len(data)
    assert ledger.execute("SELECT count(*), sum(util_pct) FROM samples").fetchall() == [
        (8, 0 + 1 + 2 + 0 + 1 + 2 + 3 + 4)
    ]


@pytest.mark.parametrize(
    ("tail", "said"),
    [
        (b"hello", "from byte {n:,}"),
        (b"\0" * 10 + b"PK\x03\x04", "from byte {m:,}"),
        (b"\x1f", "from byte {n:,}"),
    ],
    ids=["text", "zeros-then-zip", "one-byte"],
)
def test_other_bytes_after_a_gzip_are_refused_as_gzip_refuses_them(ledger, tmp_path, tail, said):
    data = gzip.compress(JOBS.encode())
    path = tmp_path / "jobs.csv.gz"
    path.write_bytes(data + tail)
    with pytest.raises(gzip.BadGzipFile):  # the reference: Python's gzip refuses it too
        gzip.decompress(path.read_bytes())
    err = _refused(ledger, path, fmt="jobs_csv")
    assert "neither zero padding nor another gzip member" in err.reason
    assert said.format(n=len(data), m=len(data) + 10) in err.reason


def _peak_rss_mib(path: Path, db: Path) -> tuple[float, str]:
    """Peak resident memory of a fresh process that ingests ``path`` (MiB), and how it ended."""
    import subprocess
    import sys

    code = (
        "import resource, sys\n"
        "from collectors.base import IngestOptions\n"
        "from collectors.ingest import ingest_file\n"
        "from gpuledger.ledger.db import writer\n"
        "from gpuledger.ledger.errors import FormatError\n"
        "with writer(sys.argv[2]) as con:\n"
        "    try:\n"
        "        r = ingest_file(con, sys.argv[1], opts=IngestOptions(tz='UTC', quiet=True))\n"
        "        said = f'landed {r.rows}'\n"
        "    except FormatError as exc:\n"
        "        said = f'refused {exc.reason}'\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, said)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, str(path), str(db)], capture_output=True, text=True, check=True, cwd=ROOT
    )
    peak, said = run.stdout.strip().split(" ", 1)
    return float(peak), said


def test_200_mb_after_a_csv_gz_cost_no_more_memory_than_the_csv_gz_alone(tmp_path):
    """The head is read alone (it was ``path.read_bytes()[:65536]``: the whole file in memory), padding is
    read a block at a time and copied around, other bytes stop the scan at their first byte."""
    data = gzip.compress(_smi_rows(20_000))
    alone = tmp_path / "alone.csv.gz"
    alone.write_bytes(data)
    padded, junk = tmp_path / "padded.csv.gz", tmp_path / "junk.csv.gz"
    for path, filler in ((padded, b"\0"), (junk, b"\xa5")):
        with path.open("wb") as fh:
            fh.write(data)
            for _ in range(50):
                fh.write(filler * (4 * 2**20))  # 200 MiB
    base, said = _peak_rss_mib(alone, tmp_path / "a.duckdb")
    assert said.startswith("landed"), said
    with_zeros, said = _peak_rss_mib(padded, tmp_path / "b.duckdb")
    assert said == "landed {'samples': 20000, 'gpus': 1}" or said.startswith("landed"), said
    with_junk, said = _peak_rss_mib(junk, tmp_path / "c.duckdb")
    assert said.startswith("refused bytes after the end of the gzip data"), said
    print(
        f"peak RSS MiB: .csv.gz alone {base:.1f}, + 200 MiB zeros {with_zeros:.1f}, + 200 MiB other {with_junk:.1f}"
    )
    assert with_zeros < base + 16 and with_junk < base + 16, (base, with_zeros, with_junk)
