"""nvidia-smi -q -x snapshots: inventory, one sample per GPU, MIG instances, processes, errors, real files."""

from __future__ import annotations

import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.conftest import dataset, write

UTC = IngestOptions(tz="UTC")


def snapshot(stamp: str = "Mon Apr 24 16:11:51 2023", util: str = "37 %") -> str:
    """A v12-shaped snapshot with one H100 and one process (only the elements gpuledger reads)."""
    return f"""<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
    <timestamp>{stamp}</timestamp>
    <gpu id="00000000:01:00.0">
        <product_name>NVIDIA H100 80GB HBM3</product_name>
        <product_architecture>Hopper</product_architecture>
        <uuid>GPU-h100</uuid>
        <minor_number>2</minor_number>
        <fb_memory_usage><total>81559 MiB</total><used>4000 MiB</used></fb_memory_usage>
        <utilization><gpu_util>{util}</gpu_util><memory_util>N/A</memory_util></utilization>
        <clocks_event_reasons>
            <clocks_event_reason_gpu_idle>Not Active</clocks_event_reason_gpu_idle>
            <clocks_event_reason_sw_power_cap>Active</clocks_event_reason_sw_power_cap>
        </clocks_event_reasons>
        <temperature><gpu_temp>41 C</gpu_temp></temperature>
        <gpu_power_readings><power_draw>N/A</power_draw><average_power_draw>250.5 W</average_power_draw></gpu_power_readings>
        <clocks><sm_clock>1755 MHz</sm_clock></clocks>
        <processes>
            <process_info><gpu_instance_id>N/A</gpu_instance_id><pid>99</pid><process_name>python</process_name><used_memory>3900 MiB</used_memory></process_info>
        </processes>
    </gpu>
</nvidia_smi_log>
"""


def _rows(ledger, sql: str) -> list[tuple[object, ...]]:
    return ledger.execute(sql).fetchall()


def test_snapshot_lands_inventory_sample_and_process(ledger, tmp_path):
    report = ingest_file(ledger, write(tmp_path, "q.xml", snapshot()), opts=UTC)
    assert report.format == "nvidia_smi_xml"
    assert report.rows == {"samples": 1, "gpus": 1, "processes": 1}
    # memory_util N/A → NULL; v13-style average_power_draw used when power_draw is N/A; sw_power_cap = 0x4
    assert _rows(
        ledger,
        "SELECT ts::VARCHAR, gpu_id, util_pct, mem_util_pct, mem_used_mib, mem_total_mib, power_w, temp_c, "
        "sm_clock_mhz, throttle_reasons FROM samples",
    ) == [("2023-04-24 16:11:51", "GPU-h100", 37.0, None, 4000.0, 81559.0, 250.5, 41.0, 1755.0, 4)]
    assert _rows(ledger, "SELECT gpu_id, uuid, gpu_index, model, memory_total_mib FROM gpus") == [
        ("GPU-h100", "GPU-h100", 2, "H100-SXM-80GB", 81559.0)
    ]
    assert _rows(ledger, "SELECT gpu_id, pid, process_name, used_mem_mib FROM processes") == [
        ("GPU-h100", 99, "python", 3900.0)
    ]


def test_appended_snapshots_each_at_their_own_time_in_tz(ledger, tmp_path):
    text = snapshot("Tue Jul  1 12:00:00 2025", "10 %") + snapshot("Tue Jul  1 12:00:30 2025", "90 %")
    ingest_file(ledger, write(tmp_path, "log.xml", text), opts=IngestOptions(tz="Europe/Paris"))
    # CEST = UTC+2; two samples 30 s apart → interval 30 s each
    assert _rows(ledger, "SELECT ts::VARCHAR, util_pct, interval_s FROM samples ORDER BY ts") == [
        ("2025-07-01 10:00:00", 10.0, 30.0),
        ("2025-07-01 10:00:30", 90.0, 30.0),
    ]


def test_snapshots_through_the_hour_a_dst_end_repeats_keep_both_passes(ledger, tmp_path):
    """Paris, 2025-10-26: 02:00 and 02:30 come twice (CEST, then CET). By hand, UTC: 00:00, 00:30 (first
    pass), 01:00, 01:30 (second), 03:00 CET = 02:00: five samples 1,800 s each. Before, the second pass was
    read as the first: three samples, one of them standing for 5,400 s."""
    stamps = ["02:00:00", "02:30:00", "02:00:00", "02:30:00", "03:00:00"]
    text = "".join(
        snapshot(f"Sun Oct 26 {t} 2025", u)
        for t, u in zip(stamps, ["10 %", "10 %", "90 %", "90 %", "90 %"], strict=True)
    )
    ingest_file(ledger, write(tmp_path, "fall.xml", text), opts=IngestOptions(tz="Europe/Paris"))
    assert _rows(ledger, "SELECT ts::VARCHAR, util_pct, interval_s FROM samples ORDER BY ts") == [
        ("2025-10-26 00:00:00", 10.0, 1800.0),
        ("2025-10-26 00:30:00", 10.0, 1800.0),
        ("2025-10-26 01:00:00", 90.0, 1800.0),
        ("2025-10-26 01:30:00", 90.0, 1800.0),
        ("2025-10-26 02:00:00", 90.0, 1800.0),
    ]


def test_bad_number_and_truncated_xml_are_errors_with_lines(ledger, tmp_path):
    with pytest.raises(FormatError, match=r"bad\.xml:1: snapshot: <gpu_util> is not a number: 'lots'"):
        ingest_file(ledger, write(tmp_path, "bad.xml", snapshot(util="lots")), opts=UTC)
    text = snapshot()
    with pytest.raises(FormatError, match=r"cut\.xml:\d+: not well-formed XML"):
        ingest_file(ledger, write(tmp_path, "cut.xml", text[: len(text) // 2]), opts=UTC)
    assert _rows(ledger, "SELECT (SELECT count(*) FROM samples), (SELECT count(*) FROM gpus)") == [(0, 0)]


def test_reingest_is_a_noop(ledger, tmp_path):
    path = write(tmp_path, "q.xml", snapshot())
    ingest_file(ledger, path, opts=UTC)
    assert ingest_file(ledger, path, opts=UTC).already
    assert _rows(ledger, "SELECT count(*) FROM samples") == [(1,)]


@pytest.mark.datasets
def test_real_a100_mig_v12(ledger):
    path = dataset("nvidia-smi-q-xml/telegraf_a100-sxm4-v12.xml")
    report = ingest_file(ledger, path, opts=UTC)
    # 1 physical GPU + its 4 MIG instances (gpu_instance_id 3..6 in the file: grep -c '<mig_device>' = 4)
    assert report.rows == {"samples": 5, "gpus": 5}
    parent = "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert _rows(
        ledger,
        f"SELECT util_pct, round(power_w::DOUBLE, 2), temp_c, mem_total_mib FROM samples WHERE gpu_id = '{parent}'",
    ) == [(None, 67.03, 27.0, 81920.0)]  # <gpu_util>N/A</gpu_util>, <power_draw>67.03 W</power_draw>
    # each instance: 14 SMs on Ampere = 1 slice, 19968 MiB → 20 GB: the A100-80GB 1g.20gb profile
    assert _rows(
        ledger,
        "SELECT count(*), min(mig_profile), max(mig_profile), min(parent_gpu_id), min(memory_total_mib) "
        "FROM gpus WHERE parent_gpu_id IS NOT NULL",
    ) == [(4, "1g.20gb", "1g.20gb", parent, 19968.0)]
    assert _rows(ledger, "SELECT min(ts)::VARCHAR FROM samples") == [("2023-08-04 11:44:30",)]


@pytest.mark.datasets
@pytest.mark.parametrize(
    ("name", "gpu", "processes", "values"),
    [
        ("telegraf_a10g.xml", "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94", 1, (0.0, 22.0, 23028.0, 17.0)),
        (
            "telegraf_tesla-t4.xml",
            "GPU-d37e67a5-91dd-3774-a5cb-99096249601a",
            2,
            (0.0, 1032.0, 15360.0, 40.0),
        ),
        (
            "telegraf_rtx-3090-v12.xml",
            "GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
            0,
            (0.0, 1.0, 24576.0, 37.0),
        ),
        (
            "telegraf_rtx-4000-sff-ada-v13.xml",
            "GPU-37037c3f-65c8-ec4d-24a9-420204ad8026",
            4,
            (0.0, 3534.0, 20475.0, 38.0),
        ),
    ],
    ids=["v11-a10g", "v11-t4", "v12-3090", "v13-ada"],
)
def test_real_single_gpu_snapshots(ledger, name, gpu, processes, values):
    report = ingest_file(ledger, dataset(f"nvidia-smi-q-xml/{name}"), opts=UTC)
    assert report.rows.get("processes", 0) == processes
    assert _rows(ledger, "SELECT gpu_id, util_pct, mem_used_mib, mem_total_mib, temp_c FROM samples") == [
        (gpu, *values)
    ]
