"""Small hand-made ledgers for the guard's tests, landed through the real write path (tests/analytics/build.py).

Samples every 5 minutes (interval 300 s), H100 at the test price $4.00/GPU-h, T0 = Monday 2025-03-03 00:00 UTC.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tests.analytics.build import alloc, gpu, ingest, job, series, set_test_prices

STEP_S = 300.0
FULL_MIB = 81_559.0


def five_min(gpu_id: str, start_min: float, utils: list[float], **cols: Any) -> list[dict[str, Any]]:
    return series(gpu_id, start_min, utils, step_s=STEP_S, **cols)


def fill_five(con: duckdb.DuckDBPyConnection) -> None:
    """The five jobs of the issue:

    - ``a/idle2``: 1 GPU, 0-300 min, 90 % for its first hour, then 0 %;
    - ``a/exempt``: bob's, the same pattern;
    - ``a/busy_again``: 2 GPUs, 0-240 min, both 0 % until 90 min, then both 80 %;
    - ``a/burst``: 1 GPU, 0-360 min, 95 % for 30 min, then 0 %;
    - ``a/fullmem``: 1 GPU, 0-300 min, 0 % all along while holding 79,000 of 81,559 MiB (97 %).
    """
    jobs = [
        job("a/idle2", 0, 300),
        job("a/exempt", 0, 300, user_name="bob"),
        job("a/busy_again", 0, 240, gpu_count=2.0),
        job("a/burst", 0, 360),
        job("a/fullmem", 0, 300),
    ]
    gpus = [gpu(f"h{i}:0") for i in range(1, 7)]
    allocs = [
        alloc("a/idle2", "h1:0", 0, 300),
        alloc("a/exempt", "h2:0", 0, 300),
        alloc("a/busy_again", "h3:0", 0, 240),
        alloc("a/busy_again", "h4:0", 0, 240),
        alloc("a/burst", "h5:0", 0, 360),
        alloc("a/fullmem", "h6:0", 0, 300),
    ]
    mem = {"mem_used_mib": 1_000.0, "mem_total_mib": FULL_MIB}
    samples = (
        five_min("h1:0", 0, [90.0] * 12 + [0.0] * 48, **mem)
        + five_min("h2:0", 0, [90.0] * 12 + [0.0] * 48, **mem)
        + five_min("h3:0", 0, [0.0] * 18 + [80.0] * 30, **mem)
        + five_min("h4:0", 0, [0.0] * 18 + [80.0] * 30, **mem)
        + five_min("h5:0", 0, [95.0] * 6 + [0.0] * 66, **mem)
        + five_min("h6:0", 0, [0.0] * 60, mem_used_mib=79_000.0, mem_total_mib=FULL_MIB)
    )
    ingest(con, jobs=jobs, gpus=gpus, allocations=allocs, samples=samples)
    set_test_prices(con)
