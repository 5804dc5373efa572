"""$ per unit of work and MFU, worked out by hand; missing inputs give NULL with a reason."""

from __future__ import annotations

import pytest

from analytics.unit_costs import job_unit_costs
from tests.analytics.build import ingest, job, set_test_prices


def _run(job_id: str, **fields):
    return {"job_id": job_id, "source": "test", **fields}


def test_unit_costs_and_mfu_by_hand(ledger):
    set_test_prices(ledger)
    ingest(
        ledger,
        jobs=[job("t", 0, 600, gpu_count=8.0), job("i", 0, 60, kind="inference")],
        training_runs=[
            # 7e9 params, bf16 on 8 × H100 (989.4 TFLOP/s each), 32 layers, hidden 4096, seq 4096.
            _run(
                "t",
                params=7.0e9,
                precision="bf16",
                n_layers=32,
                hidden_size=4096,
                seq_len=4096,
                tokens_per_s=100_000.0,
                epochs=2.0,
                samples=1.0e6,
            ),
            _run("i", generated_tokens=5.0e6, requests=20_000.0),
        ],
    )
    rows = {r["job_id"]: r for r in job_unit_costs(ledger).iter_rows(named=True)}
    t = rows["t"]
    cost = 8 * 10 * 4.0  # 8 GPUs × 10 h × $4 = $320
    tokens = 100_000 * 10 * 3600  # tokens/s × runtime = 3.6e9
    assert t["tokens"] == pytest.approx(tokens)
    assert t["tokens_per_s_per_gpu"] == pytest.approx(12_500)
    assert t["usd_per_mtok"] == pytest.approx(cost / tokens * 1e6)  # $0.0889
    assert t["usd_per_epoch"] == pytest.approx(cost / 2)
    assert t["usd_per_ksamples"] == pytest.approx(cost / 1e6 * 1e3)
    fpt = 6 * 7.0e9 + 12 * 32 * 4096 * 4096
    assert t["flops_per_token"] == pytest.approx(fpt)
    assert t["mfu"] == pytest.approx(100_000 * fpt / (8 * 989.4e12))  # ≈ 0.551
    assert t["mfu_reason"] is None
    i = rows["i"]
    assert i["usd_per_mtok_generated"] == pytest.approx(4.0 / 5.0)  # $4 / 5 M tokens
    assert i["usd_per_krequests"] == pytest.approx(4.0 / 20)
    assert i["mfu"] is None and i["mfu_reason"] == "no token count or tokens/s logged"


@pytest.mark.parametrize(
    ("run", "reason"),
    [
        ({"tokens_per_s": 1000.0, "precision": "bf16"}, "parameter count unknown"),
        ({"tokens_per_s": 1000.0, "params": 1e9}, "precision unknown"),
        ({"tokens_per_s": 1000.0, "params": 1e9, "precision": "tf32"}, "no catalog peak for precision tf32"),
        ({"params": 1e9, "precision": "bf16"}, "no token count or tokens/s logged"),
    ],
    ids=["no-params", "no-precision", "tf32", "no-tokens"],
)
def test_missing_inputs_give_null_mfu_with_reason(ledger, run, reason):
    ingest(ledger, jobs=[job("t", 0, 60)], training_runs=[_run("t", **run)])
    row = job_unit_costs(ledger).row(0, named=True)
    assert row["mfu"] is None and row["mfu_reason"] == reason


def test_bf16_on_a_card_without_bf16_and_no_metrics(ledger):
    ingest(
        ledger,
        jobs=[job("t4", 0, 60, gpu_model="T4"), job("bare", 0, 60)],
        training_runs=[_run("t4", tokens_per_s=10.0, params=1e8, precision="bf16")],
    )
    rows = {r["job_id"]: r for r in job_unit_costs(ledger).iter_rows(named=True)}
    assert rows["t4"]["mfu_reason"] == "the catalog has no bf16 peak for T4"
    assert rows["bare"]["mfu_reason"] == "no training metrics for this job"
    assert rows["bare"]["unit_cost_reason"] == "no training metrics for this job"
