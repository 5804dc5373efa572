"""nvidia-smi --query-gpu CSV in the shapes other sites write: every field of a current driver, cards told
apart only by their PCI bus id, and logs whose rows cannot be told apart per GPU (issue 36, item 1).

The two full-field fixtures (tests/fixtures/nvidia_smi/) were written by hand in the shape ``nvidia-smi
--query-gpu=<every field of --help-query-gpu> --format=csv`` has on driver 5xx (field names and order as the
driver lists them; VirtualClient's query-gpu-1xH100.csv and the public ``gpu_usage_*.csv`` logs were the
models for the narrower shapes below). 173 fields, 16 of which gpuledger reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.conftest import write

FIXTURES = Path(__file__).parent.parent / "fixtures" / "nvidia_smi"
UTC = IngestOptions(tz="UTC")


def _rows(ledger, sql: str) -> list[tuple[object, ...]]:
    return ledger.execute(sql).fetchall()


def test_a_full_field_h200_row_lands_as_written(ledger):
    path = FIXTURES / "full_fields_h200.csv"
    header = path.read_text().splitlines()[0].split(", ")
    assert len(header) == 173
    report = ingest_file(ledger, path, opts=UTC)
    assert report.format == "nvidia_smi_csv"  # sniffed, not named
    assert report.rows == {"samples": 1, "gpus": 1}
    # read: timestamp, name, uuid, pci.bus_id, index, clocks_event_reasons.active, memory.total, memory.used,
    # memory.free, utilization.gpu, utilization.memory, temperature.gpu, power.draw(.average, .instant),
    # clocks.current.sm: 16 names; the other 157 are counted in one line of the report
    assert report.skipped == {
        "157 columns not stored (no ledger column): driver_version, "
        "vgpu_driver_capability.heterogenous_multivGPU, count, serial, pci.domain, ...": 1
    }
    # the row says: 100 %, 62 %, 32362 MiB of 143771 MiB, 627.40 W (power.draw first), 61 C, 1980 MHz
    assert _rows(
        ledger,
        "SELECT ts::VARCHAR, gpu_id, util_pct, mem_util_pct, mem_used_mib, mem_total_mib, "
        "round(power_w::DOUBLE, 2), temp_c, sm_clock_mhz, throttle_reasons FROM samples",
    ) == [
        (
            "2026-02-11 09:14:07.412",
            "GPU-5c8c6f1e-7a3d-2b9f-0e41-9d2a6c3b8f17",
            100.0,
            62.0,
            32362.0,
            143771.0,
            627.4,
            61.0,
            1980.0,
            0,
        )
    ]
    assert _rows(ledger, "SELECT gpu_index, model, model_raw, memory_total_mib FROM gpus") == [
        (0, "H200", "NVIDIA H200", 143771.0)
    ]


def test_a_full_field_mig_h100_row_keeps_na_utilization_as_null(ledger):
    report = ingest_file(ledger, FIXTURES / "full_fields_h100_mig.csv", opts=UTC)
    assert report.rows == {"samples": 1, "gpus": 1}
    # MIG mode: the whole card's utilization is [N/A], never 0
    assert report.skipped["utilization.gpu: [N/A] stored as NULL"] == 1
    assert _rows(
        ledger,
        "SELECT util_pct, mem_used_mib, mem_total_mib, round(power_w::DOUBLE, 2), throttle_reasons FROM samples",
    ) == [(None, 21748.0, 81559.0, 112.83, 1)]


def test_one_known_field_among_many_unknown_is_a_header(ledger, tmp_path):
    # 2 known names (timestamp, utilization.gpu) among 30 unknown: the share rule took this for data
    unknown = [f"future.field_{i}" for i in range(30)]
    header = ", ".join(["timestamp", *unknown, "utilization.gpu [%]"])
    row = ", ".join(["2026/02/11 09:14:07.412", *(["[N/A]"] * 30), "37 %"])
    report = ingest_file(ledger, write(tmp_path, "wide.csv", f"{header}\n{row}\n"), opts=UTC)
    assert report.rows["samples"] == 1
    assert report.skipped == {
        "30 columns not stored (no ledger column): future.field_0, future.field_1, future.field_2, "
        "future.field_3, future.field_4, ...": 1
    }
    assert _rows(ledger, "SELECT gpu_id, util_pct FROM samples") == [("localhost:0", 37.0)]


def test_a_data_line_that_names_a_field_is_still_data(ledger, tmp_path):
    # a noheader row whose GPU is named "name" is not a header: it holds a time and numbers
    path = write(tmp_path, "nh.csv", "2026/02/11 09:14:07.412, name, 37 %\n")
    with pytest.raises(FormatError, match=r"nh\.csv:1: no header line: pass --columns"):
        ingest_file(ledger, path, fmt="nvidia_smi_csv", opts=UTC)


# The shape of the public gpu_usage_*.csv logs: --format=csv,noheader of 13 fields on a 4-GPU node, the
# cards named only by pci.bus_id, one poll's rows a few ms apart.
BUS_COLUMNS = [
    "timestamp",
    "name",
    "pci.bus_id",
    "driver_version",
    "pstate",
    "pcie.link.gen.max",
    "pcie.link.gen.current",
    "temperature.gpu",
    "utilization.gpu",
    "utilization.memory",
    "memory.total",
    "memory.free",
    "memory.used",
]
BUSES = ("00000000:0B:00.0", "00000000:3B:00.0", "00000000:8B:00.0", "00000000:BB:00.0")


def _bus_log(polls: int, every_s: int = 10) -> str:
    lines = []
    for p in range(polls):
        s = 5 + every_s * p
        for k, bus in enumerate(BUSES):
            util = 3 * (k + 1)
            lines.append(
                f"2024/06/01 11:{27 + s // 60:02d}:{s % 60:02d}.{177 + 4 * k:03d}, NVIDIA A100-SXM4-40GB, {bus}, "
                f"545.23.08, P0, 4, 4, {42 + k}, {util} %, 0 %, 40960 MiB, 1534 MiB, 38803 MiB"
            )
    return "\n".join(lines) + "\n"


def test_cards_told_apart_only_by_bus_id_are_four_gpus(ledger, tmp_path):
    path = write(tmp_path, "gpu_usage_node1.csv", _bus_log(polls=5))
    opts = IngestOptions(tz="UTC", host="node1", columns=tuple(BUS_COLUMNS))
    report = ingest_file(ledger, path, opts=opts)
    assert report.rows == {"samples": 20, "gpus": 4}
    # each card: 5 polls 10 s apart → 4 gaps of 10 s, and the last sample the 10-s cadence: 50 s;
    # 4 cards → 200 GPU-seconds (read as one GPU, each sample lasted the 4 ms to the next card's row)
    assert _rows(ledger, "SELECT round(sum(interval_s), 3) FROM samples") == [(200.0,)]
    assert _rows(
        ledger,
        "SELECT gpu_id, count(*), round(sum(interval_s), 3), min(util_pct) FROM samples GROUP BY 1 ORDER BY 1",
    ) == [(f"node1:{bus}", 5, 50.0, 3.0 * (k + 1)) for k, bus in enumerate(BUSES)]
    assert _rows(ledger, "SELECT gpu_id, host, gpu_index, model FROM gpus ORDER BY 1") == [
        (f"node1:{bus}", "node1", None, "A100-40GB") for bus in BUSES
    ]


def test_a_poll_of_several_gpus_without_an_identity_column_is_refused(ledger, tmp_path):
    # the same log read without its bus id (named as a field nothing reads): four cards look like one
    columns = tuple("pci.device" if c == "pci.bus_id" else c for c in BUS_COLUMNS)
    path = write(tmp_path, "gpu_usage_node1.csv", _bus_log(polls=5))
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, path, opts=IngestOptions(tz="UTC", columns=columns))
    # line 4 is the last card of the first poll: 4 ms after line 3, 9.988 s before the next poll
    assert str(err.value) == (
        f"{path}:4: rows 4 ms apart, then 9.988 s apart: one poll of several GPUs, but no uuid, index or "
        "pci.bus_id column says which GPU each row is: add uuid (or index, pci.bus_id) to --query-gpu"
    )
    assert _rows(ledger, "SELECT count(*) FROM samples") == [(0,)]


def test_several_rows_at_one_time_without_an_identity_column_are_refused(ledger, tmp_path):
    text = (
        "timestamp, name, utilization.gpu [%]\n"
        "2024/06/01 11:27:05.177, NVIDIA A100-SXM4-40GB, 3 %\n"
        "2024/06/01 11:27:05.177, NVIDIA A100-SXM4-40GB, 6 %\n"
    )
    with pytest.raises(
        FormatError, match=r"same\.csv:3: several rows at 2024-06-01 11:27:05.177000 UTC but no uuid"
    ):
        ingest_file(ledger, write(tmp_path, "same.csv", text), opts=UTC)


def test_one_gpu_with_pauses_and_a_fast_cadence_is_not_taken_for_several(ledger, tmp_path):
    # one card at -lms 100 that stalls for 30 s twice: the gaps jump 300-fold, but twice in 60 gaps
    times = (
        [0.1 * i for i in range(20)] + [32 + 0.1 * i for i in range(20)] + [64 + 0.1 * i for i in range(21)]
    )
    body = "".join(f"2024/06/01 11:{27 + int(t) // 60:02d}:{t % 60:06.3f}, 40 %\n" for t in times)
    report = ingest_file(
        ledger, write(tmp_path, "one.csv", "timestamp, utilization.gpu [%]\n" + body), opts=UTC
    )
    assert report.rows == {"samples": 61, "gpus": 1}
