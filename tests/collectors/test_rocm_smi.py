"""AMD telemetry: ``rocm-smi … --csv`` and ``amd-smi metric --csv`` logs (issue 33, item 7).

The fixtures (tests/fixtures/rocm_smi/) are hand-written in the shapes the tools and public logging scripts
write; no public file is copied:

- the CSV itself: ROCm/rocm_smi_lib ``python_smi_tools/rocm_smi.py`` (formatCsv: ``device,<fields>`` then
  ``cardN,…``, commas removed from values, ``N/A`` for a missing key, a blank line after the table; field names
  from showGpuUse / showMemUse / showPower / showMemInfo / showProductName; commit b86f922, ROCm 6.1.2, renamed
  ``GPU memory use (%)`` to ``GPU Memory Read/Write Activity (%)`` and added ``GPU Memory Allocated (VRAM%)``);
  ``N/A (Secondary die)`` is showPower's value for an MI250X's second die;
- ``mi300x_time_lines.log``: a wrapper loop that writes ``timestamp=<date -u +%Y-%m-%dT%H:%M:%S.%NZ>`` and then
  ``rocm-smi --showuse --showmemuse --showpower … --csv 2>&1`` (the ``sample_smi`` loop of a public llama.cpp
  ROCm benchmark script), with the ``WARNING: AMD GPU device(s) is/are in a low-power state`` line and blank
  lines rocm-smi prints before the table (quoted in ROCm/ROCm issue 5849 and an OLCF Frontier sampler);
- ``epoch_prefix_mi250x.csv``: a header ``epoch,device,…`` written once, then each row prefixed with
  ``$(date +%s),`` (``rocm-smi -a --csv | … | sed "s/^/$(date '+%s'),/"``, a public rocm-smi logging script);
  pre-6.1.2 names (``GPU memory use (%)``, ``Average Graphics Package Power (W)``), ``PCI Bus`` as in
  tsssni/tsssni.nix's ``rocm-smi -i --showuse … --csv`` reader;
- ``amd_smi_metric_watch.csv``: ``amd-smi metric -u -p -t -m -w 30 --csv`` per ROCm/amdsmi
  ``amdsmi_cli/amdsmi_logger.py`` (flatten_dict, ``timestamp`` = ``int(time.time())`` first in watch mode,
  ``csv.DictWriter`` quoting list values) and ``amdsmi_commands.py`` (gfx_activity, umc_activity, socket_power,
  edge/hotspot/mem temperatures, total_vram/used_vram in MiB).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.conftest import write

FIXTURES = Path(__file__).parent.parent / "fixtures" / "rocm_smi"
NODE = IngestOptions(tz="UTC", host="node7")
HEADER = "device,GPU use (%),GPU Memory Allocated (VRAM%),Current Socket Graphics Package Power (W)"


def _rows(ledger, sql: str) -> list[tuple[object, ...]]:
    return ledger.execute(sql).fetchall()


def test_a_logging_loop_of_two_mi300x_lands_utilization_memory_power_and_gpu_seconds(ledger):
    report = ingest_file(ledger, FIXTURES / "mi300x_time_lines.log", opts=NODE)
    assert report.format == "rocm_smi"  # sniffed past the time line, the WARNING and the blank lines
    assert report.rows == {"samples": 6, "gpus": 2}
    assert report.skipped == {"fields not stored: Avg. Memory Bandwidth, GFX Activity, Memory Activity": 6}
    # three polls 30 s apart: each sample stands for 30 s (the last for the cadence), 3 × 30 = 90 s a card
    # card0: GPU use 90, 100, 80 → (90 + 100 + 80) / 3 = 90 %; power 600, 700, 650 W → 650 W,
    #        600×30 + 700×30 + 650×30 = 58,500 J; VRAM used 103079215104 B / 2^20 = 98,304 MiB of 196,608
    # card1: 0, 0, 10 → 3.33 %; 140, 150, 160 W → 150 W; 4294967296 B = 4,096 MiB
    assert _rows(
        ledger,
        """SELECT gpu_id, count(*), sum(interval_s), round(avg(util_pct), 2), round(avg(mem_util_pct), 2),
                  max(mem_used_mib), max(mem_total_mib), avg(power_w), sum(power_w * interval_s)
           FROM samples GROUP BY gpu_id ORDER BY gpu_id""",
    ) == [
        ("node7:0", 3, 90.0, 90.0, 40.0, 98304.0, 196608.0, 650.0, 58500.0),
        ("node7:1", 3, 90.0, 3.33, 0.33, 4096.0, 196608.0, 150.0, 13500.0),
    ]
    assert _rows(ledger, "SELECT min(ts)::VARCHAR, max(ts)::VARCHAR FROM samples") == [
        ("2025-03-01 10:00:00", "2025-03-01 10:01:00")
    ]
    # "AMD Instinct MI300X" (Card Series) is the catalog's MI300X; the card is host + index
    assert _rows(
        ledger, "SELECT gpu_id, host, gpu_index, model, model_raw, memory_total_mib FROM gpus ORDER BY 1"
    ) == [
        ("node7:0", "node7", 0, "MI300X", "AMD Instinct MI300X", 196608.0),
        ("node7:1", "node7", 1, "MI300X", "AMD Instinct MI300X", 196608.0),
    ]


def test_the_same_log_again_lands_nothing_new(ledger):
    first = ingest_file(ledger, FIXTURES / "mi300x_time_lines.log", opts=NODE)
    again = ingest_file(ledger, FIXTURES / "mi300x_time_lines.log", opts=NODE)
    assert again.already and again.rows == {}
    assert _rows(ledger, "SELECT count(*), sum(interval_s) FROM samples") == [(6, 180.0)]
    assert first.ingest_id is not None


def test_the_same_polls_under_another_name_are_not_counted_twice(ledger, tmp_path):
    ingest_file(ledger, FIXTURES / "mi300x_time_lines.log", opts=NODE)
    copy = write(tmp_path, "copy.log", (FIXTURES / "mi300x_time_lines.log").read_text() + "\n")
    report = ingest_file(ledger, copy, opts=NODE)
    assert report.rows.get("samples", 0) == 0 and report.skipped["samples already in the ledger"] == 6
    assert _rows(ledger, "SELECT count(*), sum(interval_s) FROM samples") == [(6, 180.0)]


def test_an_epoch_prefixed_log_with_pci_buses_and_a_secondary_die(ledger):
    report = ingest_file(ledger, FIXTURES / "epoch_prefix_mi250x.csv", opts=NODE)
    assert report.format == "rocm_smi"
    # 1740823200 = 2025-03-01 10:00:00 UTC; cards by PCI bus; "GPU memory use (%)" (before ROCm 6.1.2) is
    # memory-controller activity → mem_util_pct, not memory held; the secondary die's power is NULL, not 0
    assert _rows(
        ledger,
        """SELECT ts::VARCHAR, gpu_id, interval_s, util_pct, mem_util_pct, mem_used_mib, power_w, temp_c
           FROM samples ORDER BY gpu_id, ts""",
    ) == [
        ("2025-03-01 10:00:00", "node7:0000:C1:00.0", 60.0, 97.0, 35.0, None, 310.0, 45.0),
        ("2025-03-01 10:01:00", "node7:0000:C1:00.0", 60.0, 99.0, 38.0, None, 330.0, 47.0),
        ("2025-03-01 10:00:00", "node7:0000:C6:00.0", 60.0, 96.0, 34.0, None, None, 44.0),
        ("2025-03-01 10:01:00", "node7:0000:C6:00.0", 60.0, 98.0, 37.0, None, None, 46.0),
    ]
    assert _rows(ledger, "SELECT gpu_id, gpu_index FROM gpus ORDER BY 1") == [
        ("node7:0000:C1:00.0", 0),
        ("node7:0000:C6:00.0", 1),
    ]


def test_amd_smi_metric_watch_csv(ledger):
    report = ingest_file(ledger, FIXTURES / "amd_smi_metric_watch.csv", opts=NODE)
    assert report.format == "rocm_smi"
    # timestamp column (epoch s); gfx_activity, umc_activity, socket_power; no edge sensor on MI300 (N/A) →
    # the hotspot; used_vram/total_vram already MiB; the quoted list value with commas is skipped whole
    assert _rows(
        ledger,
        """SELECT ts::VARCHAR, gpu_id, util_pct, mem_util_pct, power_w, temp_c, mem_used_mib, mem_total_mib
           FROM samples ORDER BY gpu_id, ts""",
    ) == [
        ("2025-03-01 10:00:00", "node7:0", 95.0, 80.0, 612.0, 55.0, 150000.0, 196592.0),
        ("2025-03-01 10:00:30", "node7:0", 97.0, 82.0, 640.0, 56.0, 150000.0, 196592.0),
        ("2025-03-01 10:00:00", "node7:1", 0.0, 0.0, 151.0, 41.0, 2000.0, 196592.0),
        ("2025-03-01 10:00:30", "node7:1", 5.0, 1.0, 160.0, 41.0, 2000.0, 196592.0),
    ]


def test_vram_percent_becomes_mib_only_with_the_cards_own_total(ledger, tmp_path):
    """``date -Is`` time lines (+01:00 → UTC). GPU Memory Allocated (VRAM%) is memory held once the file gives
    the card's VRAM total (here in its second block): 25 % of 196,608 MiB = 49,152 MiB, both polls."""
    path = write(
        tmp_path,
        "vram.log",
        f"2025-03-01T11:00:00+01:00\n{HEADER}\ncard0,50,25,400.0\n\n"
        f"2025-03-01T11:00:30+01:00\n{HEADER},VRAM Total Memory (B)\ncard0,60,25,420.0,206158430208\n\n",
    )
    ingest_file(ledger, path, opts=NODE)
    assert _rows(
        ledger, "SELECT ts::VARCHAR, util_pct, mem_used_mib, mem_total_mib FROM samples ORDER BY ts"
    ) == [
        ("2025-03-01 10:00:00", 50.0, 49152.0, None),
        ("2025-03-01 10:00:30", 60.0, 49152.0, 196608.0),
    ]


def test_vram_percent_without_a_total_is_null(ledger, tmp_path):
    path = write(tmp_path, "pct.log", f"1740823200\n{HEADER}\ncard0,50,25,400.0\n")
    ingest_file(ledger, path, opts=NODE)
    assert _rows(ledger, "SELECT util_pct, mem_used_mib, power_w FROM samples") == [(50.0, None, 400.0)]


def test_a_value_outside_its_range_is_refused_with_its_line(ledger, tmp_path):
    path = write(tmp_path, "bad.log", f"1740823200\n{HEADER}\ncard0,50,25,400.0\ncard1,250,25,400.0\n")
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, path, opts=NODE)
    assert str(err.value) == f"{path}:4: GPU use (%) is 250%, above 100%"
    assert _rows(ledger, "SELECT count(*) FROM samples") == [(0,)]


def test_power_above_twice_an_mi300x_tdp_is_refused(ledger, tmp_path):
    header = f"{HEADER},Card Series"
    path = write(tmp_path, "w.log", f"1740823200\n{header}\ncard0,50,25,1600.0,AMD Instinct MI300X\n")
    with pytest.raises(
        FormatError, match=r":3: Current Socket Graphics Package Power \(W\) is 1,600 W, above 2 × TDP"
    ):
        ingest_file(ledger, path, opts=NODE)


@pytest.mark.parametrize(
    ("body", "line", "reason"),
    [
        (
            f"1740823200\n{HEADER}\ncard0,50,abc,400.0\n",
            3,
            "GPU Memory Allocated (VRAM%) is 'abc', not a number",
        ),
        (
            f"1740823200\n{HEADER}\ncard0,50,25\n",
            3,
            "the header at line 2 names 4 fields but this line has 3 values",
        ),
        (f"1740823200\n{HEADER}\nGPU0,50,25,400.0\n", 3, "the card is 'GPU0', not cardN or a GPU index"),
        ("card0,50,25,400.0\n" + f"{HEADER}\n", 1, "a data line before any header"),
        (
            f"{HEADER}\ncard0,50,25,400.0\n\n{HEADER}\ncard0,51,25,400.0\n",
            4,
            "a second rocm-smi block, but the log holds no time",
        ),
        (
            f"1740823200\n{HEADER}\ncard0,50,25,400.0\n{HEADER}\ncard0,51,25,400.0\n",
            5,
            "card node7:0 a second time",
        ),
        (
            f"epoch,{HEADER}\n1740823200,card0,50,25,400.0\nsoon,card0,50,25,400.0\n",
            3,
            "no time for this row",
        ),
    ],
)
def test_bad_lines_are_errors_naming_their_line(ledger, tmp_path, body, line, reason):
    path = write(tmp_path, "x.log", body)
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, path, opts=NODE)
    assert f"{path}:{line}: {reason}" in str(err.value)
    assert _rows(ledger, "SELECT count(*) FROM samples") == [(0,)]


def test_one_untimed_block_is_one_poll_at_the_files_time(ledger, tmp_path):
    path = write(tmp_path, "snap.csv", f"{HEADER}\ncard0,50,25,400.0\ncard1,0,1,100.0\n")
    import os

    os.utime(path, (1740823200, 1740823200))
    report = ingest_file(ledger, path, opts=NODE)
    assert report.skipped == {"rows timed by the file's modification time (no time in the log)": 2}
    assert _rows(ledger, "SELECT DISTINCT ts::VARCHAR FROM samples") == [("2025-03-01 10:00:00",)]
