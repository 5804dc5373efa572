"""nvidia-smi --query-gpu / --query-compute-apps CSV: forms, N/A, time zones, identity, errors, real files."""

from __future__ import annotations

import datetime as dt

import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.conftest import dataset, write

UNITS = (
    "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W]\n"
    "2025/03/01 10:00:00.000, 0, GPU-aaa, NVIDIA H100 80GB HBM3, 50 %, 1000 MiB, 81559 MiB, 300.50 W\n"
    "2025/03/01 10:00:00.000, 1, GPU-bbb, NVIDIA H100 80GB HBM3, [N/A], 2000 MiB, 81559 MiB, [Not Supported]\n"
    "2025/03/01 10:00:10.000, 0, GPU-aaa, NVIDIA H100 80GB HBM3, 70 %, 1100 MiB, 81559 MiB, 310.00 W\n"
    "2025/03/01 10:00:10.000, 1, GPU-bbb, NVIDIA H100 80GB HBM3, 5 %, 2100 MiB, 81559 MiB, 100.00 W\n"
)
UTC = IngestOptions(tz="UTC")


def _rows(ledger, sql: str) -> list[tuple[object, ...]]:
    return ledger.execute(sql).fetchall()


@pytest.mark.parametrize(
    ("name", "text", "opts"),
    [
        ("units", UNITS, UTC),
        (
            "nounits",
            "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W]\n"
            + "\n".join(
                line.replace(" %", "").replace(" MiB", "").replace(" W", "")
                for line in UNITS.splitlines()[1:]
            )
            + "\n",
            UTC,
        ),
        (
            "noheader-columns",
            "".join(UNITS.splitlines(keepends=True)[1:]),
            IngestOptions(
                tz="UTC",
                columns=(
                    "timestamp",
                    "index",
                    "uuid",
                    "name",
                    "utilization.gpu",
                    "memory.used",
                    "memory.total",
                    "power.draw",
                ),
            ),
        ),
        (
            "field-order",
            "power.draw [W], memory.total [MiB], memory.used [MiB], utilization.gpu [%], name, uuid, index, timestamp\n"
            + "\n".join(", ".join(reversed(line.split(", "))) for line in UNITS.splitlines()[1:])
            + "\n",
            UTC,
        ),
    ],
    ids=["units", "nounits", "noheader+--columns", "field-order"],
)
def test_forms_land_the_same_samples(ledger, tmp_path, name, text, opts):
    path = write(tmp_path, f"{name}.csv", text)
    report = ingest_file(ledger, path, fmt="nvidia_smi_csv", opts=opts)
    assert report.rows["samples"] == 4
    # [N/A] and [Not Supported] are NULL, never 0; everything else is exact
    assert _rows(
        ledger,
        "SELECT ts::VARCHAR, gpu_id, util_pct, mem_used_mib, mem_total_mib, power_w FROM samples ORDER BY ts, gpu_id",
    ) == [
        ("2025-03-01 10:00:00", "GPU-aaa", 50.0, 1000.0, 81559.0, 300.5),
        ("2025-03-01 10:00:00", "GPU-bbb", None, 2000.0, 81559.0, None),
        ("2025-03-01 10:00:10", "GPU-aaa", 70.0, 1100.0, 81559.0, 310.0),
        ("2025-03-01 10:00:10", "GPU-bbb", 5.0, 2100.0, 81559.0, 100.0),
    ]
    assert _rows(ledger, "SELECT gpu_id, uuid, gpu_index, model, memory_total_mib FROM gpus ORDER BY 1") == [
        ("GPU-aaa", "GPU-aaa", 0, "H100-SXM-80GB", 81559.0),
        ("GPU-bbb", "GPU-bbb", 1, "H100-SXM-80GB", 81559.0),
    ]


def test_na_values_are_counted_in_the_report(ledger, tmp_path):
    report = ingest_file(ledger, write(tmp_path, "smi.csv", UNITS), opts=UTC)
    assert report.format == "nvidia_smi_csv"  # auto-detected
    assert report.skipped == {
        "utilization.gpu: [N/A] stored as NULL": 1,
        "power.draw: [N/A] stored as NULL": 1,
    }


def test_interval_is_the_gap_to_the_next_sample_capped(ledger, tmp_path):
    # GPU 0 at 0, 10, 20, 100 s: cadence (median gap) 10 s; the 80-s silence is a gap → 10 s, last → 10 s
    body = "".join(f"2025/03/01 10:{s // 60:02d}:{s % 60:02d}.000, 0, 40 %\n" for s in (0, 10, 20, 100))
    path = write(tmp_path, "gaps.csv", "timestamp, index, utilization.gpu [%]\n" + body)
    ingest_file(ledger, path, opts=UTC)
    assert _rows(ledger, "SELECT interval_s FROM samples ORDER BY ts") == [(10.0,), (10.0,), (10.0,), (10.0,)]
    assert _rows(ledger, "SELECT gpu_id, host, gpu_index FROM gpus") == [("localhost:0", "localhost", 0)]


def test_local_time_is_read_in_tz_and_iso_offsets_are_honoured(ledger, tmp_path):
    local = write(
        tmp_path,
        "local.csv",
        "timestamp, index, utilization.gpu [%]\n2025/07/01 12:00:00.250, 0, 10 %\n",
    )
    ingest_file(ledger, local, opts=IngestOptions(tz="Europe/Paris"))  # CEST = UTC+2 in July
    iso = write(
        tmp_path,
        "iso.csv",
        "timestamp,index,utilization.gpu\n2025-07-01T12:00:00+08:00,1, 20\n",
    )
    ingest_file(ledger, iso, opts=IngestOptions(tz="Europe/Paris"))  # the offset wins over --tz
    assert _rows(ledger, "SELECT gpu_id, ts::VARCHAR FROM samples ORDER BY gpu_id") == [
        ("localhost:0", "2025-07-01 10:00:00.25"),
        ("localhost:1", "2025-07-01 04:00:00"),
    ]


def test_hostname_column_names_the_gpu_and_throttle_hex_is_read(ledger, tmp_path):
    path = write(
        tmp_path,
        "h.csv",
        "timestamp, hostname, index, utilization.gpu [%], clocks_event_reasons.active, temperature.gpu, clocks.sm [MHz]\n"
        "2025/03/01 10:00:00.000, node7, 3, 99 %, 0x0000000000000004, 71, 1980 MHz\n",
    )
    ingest_file(ledger, path, opts=UTC)
    assert _rows(ledger, "SELECT gpu_id, throttle_reasons, temp_c, sm_clock_mhz FROM samples") == [
        ("node7:3", 4, 71.0, 1980.0)
    ]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "2025/03/01 10:00:01.000, 0, lots %, 1 MiB\n",
            "bad.csv:3: column 'utilization.gpu' is not a number: 'lots %'",
        ),
        (
            "2025/03/01 10:00:01.000, 0, 5 %, 12 KiB\n",
            "bad.csv:3: column 'memory.used' is not a number: '12 KiB'",
        ),
        (
            "2025/03/01 10:00:01.000, 0, 5 %\n",
            "bad.csv:3: expected 4 values, found 3 (a truncated or mixed file?)",
        ),
        ("yesterday, 0, 5 %, 1 MiB\n", "bad.csv:3: column 1 is not valid: 'yesterday'"),
    ],
    ids=["word-for-number", "unknown-unit", "missing-value", "bad-time"],
)
def test_bad_row_in_the_middle_names_the_line_and_leaves_the_ledger_unchanged(
    ledger, tmp_path, body, expected
):
    head = (
        "timestamp, index, utilization.gpu [%], memory.used [MiB]\n2025/03/01 10:00:00.000, 0, 1 %, 1 MiB\n"
    )
    tail = "2025/03/01 10:00:02.000, 0, 1 %, 1 MiB\n"
    path = write(tmp_path, "bad.csv", head + body + tail)
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, path, opts=UTC)
    assert str(err.value).endswith(expected)
    assert _rows(ledger, "SELECT (SELECT count(*) FROM samples), (SELECT count(*) FROM ingests)") == [(0, 0)]


def test_truncated_last_line_is_an_error_and_empty_file_too(ledger, tmp_path):
    text = UNITS[: UNITS.rindex(",")]  # cut inside the last line
    with pytest.raises(FormatError, match=r"trunc\.csv:5: expected 8 values, found 7"):
        ingest_file(ledger, write(tmp_path, "trunc.csv", text), opts=UTC)
    with pytest.raises(FormatError, match=r"empty\.csv: the file is empty"):
        ingest_file(ledger, write(tmp_path, "empty.csv", ""), fmt="nvidia_smi_csv", opts=UTC)
    assert _rows(ledger, "SELECT count(*) FROM samples") == [(0,)]


def test_noheader_without_columns_asks_for_them(ledger, tmp_path):
    path = write(tmp_path, "nh.csv", "".join(UNITS.splitlines(keepends=True)[1:]))
    with pytest.raises(FormatError, match="pass --columns"):
        ingest_file(ledger, path, opts=UTC)


def test_reingest_is_a_noop_and_overlap_is_not_double_counted(ledger, tmp_path):
    first = write(tmp_path, "a.csv", UNITS)
    ingest_file(ledger, first, opts=UTC)
    assert ingest_file(ledger, first, opts=UTC).already
    # a second log that repeats the 10:00:10 poll and adds 10:00:20
    lines = UNITS.splitlines(keepends=True)
    extra = "".join(ln.replace("10:00:10", "10:00:20") for ln in lines[3:])
    second = ingest_file(ledger, write(tmp_path, "b.csv", lines[0] + "".join(lines[3:]) + extra), opts=UTC)
    assert second.rows["samples"] == 2
    assert second.skipped["samples already in the ledger"] == 2
    assert _rows(ledger, "SELECT count(*), count(DISTINCT (gpu_id, ts)) FROM samples") == [(6, 6)]


def test_compute_apps_land_as_processes(ledger, tmp_path):
    path = write(
        tmp_path,
        "apps.csv",
        "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
        "2025/03/01 10:00:00.000, GPU-aaa, 4242, python, 30000 MiB\n"
        "2025/03/01 10:00:00.000, GPU-bbb, 77, /usr/bin/ollama, [N/A]\n",
    )
    report = ingest_file(ledger, path, opts=UTC)
    assert report.format == "nvidia_smi_apps_csv"
    assert _rows(
        ledger, "SELECT ts::VARCHAR, gpu_id, pid, process_name, used_mem_mib FROM processes ORDER BY pid"
    ) == [
        ("2025-03-01 10:00:00", "GPU-bbb", 77, "/usr/bin/ollama", None),
        ("2025-03-01 10:00:00", "GPU-aaa", 4242, "python", 30000.0),
    ]


def test_compute_apps_bad_pid_names_the_line(ledger, tmp_path):
    path = write(
        tmp_path,
        "apps.csv",
        "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
        "2025/03/01 10:00:00.000, GPU-aaa, 1, a, 1 MiB\n"
        "2025/03/01 10:00:00.000, GPU-aaa, x1, b, 1 MiB\n",
    )
    with pytest.raises(FormatError, match=r"apps\.csv:3: column 'pid' is not a number: 'x1'"):
        ingest_file(ledger, path, opts=UTC)


@pytest.mark.parametrize("delim", [", ", ","])
def test_one_gpu_row_per_gpu_from_names_that_are_sometimes_missing(ledger, tmp_path, delim):
    """A GPU's name is the one it gives when some polls say [N/A]; a GPU that never names itself has none.
    Memory total is its largest, first/last seen its first and last poll (hand-read from the file)."""
    lines = [
        "timestamp, index, name, memory.used [MiB], memory.total [MiB]",
        "2025/03/01 10:00:00.000, 0, [N/A], 100 MiB, 40960 MiB",
        "2025/03/01 10:00:00.000, 1, [N/A], 100 MiB, 81559 MiB",
        "2025/03/01 10:00:10.000, 0, NVIDIA A100-SXM4-40GB, 100 MiB, 40960 MiB",
        "2025/03/01 10:00:10.000, 1, [Not Supported], 100 MiB, 81920 MiB",
        "2025/03/01 10:00:20.000, 0, [N/A], 100 MiB, 40960 MiB",
        "2025/03/01 10:00:20.000, 1, N/A, 100 MiB, 81559 MiB",
    ]
    text = "\n".join(ln.replace(", ", delim) if i else ln for i, ln in enumerate(lines)) + "\n"
    ingest_file(ledger, write(tmp_path, "names.csv", text), opts=IngestOptions(tz="UTC", host="n1"))
    assert _rows(
        ledger,
        "SELECT gpu_id, model_raw, memory_total_mib, first_seen::VARCHAR, last_seen::VARCHAR FROM gpus ORDER BY 1",
    ) == [
        ("n1:0", "NVIDIA A100-SXM4-40GB", 40960.0, "2025-03-01 10:00:00", "2025-03-01 10:00:20"),
        ("n1:1", None, 81920.0, "2025-03-01 10:00:00", "2025-03-01 10:00:20"),
    ]


# --- real files from ../shared/datasets ---------------------------------------------------------------


@pytest.mark.datasets
def test_real_eobo0530_rtx4090_log(ledger):
    path = dataset("nvidia-smi-csv/eobo0530_vlm_optimization_gpu_log.csv")
    report = ingest_file(ledger, path, opts=IngestOptions(tz="Asia/Shanghai"))
    assert report.rows == {"samples": 2619, "gpus": 1}
    # file: 2026/01/03 15:36:53.507 → 16:24:53.961 local; Shanghai is UTC+8
    assert _rows(
        ledger, "SELECT min(ts)::VARCHAR, max(ts)::VARCHAR, count(DISTINCT gpu_id) FROM samples"
    ) == [("2026-01-03 07:36:53.507", "2026-01-03 08:24:53.961", 1)]
    # line 5: "2026/01/03 15:36:56.518, NVIDIA GeForce RTX 4090, 34 %, 1 %, 17304 MiB, 71.06 W"
    assert _rows(
        ledger,
        "SELECT util_pct, mem_util_pct, mem_used_mib, round(power_w::DOUBLE, 2) FROM samples "
        "WHERE ts = TIMESTAMP '2026-01-03 07:36:56.518'",
    ) == [(34.0, 1.0, 17304.0, 71.06)]
    assert _rows(ledger, "SELECT model, model_raw FROM gpus") == [("RTX-4090", "NVIDIA GeForce RTX 4090")]


@pytest.mark.datasets
def test_real_xypp3_mislabeled_header_is_refused_then_read_with_columns(ledger):
    path = dataset("nvidia-smi-csv/xypp3_gpu_glasses_nvidia_smi.csv")
    with pytest.raises(FormatError, match=r":1: column 'index' should tell GPUs apart"):
        ingest_file(ledger, path)
    cols = "timestamp,index,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu"
    report = ingest_file(ledger, path, opts=IngestOptions(columns=tuple(cols.split(","))))
    assert report.rows == {"samples": 43, "gpus": 8}
    # ISO times with +08:00: 2025-09-08T17:26:50+08:00 is 09:26:50 UTC whatever --tz says
    assert _rows(ledger, "SELECT min(ts)::VARCHAR, max(mem_total_mib) FROM samples") == [
        ("2025-09-08 09:26:50", 81559.0)
    ]
    # line 2: "2025-09-08T17:26:50+08:00,0, 0, 4, 81559, 74.01, 33"
    assert _rows(
        ledger,
        "SELECT util_pct, mem_used_mib, round(power_w::DOUBLE, 2), temp_c FROM samples "
        "WHERE gpu_id = 'localhost:0' AND ts = TIMESTAMP '2025-09-08 09:26:50'",
    ) == [(0.0, 4.0, 74.01, 33.0)]


@pytest.mark.datasets
def test_real_anjana5anand_custom_header(ledger):
    path = dataset("nvidia-smi-csv/anjana5anand_gpu_usage_log_resnet_224.csv")
    report = ingest_file(ledger, path, opts=UTC)
    assert report.rows == {"samples": 22, "gpus": 1}
    assert _rows(ledger, "SELECT min(ts)::VARCHAR FROM samples") == [("2025-05-25 00:13:19.084",)]
    # line 2: "2025/05/25 00:13:19.084, 0, NVIDIA RTX A5000, 10, 24564, 11325, 12909, 72"
    assert _rows(
        ledger,
        "SELECT util_pct, mem_total_mib, mem_used_mib, temp_c FROM samples ORDER BY ts LIMIT 1",
    ) == [(10.0, 24564.0, 11325.0, 72.0)]
    start = dt.datetime(2025, 5, 25, 0, 13, 19, 84000)
    assert _rows(ledger, "SELECT first_seen FROM gpus") == [(start,)]


def test_a_repeated_line_lands_once_with_the_gap_to_the_next_distinct_time(ledger, tmp_path):
    lines = UNITS.splitlines(keepends=True)
    report = ingest_file(
        ledger, write(tmp_path, "dup.csv", lines[0] + lines[1] + lines[1] + lines[3]), opts=UTC
    )
    assert report.rows["samples"] == 2
    assert report.skipped["samples already in the ledger"] == 1
    # 10:00:00 → 10:00:10: the kept row stands for 10 s, not for the 0 s to its duplicate
    assert _rows(ledger, "SELECT interval_s FROM samples ORDER BY ts") == [(10.0,), (10.0,)]


def _looped(header: str, polls: list[list[str]]) -> str:
    """What ``while true; do nvidia-smi --query-gpu=... --format=csv >> log; sleep 10; done`` writes: the
    header again before every poll."""
    return "".join(header + "".join(poll) for poll in polls)


def test_a_shell_loop_log_with_the_header_before_every_poll_lands_every_sample(ledger, tmp_path):
    header, *rows = UNITS.splitlines(keepends=True)
    path = write(tmp_path, "loop.csv", _looped(header, [rows[0:2], rows[2:4]]))
    report = ingest_file(ledger, path, opts=UTC)  # auto-detected, no --columns
    assert report.format == "nvidia_smi_csv"
    assert report.rows["samples"] == 4
    # the same four samples as the one-header file (test_forms_land_the_same_samples), nothing from the headers
    assert _rows(
        ledger,
        "SELECT ts::VARCHAR, gpu_id, util_pct, mem_used_mib, power_w, interval_s FROM samples ORDER BY ts, gpu_id",
    ) == [
        ("2025-03-01 10:00:00", "GPU-aaa", 50.0, 1000.0, 300.5, 10.0),
        ("2025-03-01 10:00:00", "GPU-bbb", None, 2000.0, None, 10.0),
        ("2025-03-01 10:00:10", "GPU-aaa", 70.0, 1100.0, 310.0, 10.0),
        ("2025-03-01 10:00:10", "GPU-bbb", 5.0, 2100.0, 100.0, 10.0),
    ]
    assert report.skipped == {
        "utilization.gpu: [N/A] stored as NULL": 1,
        "power.draw: [N/A] stored as NULL": 1,
    }


def test_a_shell_loop_log_bad_value_names_its_line_counting_the_repeated_headers(ledger, tmp_path):
    header, *rows = UNITS.splitlines(keepends=True)
    bad = rows[3].replace("5 %", "five %")
    # lines: 1 header, 2-3 poll, 4 header, 5 good row, 6 the bad row
    path = write(tmp_path, "loop.csv", _looped(header, [rows[0:2], [rows[2], bad]]))
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, path, opts=UTC)
    assert str(err.value).endswith("loop.csv:6: column 'utilization.gpu' is not a number: 'five %'")
    assert _rows(ledger, "SELECT count(*) FROM samples") == [(0,)]


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_a_header_repeated_past_the_sniffed_head_still_lands(ledger, tmp_path, gz):
    # 700 polls of 2 GPUs (~100 KB) before the header comes back: beyond the 64 KB the layout is read from
    header, *rows = UNITS.splitlines(keepends=True)
    polls = [
        [r.replace("10:00:00", f"{10 + i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}") for r in rows[0:2]]
        for i in range(700)
    ]
    text = (
        header
        + "".join("".join(p) for p in polls)
        + header
        + "".join(rows[2:4]).replace("10:00:10", "12:00:00")
    )
    path = write(tmp_path, "late.csv", text)
    if gz:
        import gzip

        path = tmp_path / "late.csv.gz"
        path.write_bytes(gzip.compress(text.encode()))
    report = ingest_file(ledger, path, fmt="nvidia_smi_csv", opts=UTC)
    assert report.rows["samples"] == 2 * 700 + 2


def test_the_block_scan_for_a_repeated_header_answers_as_a_search_of_the_whole_file(monkeypatch):
    """_repeats_in reads SCAN_BLOCK bytes at a time: a header split across two blocks, a first header that is
    not at the start, or one only inside the first header's own bytes must answer as one search of all the
    bytes does (a line starting with the header after its first occurrence)."""
    import io

    from collectors import nvidia_smi_layout as smi

    header = b"timestamp, index, utilization.gpu [%]"
    row = b"2025/03/01 00:00:00.000, 0, 50 %\n"
    cases = {
        "once": header + b"\n" + row * 3,
        "again": header + b"\n" + row * 2 + header + b"\n" + row,
        "again at the end": header + b"\n" + row + header,
        "first not at the start": b"# log\n" + row + header + b"\n" + row + header + b"\n",
        "never": row * 4,
        "only mid-line": header + b"\n" + b"x" + header + b"\n",
        "back to back": header + b"\n" + header,
    }

    def whole(data: bytes) -> bool:
        first = data.find(header)
        return first >= 0 and data.find(b"\n" + header, first + len(header)) >= 0

    expected = {"once": False, "again": True, "again at the end": True, "first not at the start": True}
    expected |= {"never": False, "only mid-line": False, "back to back": True}
    for name, data in cases.items():
        assert whole(data) is expected[name], name
        for block in (1, 2, 5, len(header) - 1, len(header), len(header) + 1, 64, 1 << 20):
            monkeypatch.setattr(smi, "SCAN_BLOCK", block)
            assert smi._repeats_in(io.BytesIO(data), header) is expected[name], (name, block)


@pytest.mark.parametrize("delim", [", ", ","])
def test_a_gpu_name_past_the_head_is_still_each_gpus_name(ledger, tmp_path, delim):
    """The stage codes the names the file's head shows in one byte; a name first seen past the head (here a
    T4 that joins after 3,000 polls of the H100, and an H100 whose name is [N/A] in the head) must still be
    its GPU's name, as read."""
    head = "timestamp, index, uuid, name, utilization.gpu [%]\n".replace(", ", delim)
    rows = [
        f"2025/03/01 10:{p // 60 % 60:02d}:{p % 60:02d}.000, 0, GPU-aaa, NVIDIA H100 80GB HBM3, 50 %"
        for p in range(3000)
    ]
    rows[0] = rows[0].replace("NVIDIA H100 80GB HBM3", "[N/A]")
    rows += [f"2025/03/01 11:{p:02d}:00.000, 1, GPU-bbb, Tesla T4, 7 %" for p in range(3)]
    rows += ["2025/03/01 11:10:00.000, 2, GPU-ccc, [N/A], 9 %"]
    text = head + "".join(r.replace(", ", delim) + "\n" for r in rows)
    assert len(text) > 64 * 1024  # past the head the parser reads (collectors.contract.HEAD_BYTES)
    ingest_file(ledger, write(tmp_path, "late.csv", text), opts=UTC)
    assert _rows(ledger, "SELECT gpu_id, model_raw, model FROM gpus ORDER BY gpu_id") == [
        ("GPU-aaa", "NVIDIA H100 80GB HBM3", "H100-SXM-80GB"),
        ("GPU-bbb", "Tesla T4", "T4"),
        ("GPU-ccc", None, None),
    ]
    assert _rows(ledger, "SELECT count(*) FROM samples") == [(3004,)]


def test_a_bad_value_far_into_a_file_names_its_line(ledger, tmp_path):
    """The stage numbers its rows by rowid, not by a column: a value out of range deep in a file with a
    header must still be reported at its own line, and nothing lands."""
    rows = [f"2025/03/01 10:{p // 60:02d}:{p % 60:02d}.000, 0, GPU-aaa, 50 %" for p in range(1200)]
    rows[1036] = rows[1036].replace("50 %", "250 %")
    path = write(
        tmp_path, "bad.csv", "timestamp, index, uuid, utilization.gpu [%]\n" + "\n".join(rows) + "\n"
    )
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, path, opts=UTC)
    assert err.value.line == 1038  # the header is line 1, rows[0] line 2
    assert "250" in str(err.value)
    assert _rows(ledger, "SELECT count(*) FROM samples") == [(0,)]


@pytest.mark.parametrize("typed", [True, False], ids=["reader-types-the-time", "all-text"])
def test_the_whole_file_is_scanned_for_a_late_header_only_when_it_matters(
    ledger, tmp_path, monkeypatch, typed
):
    """Where the reader types nvidia-smi's timestamp, a header line past the head fails the read: a file that
    reads cleanly is never scanned whole, and one whose header comes back is scanned once, after the failed
    read, and staged again. Where the reader types nothing (ISO times, ',' between values) a header line
    would read as values, so the scan comes first. Either way every sample lands once."""
    from collectors import nvidia_smi_layout as smi

    calls: list[int] = []
    real = smi._repeats_in
    monkeypatch.setattr(smi, "_repeats_in", lambda fh, header: calls.append(1) or real(fh, header))
    header = "timestamp, index, utilization.gpu [%]\n"
    stamp = "2025/03/01 {h:02d}:{m:02d}:{s:02d}.000" if typed else "2025-03-01T{h:02d}:{m:02d}:{s:02d}Z"
    sep = ", " if typed else ","
    header = header if typed else header.replace(", ", ",")

    def rows(first: int, n: int) -> str:
        return "".join(
            f"{stamp.format(h=i // 3600, m=i // 60 % 60, s=i % 60)}{sep}{g}{sep}{(i + g) % 90} %\n"
            for i in range(first, first + n)
            for g in (0, 1)
        )

    clean = write(tmp_path, "clean.csv", header + rows(0, 2000))
    assert clean.stat().st_size > 64 * 1024
    assert ingest_file(ledger, clean, opts=UTC).rows["samples"] == 4000
    assert calls == ([] if typed else [1])
    calls.clear()
    late = write(tmp_path, "late.csv", header + rows(3000, 2000) + header + rows(6000, 5))
    first = ingest_file(ledger, late, opts=UTC)
    assert first.rows["samples"] == 4010
    assert calls == [1]
    # staged twice, one ingest: the id the first try took is the ingest's (no gap in the ingests' ids)
    assert _rows(ledger, "SELECT ingest_id FROM ingests ORDER BY 1")[-2:] == [
        (first.ingest_id - 1,),
        (first.ingest_id,),
    ]
    assert _rows(ledger, "SELECT count(*), count(DISTINCT gpu_id) FROM samples") == [(8010, 2)]


def test_a_gpus_name_index_and_host_are_one_answer_when_its_rows_disagree(ledger, tmp_path):
    """A GPU whose rows give two names (a glitch in one poll) takes the name most of its rows give, and one
    whose index changed (a reboot renumbers the cards) its latest index: each is one answer, not whichever
    row a thread met first."""
    lines = [
        "timestamp, index, uuid, name, utilization.gpu [%]",
        "2025/03/01 10:00:00.000, 0, GPU-aaa, NVIDIA A100-SXM4-80GB, 10 %",
        "2025/03/01 10:00:10.000, 0, GPU-aaa, NVIDIA H100 80GB HBM3, 10 %",
        "2025/03/01 10:00:20.000, 3, GPU-aaa, NVIDIA A100-SXM4-80GB, 10 %",
        "2025/03/01 10:00:30.000, 3, GPU-aaa, [N/A], 10 %",
        "2025/03/01 10:00:40.000, 3, GPU-aaa, [N/A], 10 %",
        "2025/03/01 10:00:50.000, 2, GPU-aaa, NVIDIA A100-SXM4-80GB, 10 %",
    ]
    ingest_file(ledger, write(tmp_path, "mixed.csv", "\n".join(lines) + "\n"), opts=UTC)
    assert _rows(ledger, "SELECT model_raw, gpu_index FROM gpus") == [("NVIDIA A100-SXM4-80GB", 2)]


def _fall_back_log(zone_day: str, local: list[tuple[str, int]], gpus: tuple[str, ...] = ("0",)) -> str:
    """nvidia-smi lines (local times of one day, utilization), every GPU in every poll, in file order."""
    lines = [f"{zone_day} {t}.000, {g}, {u} %" for t, u in local for g in gpus]
    return "timestamp, index, utilization.gpu [%]\n" + "\n".join(lines) + "\n"


# 2025-10-26 in Paris: at 03:00 CEST (01:00 UTC) the clocks go back to 02:00 CET, so 02:00-02:59 comes twice.
PARIS_FALL_BACK = [("02:00:00", 10), ("02:30:00", 10), ("02:00:00", 90), ("02:30:00", 90), ("03:00:00", 90)]


@pytest.mark.parametrize("gpus", [("0",), ("0", "1")], ids=["one-gpu", "two-gpus-per-poll"])
def test_local_times_in_the_repeated_hour_of_a_dst_end_keep_both_passes(ledger, tmp_path, gpus):
    """By hand: 02:00 and 02:30 CEST are 00:00 and 00:30 UTC, the second 02:00 and 02:30 (CET) 01:00 and
    01:30 UTC, 03:00 CET 02:00 UTC: five samples 30 min apart, 5 × 1800 = 9,000 GPU-seconds per GPU, mean
    utilization (2 × 10 + 3 × 90) / 5 = 58 %. Before, the repeated hour was read as one: a file with an index
    column was refused ("index repeats within one timestamp") and one with uuids lost two samples."""
    log = write(tmp_path, "dst.csv", _fall_back_log("2025/10/26", PARIS_FALL_BACK, gpus))
    report = ingest_file(ledger, log, opts=IngestOptions(tz="Europe/Paris", host="n1"))
    for g in gpus:
        got = _rows(
            ledger, f"SELECT ts, interval_s, util_pct FROM samples WHERE gpu_id = 'n1:{g}' ORDER BY ts"
        )
        assert got == [
            (dt.datetime(2025, 10, 26, h, m), 1800.0, float(u))
            for (h, m), u in zip(
                [(0, 0), (0, 30), (1, 0), (1, 30), (2, 0)], [10, 10, 90, 90, 90], strict=True
            )
        ]
    assert _rows(
        ledger, "SELECT sum(interval_s), sum(util_pct * interval_s) / sum(interval_s) FROM samples"
    ) == [(9000.0 * len(gpus), 58.0)]
    assert report.rows["samples"] == 5 * len(gpus)
    assert sum(n for k, n in report.skipped.items() if "clocks went back" in k) == 4 * len(gpus)


def test_a_dst_end_in_another_zone_and_a_single_pass_through_it(ledger, tmp_path):
    """New York, 2025-11-02: 01:00-01:59 comes twice (EDT, UTC-4, then EST, UTC-5). A log that went through it
    once (the logger down for the other pass) has nothing to tell the passes apart: its times are read as the
    first pass, EDT (Python's fold=0); one that went through twice gets both. By hand, UTC: 05:00 and 05:30
    (EDT), 06:00 and 06:30 (EST)."""
    twice = [("01:00:00", 10), ("01:30:00", 10), ("01:00:00", 90), ("01:30:00", 90)]
    ny = IngestOptions(tz="America/New_York", host="a")
    ingest_file(ledger, write(tmp_path, "twice.csv", _fall_back_log("2025/11/02", twice)), opts=ny)
    once = [("01:00:00", 50), ("01:30:00", 50)]
    ingest_file(
        ledger, write(tmp_path, "once.csv", _fall_back_log("2025/11/02", once)), opts=replace_host(ny, "b")
    )
    assert _rows(ledger, "SELECT gpu_id, ts, util_pct FROM samples ORDER BY gpu_id, ts") == [
        ("a:0", dt.datetime(2025, 11, 2, 5, 0), 10.0),
        ("a:0", dt.datetime(2025, 11, 2, 5, 30), 10.0),
        ("a:0", dt.datetime(2025, 11, 2, 6, 0), 90.0),
        ("a:0", dt.datetime(2025, 11, 2, 6, 30), 90.0),
        ("b:0", dt.datetime(2025, 11, 2, 5, 0), 50.0),
        ("b:0", dt.datetime(2025, 11, 2, 5, 30), 50.0),
    ]


def replace_host(opts: IngestOptions, host: str) -> IngestOptions:
    from dataclasses import replace

    return replace(opts, host=host)


def test_a_zone_whose_repeated_hour_duckdb_reads_as_the_earlier_instant(ledger, tmp_path):
    """Moldova's clocks go back at 03:00 EEST = 00:00 UTC, and DuckDB (ICU) reads its repeated 02:00-02:59
    as the earlier instant, unlike most zones. By hand, UTC: 02:10, 02:30, 02:50 EEST (+3) are 23:10, 23:30,
    23:50 on the 25th; the second 02:10, 02:30, 02:50 (EET, +2) 00:10, 00:30, 00:50; 03:10 EET 01:10: seven
    samples 20 minutes apart. Before, the second pass was read as the first and dropped as duplicates."""
    local = [(t, 10) for t in ("02:10:00", "02:30:00", "02:50:00") * 2] + [("03:10:00", 10)]
    path = write(tmp_path, "md.csv", _fall_back_log("2025/10/26", local))
    ingest_file(ledger, path, opts=IngestOptions(tz="Europe/Chisinau", host="n1"))
    got = [t for (t,) in _rows(ledger, "SELECT ts FROM samples ORDER BY ts")]
    day = dt.datetime(2025, 10, 26)
    assert got == [day + dt.timedelta(minutes=m) for m in (-50, -30, -10, 10, 30, 50, 70)]


def test_times_with_their_own_offset_keep_it_beside_local_ones(ledger, tmp_path):
    """New York, 2025-11-02 (01:00-01:59 twice: EDT -4, then EST -5), a wrapper that wrote some times with
    their offset: naive 01:00 and 01:15 (first pass: 05:00, 05:15 UTC), 01:30-04:00 (05:30) and 01:45-05:00
    (06:45, an offset is never moved), then naive 01:00 and 01:15 again (second pass: 06:00, 06:15)."""
    rows = [
        "2025-11-02 01:00:00",
        "2025-11-02 01:15:00",
        "2025-11-02T01:30:00-04:00",
        "2025-11-02T01:45:00-05:00",
        "2025-11-02 01:00:00",
        "2025-11-02 01:15:00",
    ]
    text = "timestamp, index, utilization.gpu [%]\n" + "".join(f"{t}, 0, 50 %\n" for t in rows)
    ingest_file(
        ledger, write(tmp_path, "mix.csv", text), opts=IngestOptions(tz="America/New_York", host="n1")
    )
    got = [t for (t,) in _rows(ledger, "SELECT ts FROM samples ORDER BY ts")]
    day = dt.datetime(2025, 11, 2)
    assert got == [day + dt.timedelta(minutes=m) for m in (300, 315, 330, 360, 375, 405)]
