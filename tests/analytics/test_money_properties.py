"""Money invariants over generated cluster shapes (Hypothesis; shapes: tests/analytics/money_shapes.py).

For every shape — 1-3 clusters, GPU- and host-level allocations, time-slicing with declared fractions, MIG
instances, running, failed (with and without a checkpoint) and requeued jobs, a price change at midnight, gaps
in telemetry, cards no job claims, hosts without telemetry, telemetry in two files landing in either order,
one of them first as a draft that --replace withdraws:

- spend equals the sum of its parts, for the whole ledger, each day and each team (``summary``: the CLI's,
  the Overview's and the reports' headline);
- spend, every part, and the GPU-hours held and idle add up over the two days and over the teams (with
  "unallocated" and "unattributed");
- spend equals the plain-SQL oracle (money_shapes.oracle), and the card-hours billed never exceed the
  card-hours that exist plus the unmeasured allocations;
- the rollup the two files left gives the figures of the raw samples, and so does the rollup rebuilt;
- landing the same samples again, or --replace of a file by the same rows, changes nothing.

Speed (measured 2026-12-06 on the shared 2-core machine, load 6-8 from other engineers): an example took
9.8 s before (6 shapes paired; each view recomputed its per-job costs and capacity, 8 waste_totals and 4
summaries planning the same 50 kB statements) and 3.6 s after, with each ledger state read in one sharing
block as the CLI and pages read it (cpu 4.3 -> 2.1 s). The suite's 20 derandomized examples took 74 s wall
(3.7 s each) and 41 s of CPU, so ``EXAMPLES`` = 16 fits about 60 s of one xdist worker; the final 16 took
41 s (2.6 s each, load 8). ``MONEY_EXAMPLES`` overrides; ``MONEY_RANDOM=1`` explores new shapes;
bench/money_properties.py runs 200.

Two shapes fail for faults in the product, not in the tests: each is built by hand in money_shapes, pinned
below as a strict expected failure, and left out of the generated shapes until its fix lands (money_shapes,
"Left out on purpose"). A third, a file holding one sample of a GPU, was fixed (collectors/lone_samples.py) and
is generated again.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import duckdb
import pytest

pytest.importorskip("hypothesis")  # the test extra (pyproject.toml) installs it
from hypothesis import HealthCheck, given, settings

from analytics.cost import job_costs_sql
from analytics.filters import Filters
from analytics.shared import sharing
from analytics.summary import summary
from analytics.waste import PARTS, job_waste, unallocated, waste_totals
from gpuledger.ledger.db import memory_ledger
from gpuledger.ledger.rollup import rebuild_rollup
from tests.analytics.build import T0, ingest
from tests.analytics.money_shapes import (
    TEAMS,
    Shape,
    instance_held_twice_example,
    known_limit,
    land_file,
    lone_sample_example,
    oracle,
    set_prices,
    shapes,
)
from tests.analytics.oracle import ORACLE

EXAMPLES = int(os.environ.get("MONEY_EXAMPLES", "16"))  # about 60 s (module docstring)
DAYS = [Filters(since=T0.date(), until=T0.date()), Filters(since=(T0 + dt.timedelta(days=1)).date(),
                                                           until=(T0 + dt.timedelta(days=1)).date())]  # fmt: skip
VIEWS = [Filters(), *DAYS, *(Filters(teams=(t,)) for t in (*TEAMS, "unallocated", "unattributed"))]
CENT = 1e-6  # float sums of the same dollars in another order


def land(shape: Shape):
    """The shape's ledger: the job records, then the samples as two telemetry files meeting at split_at (b.csv
    landing first as its draft, then --replace'd by the whole file, when the shape has one)."""
    con = memory_ledger()
    set_prices(con, shape.price_change)
    ingest(con, jobs=shape.jobs, allocations=shape.allocations, gpus=shape.gpus)
    for key, rows in files(shape)[:: -1 if shape.b_first else 1]:
        if key == "b.csv" and shape.draft:
            land_file(con, key, shape.draft)
            land_file(con, key, rows, replace=True)
        elif rows:
            land_file(con, key, rows)
    return con


def files(shape: Shape) -> list[tuple[str, list[dict]]]:
    """The samples as the two files they land from: a.csv before split_at, b.csv from it on."""
    return [
        ("a.csv", [s for s in shape.samples if s["ts"] < shape.split_at]),
        ("b.csv", [s for s in shape.samples if s["ts"] >= shape.split_at]),
    ]


def totals(s: dict[str, Any]) -> dict[str, float]:
    """A summary's money and time: spend, each part, and the GPU-hours held and idle."""
    return {
        **s["waste"],
        "spend_usd": s["spend_usd"],
        "gpu_hours": s["gpu_hours"],
        "idle_gpu_hours": s["idle_gpu_hours"],
    }


def check(shape: Shape) -> None:
    con = land(shape)
    try:
        # Each state of the ledger is read inside a sharing block, as the CLI, the pages and the reports read
        # it (analytics/shared.py): a view's per-job costs and its unallocated capacity are computed once,
        # whichever function asks (measured in the module docstring).
        with sharing(con):
            whole = views(con, shape)
            same_as_raw(con, "incremental", whole)
        con.execute("BEGIN TRANSACTION")
        rebuild_rollup(con, idle_util_pct=5.0)
        con.execute("COMMIT")
        with sharing(con):  # a new block: the ledger changed
            same_as_raw(con, "rebuilt", whole)
        # landing the same samples again changes nothing, nor does --replace of a file by the same rows (read
        # outside a sharing block: the unshared path)
        if shape.samples:
            ingest(con, samples=shape.samples)
        for key, rows in files(shape)[:1]:
            if rows:
                land_file(con, key, rows, replace=True)
        assert totals(summary(con)) == pytest.approx(whole, abs=CENT), "landed again"
    finally:
        con.close()


def views(con: duckdb.DuckDBPyConnection, shape: Shape) -> dict[str, float]:
    """The invariants over the views of the headline (analytics/summary.py: the CLI's ``summary``, the
    Overview, the reports); returns the whole ledger's :func:`totals`."""
    got = {f: totals(summary(con, filters=f)) for f in VIEWS}
    whole = got[Filters()]
    # spend = Σ parts, whole / each day / each team
    for f, t in got.items():
        assert t["spend_usd"] == pytest.approx(sum(t[p] for p in PARTS), abs=CENT), f
    # additivity, part by part (and the held and idle GPU-hours): two days, and the teams with "unallocated"
    for group in (DAYS, [f for f in VIEWS if f.teams]):
        for p, v in whole.items():
            assert sum(got[f][p] for f in group) == pytest.approx(v, abs=CENT), (p, group)
    # waste_totals (the parts in one statement) says what the headline says
    for p, v in waste_totals(con).items():
        if p in whole:
            assert v == pytest.approx(whole[p], abs=CENT), p
    # the oracle: every card-second billed once at the price in force; nothing beyond what exists
    usd, hours = oracle(con, shape.price_change)
    assert whole["spend_usd"] == pytest.approx(usd, abs=CENT), ("oracle", whole["spend_usd"], usd)
    un = unallocated(con)
    billed = float(job_waste(con)["gpu_hours"].sum()) + (
        float(un["unallocated_gpu_hours"].sum()) if un.height else 0.0
    )
    assert billed <= hours + 1e-9, ("billed beyond what exists", billed, hours)
    return whole


def same_as_raw(con: duckdb.DuckDBPyConnection, state: str, whole: dict[str, float]) -> None:
    """The rollup (two files meeting at split_at, or rebuilt) gives the figures of the raw samples."""
    fast, raw = summary(con), summary(con, source=ORACLE)
    for k in ("spend_usd", "idle_gpu_hours", "mean_util_pct"):
        assert fast[k] == pytest.approx(raw[k], abs=CENT), (state, k)
    for p in PARTS:
        assert fast["waste"][p] == pytest.approx(raw["waste"][p], abs=CENT), (state, p)
    assert totals(fast) == pytest.approx(whole, abs=CENT), state


# The suite runs a fixed set of examples (derandomize), so CI is repeatable; MONEY_RANDOM=1 (and
# bench/money_properties.py) explores new ones. What they found: a card two jobs share across midnight (fixed:
# docs/metrics.md, "Additivity on shared cards"), a MIG instance held twice, a file with one sample of a GPU
# (all three pinned below), and a silence of a card ending at midnight, which the generator now leaves out
# as it meant to (money_shapes, module docstring).
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


def test_two_jobs_sharing_a_card_across_midnight_add_up_over_days() -> None:
    """The shape a random run once found breaking additivity over days (docs/metrics.md, "Additivity on shared
    cards"): two jobs sharing a card across midnight beside host-level jobs. Since a shared card's samples
    count for each holder by its share, its days add up to the whole in every part."""
    check(known_limit())


def test_a_mig_instance_held_twice_bills_its_share_of_the_card_once() -> None:
    """Found by bench/money_properties.py (seed 0, example 46): j0 and j1 each hold the 3g instance of an H100
    (3/7 of the card) and j2 the 4g one (4/7) for one hour at $4 a card-hour. Each job was billed its declared
    share, $5.71 for a $4 card-hour. The 3g instance holds 3/7 of the card whoever holds it, so its two jobs
    split that: 3/14 each (gpuledger/ledger/shares.py, capacity of a MIG instance)."""
    check(instance_held_twice_example())
    con = land(instance_held_twice_example())
    try:
        cost = dict(
            con.execute(
                f"SELECT job_id, cost_usd FROM ({job_costs_sql(Filters(), None)[0]})",
                job_costs_sql(Filters(), None)[1],
            ).fetchall()
        )
    finally:
        con.close()
    assert cost["j0"] == pytest.approx(4.0 * 3 / 14) and cost["j1"] == pytest.approx(4.0 * 3 / 14)  # $0.857
    assert cost["j2"] == pytest.approx(4.0 * 4 / 7)  # $2.286
    assert sum(cost.values()) == pytest.approx(4.0)


def test_a_lone_sample_in_its_file_changes_nothing_when_landed_again() -> None:
    """Found by the suite's derandomized examples: a file holding one sample of a GPU gave it 1 s, which the rest
    of its series landing from another file did not revise while landing all the samples again did
    (money_shapes.lone_sample_example: $7.67, then $8.00). Fixed by collectors/lone_samples.py; the invariants
    now hold for it, and money_shapes.shapes generates such files again."""
    check(lone_sample_example())


@pytest.mark.parametrize("order", ["one file", "b.csv first", "a.csv first"])
def test_a_lone_sample_stands_for_the_cadence_whatever_the_order(order: str) -> None:
    """money_shapes.lone_sample_example: one card no job claims, a sample every 5 minutes from 10:00 to 11:55
    (24 samples), b.csv holding only the 11:55 one. By hand, whatever files bring them and in which order:
    24 samples × 300 s = 7,200 s = 2 GPU-h at $4.00/h = $8.00; the 11:55 sample stands for 300 s (to 12:00),
    not 1 s (23 × 300 + 1 = 6,901 s: $7.6678, what b.csv then a.csv, or a.csv then b.csv, gave before). Landing
    every sample again, then b.csv again with --replace, changes none of it."""
    shape = lone_sample_example()
    con = memory_ledger()
    try:
        set_prices(con, False)
        ingest(con, gpus=shape.gpus)
        a, b = (rows for _, rows in files(shape))
        assert len(a) == 23 and len(b) == 1
        batches = {"one file": [("all.csv", a + b)], "b.csv first": [("b.csv", b), ("a.csv", a)]}
        batches["a.csv first"] = batches["b.csv first"][::-1]
        for key, rows in batches[order]:
            land_file(con, key, rows)
        for again in (False, True):
            lone = con.execute("SELECT interval_s FROM samples WHERE ts = ?", [b[0]["ts"]]).fetchall()
            assert lone == [(300.0,)], (order, again)
            got = summary(con)
            assert got["gpu_hours"] == pytest.approx(24 * 300 / 3600, abs=1e-9), (order, again)
            assert got["spend_usd"] == pytest.approx(24 * 300 / 3600 * 4.00, abs=CENT), (order, again)
            ingest(con, samples=shape.samples)
            land_file(con, "b.csv", b, replace=True)
    finally:
        con.close()
