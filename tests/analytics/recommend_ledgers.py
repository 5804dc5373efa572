"""Hand-built ledgers for the diagnoses / batch-size / recommendation tests (landed through the real
write path by tests.analytics.build.ingest).

Round test prices, so every dollar figure in the tests can be worked out by hand:
H100-SXM-80GB on_demand $3.00/GPU-h, spot $1.50; A100-80GB on_demand $2.00; L40S on_demand $1.00;
L4 on_demand $0.50. No other model has a price.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import duckdb

from tests.analytics.build import H100, T0, alloc, at, ingest, job, series

A100 = "A100-80GB"
PRICES = [
    (H100, "on_demand", 3.0),
    (H100, "spot", 1.5),
    (A100, "on_demand", 2.0),
    ("L40S", "on_demand", 1.0),
    ("L4", "on_demand", 0.5),
]
EARLIER = -30 * 24 * 60  # minutes: a month before T0, outside a view of T0's day


def set_prices(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("DELETE FROM prices")
    for model, tier, usd in PRICES:
        con.execute(
            "INSERT INTO prices VALUES (?, ?, NULL, DATE '2025-01-01', ?, 'test price', DATE '2025-01-01', 'sheet', NULL)",
            [model, tier, usd],
        )


def _gpus_job(job_id: str, host: str, n: int, start: float, end: float) -> list[dict[str, Any]]:
    return [alloc(job_id, f"{host}:{i}", start, end) for i in range(n)]


def run(job_id: str, **fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"job_id": job_id, "source": "test"}
    row.update(fields)
    return row


def recommend_ledger(con: duckdb.DuckDBPyConnection) -> None:
    """Jobs on T0's day, one per recommendation kind (see tests/analytics/test_recommend.py)."""
    set_prices(con)
    jobs = [
        # notebook: 2 h at 50 %, then 8 h at 1 % (one idle stretch of 8 h)
        job("nb1", 0, 600, kind="interactive", name="notebook-idle-1"),
        # bob's notebook on an A100: 4 h at 15 %, then 4 h at 1 % (idle, and small enough to right-size)
        job("nb2", 0, 480, gpu_model=A100, kind="interactive", user_name="bob", name="notebook-small-2"),
        # 8 GPUs for 4 h, 2 busy at 90 %, 6 at 0 %
        job("over8", 0, 240, gpu_count=8.0, name="overalloc-1"),
        # checkpointed on-demand training, 2 GPUs × 12 h, last checkpoint 30 min before the end
        job("spot1", 0, 720, gpu_count=2.0, name="ckpt-ondemand-1", last_checkpoint_ts=at(690)),
        # 1 × A100 for 6 h at 20 % util, 15 % SM-active, 6000 MiB
        job("tiny1", 0, 360, gpu_model=A100, kind="inference", name="tiny-1"),
        # batch 8 run with a family measured at 16 and 32 a month earlier
        job("bs8", 0, 480, name="small-batch-8"),
        job("bs16", EARLIER, EARLIER + 60, name="small-batch-16"),
        job("bs32", EARLIER, EARLIER + 60, name="small-batch-32"),
        # scaling family: 8 GPUs a month earlier, 16 GPUs today for 2 h
        job("sc8", EARLIER, EARLIER + 60, gpu_count=8.0, name="scaling-8"),
        job("sc16", 0, 120, gpu_count=16.0, name="scaling-16"),
    ]
    allocations = [
        alloc("nb1", "hA:0", 0, 600),
        alloc("nb2", "hE:0", 0, 480),
        *_gpus_job("over8", "hB", 8, 0, 240),
        alloc("tiny1", "hD:0", 0, 360),
    ]
    samples = (
        series("hA:0", 0, [50.0] * 120 + [1.0] * 480, mem_used_mib=1000.0)
        + series("hE:0", 0, [15.0] * 240 + [1.0] * 240, mem_used_mib=1000.0)
        + [
            s
            for i in range(8)
            for s in series(f"hB:{i}", 0, [90.0 if i < 2 else 0.0] * 240, mem_used_mib=30000.0)
        ]
        + series("hD:0", 0, [20.0] * 360, mem_used_mib=6000.0, sm_active_pct=15.0)
    )
    family = {"model": "m-1b", "params": 1e9, "precision": "bf16", "optimizer": "adamw", "seq_len": 2048}
    scaling = {"model": "s-13b", "precision": "bf16", "batch_size": 4, "seq_len": 4096}
    runs = [
        run("bs8", batch_size=8, peak_mem_mib=20480.0, tokens_per_s=12000.0, **family),
        run("bs16", batch_size=16, peak_mem_mib=30720.0, tokens_per_s=16000.0, **family),
        run("bs32", batch_size=32, peak_mem_mib=51200.0, tokens_per_s=19200.0, **family),
        run("sc8", tokens_per_s=80000.0, **scaling),
        run("sc16", tokens_per_s=112000.0, **scaling),
    ]
    ingest(con, jobs=jobs, allocations=allocations, samples=samples, training_runs=runs)


def diagnosis_ledger(con: duckdb.DuckDBPyConnection) -> None:
    """Jobs on T0's day, one per diagnosis plus look-alikes that must not be flagged."""
    set_prices(con)
    swing = [90.0, 90.0, 90.0, 2.0] * 15
    jobs = [
        job("busy", 0, 60, name="busy-idle-1"),
        job("healthy", 0, 60, name="healthy-1"),
        job("input", 0, 60, name="input-bound-1"),
        job("serve", 0, 60, kind="inference", name="serve-1"),
        job("hot", 0, 60, name="hot-1"),
        job("tiny1", 0, 360, gpu_model=A100, kind="inference", name="tiny-1"),
        job("sc8", EARLIER, EARLIER + 60, gpu_count=8.0, name="scaling-8"),
        job("sc16", 0, 120, gpu_count=16.0, name="scaling-16"),
        job("half", 0, 60, gpu_count=4.0, name="half-idle-1"),  # 2 of 4 GPUs idle: idle_gpus
        job("quarter", 0, 60, gpu_count=4.0, name="quarter-idle-1"),  # 1 of 4: a look-alike, not flagged
    ]
    allocations = [
        alloc(j, f"h{j}:0", 0, 60 if j != "tiny1" else 360)
        for j in ("busy", "healthy", "input", "serve", "hot", "tiny1")
    ] + [alloc(j, f"h{j}:{i}", 0, 60) for j in ("half", "quarter") for i in range(4)]
    samples = (
        series("hbusy:0", 0, [95.0] * 60, sm_active_pct=20.0, tensor_active_pct=1.0)
        + series("hhealthy:0", 0, [95.0] * 60, sm_active_pct=80.0, tensor_active_pct=50.0)
        + series("hinput:0", 0, swing)
        + series("hserve:0", 0, swing)
        + series("hhot:0", 0, [90.0] * 30, temp_c=88.0, throttle_reasons=0x40)
        + series("hhot:0", 30, [90.0] * 30, temp_c=70.0, throttle_reasons=0)
        + series("htiny1:0", 0, [20.0] * 360, mem_used_mib=6000.0, sm_active_pct=15.0)
        # busy GPUs at 90 % with 80 % SM-active (healthy), idle ones at 0 %
        + [
            s
            for i in range(4)
            for s in series(f"hhalf:{i}", 0, [90.0 if i < 2 else 0.0] * 60, sm_active_pct=80.0)
        ]
        + [
            s
            for i in range(4)
            for s in series(f"hquarter:{i}", 0, [90.0 if i < 3 else 0.0] * 60, sm_active_pct=80.0)
        ]
    )
    scaling = {"model": "s-13b", "precision": "bf16", "batch_size": 4, "seq_len": 4096}
    runs = [run("sc8", tokens_per_s=80000.0, **scaling), run("sc16", tokens_per_s=112000.0, **scaling)]
    ingest(con, jobs=jobs, allocations=allocations, samples=samples, training_runs=runs)


DAY = dt.date(T0.year, T0.month, T0.day)
