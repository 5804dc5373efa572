"""analytics.savings.counted_savings folds each job's items as they come; the rule as written
(counted_savings_reference, below) folds them all again at every item. Both must give the same figures, bit for bit."""

from __future__ import annotations

import math
from collections import defaultdict

import polars as pl
import pytest

from analytics.savings import _combined, _order, counted_savings

SCHEMA = {
    "kind": pl.Utf8,
    "lever": pl.Utf8,
    "recurring": pl.Boolean,
    "job_ids": pl.List(pl.Utf8),
    "job_saving_usd": pl.List(pl.Float64),
    "job_cost_usd": pl.List(pl.Float64),
}


def frame(rows: list[tuple[object, ...]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


def counted_savings_reference(recs: pl.DataFrame) -> list[float]:
    """:func:`counted_savings` by the rule as written (its code before the fold): every job's items folded
    again by ``_combined`` at each item."""
    applied: dict[str, dict[str, list[tuple[str, float]]]] = defaultdict(lambda: defaultdict(list))
    done: dict[str, float] = defaultdict(float)
    out = [0.0] * recs.height
    cols = ("kind", "lever", "job_ids", "job_saving_usd", "job_cost_usd")
    rows = list(zip(*(recs[c].to_list() for c in cols), strict=True))
    for i in _order(recs):
        kind, lever, ids, savings, costs = rows[i]
        added = 0.0
        for job, saving, cost in zip(ids, savings, costs, strict=True):
            if saving is None or cost is None:
                continue
            applied[job][lever].append((kind, saving))
            now = _combined(cost, applied[job])
            added += now - done[job]
            done[job] = now
        out[i] = max(added, 0.0)
    return out


# Job "a" (cost 100) gets, in counting order: idle 10 and 5 (time, additive: 15), a notebook auto-stop 12
# (time policy: max(15, 12) = 15), a smaller GPU 20 then a MIG slice 30 (price: the larger, 30), a larger
# batch 10 (work). Each row's counted saving is the job's combined saving after it minus before it.
ROWS = [
    ("reclaim_idle", "time", True, ["a", "b"], [10.0, 4.0], [100.0, 8.0]),
    ("stop_idle_notebooks", "time", True, ["a"], [12.0], [100.0]),
    ("reclaim_idle", "time", True, ["a"], [5.0], [100.0]),
    ("right_size_gpu", "price", True, ["a", "b"], [20.0, 9.0], [100.0, 8.0]),  # b: price past its cost
    ("mig_slice", "price", True, ["a"], [30.0], [100.0]),
    ("larger_batch", "work", True, ["a"], [10.0], [100.0]),
    # a one-off listed first is counted after every recurring row
    ("use_spot", "price", False, ["a"], [40.0], [100.0]),
    # a negative saving, a NULL saving, a NULL cost, a zero cost, a lever the rule does not read
    ("fewer_gpus", "work", True, ["c", "c", "d", "e"], [-3.0, None, 2.0, 1.0], [50.0, 50.0, None, 0.0]),
    ("fewer_gpus", "work", True, ["c"], [-1.0], [50.0]),
    ("other", "config", True, ["a", "c"], [99.0, 99.0], [100.0, 50.0]),
    # the same job costed differently by two items (a capacity pseudo-job and a job of two views)
    ("reclaim_idle", "time", True, ["f"], [3.0], [10.0]),
    ("stop_idle_notebooks", "time", True, ["f"], [4.0], [20.0]),
    ("stop_idle_notebooks", "time", True, ["f"], [4.0], [5.0]),
]


def test_folded_counting_equals_the_rule_bit_for_bit() -> None:
    recs = frame(ROWS)
    fast, slow = counted_savings(recs), counted_savings_reference(recs)
    assert [x.hex() for x in fast] == [x.hex() for x in slow]


def test_folded_counting_by_hand() -> None:
    got = counted_savings(frame(ROWS[:6]))
    # a after each row: time 10 -> 10; time max(10, 12) -> 12; time max(15, 12) = 15; price 20:
    # 100 × (1 − 0.85 × 0.8) = 32; price 30: 100 × (1 − 0.85 × 0.7) = 40.5; work 10: 100 × (1 − 0.85 × 0.7 × 0.9)
    a = [10.0, 2.0, 3.0, 32.0 - 15.0, 40.5 - 32.0, 100 * (1 - 0.85 * 0.7 * 0.9) - 40.5]
    # b (cost 8): time 4 -> 4; price 9 clamps at the whole cost: 8 × (1 − 0.5 × 0) = 8
    b = [4.0, 0.0, 0.0, 4.0, 0.0, 0.0]
    assert got == pytest.approx([x + y for x, y in zip(a, b, strict=True)])


@pytest.mark.parametrize("order", ["as listed", "reversed", "interleaved"])
def test_folded_counting_in_any_order(order: str) -> None:
    rows = {"as listed": ROWS, "reversed": ROWS[::-1], "interleaved": ROWS[::2] + ROWS[1::2]}[order]
    recs = frame(rows)
    fast, slow = counted_savings(recs), counted_savings_reference(recs)
    assert all(math.isclose(x, y, rel_tol=0, abs_tol=0) for x, y in zip(fast, slow, strict=True))
    assert [x.hex() for x in fast] == [x.hex() for x in slow]
