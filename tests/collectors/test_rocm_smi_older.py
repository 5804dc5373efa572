"""Older ``amd-smi metric --csv`` names (ROCm/amdsmi CLI 0.0.1–2023: gfx_usage, mem_usage, fb_total, fb_used,
current_power/average_socket_power, edge_temperature) read through the one alias table of
collectors/rocm_smi.py. ``amd_smi_metric_older_names.csv`` is hand-written in the header order of
``amdsmi_cli/amdsmi_commands.py`` @ 6dcfd4a (usage, fb_usage, power, temperature; values of one card)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from collectors.rocm_smi import read_header
from gpuledger.ledger.errors import FormatError
from tests.conftest import write

FIXTURES = Path(__file__).parent.parent / "fixtures" / "rocm_smi"
NODE = IngestOptions(tz="UTC", host="node3")


def test_older_amd_smi_names_land_98_pct_and_363_of_14928_mib(ledger):
    """One card: gfx_usage 98 → util 98 %; mem_usage 41 (umc activity) → mem_util 41 %; fb_used 363 of
    fb_total 14928 MB → 363 / 14,928 MiB; current_power N/A, so average_socket_power 187 W; edge 61 C."""
    report = ingest_file(ledger, FIXTURES / "amd_smi_metric_older_names.csv", opts=NODE)
    assert report.format == "rocm_smi"
    assert report.rows == {"samples": 1, "gpus": 1}
    assert ledger.execute(
        "SELECT gpu_id, util_pct, mem_util_pct, mem_used_mib, mem_total_mib, power_w, temp_c FROM samples"
    ).fetchall() == [("node3:0", 98.0, 41.0, 363.0, 14928.0, 187.0, 61.0)]
    assert "rows timed by the file's modification time (no time in the log)" in report.skipped


@pytest.mark.parametrize(
    ("header", "kind"),
    [
        ("gfx_usage", "util"),
        ("mem_usage", "mem_util"),
        ("fb_total", "total_mib"),
        ("fb_used", "used_mib"),
        ("vram_total", "total_mib"),
        ("vram_used", "used_mib"),
        ("power", "power"),
        ("current_power", "power"),
        ("average_power", "power"),
        ("average_socket_power", "power"),
        ("current_socket_power", "power"),
        ("edge_temperature", "temp_edge"),
        ("hotspot_temperature", "temp_junction"),
    ],
)
def test_each_older_name_is_an_alias(header, kind):
    assert read_header(f"gpu,{header}").pos == {"card": 1, kind: 2}


def test_the_first_alias_holding_a_reading_wins_per_row(ledger, tmp_path):
    """Row 1: current_power 300 (first alias) → 300 W; row 2: current_power N/A → average_socket_power 150."""
    text = "timestamp,gpu,current_power,average_socket_power\n1740823200,0,300,290\n1740823200,1,N/A,150\n"
    ingest_file(ledger, write(tmp_path, "p.csv", text), opts=NODE)
    assert ledger.execute("SELECT gpu_id, power_w FROM samples ORDER BY 1").fetchall() == [
        ("node3:0", 300.0),
        ("node3:1", 150.0),
    ]


def test_an_unreadable_value_under_the_second_alias_names_it(ledger, tmp_path):
    text = "timestamp,gpu,current_power,average_socket_power\n1740823200,0,N/A,lots\n"
    with pytest.raises(FormatError, match="average_socket_power is 'lots', not a number") as err:
        ingest_file(ledger, write(tmp_path, "p.csv", text), opts=NODE)
    assert err.value.line == 2


def test_a_card_index_too_large_for_a_node_names_its_line(ledger, tmp_path):
    """Found by bench/fuzz.py (readers_round3, seed 4, input 10): a gpu of 9223372036854775807 was a DuckDB
    conversion error ("could not be read"); an index of more than 5 digits is no card a node holds."""
    text = "gpu,gfx_usage,fb_total,fb_used\n9223372036854775807,98,14928,363\n"
    with pytest.raises(
        FormatError, match="the card is '9223372036854775807', not cardN or a GPU index"
    ) as err:
        ingest_file(ledger, write(tmp_path, "a.csv", text), opts=NODE)
    assert err.value.line == 2
