"""A physical card is billed once, whatever mix of card-level and MIG-instance telemetry it reports.

A MIG instance is a GPU row ``<card>/<instance>`` with ``parent_gpu_id`` = the card and a ``mig_profile``.
Telemetry no job record claims is decided per card (analytics/cost.py TELEMETRY_ONLY_GPUS_SQL): the card and
its instances make one ``unattributed:<card>`` pseudo-job of 1 GPU, and each instance's samples weigh by its
share of the card (3g of an A100's 7 slices = 3/7; an A30 has 4). A card some of whose instances a job holds
is not telemetry-only: its other instances' time is unallocated capacity (analytics/waste.py).

Before the fix each GPU row was its own pseudo-job of 1 GPU: a card with two instances cost two cards (plus a
third when nvidia-smi -q -x lists the card too). Every figure below is worked out by hand, and each ledger is
also read by the raw-sample oracle (``source=ORACLE``) and from the rollups, which must agree.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import duckdb
import polars as pl
import pytest

from analytics.cost import job_costs
from analytics.filters import Filters
from analytics.job_signals import job_signals
from analytics.shared import sharing
from analytics.summary import summary
from analytics.telemetry_source import ROLLUPS, require_rollup
from analytics.utilization import job_utilization
from analytics.waste import (
    PARTS,
    job_waste,
    spend_by_week,
    unallocated,
    waste_by_week,
    waste_totals,
)
from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from gpuledger.ledger.db import memory_ledger
from gpuledger.ledger.settings import Settings
from tests.analytics.build import T0, at, ingest, job, series, set_test_prices
from tests.analytics.oracle import ORACLE
from tests.analytics.parity import raw_equals_fast
from tests.conftest import dataset, write

A100 = "A100-80GB"
A30 = "A30"
A100_USD = 7.0  # $/GPU-h: a slice of the 7 costs $1 an hour
A30_USD = 4.0  # $/GPU-h: a slice of the 4 costs $1 an hour
DAY = Filters(since=T0.date(), until=T0.date())
SETTINGS = Settings()


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    c = memory_ledger()
    set_test_prices(c)
    for model, usd in ((A100, A100_USD), (A30, A30_USD)):
        c.execute(
            "INSERT INTO prices VALUES (?, 'on_demand', NULL, ?, ?, 'test price', ?, 'sheet', NULL)",
            [model, dt.date(2020, 1, 1), usd, dt.date(2020, 1, 1)],
        )
    yield c
    c.close()


def instance(card: str, gi: int, profile: str, model: str = A100, cluster: str = "c1") -> dict[str, object]:
    return {
        "gpu_id": f"{card}/{gi}",
        "host": card.split(":")[0],
        "model": model,
        "cluster": cluster,
        "mig_profile": profile,
        "parent_gpu_id": card,
    }


def card_row(card: str, model: str = A100, cluster: str = "c1") -> dict[str, object]:
    return {"gpu_id": card, "host": card.split(":")[0], "model": model, "cluster": cluster}


def assert_invariants(con: duckdb.DuckDBPyConnection, views: list[Filters]) -> None:
    """Raw equals fast, spend is the sum of its parts (and of its jobs plus unallocated), and no job's idle
    time or dollars exceed what it held, at every view."""
    require_rollup(con, SETTINGS)
    with sharing(con):
        for f in views:
            kw = {"filters": f, "settings": SETTINGS}
            raw_equals_fast(con, f, SETTINGS)
            fast = summary(con, **kw)
            # spend = the sum of its parts = Σ job cost + unallocated, by week as in total
            jobs = job_costs(con, filters=f)
            un = unallocated(con, filters=f, settings=SETTINGS)
            un_usd = float(un["unallocated_usd"].fill_null(0).sum()) if un.height else 0.0
            assert fast["spend_usd"] == pytest.approx(sum(fast["waste"][p] for p in PARTS))
            assert fast["spend_usd"] == pytest.approx(float(jobs["cost_usd"].fill_null(0).sum()) + un_usd)
            weeks = waste_by_week(con, filters=f, settings=SETTINGS)
            assert float(weeks["spend_usd"].sum()) == pytest.approx(fast["spend_usd"])
            assert float(weeks.select(pl.sum_horizontal(*PARTS)).to_series().sum()) == pytest.approx(
                fast["spend_usd"]
            )
            bars = spend_by_week(con, filters=f, settings=SETTINGS)
            assert float(bars["spend_usd"].sum()) == pytest.approx(fast["spend_usd"])
            # no job's idle time or dollars exceed what it held; unknown_share within 0-1
            for r in job_waste(con, **kw).iter_rows(named=True):
                assert r["idle_gpu_hours"] <= r["gpu_hours"] + 1e-9
                assert r["covered_gpu_hours"] <= r["gpu_hours"] + 1e-9
                if r["cost_usd"] is not None:
                    assert r["idle_allocated_usd"] <= r["cost_usd"] + 1e-9
                    parts = sum(r[p] for p in PARTS if p != "unallocated_usd")
                    assert parts == pytest.approx(r["cost_usd"])
            for r in job_utilization(con, **kw).iter_rows(named=True):
                if r["unknown_share"] is not None:
                    assert -1e-9 <= r["unknown_share"] <= 1 + 1e-9


def dcgm_mig(gr_active: dict[str, float], scrapes: int = 2, step_s: int = 3600) -> str:
    """dcgm-exporter text of one A100 80GB PCIe card GPU-ed1353d6 on host n1 in MIG mode: instance 1 (3g.40gb)
    and 2 (4g.40gb), each reporting only DCGM_FI_PROF_GR_ENGINE_ACTIVE (a MIG instance has no GPU_UTIL), every
    ``step_s`` seconds from T0."""
    base = int(T0.replace(tzinfo=dt.UTC).timestamp() * 1000)
    lines = []
    for i in range(scrapes):
        for gi, profile in (("1", "3g.40gb"), ("2", "4g.40gb")):
            labels = (
                f'gpu="0",UUID="GPU-ed1353d6",modelName="NVIDIA A100 80GB PCIe",GPU_I_PROFILE="{profile}",'
                f'GPU_I_ID="{gi}",Hostname="n1"'
            )
            lines.append(
                f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} {gr_active[profile]} {base + i * step_s * 1000}"
            )
    return "\n".join(lines) + "\n"


def test_dcgm_instances_without_jobs_are_one_card(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """Two scrapes 1 h apart of a card whose 3g.40gb instance idles (0 %) and 4g.40gb instance is busy
    (100 %). Each sample stands for 3,600 s (the time to the next; the last one the cadence), so the card
    reports from 00:00 to 02:00: one pseudo-job of 1 GPU × 2 h × $7 = $14 (it was two of $14 each, $28).
    Inside it each instance weighs its slices: covered = (3/7 + 4/7) × 2 h = 2 h, unknown_share 0; mean
    utilization = 4/7 × 100 = 57.14 %; the idle 3g instance's two samples (7,200 s ≥ 30 min) are an idle
    stretch of 3/7 × 2 h = 0.857 GPU-h: idle_allocated = $14 × 3/7 = $6; the busy 4/7 (≥ the 60 % target)
    is productive, $8."""
    ingest_file(con, write(tmp_path, "mig.prom", dcgm_mig({"3g.40gb": 0.0, "4g.40gb": 1.0})))
    assert con.execute("SELECT DISTINCT interval_s FROM samples").fetchall() == [(3600.0,)]
    rows = job_waste(con).to_dicts()
    assert [r["job_id"] for r in rows] == ["unattributed:GPU-ed1353d6"]
    (r,) = rows
    assert r["gpu_count"] == 1.0 and r["gpu_model"] == A100
    assert r["gpu_hours"] == pytest.approx(2.0)
    assert r["cost_usd"] == pytest.approx(2.0 * A100_USD)  # $14
    assert r["idle_gpu_hours"] == pytest.approx(3 / 7 * 2.0)
    assert r["idle_allocated_usd"] == pytest.approx(6.0)
    assert r["productive_usd"] == pytest.approx(8.0)
    assert r["underused_usd"] == pytest.approx(0.0)
    assert r["unmeasured_usd"] == pytest.approx(0.0, abs=1e-9)
    u = job_utilization(con).row(0, named=True)
    assert u["mean_util_pct"] == pytest.approx(400 / 7)  # 57.14 %
    assert u["unknown_share"] == pytest.approx(0.0, abs=1e-9)
    assert u["p50_util_pct"] == pytest.approx(100.0)  # 4/7 of the card's time reads 100 %
    s = summary(con)
    assert (s["jobs"], s["gpu_hours"], s["spend_usd"]) == (1, pytest.approx(2.0), pytest.approx(14.0))
    assert s["idle_usd"] == pytest.approx(6.0)
    assert_invariants(con, [Filters(), DAY, Filters(teams=("unattributed",))])


def test_dcgm_instances_at_the_price_sheet(tmp_path: Path) -> None:
    """The tester's repro on the shipped price sheet: both instances at 50 %, two scrapes 1 h apart: one
    A100-80GB for 2 h at the sheet's on-demand price (2 × $1.79 = $3.58, not $7.16)."""
    con = memory_ledger()
    try:
        ingest_file(con, write(tmp_path, "mig.prom", dcgm_mig({"3g.40gb": 0.5, "4g.40gb": 0.5})))
        (price,) = con.execute(
            """SELECT arg_max(usd_per_gpu_hour, effective_from) FROM prices
               WHERE gpu_model = 'A100-80GB' AND tier = 'on_demand' AND cluster IS NULL"""
        ).fetchall()[0]
        s = summary(con)
        assert (s["jobs"], s["gpu_hours"]) == (1, pytest.approx(2.0))
        assert s["spend_usd"] == pytest.approx(2.0 * price)
        assert s["mean_util_pct"] == pytest.approx(50.0)
    finally:
        con.close()


def test_card_and_instance_rows_bill_the_card_once(con: duckdb.DuckDBPyConnection) -> None:
    """nvidia-smi -q -x of an A100 in MIG mode lists the card (power, memory; utilization N/A) and its four
    1g.20gb instances (memory only): five GPU rows, 5 snapshots 60 s apart. One pseudo-job: the card for
    5 × 60 s = 300 s = 1/12 GPU-h × $7 = $0.5833 (it was five, 5/12 GPU-h, $2.92). No utilization reading:
    all unmeasured, unknown_share 1. Energy is the card's own power, 70 W × 300 s = 21,000 J."""
    card = "n1:0"
    gpus = [card_row(card)] + [instance(card, gi, "1g.20gb") for gi in (3, 4, 5, 6)]
    samples = series(card, 0, [None] * 5, power_w=70.0, mem_used_mib=50.0, mem_total_mib=81920.0)
    for gi in (3, 4, 5, 6):
        samples += series(f"{card}/{gi}", 0, [None] * 5, mem_used_mib=12.0, mem_total_mib=19968.0)
    ingest(con, gpus=gpus, samples=samples)
    (r,) = job_waste(con).to_dicts()
    assert r["job_id"] == "unattributed:n1:0"
    assert r["gpu_hours"] == pytest.approx(300 / 3600)
    assert r["cost_usd"] == pytest.approx(300 / 3600 * A100_USD)
    assert r["unmeasured_usd"] == pytest.approx(r["cost_usd"])
    assert r["energy_kwh"] == pytest.approx(70.0 * 300 / 3.6e6)
    assert job_utilization(con).row(0, named=True)["unknown_share"] == pytest.approx(1.0)
    assert summary(con)["jobs"] == 1
    assert_invariants(con, [Filters(), DAY])


def test_a30_instances_weigh_quarters(con: duckdb.DuckDBPyConnection) -> None:
    """An A30 has 4 slices. Its 1g.6gb instance idles and its 2g.12gb instance is busy for 1 h; the fourth
    slice reports nothing. One pseudo-job: 1 × 1 h × $4 = $4. Covered = (1/4 + 2/4) × 1 h = 0.75 h, so
    unknown_share = 0.25 and $1 is unmeasured; idle = 1/4 h = $1; productive = 2/4 h = $2; mean utilization
    = (2/4 × 100) / (3/4) = 66.67 %."""
    card = "a30:0"
    ingest(
        con,
        gpus=[instance(card, 1, "1g.6gb", model=A30), instance(card, 2, "2g.12gb", model=A30)],
        samples=series(f"{card}/1", 0, [0.0] * 60) + series(f"{card}/2", 0, [100.0] * 60),
    )
    (r,) = job_waste(con).to_dicts()
    assert (r["job_id"], r["gpu_model"]) == ("unattributed:a30:0", A30)
    assert r["gpu_hours"] == pytest.approx(1.0)
    assert r["cost_usd"] == pytest.approx(A30_USD)
    assert r["idle_allocated_usd"] == pytest.approx(1.0)
    assert r["productive_usd"] == pytest.approx(2.0)
    assert r["unmeasured_usd"] == pytest.approx(1.0)
    assert r["idle_gpu_hours"] == pytest.approx(0.25)
    u = job_utilization(con).row(0, named=True)
    assert u["unknown_share"] == pytest.approx(0.25)
    assert u["mean_util_pct"] == pytest.approx(200 / 3)
    assert_invariants(con, [Filters(), DAY])


def test_a_card_with_one_instance_held_is_capacity_not_a_pseudo_job(con: duckdb.DuckDBPyConnection) -> None:
    """Job j1 holds the 3g.40gb instance of card n1:0 (gpu_count 3/7, as sacct counts
    ``gres/gpu:a100_3g.40gb=1``) for 2 h at 50 %; the 4g.40gb instance reports 0 % with no job. The card is
    not telemetry-only: j1 costs 3/7 × 2 h × $7 = $6, and the card's other 4/7 for 2 h is unallocated
    capacity, 8/7 GPU-h × $7 = $8: $14 in all, the card's 2 h once. (Before: the idle instance was a pseudo-job
    of a whole card, $14 more.) j1's 2 h of samples over its 6/7 GPU-h held are clamped (f = 3/7): all
    measured, at 50 % under the 60 % target: underused = $6 × 10/60 = $1, productive $5."""
    card = "n1:0"
    ingest(
        con,
        jobs=[job("j1", 0, 120, gpu_model=A100, gpu_count=3 / 7)],
        allocations=[
            {
                "job_id": "j1",
                "host": "n1",
                "gpu_id": f"{card}/1",
                "gpu_count": 3 / 7,
                "start_ts": at(0),
                "end_ts": at(120),
            }
        ],
        gpus=[instance(card, 1, "3g.40gb"), instance(card, 2, "4g.40gb")],
        samples=series(f"{card}/1", 0, [50.0] * 120) + series(f"{card}/2", 0, [0.0] * 120),
    )
    rows = {r["job_id"]: r for r in job_waste(con).iter_rows(named=True)}
    assert list(rows) == ["j1"]
    j1 = rows["j1"]
    assert j1["cost_usd"] == pytest.approx(6.0)
    assert (j1["underused_usd"], j1["productive_usd"]) == (pytest.approx(1.0), pytest.approx(5.0))
    un = unallocated(con).row(0, named=True)
    assert (un["cluster"], un["gpu_model"]) == ("c1", A100)
    assert un["observed_gpu_hours"] == pytest.approx(2.0)
    assert un["allocated_gpu_hours"] == pytest.approx(6 / 7)
    assert un["unallocated_gpu_hours"] == pytest.approx(8 / 7)
    assert un["unallocated_usd"] == pytest.approx(8.0)
    totals = waste_totals(con)
    assert totals["spend_usd"] == pytest.approx(14.0)
    assert totals["oversubscribed_gpu_hours"] == pytest.approx(0.0)
    assert_invariants(
        con,
        [Filters(), DAY, Filters(teams=("nlp",)), Filters(teams=("unallocated",)), Filters(clusters=("c1",))],
    )
    assert waste_totals(con, filters=Filters(teams=("nlp",)))["spend_usd"] == pytest.approx(6.0)


def test_an_unheld_instance_without_a_cluster_takes_its_card_s(con: duckdb.DuckDBPyConnection) -> None:
    """dcgm-exporter ingested without --cluster: the instance rows carry no cluster. Job j1 (cluster c1)
    holds the 3g.40gb instance for its hour 0-1, the only hour that instance reports; the 4g.40gb instance
    reports alone from hour 2 to 3, after a silence longer than the 30-minute capacity gap. That hour is
    still the card's, of c1 (the cluster its held instance takes from j1's allocation), and nobody held it:
    capacity 2 GPU-h (hours 0-1 and 2-3), held 3/7, unallocated 11/7 GPU-h × $7 = $11; with j1's $3, $14."""
    card = "n1:0"
    ingest(
        con,
        jobs=[job("j1", 0, 60, gpu_model=A100, gpu_count=3 / 7)],
        allocations=[
            {
                "job_id": "j1",
                "host": "n1",
                "gpu_id": f"{card}/1",
                "gpu_count": 3 / 7,
                "start_ts": at(0),
                "end_ts": at(60),
            }
        ],
        gpus=[instance(card, 1, "3g.40gb", cluster=None), instance(card, 2, "4g.40gb", cluster=None)],
        samples=series(f"{card}/1", 0, [50.0] * 60) + series(f"{card}/2", 120, [0.0] * 60),
    )
    assert job_waste(con)["job_id"].to_list() == ["j1"]
    un = unallocated(con).row(0, named=True)
    assert (un["cluster"], un["observed_gpu_hours"]) == ("c1", pytest.approx(2.0))
    assert un["unallocated_usd"] == pytest.approx(11.0)
    assert waste_totals(con)["spend_usd"] == pytest.approx(14.0)
    assert_invariants(con, [Filters(), DAY, Filters(teams=("unallocated",))])


def test_an_allocation_naming_the_card_claims_its_instances(con: duckdb.DuckDBPyConnection) -> None:
    """A job's allocation names card GPU-x by its UUID (an NVML sampler's row) while DCGM reported only its
    two instances: the card is the job's, so its instances are no pseudo-jobs. Job j1 holds the card for 1 h
    at $7: spend $7, and the card's observed hour is allocated, nothing unallocated (before: two pseudo-jobs
    of $7 each beside it)."""
    ingest(
        con,
        jobs=[job("j1", 0, 60, gpu_model=A100)],
        allocations=[
            {
                "job_id": "j1",
                "host": "n1",
                "gpu_id": "GPU-x",
                "gpu_count": 1.0,
                "start_ts": at(0),
                "end_ts": at(60),
            }
        ],
        gpus=[
            {**instance("GPU-x", 1, "3g.40gb"), "host": "n1"},
            {**instance("GPU-x", 2, "4g.40gb"), "host": "n1"},
        ],
        samples=series("GPU-x/1", 0, [30.0] * 60) + series("GPU-x/2", 0, [30.0] * 60),
    )
    assert job_waste(con)["job_id"].to_list() == ["j1"]
    totals = waste_totals(con)
    assert totals["spend_usd"] == pytest.approx(A100_USD)
    assert totals["unallocated_usd"] == pytest.approx(0.0)
    assert_invariants(con, [Filters(), DAY])


def test_instances_of_two_cards_are_two_pseudo_jobs(con: duckdb.DuckDBPyConnection) -> None:
    """Cards are told apart by their parent: n1:0's two instances and n1:1's one, for 1 h each, are two
    pseudo-jobs of 1 GPU-h ($7 each), not three, and not one."""
    ingest(
        con,
        gpus=[instance("n1:0", 1, "3g.40gb"), instance("n1:0", 2, "4g.40gb"), instance("n1:1", 1, "7g.80gb")],
        samples=series("n1:0/1", 0, [10.0] * 60)
        + series("n1:0/2", 0, [10.0] * 60)
        + series("n1:1/1", 0, [10.0] * 60),
    )
    costs = job_costs(con).sort("job_id")
    assert costs["job_id"].to_list() == ["unattributed:n1:0", "unattributed:n1:1"]
    assert costs["cost_usd"].to_list() == [pytest.approx(A100_USD), pytest.approx(A100_USD)]
    assert_invariants(con, [Filters(), DAY])


def test_exact_ties_read_the_same_from_samples_and_rollups(con: duckdb.DuckDBPyConnection) -> None:
    """Two 1g.10gb instances of one card for 90 min, one at 0 %, one at 100 %: each is 1/7 of the card, so the
    card's time at 0 % is exactly half of its measured time and the time-weighted median is 0 % (the first
    reading whose cumulative time reaches half), p95 100 %. Weighted by 1/7 a sample, the raw path's sum and
    the rollup's would round apart and read 0 % and 100 %; weighted by whole slices (1 each, divided by 7
    once), both read 0 %. A third 1g instance at exactly 5 % (the idle threshold) is an unused GPU of the
    pseudo-job in both paths: its own mean is its plain mean, never a weighted one rounded above 5 %."""
    card = "n1:0"
    ingest(
        con,
        gpus=[instance(card, gi, "1g.10gb") for gi in (1, 2)],
        samples=series(f"{card}/1", 0, [0.0] * 90) + series(f"{card}/2", 0, [100.0] * 90),
    )
    for source in (ORACLE, ROLLUPS):
        u = job_utilization(con, source=source).row(0, named=True)
        assert (u["p50_util_pct"], u["p95_util_pct"]) == (0.0, 100.0), source
        assert u["unknown_share"] == pytest.approx(5 / 7)  # 2 of 7 slices report
    ingest(con, gpus=[instance(card, 3, "1g.10gb")], samples=series(f"{card}/3", 0, [5.0] * 90))
    for source in (ORACLE, ROLLUPS):
        (sig,) = job_signals(con, source=source).to_dicts()
        assert sig["unused_gpus"] == 2, source  # the idle instance and the one at 5 %
        assert sig["covered_gpu_s"] == pytest.approx(3 / 7 * 90 * 60)
    assert_invariants(con, [Filters(), DAY])


@pytest.mark.parametrize(
    ("model", "profile", "memory_mib", "share"),
    [
        (A100, "3g.40gb", None, 3 / 7),
        (A100, "7g.80gb", None, 1.0),
        (A100, "1c.3g.40gb", None, 1 / 7),  # a compute instance: 1 of the 3g instance's slices
        (
            A100,
            "?g.20gb",
            20480.0,
            20480 / 81920,
        ),  # slices unknown: memory over the catalog card's 81,920 MiB
        (A100, None, None, 1 / 7),  # nothing known: one slice
        (A30, "2g.12gb", None, 2 / 4),
        ("H100-SXM-80GB", "1g.10gb", None, 1 / 7),
    ],
    ids=["3g", "7g", "compute-instance", "unsized", "no-profile", "a30-2g", "h100-1g"],
)
def test_card_share_of_an_instance(
    con: duckdb.DuckDBPyConnection, model: str, profile: str | None, memory_mib: float | None, share: float
) -> None:
    from analytics.cost import TELEMETRY_ONLY_GPUS_SQL

    row = {
        **instance("n1:0", 1, profile or "x", model=model),
        "mig_profile": profile,
        "memory_total_mib": memory_mib,
    }
    ingest(
        con,
        gpus=[row, card_row("n1:0", model=model)],
        samples=series("n1:0/1", 0, [10.0]) + series("n1:0", 0, [10.0]),
    )
    got = dict(con.execute(f"SELECT gpu_id, card_share FROM ({TELEMETRY_ONLY_GPUS_SQL})").fetchall())
    assert got == {"n1:0/1": pytest.approx(share), "n1:0": 1.0}


def test_a_second_view_of_a_whole_card_weighs_the_card(con: duckdb.DuckDBPyConnection) -> None:
    """A GPU row with a parent but no MIG profile and no ``<card>/<instance>`` id (a W&B series made a view of
    its host's card, collectors/attribute.py) is the whole card seen twice: share 1, and one pseudo-job."""
    from analytics.cost import TELEMETRY_ONLY_GPUS_SQL

    view = {**card_row("n1:0"), "gpu_id": "n1:0-view", "parent_gpu_id": "n1:0"}
    ingest(
        con, gpus=[card_row("n1:0"), view], samples=series("n1:0", 0, [10.0]) + series("n1:0-view", 0, [10.0])
    )
    got = dict(con.execute(f"SELECT gpu_id, card_share FROM ({TELEMETRY_ONLY_GPUS_SQL})").fetchall())
    assert got == {"n1:0": 1.0, "n1:0-view": 1.0}
    assert job_costs(con)["job_id"].to_list() == ["unattributed:n1:0"]


@pytest.mark.datasets
def test_real_nvidia_smi_xml_of_a_mig_card_five_snapshots(
    con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    """The real nvidia-smi -q -x of an A100-SXM4-80GB with 4 MIG 1g.20gb instances, as 5 snapshots 60 s apart
    (``nvidia-smi -q -x -l 60``): 1 card × 300 s = 1/12 GPU-h, $7/12 = $0.5833, one pseudo-job (it was five
    of 300 s each: 5/12 GPU-h)."""
    text = dataset("nvidia-smi-q-xml/telegraf_a100-sxm4-v12.xml").read_text(encoding="utf-8")
    stamp = "<timestamp>Fri Aug  4 11:44:30 2023</timestamp>"
    assert stamp in text
    snaps = [text.replace(stamp, f"<timestamp>Fri Aug  4 11:{44 + i}:30 2023</timestamp>") for i in range(5)]
    ingest_file(
        con,
        write(tmp_path, "mig5.xml", "\n".join(s.strip() for s in snaps) + "\n"),
        opts=IngestOptions(tz="UTC"),
    )
    assert con.execute("SELECT count(*), count(DISTINCT gpu_id) FROM samples").fetchall() == [(25, 5)]
    costs = job_costs(con)
    assert costs["job_id"].to_list() == ["unattributed:GPU-513536b6-7d19-9063-b049-1e69664bb298"]
    assert costs["gpu_hours"].to_list() == [pytest.approx(300 / 3600)]
    assert costs["cost_usd"].to_list() == [pytest.approx(300 / 3600 * A100_USD)]
    day = Filters(since=dt.date(2023, 8, 4), until=dt.date(2023, 8, 4))
    assert math.isclose(summary(con, filters=day)["gpu_hours"], 300 / 3600)
    assert_invariants(con, [Filters(), day])
