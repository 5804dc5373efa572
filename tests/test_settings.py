"""Settings: defaults, overrides, and one clear error naming the key for every kind of mistake."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuledger.ledger.db import sync_reference
from gpuledger.ledger.errors import SettingsError
from gpuledger.ledger.reference import effective_prices, normalize_model
from gpuledger.ledger.settings import Settings, load_settings
from tests.conftest import ROOT, write


def test_example_settings_file_is_valid_and_equals_defaults():
    loaded = load_settings(ROOT / "data" / "settings.example.toml")
    assert loaded.fingerprint() == Settings().fingerprint()


def test_overrides_are_read(tmp_path):
    path = write(
        tmp_path,
        "s.toml",
        "[thresholds]\nidle_util_pct = 2\n[energy]\nusd_per_kwh = 0.3\n"
        '[[price]]\ngpu_model = "T4"\ntier = "on_demand"\nusd_per_gpu_hour = 0.4\neffective_from = 2026-01-01\nsource = "ours"\n'
        '[clusters.lab]\ntier = "on_prem"\ncapacity = [{ gpu_model = "T4", gpu_count = 4 }]\n',
    )
    s = load_settings(path)
    assert (s.idle_util_pct, s.usd_per_kwh) == (2.0, 0.3)
    assert s.clusters["lab"].tier == "on_prem" and s.clusters["lab"].capacity[0].gpu_count == 4
    t4 = sorted(
        (p.effective_from.isoformat(), p.usd_per_gpu_hour)
        for p in effective_prices(s)
        if p.gpu_model == "T4" and p.tier == "on_demand"
    )
    assert t4 == [("2025-01-01", 0.526), ("2026-01-01", 0.4)]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[thresholds]\nidle_util_pct = 'low'\n", "thresholds.idle_util_pct"),
        ("[thresholds]\nidle_util_pct = 150\n", "thresholds.idle_util_pct"),
        ("[thresholds]\nidle_pct = 5\n", "thresholds.idle_pct"),
        ("[thresholds]\nidle_util_pct = 70\ntarget_util_pct = 60\n", "thresholds.idle_util_pct"),
        ("[energy]\nusd_per_kwh = -1\n", "energy.usd_per_kwh"),
        ("[pricing]\ndefault_tier = 'cheap'\n", "pricing.default_tier"),
        (
            "[[price]]\ngpu_model = 'T4'\ntier = 'on_demand'\neffective_from = 2026-01-01\nsource = 'x'\n",
            "price[0].usd_per_gpu_hour",
        ),
        (
            "[[price]]\ngpu_model = 'T4'\ntier = 'on_demand'\nusd_per_gpu_hour = 1\neffective_from = 'soon'\nsource = 'x'\n",
            "price[0].effective_from",
        ),
        ("[clusters.lab]\ntier = 'free'\n", "clusters.lab.tier"),
        ("[colors]\nx = 1\n", "colors"),
        ("[thresholds\n", "(syntax)"),
    ],
    ids=[
        "not-a-number",
        "out-of-range",
        "unknown-key",
        "idle-above-target",
        "negative",
        "bad-tier",
        "price-missing-field",
        "price-bad-date",
        "cluster-bad-tier",
        "unknown-section",
        "toml-syntax",
    ],
)
def test_invalid_settings_name_the_key(tmp_path, text, key):
    path = write(tmp_path, "s.toml", text)
    with pytest.raises(SettingsError) as err:
        load_settings(path)
    assert f"setting {key!r}" in str(err.value) and str(path) in str(err.value)


def test_price_for_unknown_gpu_model_is_rejected_when_applied(tmp_path, db_path):
    path = write(
        tmp_path,
        "s.toml",
        "[[price]]\ngpu_model = 'Z9000'\ntier = 'on_demand'\nusd_per_gpu_hour = 1\neffective_from = 2026-01-01\nsource = 'x'\n",
    )
    with pytest.raises(SettingsError, match=r"'price\[0\].gpu_model'.*not in the GPU catalog"):
        sync_reference(db_path, load_settings(path))


def test_cli_bad_settings_is_one_line_exit_1_db_untouched(tmp_path):
    import hashlib

    db = tmp_path / "l.duckdb"
    jobs = write(
        tmp_path,
        "j.csv",
        "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state\nj,a,t,c,T4,1,2025-01-01,2025-01-02,COMPLETED\n",
    )
    run = [sys.executable, "-m", "gpuledger", "ingest", "--db", str(db)]
    assert subprocess.run([*run, str(jobs)], capture_output=True, check=False).returncode == 0
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    bad = write(tmp_path, "bad.toml", "[energy]\nusd_per_kwh = 'cheap'\n")
    result = subprocess.run(
        [*run, "--settings", str(bad), str(jobs)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert (
        result.stderr.strip() == f"error: {bad}: setting 'energy.usd_per_kwh': must be a number, got 'cheap'"
    )
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


@pytest.mark.parametrize(
    ("reported", "model"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM-80GB"),
        ("NVIDIA H100 PCIe", "H100-PCIe-80GB"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("a100_3g.20gb", "A100-40GB"),
        ("Tesla T4", "T4"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("Tesla V100-SXM2-32GB", "V100-32GB"),
        ("V100M16", "V100-16GB"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("AMD Instinct MI300X", "MI300X"),
        ("Matrox G200", None),
    ],
)
def test_reported_gpu_names_map_to_catalog_models(reported, model):
    assert normalize_model(reported) == model


READING_COMMANDS = [
    ["summary", "--json"],
    ["jobs", "--json"],
    ["recommend", "--json"],
    ["whatif", "--json"],
    ["report", "--week", "2026-W07", "--format", "md"],
    ["notify", "--week", "2026-W07", "--dry-run"],
]


@pytest.mark.parametrize("command", READING_COMMANDS, ids=[c[0] for c in READING_COMMANDS])
def test_every_reading_command_syncs_the_rollups_to_its_settings_thresholds(tmp_path, command):
    """The analytics read only the rollups and raise RollupMismatch when they were built for other thresholds
    (analytics/telemetry_source.py), so each command that reads syncs the ledger to its settings first: a
    ledger ingested with the defaults (5 %, 30 min, 60 %) is rebuilt for the settings' 2 %, 10 min, 70 %."""
    import shutil

    import duckdb

    from gpuledger.ledger.rollup_thresholds import stored_thresholds

    db = tmp_path / "l.duckdb"
    smi = ROOT / "tests" / "fixtures" / "nvidia_smi" / "full_fields_h200.csv"
    run = [sys.executable, "-m", "gpuledger"]
    ingest = subprocess.run([*run, "ingest", "--db", str(db), str(smi)], capture_output=True, check=False)
    assert ingest.returncode == 0, ingest.stderr
    with duckdb.connect(str(db), read_only=True) as con:
        assert stored_thresholds(con) == (5.0, 30.0, 60.0)
    copy = tmp_path / "c.duckdb"
    shutil.copy(db, copy)
    custom = write(
        tmp_path, "s.toml", "[thresholds]\nidle_util_pct = 2\nidle_min_minutes = 10\ntarget_util_pct = 70\n"
    )
    result = subprocess.run(
        [*run, *command, "--db", str(copy), "--settings", str(custom)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    with duckdb.connect(str(copy), read_only=True) as con:
        assert stored_thresholds(con) == (2.0, 10.0, 70.0)
