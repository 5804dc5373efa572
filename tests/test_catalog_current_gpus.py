"""The current GPUs of issue 36 in the catalog and the price sheet: found from the names real sources write,
with a source for every figure, and an 8 × B200 W&B run lands priced (cost worked by hand)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from analytics.cost import job_costs
from collectors.ingest import ingest_file
from gpuledger.ledger.reference import catalog, normalize_model, shipped_prices
from tests.conftest import write

NEW = ("B200", "GB200", "B300", "H20", "L20", "RTX-PRO-6000-Blackwell", "MI325X", "MI355X")


@pytest.mark.parametrize(
    ("reported", "model"),
    [
        ("NVIDIA B200", "B200"),  # nvidia-smi / W&B metadata
        ("NVIDIA GB200", "GB200"),
        ("gb200", "GB200"),  # a Slurm gres type
        ("b200", "B200"),
        ("NVIDIA B300 SXM6 AC", "B300"),
        ("NVIDIA H20", "H20"),
        ("NVIDIA L20", "L20"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000-Blackwell"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX-PRO-6000-Blackwell"),
        ("AMD Instinct MI325X", "MI325X"),
        ("AMD Instinct MI355X", "MI355X"),
        # the new patterns take nothing from the cards that were there
        ("NVIDIA H200", "H200"),
        ("NVIDIA GH200 480GB", "H200"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM-80GB"),
        ("NVIDIA RTX A6000", "RTX-A6000"),
        ("NVIDIA L40S", "L40S"),
        ("AMD Instinct MI300X", "MI300X"),
    ],
)
def test_real_names_find_their_model(reported, model):
    assert normalize_model(reported) == model


def test_sql_matching_agrees_with_python(ledger):
    from gpuledger.ledger.reference import model_sql_case

    names = ["NVIDIA B200", "NVIDIA GB200", "AMD Instinct MI325X", "NVIDIA H20", "NVIDIA H200", "NVIDIA L20"]
    got = ledger.execute(f"SELECT n, {model_sql_case('n')} FROM unnest(?) t(n)", [names]).fetchall()
    assert dict(got) == {n: normalize_model(n) for n in names}


def test_each_new_card_has_memory_tdp_dense_peaks_and_a_source():
    models = {m.model: m for m in catalog()}
    for name in NEW:
        m = models[name]
        assert m.memory_mib > 0 and m.tdp_w > 0 and m.source
        assert m.bf16_tflops and m.fp16_tflops and m.fp8_tflops, name
        # dense fp8 is twice dense bf16 on every one of these cards
        assert m.fp8_tflops == pytest.approx(2 * m.bf16_tflops, rel=0.01), name
        if m.tf32_tflops is not None:
            assert m.tf32_tflops == pytest.approx(m.bf16_tflops / 2, rel=0.01), name


def test_b200_and_gb200_have_dated_prices_with_a_source():
    rows = {(p.gpu_model, p.tier): p for p in shipped_prices()}
    for model in ("B200", "GB200"):
        for tier in ("on_demand", "spot"):
            row = rows[(model, tier)]
            assert row.source and row.source_date is not None
    assert rows[("GB200", "on_demand")].usd_per_gpu_hour == pytest.approx(42.00 / 4)


def test_an_8_x_b200_wandb_run_lands_priced(ledger, tmp_path):
    run = tmp_path / "run-20250901_100000-b2x8" / "files"
    run.mkdir(parents=True)
    meta = {
        "host": "b200-node-3",
        "startedAt": "2025-09-01T10:00:00.000000Z",
        "heartbeatAt": "2025-09-01T12:00:00.000000Z",
        "gpu": "NVIDIA B200",
        "gpu_count": 8,
    }
    ingest_file(ledger, write(run, "wandb-metadata.json", json.dumps(meta, indent=2)))
    assert ledger.execute("SELECT gpu_model, gpu_count FROM jobs").fetchall() == [("B200", 8.0)]
    costs = job_costs(ledger, as_of=dt.datetime(2025, 9, 2))
    # 8 GPUs × 2 h × $4.99 on-demand (Lambda, data/prices.toml) = $79.84
    assert costs.select("cost_usd").to_series().to_list() == [pytest.approx(8 * 2 * 4.99)]
