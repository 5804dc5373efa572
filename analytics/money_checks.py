"""The money invariants a ledger must keep, checked on the ledger itself (``gpuledger check``); the property
tests (tests/analytics/test_money_properties.py) check the same over generated shapes.

- no job costs less than nothing, holds negative GPU-hours or declares a negative oversubscription;
- no split of a shared card's time gives a holder a negative share, a share above what it declared
  (``cut`` < 0) or shares summing above the GPU row's capacity (a card, a MIG instance's slices of it):
  every card-second is billed at most once (gpuledger/ledger/shares.py);
- no unallocated capacity is negative.
"""

from __future__ import annotations

import duckdb

from analytics.capacity import unallocated
from analytics.cost import job_costs
from gpuledger.ledger.mig import GPU_SLICES_SQL
from gpuledger.ledger.settings import Settings

EPS = 1e-9  # float sums of the same card-seconds in another order

# pieces of shared stretches whose split breaks a rule: gpu_id, s_from, s_to, reason. No parameters.
SPLIT_PROBLEMS_SQL = f"""
    SELECT gpu_id, s_from, s_to, 'a share of ' || round(min(share), 6) || ' is negative' AS reason
    FROM gpu_shares GROUP BY ALL HAVING min(share) < -{EPS}
    UNION ALL
    SELECT gpu_id, s_from, s_to, 'job ' || job_id || ' has ' || round(-cut, 6) || ' card above what it declared'
    FROM gpu_shares WHERE cut < -{EPS}
    UNION ALL
    SELECT s.gpu_id, s.s_from, s.s_to,
           'shares sum to ' || round(sum(s.share), 6) || ' of a capacity of ' || round(any_value(coalesce(z.cap, 1.0)), 6)
    FROM gpu_shares s LEFT JOIN (SELECT gpu_id, slice_units / slices AS cap FROM ({GPU_SLICES_SQL})) z USING (gpu_id)
    GROUP BY s.gpu_id, s.s_from, s.s_to HAVING sum(s.share) > any_value(coalesce(z.cap, 1.0)) + {EPS}
    ORDER BY 1, 2
"""


def money_problems(con: duckdb.DuckDBPyConnection, settings: Settings) -> list[str]:
    """One sentence per broken money invariant (module docstring); empty when the ledger keeps them all."""
    out = []
    for gpu_id, lo, hi, reason in con.execute(SPLIT_PROBLEMS_SQL).fetchall():
        out.append(f"gpu_shares: {gpu_id} {lo:%Y-%m-%d %H:%M:%S}..{hi:%Y-%m-%d %H:%M:%S}: {reason}")
    for r in job_costs(con).iter_rows(named=True):
        for col, what in (
            ("cost_usd", "costs ${:,.2f}"),
            ("gpu_hours", "holds {:,.4f} GPU-hours"),
            ("oversubscribed_gpu_hours", "has {:,.4f} oversubscribed GPU-hours"),
        ):
            if r[col] is not None and r[col] < -EPS:
                out.append(f"jobs: {r['job_id']} {what.format(r[col])}, below zero")
    un = unallocated(con, settings=settings)
    for r in un.iter_rows(named=True):
        for col in ("unallocated_gpu_hours", "unallocated_usd"):
            if r[col] is not None and r[col] < -EPS:
                out.append(f"unallocated: {r['cluster']} {r['gpu_model']}: {col} {r[col]:,.4f} is below zero")
    return out
