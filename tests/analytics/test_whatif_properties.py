"""The what-if and the price in force over generated cluster shapes with dated price rows (issue 41).

The shapes are tests/analytics/money_shapes.py's (MIG instances, time-slicing, host-level ties, requeues,
unclaimed cards, hosts without telemetry); the prices are drawn by ``money_shapes.dated_prices``: H100 and
A100 rows, on-demand and spot, generic and per cluster, dated before the data, at its first midnight, at the
midnight inside it and after it. For each, against ``money_shapes.hand_rate`` (docs/metrics.md "Cost" read
literally, written apart from gpuledger/ledger/prices.py):

- every job's cost is its GPU-hours each day at the price in force that day (the view narrowed to each day
  gives them: a card shared only after a price change is cut at the new price);
- a row dated after the data changes no figure;
- the what-if's "now" is the summary, and with no change nothing moves;
- moving a team to spot saves, on the whole ledger and on the second day alone, what repricing each of its
  jobs by hand saves (a job with no price as booked billed on spot), and what the same ledger re-billed with
  the team's jobs asking for spot saves;
- H100 → A100 saves what repricing each H100 job by hand at A100's row in force saves;
- no negative dollar or GPU-hour in the summary or a job.

``WHATIF_EXAMPLES`` (default 5: the module in 52-91 s on the loaded 2-core machine) sets how many shapes;
bench/money_properties.py runs 200. Each example spends about 40 % landing its ledger, 40 % in five summaries
(per-job parts and unallocated capacity), the rest in the what-if jobs and this module's per-day oracle.
"""

from __future__ import annotations

import datetime as dt
import os

import polars as pl
import pytest

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings

from analytics.cost import job_costs
from analytics.filters import Filters
from analytics.shared import sharing
from analytics.summary import summary
from analytics.whatif import what_if, whatif_jobs
from analytics.whatif_audit import negative_money, spot_saving_sql
from gpuledger.ledger.prices import price_book
from gpuledger.ledger.settings import Settings
from tests.analytics.build import H100, T0
from tests.analytics.money_shapes import (
    A100,
    CADENCE_MIN,
    SLOT_MIN,
    TEAMS,
    Place,
    Shape,
    _alloc,
    _job,
    at,
    dated_prices,
    hand_usd,
    put_prices,
    shapes,
)
from tests.analytics.test_money_properties import land

EXAMPLES = int(os.environ.get("WHATIF_EXAMPLES", "5"))
FIRST_DAY = Filters(since=T0.date(), until=T0.date())
AFTER_FIRST_DAY = Filters(since=(T0 + dt.timedelta(days=1)).date())
SECOND_DAY = Filters(since=(T0 + dt.timedelta(days=1)).date(), until=(T0 + dt.timedelta(days=1)).date())
CENT = 0.005  # the what-if leaves a job whose saving is under half a cent as it is
PriceRows = list[tuple[str, str, str | None, dt.date, float]]


Days = dict[str, list[tuple[dt.datetime, dt.datetime, float]]]  # job → its (span, GPU-hours) each UTC day


def job_days(con, view: Filters) -> Days:
    """Each job's time inside ``view``, day by day: the view narrowed to each UTC day (job_costs' spans and
    GPU-hours). Within a day one row is in force, so a job's dollars are Σ its GPU-hours each day × that day's
    price: a card shared only after a price change takes its cut at the new price, not spread over the job."""
    whole = job_costs(con, filters=view)
    if whole.is_empty():
        return {}
    out: Days = {}
    day = whole["span_start"].min().date()
    while dt.datetime.combine(day, dt.time()) < whole["span_end"].max():
        if (view.since is None or view.since <= day) and (view.until is None or day <= view.until):
            for j in job_costs(con, filters=Filters(since=day, until=day)).iter_rows(named=True):
                out.setdefault(j["job_id"], []).append((j["span_start"], j["span_end"], j["gpu_hours"]))
        day += dt.timedelta(days=1)
    return out


def hand_job(
    rows: PriceRows, days: Days, j: dict, model: str, tier: str, *, fallback: bool = True
) -> float | None:
    """A job's GPU-hours each day at :func:`hand_usd`'s price that day (spread over its span that day)."""
    total = 0.0
    for start, end, gpu_hours in days.get(j["job_id"], []):
        usd = hand_usd(rows, model, tier, j["cluster"], start, end, fallback=fallback)
        if usd is None:
            return None
        total += gpu_hours * usd / ((end - start).total_seconds() / 3600)
    return total


def hand_spot_saving(rows: PriceRows, days: Days, jobs: pl.DataFrame, team: str) -> float:
    """docs/metrics.md "What-if" read literally: each of the team's jobs as the ledger would bill it asking
    for spot, day by day: each UTC day spot makes cheaper moves (one row is in force all day, so a day
    chooses as its price piece does); a day with no price as booked is billed on spot (its spot dollars
    come off the saving)."""
    out = 0.0
    for j in jobs.filter(pl.col("team") == team).iter_rows(named=True):
        cost = j["cost_usd"]
        if (cost is not None and cost <= 0) or (j["gpu_hours"] or 0) <= 0 or j["gpu_model"] is None:
            continue
        if hand_usd(rows, j["gpu_model"], "spot", j["cluster"], T0, T0, fallback=False) is None:
            continue  # no spot row for the model there at all: the job stays
        for day in days.get(j["job_id"], []):
            one = {j["job_id"]: [day]}
            new = hand_job(rows, one, j, j["gpu_model"], "spot")
            was = hand_job(rows, one, j, j["gpu_model"], j["pricing_tier"])
            if new is None or day[2] <= 0:
                continue
            if was is None:
                out -= new
            elif new < was * (1 - 1e-9):
                out += was - new
    return out


def spot_saving(con, cfg: Settings, book, view: Filters, team: str) -> float:
    """``whatif --spot TEAM``'s saving over ``view``."""
    s = summary(con, filters=view, settings=cfg)
    jobs = whatif_jobs(con, filters=view, settings=cfg)
    return what_if(s, jobs, pl.DataFrame(), book, cfg, spot=(team,)).changes[0].saving_usd


def check_whatif(shape: Shape, rows: PriceRows) -> None:
    con = land(shape)
    try:
        put_prices(con, rows)
        cfg = Settings()  # every cluster on_demand: capacity bought by the hour
        with sharing(con):
            now = summary(con, settings=cfg)
            book = price_book(con)
            days = job_days(con, Filters())
            for j in job_costs(con).filter(pl.col("cost_usd").is_not_null()).iter_rows(named=True):
                want = hand_job(rows, days, j, j["gpu_model"], j["pricing_tier"])
                assert j["cost_usd"] == pytest.approx(want, abs=1e-6), (
                    "cost",
                    j["job_id"],
                    j["cost_usd"],
                    want,
                )
            for view in (Filters(), SECOND_DAY):
                s = summary(con, filters=view, settings=cfg)
                jobs = whatif_jobs(con, filters=view, settings=cfg)
                days = job_days(con, view)
                assert negative_money(s, jobs) == [], view
                assert what_if(s, jobs, pl.DataFrame(), book, cfg).after == s
                for team in TEAMS:
                    got = what_if(s, jobs, pl.DataFrame(), book, cfg, spot=(team,))
                    want = hand_spot_saving(rows, days, jobs, team)
                    assert got.changes[0].saving_usd == pytest.approx(want, abs=1e-6), ("spot", team, view)
                    assert got.after["spend_usd"] == pytest.approx(s["spend_usd"] - want, abs=1e-6)
                    if view == SECOND_DAY:  # disjoint views add up: the first day and the rest, to the whole
                        parts = [spot_saving(con, cfg, book, f, team) for f in (FIRST_DAY, AFTER_FIRST_DAY)]
                        whole = spot_saving(con, cfg, book, Filters(), team)
                        assert sum(parts) == pytest.approx(whole, abs=1e-6), ("spot days", team, parts, whole)
                moved = what_if(s, jobs, pl.DataFrame(), book, cfg, models=((H100, A100),)).changes[0]
                want = 0.0
                for j in jobs.filter(
                    (pl.col("gpu_model") == H100) & (pl.col("cost_usd").is_null() | (pl.col("cost_usd") > 0))
                ).iter_rows(named=True):
                    new = hand_job(rows, days, j, A100, j["pricing_tier"])
                    want += (j["cost_usd"] or 0.0) - new if new is not None else 0.0
                assert moved.saving_usd == pytest.approx(want, abs=1e-6), ("model", view)
        # the same ledger re-billed: the first team's jobs ask for spot: where spot is never dearer (no cluster
        # row under a spot row) the spend falls by what the what-if saves, up to half a cent a job; and always
        # check's SQL re-bill, day by day, saves what the what-if saves
        team = TEAMS[0]
        with sharing(con):
            jobs = whatif_jobs(con, filters=Filters(), settings=cfg)
            saving = what_if(now, jobs, pl.DataFrame(), book, cfg, spot=(team,)).changes[0].saving_usd
            assert spot_saving_sql(con, team, cfg, Filters()) == pytest.approx(saving, abs=1e-6), "sql spot"
        spots = [r[4] for r in rows if r[1] == "spot"]
        if not spots or min(r[4] for r in rows if r[1] == "on_demand") >= max(spots):
            n = jobs.filter(pl.col("team") == team).height
            con.execute("BEGIN TRANSACTION")
            con.execute("UPDATE jobs SET pricing_tier = 'spot' WHERE team = ?", [team])
            rebilled = summary(con, settings=cfg)["spend_usd"]
            con.execute("ROLLBACK")
            assert rebilled == pytest.approx(now["spend_usd"] - saving, abs=CENT * max(n, 1) + 1e-6)
        # a row dated after the data changes nothing in it
        later = (T0 + dt.timedelta(days=40)).date()
        put_prices(
            con, [*rows, (H100, "on_demand", None, later, 0.01), (H100, "on_demand", "c0", later, 0.01)]
        )
        after = summary(con, settings=cfg)
        assert after["spend_usd"] == pytest.approx(now["spend_usd"], abs=1e-6)
        assert after["waste"] == pytest.approx(now["waste"], abs=1e-6)
    finally:
        con.close()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=not os.environ.get("MONEY_RANDOM"),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(shapes(), dated_prices())
def test_whatif_and_prices_in_force_over_generated_clusters(shape: Shape, rows: PriceRows) -> None:
    check_whatif(shape, rows)


@pytest.mark.parametrize(
    ("c0_on_demand", "cost", "saving"),
    [(2.0, 24.0, 18.0), (0.25, 17.0, 12.0)],
    ids=["spot-cheaper-both-days", "spot-dearer-on-day-2"],
)
def test_a_cluster_row_dated_inside_the_data_applies_from_its_date_only(
    c0_on_demand: float, cost: float, saving: float
) -> None:
    """By hand: one card on c0 held whole by j0 from 20:00 to 04:00 the next day (8 GPU-h). Generic H100
    on-demand $4 from before the data; c0's own from the second day; spot $1 generic, c0's $0.50 from the
    second day. c0 at $2: cost 4 h × $4 + 4 h × $2 = $24; on spot 4 × $1 + 4 × $0.50 = $6, $18 saved. c0 at
    $0.25 (under spot): cost 4 × $4 + 4 × $0.25 = $17; the first day moves (4 × $1 instead of $16), the second
    stays ($0.50 > $0.25): $12 saved (one choice for the whole job moved both days: $11)."""
    place = Place("c0", "c0h0", "c0h0:0", 36, 60)
    samples = [  # 18:00 to 06:00 at 50 %, every 5 minutes
        {"ts": at(36) + dt.timedelta(minutes=CADENCE_MIN * i), "gpu_id": "c0h0:0", "util_pct": 50.0}
        for i in range(12 * 60 // CADENCE_MIN)
    ]
    shape = Shape(
        gpus=[{"gpu_id": "c0h0:0", "host": "c0h0", "model": H100, "cluster": "c0"}],
        samples=samples,
        jobs=[_job("j0", place, 40, 56, 1.0, TEAMS[0], "COMPLETED", None, None, None)],
        allocations=[_alloc("j0", place, "c0h0:0", 40, 56, 1.0)],
        split_at=T0 + dt.timedelta(days=3),
    )
    day2 = (T0 + dt.timedelta(days=1)).date()
    rows = [
        (H100, "on_demand", None, dt.date(2025, 1, 1), 4.0),
        (H100, "on_demand", "c0", day2, c0_on_demand),
        (H100, "spot", None, dt.date(2025, 1, 1), 1.0),
        (H100, "spot", "c0", day2, 0.5),
    ]
    con = land(shape)
    try:
        put_prices(con, rows)
        cfg = Settings()
        with sharing(con):
            assert job_costs(con).filter(pl.col("job_id") == "j0")["cost_usd"].item() == pytest.approx(cost)
            s = summary(con, settings=cfg)
            jobs = whatif_jobs(con, filters=Filters(), settings=cfg)
            change = what_if(s, jobs, pl.DataFrame(), price_book(con), cfg, spot=(TEAMS[0],)).changes[0]
        assert change.saving_usd == pytest.approx(saving)
    finally:
        con.close()
    check_whatif(shape, rows)


def _card(gid: str, cluster: str, lo: int, hi: int) -> tuple[Place, list[dict]]:
    """One H100 card reporting at 50 % every CADENCE_MIN minutes over slots [lo, hi)."""
    place = Place(cluster, gid.split(":")[0], gid, lo, hi)
    n = (hi - lo) * SLOT_MIN // CADENCE_MIN
    samples = [
        {"ts": at(lo) + dt.timedelta(minutes=CADENCE_MIN * i), "gpu_id": gid, "util_pct": 50.0}
        for i in range(n)
    ]
    return place, samples


def test_a_job_unpriced_as_booked_is_billed_on_spot_in_the_whatif() -> None:
    """The derandomized shape the property failed on (issue 41), cut to the jobs that mattered, with its
    drawn price rows: A100 has spot rows only, so a job booked as A100 is unpriced on on_demand and priced
    on spot. Card c1h0:0 (H100, cluster c1) reports 21:00-22:30 on 2025-03-04; j3 (nlp, booked A100) holds
    half of it 21:00-22:30, j2 (nlp, H100) all of it 21:30-22:00: 1.5 GPUs declared then, split 1/3 : 2/3.
    j3: 0.5 × 1.5 h − (0.5 − 1/3) × 0.5 h = 2/3 GPU-h; j2: 1/3 GPU-h. On 2025-03-04 H100 on_demand is the
    generic $4 (c1 has no on_demand row), H100 spot c1's $1.00 (from 2025-03-03), A100 spot c1's $0.50.
    Now: j2 $4/3, j3 unpriced, unallocated 1.5 − 1.0 held = 0.5 card-h × $4 = $2: spend $3.33.
    nlp on spot: j2 $1/3 (saves $1.00), j3 2/3 × $0.50 = $1/3 billed: saving $0.67, after $2.67, what the
    ledger re-billed with nlp on spot costs (before the fix the what-if left j3 out: $1.00 and $2.33)."""
    rows = [
        (H100, "on_demand", None, dt.date(2025, 2, 1), 4.0),
        (H100, "spot", "c0", dt.date(2025, 2, 1), 1.0),
        (H100, "spot", "c0", dt.date(2025, 3, 8), 1.0),
        (H100, "spot", "c1", dt.date(2025, 2, 1), 0.5),
        (H100, "spot", "c1", dt.date(2025, 3, 3), 1.0),
        (A100, "spot", "c0", dt.date(2025, 3, 8), 1.0),
        (A100, "spot", "c1", dt.date(2025, 2, 1), 0.5),
    ]
    place, samples = _card("c1h0:0", "c1", 90, 93)
    j3 = {**_job("j3", place, 90, 93, 0.5, TEAMS[0], "COMPLETED", None, None, None), "gpu_model": A100}
    shape = Shape(
        gpus=[{"gpu_id": "c1h0:0", "host": "c1h0", "model": H100, "cluster": "c1"}],
        samples=samples,
        jobs=[j3, _job("j2", place, 91, 92, 1.0, TEAMS[0], "COMPLETED", None, None, None)],
        allocations=[_alloc("j3", place, "c1h0:0", 90, 93, 0.5), _alloc("j2", place, "c1h0:0", 91, 92, 1.0)],
        split_at=T0 + dt.timedelta(days=3),
    )
    con = land(shape)
    try:
        put_prices(con, rows)
        cfg = Settings()
        with sharing(con):
            s = summary(con, settings=cfg)
            jobs = whatif_jobs(con, filters=Filters(), settings=cfg)
            got = what_if(s, jobs, pl.DataFrame(), price_book(con), cfg, spot=(TEAMS[0],))
        by_id = {j["job_id"]: j for j in jobs.iter_rows(named=True)}
        assert by_id["j3"]["gpu_hours"] == pytest.approx(2 / 3) and by_id["j3"]["cost_usd"] is None
        assert by_id["j2"]["cost_usd"] == pytest.approx(4 / 3)
        assert s["spend_usd"] == pytest.approx(4 / 3 + 2)
        assert s["unpriced_gpu_hours"] == pytest.approx(2 / 3)
        change = got.changes[0]
        assert change.saving_usd == pytest.approx(1.0 - 1 / 3)
        assert change.jobs == 2 and change.priced_gpu_hours == pytest.approx(2 / 3)
        assert got.after["spend_usd"] == pytest.approx(2 / 3 + 2)
        assert got.after["unpriced_gpu_hours"] == pytest.approx(0.0)
        con.execute("UPDATE jobs SET pricing_tier = 'spot' WHERE team = ?", [TEAMS[0]])
        rebilled = summary(con, settings=cfg)
        assert rebilled["spend_usd"] == pytest.approx(got.after["spend_usd"])
        assert rebilled["waste"] == pytest.approx(got.after["waste"])
        con.execute("UPDATE jobs SET pricing_tier = 'on_demand'")
    finally:
        con.close()
    check_whatif(shape, rows)


def test_a_share_cut_after_a_price_change_is_taken_off_at_the_new_price() -> None:
    """By hand: card c0h0:0 reports 18:00-06:00 across the first midnight. j0 (nlp) holds it whole 20:00-04:00,
    j1 (cv) whole 00:00-02:00 (both by id): 00:00-02:00 each gets half. H100 on_demand $4, $6 from the second
    day; spot $1, $0.50 from the second day. j0: 4 h × $4 + (4 − 1) h × $6 = $34 (the cut spread over its
    span gave 7/8 × $40 = $35, while the summary's per-day pieces gave $34); j1: 1 h × $6 = $6; the card's
    12 h cost 6 × $4 + 6 × $6 = $60. nlp on spot: j0 at 4 × $1 + 3 × $0.50 = $5.50, saving $28.50 (the
    even spread gave 7/8 × $6 = $5.25, $28.75), after $31.50, what the ledger re-billed costs."""
    place, samples = _card("c0h0:0", "c0", 36, 60)
    shape = Shape(
        gpus=[{"gpu_id": "c0h0:0", "host": "c0h0", "model": H100, "cluster": "c0"}],
        samples=samples,
        jobs=[
            _job("j0", place, 40, 56, 1.0, TEAMS[0], "COMPLETED", None, None, None),
            _job("j1", place, 48, 52, 1.0, TEAMS[1], "COMPLETED", None, None, None),
        ],
        allocations=[_alloc("j0", place, "c0h0:0", 40, 56, 1.0), _alloc("j1", place, "c0h0:0", 48, 52, 1.0)],
        split_at=T0 + dt.timedelta(days=3),
    )
    day2 = (T0 + dt.timedelta(days=1)).date()
    rows = [
        (H100, "on_demand", None, dt.date(2025, 1, 1), 4.0),
        (H100, "on_demand", None, day2, 6.0),
        (H100, "spot", None, dt.date(2025, 1, 1), 1.0),
        (H100, "spot", None, day2, 0.5),
    ]
    con = land(shape)
    try:
        put_prices(con, rows)
        cfg = Settings()
        with sharing(con):
            costs = {r["job_id"]: r["cost_usd"] for r in job_costs(con).iter_rows(named=True)}
            assert costs == pytest.approx({"j0": 34.0, "j1": 6.0})
            s = summary(con, settings=cfg)
            assert s["spend_usd"] == pytest.approx(60.0)
            jobs = whatif_jobs(con, filters=Filters(), settings=cfg)
            got = what_if(s, jobs, pl.DataFrame(), price_book(con), cfg, spot=(TEAMS[0],))
        assert got.changes[0].saving_usd == pytest.approx(28.5)
        assert got.after["spend_usd"] == pytest.approx(31.5)
        assert spot_saving_sql(con, TEAMS[0], cfg, Filters()) == pytest.approx(28.5)
        con.execute("UPDATE jobs SET pricing_tier = 'spot' WHERE team = ?", [TEAMS[0]])
        rebilled = summary(con, settings=cfg)
        assert rebilled["spend_usd"] == pytest.approx(31.5)
        assert rebilled["waste"] == pytest.approx(got.after["waste"])
        con.execute("UPDATE jobs SET pricing_tier = 'on_demand'")
    finally:
        con.close()
    check_whatif(shape, rows)
