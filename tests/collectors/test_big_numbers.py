"""A number too large for a 32-bit FLOAT (10^44 W written out) is staged as DOUBLE by every parser, so the
range check names its line and its value instead of DuckDB refusing the file as "a number too large to store"
with neither (issue 48)."""

from __future__ import annotations

import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.collectors.test_nvidia_smi_xml import snapshot
from tests.conftest import write

UTC = IngestOptions(tz="UTC")
HUGE = "1" + "0" * 44 + ".00"  # 10^44, past FLOAT's largest (about 3.4 × 10^38)

QUERY_GPU = (
    "timestamp, name, uuid, index, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W]\n"
    "2026/02/11 09:14:07.412, NVIDIA H100 80GB HBM3, GPU-a, 0, 50 %, 100 MiB, 81559 MiB, 300.00 W\n"
    f"2026/02/11 09:14:37.412, NVIDIA H100 80GB HBM3, GPU-a, 0, 50 %, 100 MiB, 81559 MiB, {HUGE} W\n"
)
ROCM = (
    "epoch,device,Temperature (Sensor edge) (C),Average Graphics Package Power (W),GPU use (%)\n"
    "1740823200,card0,45.0,310.0,97\n"
    f"1740823230,card0,45.0,{HUGE},97\n"
)


def _xml() -> str:
    text = snapshot().replace("250.5 W", f"{HUGE} W")
    assert "<average_power_draw>" + HUGE in text.splitlines()[16]  # line 17 holds the value
    return text


@pytest.mark.parametrize(
    ("name", "text", "line", "column"),
    [
        ("big.xml", _xml(), 17, "power_w"),
        ("big.csv", QUERY_GPU, 3, "power.draw"),
        ("big_rocm.csv", ROCM, 3, "Average Graphics Package Power"),
    ],
    ids=["nvidia_smi_xml", "nvidia_smi_csv", "rocm_smi"],
)
def test_power_of_ten_to_the_44_is_refused_with_its_line_and_value(
    ledger, tmp_path, name, text, line, column
):
    with pytest.raises(FormatError) as info:
        ingest_file(ledger, write(tmp_path, name, text), opts=UTC)
    err = info.value
    assert err.line == line
    assert column in err.reason and "1e+44 W" in err.reason
    assert ledger.execute("SELECT count(*) FROM samples").fetchone() == (0,)
