"""gpustat --json logs: samples, GPUs and processes by hand, a bad value with its line, re-ingest.

The fixture (tests/fixtures/gpustat/gpustat_two_polls.json) is two polls appended, each written as gpustat's
``print_json`` writes (wookayin/gpustat gpustat/core.py: ``json.dump(o, fp, indent=4, separators=(',', ': '))``
of ``hostname``, ``driver_version``, ``query_time`` (``datetime.now()``, ISO) and ``gpus``; memory in MiB,
power in W, ``null`` where NVML does not support a reading)."""

from __future__ import annotations

import datetime as dt

import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.conftest import ROOT, write

FIXTURE = ROOT / "tests" / "fixtures" / "gpustat" / "gpustat_two_polls.json"
UTC = IngestOptions(tz="UTC")
G0, G1 = "GPU-8d4bd1c4-9a1e-4a36-b1a3-2e8f0c6e5a01", "GPU-3f0c2b9e-77d1-4c1b-9e55-a0b6d2c4e802"


def test_two_polls_land_samples_gpus_and_processes(ledger):
    report = ingest_file(ledger, FIXTURE, opts=UTC)
    assert report.format == "gpustat_json"  # auto-detected
    assert report.rows == {"samples": 4, "gpus": 2, "processes": 2}
    rows = ledger.execute(
        "SELECT ts, gpu_id, util_pct, mem_used_mib, mem_total_mib, power_w, temp_c FROM samples ORDER BY ts, gpu_id"
    ).fetchall()
    t0, t1 = dt.datetime(2025, 3, 1, 10, 0, 0, 512843), dt.datetime(2025, 3, 1, 10, 0, 30, 498120)
    assert rows == [
        (t0, G1, 0.0, 4.0, 81920.0, None, 33.0),  # power.draw null: no reading, not 0 W
        (t0, G0, 97.0, 71702.0, 81920.0, 312.0, 61.0),
        (t1, G1, 0.0, 4.0, 81920.0, None, 33.0),
        (t1, G0, 88.0, 71702.0, 81920.0, 298.0, 61.0),
    ]
    assert ledger.execute(
        "SELECT gpu_id, host, gpu_index, model FROM gpus ORDER BY gpu_index"
    ).fetchall() == [
        (G0, "dgx-07", 0, "A100-80GB"),
        (G1, "dgx-07", 1, "A100-80GB"),
    ]
    assert ledger.execute(
        "SELECT ts, gpu_id, pid, process_name, used_mem_mib FROM processes ORDER BY ts"
    ).fetchall() == [
        (t0, G0, 48211, "python", 71234.0),
        (t1, G0, 48211, "python", 71234.0),
    ]


def test_query_time_is_local_time_in_tz(ledger):
    ingest_file(ledger, FIXTURE, opts=IngestOptions(tz="Europe/Paris"))  # UTC+1 in March
    assert ledger.execute("SELECT min(ts) FROM samples").fetchall() == [
        (dt.datetime(2025, 3, 1, 9, 0, 0, 512843),)
    ]


def test_a_value_out_of_range_names_its_line_and_a_bad_one_its_entry(ledger, tmp_path):
    text = FIXTURE.read_text()
    hot = write(tmp_path, "hot.json", text.replace('"power.draw": 298', '"power.draw": 99999', 1))
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, hot, opts=UTC)
    assert err.value.line == 66 and "99,999" in err.value.reason, err.value
    bad = write(tmp_path, "bad.json", text.replace('"utilization.gpu": 88', '"utilization.gpu": "busy"', 1))
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, bad, opts=UTC)
    assert (err.value.line, err.value.reason) == (59, "\"utilization.gpu\" is not a number: 'busy'")
    cut = write(tmp_path, "cut.json", text[: len(text) * 3 // 4])
    with pytest.raises(FormatError, match="not valid JSON"):
        ingest_file(ledger, cut, opts=UTC)
    assert ledger.execute("SELECT count(*) FROM ingests").fetchall() == [(0,)]


def test_reingest_is_a_noop(ledger):
    ingest_file(ledger, FIXTURE, opts=UTC)
    assert ingest_file(ledger, FIXTURE, opts=UTC).already
    assert ledger.execute("SELECT count(*) FROM samples").fetchall() == [(4,)]
