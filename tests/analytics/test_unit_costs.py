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
    # generated tokens alone are the inference job's work; MFU then lacks only the parameter count
    assert i["tokens"] == pytest.approx(5.0e6)
    assert i["mfu"] is None and i["mfu_reason"] == "parameter count unknown"


def test_inference_mfu_is_2n_per_generated_token_by_hand(ledger):
    # 7e9 parameters, 36,000,000 generated tokens in 1 h on one H100 SXM (bf16 dense peak 989.4 TFLOP/s):
    # 36e6 / 3600 s = 1e4 tokens/s; MFU = 2 · 7e9 · 1e4 / 989.4e12 = 0.14150
    set_test_prices(ledger)
    ingest(
        ledger,
        jobs=[job("serve", 0, 60, kind="inference"), job("train", 0, 60)],
        training_runs=[
            _run("serve", params=7.0e9, precision="bf16", generated_tokens=36_000_000.0),
            _run("train", params=7.0e9, precision="bf16", tokens=36_000_000.0),
        ],
    )
    rows = {r["job_id"]: r for r in job_unit_costs(ledger).iter_rows(named=True)}
    serve = rows["serve"]
    assert serve["mfu_basis"] == "inference"
    assert serve["flops_per_token"] == pytest.approx(2 * 7.0e9)
    assert serve["tokens_per_s"] == pytest.approx(1.0e4)
    assert serve["mfu"] == pytest.approx(0.1415, abs=5e-5)
    assert serve["mfu"] == pytest.approx(2 * 7.0e9 * 1.0e4 / 989.4e12)
    assert serve["usd_per_mtok_generated"] == pytest.approx(4.0 / 36)  # $4 for 1 h / 36 M tokens
    # the same count as training tokens is 6·N per token: 3 × the inference figure
    assert rows["train"]["mfu_basis"] == "training"
    assert rows["train"]["mfu"] == pytest.approx(6 * 7.0e9 * 1.0e4 / 989.4e12)  # 0.4245


def test_inference_attention_term_is_the_forward_third(ledger):
    ingest(
        ledger,
        jobs=[job("serve", 0, 60, kind="inference")],
        training_runs=[
            _run(
                "serve",
                params=7.0e9,
                precision="bf16",
                n_layers=32,
                hidden_size=4096,
                seq_len=2048,
                tokens=7.2e7,  # prompt + generated: preferred over the 3.6e7 generated
                generated_tokens=3.6e7,
            )
        ],
    )
    row = job_unit_costs(ledger).row(0, named=True)
    fpt = 2 * 7.0e9 + 4 * 32 * 4096 * 2048  # 1.4e10 + 1.074e9
    assert row["flops_per_token"] == pytest.approx(fpt)
    assert row["tokens_per_s"] == pytest.approx(7.2e7 / 3600)  # 2e4 processed tokens/s
    assert row["mfu"] == pytest.approx(2.0e4 * fpt / 989.4e12)  # ≈ 0.3047


@pytest.mark.parametrize(
    ("run", "reason"),
    [
        ({"tokens_per_s": 1000.0, "precision": "bf16"}, "parameter count unknown"),
        ({"tokens_per_s": 1000.0, "params": 1e9, "precision": "int8"}, "no catalog peak for precision int8"),
        ({"params": 1e9, "precision": "bf16"}, "no token count or tokens/s logged"),
    ],
    ids=["no-params", "int8", "no-tokens"],
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


@pytest.mark.parametrize(
    ("precision", "gpu_model", "peak", "basis"),
    [
        # no precision logged: bf16 assumed, and said so (H100 SXM dense bf16 989.4 TFLOP/s)
        (None, "H100-SXM-80GB", 989.4, "training, bf16 assumed"),
        # fp8 and tf32 take their own dense peaks (H100 SXM: 1,978.9 and 494.7; B200: 4,500)
        ("fp8", "H100-SXM-80GB", 1978.9, "training"),
        ("tf32", "H100-SXM-80GB", 494.7, "training"),
        ("fp8", "B200", 4500.0, "training"),
        (None, "B200", 2250.0, "training, bf16 assumed"),
    ],
    ids=["assumed-bf16", "fp8", "tf32", "fp8-b200", "assumed-bf16-b200"],
)
def test_mfu_peak_for_the_precision_and_bf16_when_none_is_logged(ledger, precision, gpu_model, peak, basis):
    ingest(
        ledger,
        jobs=[job("t", 0, 60, gpu_model=gpu_model, gpu_count=8.0)],
        training_runs=[_run("t", tokens_per_s=50_000.0, params=7.0e9, precision=precision)],
    )
    row = job_unit_costs(ledger).row(0, named=True)
    # 50,000 tokens/s × 6 × 7e9 FLOPs/token = 2.1e15 FLOP/s over 8 GPUs
    assert row["mfu"] == pytest.approx(50_000 * 6 * 7.0e9 / (8 * peak * 1e12))
    assert row["peak_tflops"] == pytest.approx(peak)
    assert row["mfu_basis"] == basis
    assert row["precision"] == (precision or "bf16")


def test_weekly_usd_per_mtok_by_team_by_hand_and_by_plain_sql(ledger):
    """At the test price ($4/GPU-h): nlp's a (2 GPUs × 10 h = $80, 1e9 tokens) and b (1 GPU × 5 h = $20,
    1e9 tokens) start in T0's week: ($80 + $20) / 2e9 × 1e6 = $0.05 per 1M tokens; vision's v, 8 days
    later (the next week), 1 GPU × 10 h = $40 for 4e8 tokens = $0.10; the inference job is left out."""
    import datetime as dt

    from analytics.unit_costs import weekly_usd_per_mtok
    from tests.analytics.build import T0

    set_test_prices(ledger)
    day = 24 * 60
    ingest(
        ledger,
        jobs=[
            job("a", 0, 600, gpu_count=2.0),
            job("b", 60, 360),
            job("v", 8 * day, 8 * day + 600, team="vision"),
            job("i", 0, 600, kind="inference"),
        ],
        training_runs=[
            _run("a", tokens=1.0e9),
            _run("b", tokens=1.0e9),
            _run("v", tokens=4.0e8),
            _run("i", tokens=1.0e9, generated_tokens=1.0e8),
        ],
    )
    got = {(r["week"], r["team"]): r for r in weekly_usd_per_mtok(ledger).iter_rows(named=True)}
    monday = (T0 - dt.timedelta(days=T0.weekday())).date()
    assert got.keys() == {(monday, "nlp"), (monday + dt.timedelta(days=7), "vision")}
    assert got[(monday, "nlp")]["usd_per_mtok"] == pytest.approx(100 / 2e9 * 1e6)
    assert got[(monday, "nlp")]["runs"] == 2
    assert got[(monday + dt.timedelta(days=7), "vision")]["usd_per_mtok"] == pytest.approx(40 / 4e8 * 1e6)
    # the same sums in plain SQL over jobs and training_runs (every job whole in the view, one price)
    plain = ledger.execute(
        """SELECT CAST(date_trunc('week', j.start_ts) AS DATE), j.team,
                  sum(j.gpu_count * epoch(j.end_ts - j.start_ts) / 3600 * 4.0) / sum(tr.tokens) * 1e6
           FROM jobs j JOIN training_runs tr USING (job_id) WHERE j.kind <> 'inference' GROUP BY ALL"""
    ).fetchall()
    assert {(w, t): v for w, t, v in plain} == pytest.approx({k: r["usd_per_mtok"] for k, r in got.items()})
