"""A generated six-week ledger with planted habits and fixes (tests/items/test_items.py).

Weeks 1–6 are ISO weeks 2025-W10 … W15 (tests.analytics.build.T0 is Monday 2025-03-03). Round prices
(tests/analytics/recommend_ledgers.py): an H100 costs $3.00 per GPU-hour. Every week:

- **alice** (team nlp) opens a notebook on one H100 on Monday 09:00: 2 h at 50 %, then, until her fix in
  week ``notebook_fix``, it sits 8 h at 1 % (one idle stretch): 8 card-hours × $3.00 = $24.00 of idle a
  week; from the fix on she stops it after the 2 h. With ``relapse`` the idle hours come back from that week;
- **carol** (team nlp) trains ``small-batch`` on one H100 on Tuesday at per-GPU batch 8 (12,000 tokens/s,
  8 h); from week ``batch_fix`` she runs the same work at batch 32 (19,200 tokens/s, measured by the
  family's probes) in 8 × 12,000 / 19,200 = 5 h at 90 % utilization;
- **bob** (team vision) leaves a notebook idle like alice's, never fixed ($24.00 a week);
- **dave** (team probe) ran the family's probes at batch 16 and 32 in week 1 (the throughput points);
- **eve** (team ops) runs a busy job on the last Sunday, so the data reach the end of week 6.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tests.analytics.build import alloc, ingest, job, series
from tests.analytics.recommend_ledgers import run, set_prices

DAY = 24 * 60  # minutes
WEEKS = 6
PRICE_H100 = 3.0


def week_start(week: int) -> float:
    """Minutes from T0 to the Monday of ``week`` (1-based)."""
    return (week - 1) * 7 * DAY


def build(
    con: duckdb.DuckDBPyConnection,
    *,
    notebook_fix: int = 3,
    batch_fix: int = 4,
    relapse: int | None = None,
    second_notebook: bool = False,
) -> None:
    """The ledger of the module docstring; ``second_notebook``: alice also leaves a ``lab-`` notebook idle
    the same way on a second card, so her two notebook families are one problem whose best action is the
    per-user auto-stop (stop_idle_notebooks), fixed with the first."""
    set_prices(con)
    jobs: list[dict[str, Any]] = []
    allocs: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    family = {"model": "m-1b", "params": 1e9, "precision": "bf16", "optimizer": "adamw", "seq_len": 2048}
    for w in range(1, WEEKS + 1):
        m0 = week_start(w)
        # alice's notebook, Monday 09:00
        idle = w < notebook_fix or (relapse is not None and w >= relapse)
        nb0 = m0 + 9 * 60
        minutes = 120 + (480 if idle else 0)
        jobs.append(job(f"nb-a{w}", nb0, nb0 + minutes, kind="interactive", name=f"notebook-idle-w{w}"))
        allocs.append(alloc(f"nb-a{w}", "hA:0", nb0, nb0 + minutes))
        samples += series("hA:0", nb0, [50.0] * 120 + [1.0] * (minutes - 120), mem_used_mib=1000.0)
        if second_notebook:
            jobs.append(job(f"lab-a{w}", nb0, nb0 + minutes, kind="interactive", name=f"lab-notebook-w{w}"))
            allocs.append(alloc(f"lab-a{w}", "hA:1", nb0, nb0 + minutes))
            samples += series("hA:1", nb0, [50.0] * 120 + [1.0] * (minutes - 120), mem_used_mib=1000.0)
        # bob's notebook, Monday 09:00 on his own card, never fixed
        jobs.append(
            job(
                f"nb-b{w}",
                nb0,
                nb0 + 600,
                kind="interactive",
                name=f"nb-w{w}",
                user_name="bob",
                team="vision",
            )
        )
        allocs.append(alloc(f"nb-b{w}", "hB:0", nb0, nb0 + 600))
        samples += series("hB:0", nb0, [50.0] * 120 + [1.0] * 480, mem_used_mib=1000.0)
        # carol's training, Tuesday 09:00
        t0 = m0 + DAY + 9 * 60
        if w < batch_fix:
            jobs.append(job(f"sb{w}", t0, t0 + 480, name=f"small-batch-w{w}", user_name="carol"))
            runs.append(run(f"sb{w}", batch_size=8, peak_mem_mib=20480.0, tokens_per_s=12000.0, **family))
        else:
            jobs.append(job(f"sb{w}", t0, t0 + 300, name=f"small-batch-w{w}", user_name="carol"))
            allocs.append(alloc(f"sb{w}", "hC:0", t0, t0 + 300))
            samples += series("hC:0", t0, [90.0] * 300, mem_used_mib=51200.0)
            runs.append(run(f"sb{w}", batch_size=32, peak_mem_mib=51200.0, tokens_per_s=19200.0, **family))
    # dave's probes of the family, week 1 Wednesday
    p0 = 2 * DAY
    jobs += [
        job("probe16", p0, p0 + 60, name="probe-16", user_name="dave", team="probe"),
        job("probe32", p0, p0 + 60, name="probe-32", user_name="dave", team="probe"),
    ]
    runs += [
        run("probe16", batch_size=16, peak_mem_mib=30720.0, tokens_per_s=16000.0, **family),
        run("probe32", batch_size=32, peak_mem_mib=51200.0, tokens_per_s=19200.0, **family),
    ]
    # eve's busy job on the last Sunday, 10:00–12:00: the horizon reaches week 6's Sunday
    e0 = week_start(WEEKS) + 6 * DAY + 10 * 60
    jobs.append(job("busy", e0, e0 + 120, name="busy", user_name="eve", team="ops"))
    allocs.append(alloc("busy", "hE:0", e0, e0 + 120))
    samples += series("hE:0", e0, [95.0] * 120, mem_used_mib=60000.0)
    ingest(con, jobs=jobs, allocations=allocs, samples=samples, training_runs=runs)
