"""The Prometheus text reader (collectors/dcgm.py read_exposition) against prometheus_client's own parsers,
the Prometheus text one and the OpenMetrics one, on generated expositions (issue 48): every sample line gives
the same name, labels (escapes undone), value (NaN, +Inf and -Inf included) and time; OpenMetrics timestamps
are seconds with a fraction, and exemplars are read past. Then the rule for non-finite values at ingest:
NaN is a missing reading (NULL), ±Inf of a stored metric is refused with its line."""

from __future__ import annotations

import datetime as dt
import math
import random
from pathlib import Path

import duckdb
import pytest

from collectors.dcgm import read_exposition
from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.conftest import write

prometheus_parser = pytest.importorskip("prometheus_client.parser")
openmetrics_parser = pytest.importorskip("prometheus_client.openmetrics.parser")

GAUGES = [
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_POWER_USAGE",
    "dcgm_gpu_temp",
    "node_load1",
]
VALUES = ["0", "97", "1.5", "-2.5e3", "6.02E23", "1e-7", "NaN", "+Inf", "-Inf", "300.25"]
LABEL_VALUES = [
    "0",
    "GPU-5f6e-1",
    "a b",
    'say "hi"',
    "back\\slash",
    "two\nlines",
    "}# not an exemplar",
    "",
    "é",
]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(rng: random.Random, i: int) -> dict[str, str]:
    names = rng.sample(["Hostname", "modelName", "pod", "device", "le_x", "job"], rng.randint(0, 3))
    return {"UUID": f"GPU-{i}", **{n: rng.choice(LABEL_VALUES) for n in names}}


def _sample(name: str, labels: dict[str, str], value: str, ts: str | None, exemplar: str = "") -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return f"{name}{{{inner}}} {value}" + (f" {ts}" if ts else "") + exemplar


def prometheus_text(seed: int) -> str:
    """Families of gauges, several series each, integer-millisecond timestamps, # HELP and # TYPE lines."""
    rng = random.Random(seed)
    lines = []
    for name in rng.sample(GAUGES, 3):
        lines += [f"# HELP {name} a gauge", f"# TYPE {name} gauge"]
        for i in range(rng.randint(1, 4)):
            ts = str(1_700_000_000_000 + rng.randrange(0, 10**9))
            lines.append(_sample(name, _labels(rng, i), rng.choice(VALUES), ts))
    return "\n".join(lines) + "\n"


def openmetrics_text(seed: int) -> str:
    """OpenMetrics: gauges and a counter, seconds with a fraction, exemplars on the counter, # EOF."""
    rng = random.Random(seed)
    lines = []
    for name in rng.sample(GAUGES, 2):
        lines.append(f"# TYPE {name} gauge")
        for i in range(rng.randint(1, 3)):
            ts = f"{1_700_000_000 + rng.randrange(0, 10**6)}.{rng.randrange(0, 1000):03d}"
            lines.append(_sample(name, _labels(rng, i), rng.choice(VALUES), ts))
    energy = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    lines.append(f"# TYPE {energy} counter")
    for i in range(rng.randint(1, 3)):
        ts = f"{1_700_000_000 + i}.{rng.randrange(0, 1000):03d}"
        trace = f' # {{trace_id="{rng.getrandbits(64):016x}"}} {rng.randint(1, 9)}.5 {1_700_000_000 + i}.25'
        lines.append(_sample(f"{energy}_total", _labels(rng, i), str(rng.randint(0, 10**9)), ts, trace))
    return "\n".join([*lines, "# EOF"]) + "\n"


def _ours(path: Path) -> list[tuple]:
    con = duckdb.connect()
    read_exposition(con, path)
    rows = con.execute(
        "SELECT metric, map_entries(labels), value, ts FROM prom_long ORDER BY line_no"
    ).fetchall()
    return [
        (m, tuple(sorted((e["key"], e["value"]) for e in labels)), v, ts.replace(tzinfo=dt.UTC).timestamp())
        for m, labels, v, ts in rows
    ]


def _reference(text: str, parser) -> list[tuple]:
    out = []
    for family in parser.text_string_to_metric_families(text):
        for s in family.samples:
            ts = s.timestamp
            seconds = ts.sec + ts.nsec / 1e9 if hasattr(ts, "sec") else ts
            out.append((s.name, tuple(sorted(s.labels.items())), s.value, seconds))
    return out


def _same(ours: list[tuple], ref: list[tuple]) -> None:
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref, strict=True):
        assert a[:2] == b[:2]
        assert (math.isnan(a[2]) and math.isnan(b[2])) or a[2] == b[2], (a, b)
        assert a[3] == pytest.approx(b[3], abs=1e-6), (a, b)


@pytest.mark.parametrize("seed", range(20))
def test_prometheus_text_reads_as_prometheus_client_reads_it(tmp_path, seed):
    text = prometheus_text(seed)
    _same(_ours(write(tmp_path, "m.prom", text)), _reference(text, prometheus_parser))


@pytest.mark.parametrize("seed", range(20))
def test_openmetrics_reads_as_prometheus_client_reads_it(tmp_path, seed):
    text = openmetrics_text(seed)
    assert " # {trace_id=" in text and "# EOF" in text
    _same(_ours(write(tmp_path, "m.om", text)), _reference(text, openmetrics_parser))


def test_the_generators_cover_the_edge_values():
    texts = [prometheus_text(s) for s in range(20)] + [openmetrics_text(s) for s in range(20)]
    joined = "\n".join(texts)
    for needle in (" NaN ", " +Inf ", " -Inf ", "\\n", '\\"', "\\\\", "}# not an exemplar"):
        assert needle in joined, needle


# ---------------------------------------------------------------- the rule for NaN and ±Inf at ingest

L0 = 'gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3",Hostname="n1"'
T1 = 1_740_823_200_000  # 2025-03-01 10:00:00 UTC in ms


def test_nan_is_a_missing_reading_and_the_other_values_land(ledger, tmp_path):
    text = f"DCGM_FI_DEV_GPU_UTIL{{{L0}}} NaN {T1}\nDCGM_FI_DEV_POWER_USAGE{{{L0}}} 250.5 {T1}\n"
    report = ingest_file(ledger, write(tmp_path, "m.prom", text), fmt="dcgm")
    assert report.skipped == {}  # stored, as a missing reading: not a skip (docs/formats-telemetry.md)
    assert ledger.execute("SELECT util_pct, power_w FROM samples").fetchall() == [(None, 250.5)]


@pytest.mark.parametrize("value", ["+Inf", "-Inf"])
def test_an_infinite_reading_is_refused_with_its_line(ledger, tmp_path, value):
    text = (
        f"# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{{{L0}}} 50 {T1}\n"
        f"DCGM_FI_DEV_POWER_USAGE{{{L0}}} {value} {T1}\n"
    )
    with pytest.raises(FormatError) as err:
        ingest_file(ledger, write(tmp_path, "m.prom", text), fmt="dcgm")
    assert (err.value.line, err.value.reason) == (
        3,
        f"DCGM_FI_DEV_POWER_USAGE is {value}: no GPU reading is infinite",
    )
    assert ledger.execute("SELECT count(*) FROM ingests").fetchall() == [(0,)]


def test_an_infinite_value_of_a_metric_not_stored_is_counted_with_them(ledger, tmp_path):
    text = f"DCGM_FI_DEV_GPU_UTIL{{{L0}}} 50 {T1}\nsome_histogram_sum{{{L0}}} +Inf {T1}\n"
    report = ingest_file(ledger, write(tmp_path, "m.prom", text), fmt="dcgm")
    assert report.skipped == {"values of metrics the ledger does not store": 1}


def test_openmetrics_seconds_with_a_fraction_and_an_exemplar_land_at_their_time(ledger, tmp_path):
    text = (
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        f"DCGM_FI_DEV_GPU_UTIL{{{L0}}} 42 1740823200.250\n"
        f'DCGM_FI_DEV_POWER_USAGE{{{L0}}} 300 1740823200.250 # {{trace_id="ab"}} 1.0\n'
        "# EOF\n"
    )
    ingest_file(ledger, write(tmp_path, "m.om", text), fmt="dcgm")
    assert ledger.execute("SELECT ts, util_pct, power_w FROM samples").fetchall() == [
        (dt.datetime(2025, 3, 1, 10, 0, 0, 250_000), 42.0, 300.0)
    ]


def test_a_fraction_of_a_millisecond_without_eof_says_what_it_would_be(ledger, tmp_path):
    text = f"DCGM_FI_DEV_GPU_UTIL{{{L0}}} 42 1740823200.250\n"
    with pytest.raises(FormatError, match=r"m\.prom:1: the timestamp is not milliseconds since 1970: "):
        ingest_file(ledger, write(tmp_path, "m.prom", text), fmt="dcgm")
