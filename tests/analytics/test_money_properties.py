"""Money invariants over generated cluster shapes (Hypothesis; shapes: tests/analytics/money_shapes.py).

For every shape — 1-3 clusters, GPU- and host-level allocations, time-slicing with declared fractions,
running jobs, a price change at midnight, gaps in telemetry, cards no job claims, hosts without telemetry:

- spend equals the sum of its parts, for the whole ledger, each day and each team;
- spend and every part add up over the two days and over the teams (with "unallocated" and "unattributed");
- spend equals the plain-SQL oracle (money_shapes.oracle), and the card-hours billed never exceed the
  card-hours that exist plus the unmeasured allocations;
- samples landed in two ingests meeting at a random time give the figures of the raw samples, and so does the
  rollup rebuilt; landing the same samples again changes nothing.

A few examples here (each lands a ledger and asks about ten views: 10-25 s on the shared 2-core machine;
``MONEY_EXAMPLES`` overrides); bench/money_properties.py runs 200.
"""

from __future__ import annotations

import datetime as dt
import os

import pytest

pytest.importorskip("hypothesis")  # the test extra (pyproject.toml) installs it
from hypothesis import HealthCheck, given, settings

from analytics.filters import Filters
from analytics.summary import summary
from analytics.waste import PARTS, job_waste, unallocated, waste_totals
from gpuledger.ledger.db import memory_ledger
from gpuledger.ledger.rollup import rebuild_rollup
from tests.analytics.build import T0, ingest
from tests.analytics.money_shapes import TEAMS, Shape, oracle, set_prices, shapes
from tests.analytics.oracle import ORACLE

EXAMPLES = int(os.environ.get("MONEY_EXAMPLES", "4"))  # 10-25 s an example on the shared 2-core machine
DAYS = [Filters(since=T0.date(), until=T0.date()), Filters(since=(T0 + dt.timedelta(days=1)).date(),
                                                           until=(T0 + dt.timedelta(days=1)).date())]  # fmt: skip
CENT = 1e-6  # float sums of the same dollars in another order


def land(shape: Shape):
    con = memory_ledger()
    set_prices(con, shape.price_change)
    ingest(con, jobs=shape.jobs, allocations=shape.allocations, gpus=shape.gpus)
    first = [s for s in shape.samples if s["ts"] < shape.split_at]
    second = [s for s in shape.samples if s["ts"] >= shape.split_at]
    for part in (first, second):
        if part:
            ingest(con, samples=part)
    return con


def parts(t: dict[str, float]) -> dict[str, float]:
    return {p: t[p] for p in (*PARTS, "spend_usd")}


def check(shape: Shape) -> None:
    con = land(shape)
    try:
        whole = waste_totals(con)
        # spend = Σ parts, whole / each day / each team
        views = [Filters(), *DAYS, *(Filters(teams=(t,)) for t in (*TEAMS, "unallocated", "unattributed"))]
        got = {f: waste_totals(con, filters=f) for f in views}
        for f, t in got.items():
            assert t["spend_usd"] == pytest.approx(sum(t[p] for p in PARTS), abs=CENT), f
        # additivity, part by part: two days, and the teams with "unallocated"
        for group in (DAYS, [f for f in views if f.teams]):
            for p, v in parts(whole).items():
                assert sum(got[f][p] for f in group) == pytest.approx(v, abs=CENT), (p, group)
        # the oracle: every card-second billed once at the price in force; nothing beyond what exists
        usd, hours = oracle(con, shape.price_change)
        assert whole["spend_usd"] == pytest.approx(usd, abs=CENT)
        jobs = job_waste(con)
        un = unallocated(con)
        billed = float(jobs["gpu_hours"].sum()) + (
            float(un["unallocated_gpu_hours"].sum()) if un.height else 0.0
        )
        assert billed <= hours + 1e-9
        # the rollup (two ingests meeting at split_at) equals the raw samples, and so does a rebuild
        for state in ("incremental", "rebuilt"):
            if state == "rebuilt":
                con.execute("BEGIN TRANSACTION")
                rebuild_rollup(con, idle_util_pct=5.0)
                con.execute("COMMIT")
            fast, raw = summary(con), summary(con, source=ORACLE)
            for k in ("spend_usd", "idle_gpu_hours", "mean_util_pct"):
                assert fast[k] == pytest.approx(raw[k], abs=CENT), (state, k)
            for p in PARTS:
                assert fast["waste"][p] == pytest.approx(raw["waste"][p], abs=CENT), (state, p)
        # landing the same samples again changes nothing
        if shape.samples:
            ingest(con, samples=shape.samples)
        assert parts(waste_totals(con)) == pytest.approx(parts(whole), abs=CENT)
    finally:
        con.close()


# The suite runs a fixed set of examples (derandomize), so CI is repeatable; MONEY_RANDOM=1 (and
# bench/money_properties.py) explores new ones. A random run of 40 found one shape that breaks additivity over
# days (see docs/metrics.md, "Known limits": idle on a card two jobs share across midnight).
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=not os.environ.get("MONEY_RANDOM"),
    suppress_health_check=[HealthCheck.too_slow],
)
@given(shapes())
def test_money_invariants_over_generated_clusters(shape: Shape) -> None:
    check(shape)
