"""Advice on the price tier: ``use_spot`` (job; docs/recommendations.md).

Checkpointed on-demand training whose last checkpoint is at most ``recommend.spot_checkpoint_max_gap_hours``
before its end: preemption costs little, so saving = GPU-hours × (rate − spot × (1 + ``spot_rework_pct``)).
Only on a cluster billed per job, or next to the capacity item it frees (analytics/problems.py).
"""

from __future__ import annotations

import datetime as dt

import polars as pl

from analytics.advice_common import AdviceView, Found, held, job_item, job_label
from analytics.diagnoses import TRAINING_KINDS
from analytics.shared import ledger_frame, ledger_prices

KINDS = ("use_spot",)


def advise(v: AdviceView, found: Found) -> Found:
    """Per job: checkpointed on-demand training; saving = GPU-hours × (rate − spot × (1 + rework))."""
    con, s = v.con, v.settings
    prices, day = ledger_prices(con), (v.as_of or dt.datetime(9999, 1, 1)).date()
    rework = s.spot_rework_pct / 100.0
    out: Found = []
    cands = v.jobs.filter(
        pl.col("kind").is_in(TRAINING_KINDS)
        & (pl.col("pricing_tier") == "on_demand")
        & pl.col("cost_usd").is_not_null()
        & (pl.col("gpu_hours") > 0)
    )
    ckpt = ledger_frame(
        con, "SELECT job_id, last_checkpoint_ts FROM jobs WHERE last_checkpoint_ts IS NOT NULL"
    )
    for j in cands.join(ckpt, on="job_id").to_dicts():
        spot = prices.offered(j["gpu_model"], "spot", j["cluster"], day)  # the cluster's own rows first
        if spot is None:
            continue
        end = j["end_ts"] or j["span_end"]
        gap_h = (end - j["last_checkpoint_ts"]).total_seconds() / 3600.0
        if gap_h < 0 or gap_h > s.spot_checkpoint_max_gap_hours:
            continue
        rate = j["cost_usd"] / j["gpu_hours"]
        saving = j["gpu_hours"] * (rate - spot * (1.0 + rework))
        evidence = (
            f"{job_label(j)} {held(j)} on demand at ${rate:.2f}/GPU-h (${j['cost_usd']:,.2f}); it checkpoints "
            f"(last checkpoint {gap_h:.1f} h before its end), so preemption costs little: at the spot price "
            f"${spot:.2f}/GPU-h plus {s.spot_rework_pct:.0f} % rework it would have cost ${saving:,.2f} less."
        )
        action = "Run it on spot capacity with automatic resume from the last checkpoint."
        out.append(job_item(j, "use_spot", evidence, action, saving, "medium", "price", ()))
    return out
