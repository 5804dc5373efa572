"""nvidia-smi -q -x across DTD versions (real telegraf testdata, tests/fixtures/nvidia_smi_xml/README.md) and
identity inside one snapshot: two <gpu> elements sharing a (masked) UUID are told apart by bus id or minor."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from tests.conftest import write

FIXTURES = Path(__file__).parent.parent / "fixtures" / "nvidia_smi_xml"
UTC = IngestOptions(tz="UTC")
T = dt.datetime


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # each row read by hand from the file: <timestamp>, uuid, gpu_util, memory_util, fb used/total,
        # power (power_draw, else average_power_draw), gpu_temp, the first <clocks><sm_clock>
        ("telegraf_gtx-1660-ti.xml", (T(2019, 3, 29, 19, 19, 44), "GPU-304a277d-3545-63b8-3a36-dfde3c992989", 0, 1, 0, 5912, 8.93, 40, 300)),
        ("telegraf_quadro-p400.xml", (T(2019, 3, 11, 17, 3, 27), "GPU-8f750be4-dfbc-23b9-b33f-da729a536494", 0, 3, 0, 1998, None, 33, 139)),
        ("telegraf_rtx-3060-v12.xml", (T(2025, 3, 2, 15, 2, 2), "GPU-d6889ff6-2523-9142-ca3c-1ca3f396a625", 0, 0, 116, 12288, 11.60, 42, 210)),
        ("telegraf_rtx-3080-v12.xml", (T(2023, 7, 20, 17, 0, 50), "GPU-19d6d965-2acc-f646-00f8-4c76979aabb4", 0, 37, 1128, 10240, 22.78, 31, 210)),
        ("telegraf_rtx-3080-v13.xml", (T(2026, 4, 10, 10, 23, 1), "GPU-19d6d965-2acc-f646-00f8-4c76979aabb4", 65, 9, 9184, 10240, 139.62, 27, 1950)),
    ],
)  # fmt: skip
def test_real_snapshots_across_dtd_versions(ledger, name, expected):
    ingest_file(ledger, FIXTURES / name, opts=UTC)
    got = ledger.execute(
        """SELECT ts, gpu_id, util_pct, mem_util_pct, mem_used_mib, mem_total_mib, power_w, temp_c, sm_clock_mhz
           FROM samples"""
    ).fetchall()
    assert len(got) == 1
    assert got[0][:2] == expected[:2]
    assert got[0][2:] == tuple(None if v is None else pytest.approx(v, abs=0.005) for v in expected[2:])


def test_windows_snapshot_has_no_minor_number(ledger):
    ingest_file(ledger, FIXTURES / "telegraf_rtx-3080-v12.xml", opts=UTC)
    assert ledger.execute("SELECT gpu_index, model_raw FROM gpus").fetchall() == [
        (None, "NVIDIA GeForce RTX 3080")
    ]
    assert ledger.execute("SELECT count(*) FROM processes").fetchall() == [(5,)]


def test_two_gpus_sharing_a_masked_uuid_are_two_gpus_with_their_own_power(ledger):
    """Card 00000000:2D:00.0: 0 %, 116 MiB, 11.60 W; card 00000000:2E:00.0: 97 %, 10240 MiB, 171.25 W —
    before, both landed as one GPU (the masked UUID) with one card's power."""
    report = ingest_file(
        ledger,
        FIXTURES / "masked_uuid_2gpu_from_rtx-3060-v12.xml",
        opts=IngestOptions(tz="UTC", host="node9"),
    )
    assert report.rows["gpus"] == 2
    assert ledger.execute(
        "SELECT gpu_id, util_pct, mem_used_mib, round(power_w * 100)::INTEGER FROM samples ORDER BY gpu_id"
    ).fetchall() == [
        ("node9:00000000:2D:00.0", 0.0, 116.0, 1160),  # W × 100
        ("node9:00000000:2E:00.0", 97.0, 10240.0, 17125),
    ]
    assert ledger.execute("SELECT gpu_id, uuid, host, gpu_index FROM gpus ORDER BY gpu_id").fetchall() == [
        ("node9:00000000:2D:00.0", None, "node9", 0),
        ("node9:00000000:2E:00.0", None, "node9", 1),
    ]
    (note,) = [k for k in report.skipped if "sharing one UUID" in k]
    assert "told apart by PCI bus id" in note and "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" in note
    assert report.skipped[note] == 2


def test_without_a_bus_id_the_minor_number_tells_them_apart(ledger, tmp_path):
    gpu = (
        "<gpu><product_name>NVIDIA A100-SXM4-80GB</product_name><uuid>GPU-0000</uuid>"
        "<minor_number>{m}</minor_number><power_readings><power_draw>{w} W</power_draw></power_readings></gpu>"
    )
    text = (
        '<?xml version="1.0" ?><nvidia_smi_log><timestamp>Mon Mar  3 10:00:00 2025</timestamp>'
        + gpu.format(m=0, w=100)
        + gpu.format(m=1, w=250)
        + "</nvidia_smi_log>\n"
    )
    report = ingest_file(ledger, write(tmp_path, "m.xml", text), opts=UTC)
    assert ledger.execute("SELECT gpu_id, power_w FROM samples ORDER BY 1").fetchall() == [
        ("localhost:0", 100.0),
        ("localhost:1", 250.0),
    ]
    assert any("told apart by minor number" in k for k in report.skipped)
