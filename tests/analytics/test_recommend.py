"""The recommendations engine: every kind on a hand-built ledger, each dollar figure worked out by hand.

The view is T0's day (2025-03-03); the ledger's data ends at 12:00 that day (the latest job end), so the
view lasts 12 h and view_days is floored at 1: usd_per_week = saving_usd × 7 / 1.
Prices (tests/analytics/recommend_ledgers.py): H100 $3.00 on demand, $1.50 spot; A100 $2.00; L40S $1.00;
L4 $0.50 per GPU-hour.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from analytics.filters import Filters, horizon
from analytics.recommend import (
    KINDS,
    RECOMMENDATION_COLUMNS,
    Listing,
    as_json,
    recommendation_lists,
    recommendations,
    view_window,
)
from analytics.savings import savings_total
from gpuledger.ledger.db import memory_ledger, writer
from gpuledger.ledger.settings import ClusterSettings, Settings
from tests.analytics.build import H100, alloc, ingest, job, series
from tests.analytics.recommend_ledgers import A100, DAY, EARLIER, recommend_ledger, run, set_prices
from tests.conftest import gpuledger

VIEW = Filters(since=DAY, until=DAY)
# cluster c1 billed per job (capacity nobody holds is not paid for): a cheaper GPU or tier saves by itself
ELASTIC = Settings(clusters={"c1": ClusterSettings(billing="per_job")})


@pytest.fixture(scope="module")
def recs() -> pl.DataFrame:
    """Every rule's own items (problems=False): each kind's dollars are checked on their own."""
    con = memory_ledger()
    recommend_ledger(con)
    out = recommendations(con, filters=VIEW, settings=ELASTIC, problems=False)
    con.close()
    return out


def _item(recs: pl.DataFrame, kind: str, target: str) -> dict[str, object]:
    rows = recs.filter((pl.col("kind") == kind) & (pl.col("target") == target)).to_dicts()
    assert len(rows) == 1, f"expected one {kind} item for {target}, got {rows}"
    return rows[0]


# (kind, target, saving in the view worked out by hand, confidence)
EXPECTED = [
    # nb1: 1 × H100 for 10 h = $30; 480 one-minute samples at 1 % form one 8 h idle stretch: 8/10 × $30
    ("reclaim_idle", "nb1", 8 / 10 * 30.0, "high"),
    # an auto-stop after 60 min would save the stretch beyond the first hour: (8 h − 1 h) × $3.00
    ("stop_idle_notebooks", "alice", (8 - 1) * 3.0, "high"),
    # over8: 8 × 4 h × $3 = $96; 6 of the 8 GPUs sat at 0 %: 96 × 6/8
    ("fewer_gpus", "over8", 96.0 * 6 / 8, "high"),
    # sc16: 16 × 2 h × $3 = $96; per-GPU throughput 112000/16 = 7000 vs 80000/8 = 10000 at 8 GPUs
    ("fewer_gpus", "sc16", 96.0 * (1 - 7000 / 10000), "medium"),
    # spot1: 2 GPUs × 12 h = 24 GPU-h at $3.00; spot $1.50 + 10 % rework = $1.65
    ("use_spot", "spot1", 24 * (3.00 - 1.50 * 1.10), "medium"),
    # tiny1: 1 × A100 6 h = $12; 15 % SM-active needs > 1/7 × 0.9 = 12.9 %, so 2g.20gb (2/7 of the GPU)
    ("mig_slice", "tiny1", 12.0 * (1 - 2 / 7), "medium"),
    # tiny1: on L4 the same work is 15 % × 312/121 = 38.7 % busy (≤ 80 %), 6000 MiB ≤ 0.9 × 23034: 6 h × (2.00 − 0.50)
    ("right_size_gpu", "tiny1", 6 * (2.00 - 0.50), "medium"),
    # nb1 gets neither a slice nor a smaller card: outside its idle stretch it runs at ≤ 10.8 × 600/120 = 54 %
    # (true 50 %), which no 1g/2g/3g slice (≤ 3/7 × 0.9 = 38.6 %) holds and L40S would run 147 % busy.
    # nb2: 1 × A100 8 h = $16; one 4 h idle stretch: 4/8 × $16
    ("reclaim_idle", "nb2", 4 / 8 * 16.0, "high"),
    # bob's auto-stop after 60 min saves (4 h − 1 h) × $2.00
    ("stop_idle_notebooks", "bob", (4 - 1) * 2.0, "high"),
    # nb2 outside its idle stretch: mean 8 % × 480/240 = 16 % (idle samples counted as 0; true 15 %):
    # 1/7 × 0.9 = 12.9 % < 16 % ≤ 2/7 × 0.9 = 25.7 %, so 2g.20gb: $16 × (1 − 2/7)
    ("mig_slice", "nb2", 16.0 * (1 - 2 / 7), "low"),
    # nb2 on L4: 16 % × 312/121 = 41 % busy ≤ 80 %, $0.50 ≤ 0.9 × $2.00: 8 h × (2.00 − 0.50)
    ("right_size_gpu", "nb2", 8 * (2.00 - 0.50), "low"),
    # bs8: memory 10240 + 1280 × batch fits 0.9 × 81920 = 73728 up to 49.6 → 48, the family ran up to 32
    # (2× → 64), and without a noise scale the global batch grows at most 4× → bound 32. Throughput measured
    # 12000 / 16000 / 19200 at 8 / 16 / 32: gain 0.6 at 32; the knee (≥ 0.54) is 32 itself (24 gives
    # 24000·24/32 / 12000 − 1 = 0.5): cost 8 h × $3 = $24, saving 24 × 0.6 ÷ 1.6 = $9
    ("larger_batch", "bs8", 24.0 * 0.6 / 1.6, "high"),
]
# one training job each whose family ran once in the ledger (analytics/recurrence.py); sc16 and bs8 recur:
# their families (scaling-8, small-batch-16 and -32) ran a month earlier, outside the view
ONE_OFF = {"over8", "spot1"}
# Each dollar once (analytics/savings.py), walking the recurring items first, then the one-offs; per view-day:
# sc16 28.8 · reclaim nb1 24 · stop alice 21 → 0 (max(24, 21) = 24 already counted) ·
# right_size nb2 12 · mig nb2 11.43 → 0 (one card at a time) · bs8 10 · right_size tiny1 9 · mig tiny1 → 0 ·
# reclaim nb2 8 → 16 × (1 − (1 − 8/16)(1 − 12/16)) − 12 = 14 − 12 = 2 (idle time and card compound) ·
# stop bob 6 → 0 (max(8, 6) = 8) · then the one-offs: over8 72 · spot1 32.4
COUNTED = {
    ("fewer_gpus", "over8"): 72.0,
    ("use_spot", "spot1"): 32.4,
    ("fewer_gpus", "sc16"): 28.8,
    ("reclaim_idle", "nb1"): 24.0,
    ("stop_idle_notebooks", "alice"): 0.0,
    ("right_size_gpu", "nb2"): 12.0,
    ("mig_slice", "nb2"): 0.0,
    ("larger_batch", "bs8"): 9.0,
    ("right_size_gpu", "tiny1"): 9.0,
    ("mig_slice", "tiny1"): 0.0,
    ("reclaim_idle", "nb2"): 2.0,
    ("stop_idle_notebooks", "bob"): 0.0,
}
TOTAL_PER_DAY = 28.8 + 24 + 12 + 9 + 9 + 2  # the recurring items: 84.8 a day, $593.60/week
ONE_OFF_SAVED = 72 + 32.4  # the one-offs (no job shared with a recurring item): $104.40
LISTED_PER_DAY = 28.8 + 24 + 21 + 12 + 16 * 5 / 7 + 9 + 9 + 12 * 5 / 7 + 8 + 6


@pytest.mark.parametrize(
    ("kind", "target", "saving", "confidence"), EXPECTED, ids=[f"{k}-{t}" for k, t, *_ in EXPECTED]
)
def test_each_kind_dollars_match_the_hand_computation(recs, kind, target, saving, confidence):
    item = _item(recs, kind, target)
    assert item["saving_usd"] == pytest.approx(saving, abs=0.005)
    # notebooks (a habit), services and run families with 2+ runs in the ledger recur: $/week; a training run
    # whose family ran once is a one-off: no $/week
    if target in ONE_OFF:
        assert item["recurring"] is False and item["usd_per_week"] is None
    else:
        assert item["recurring"] is True
        assert item["usd_per_week"] == pytest.approx(saving * 7 / 1, abs=0.005)
    assert item["kind_label"] and item["kind_label"] != kind
    assert item["confidence"] == confidence
    assert f"${saving:,.2f}" in str(item["evidence"])
    assert item["action"]


def test_the_list_is_ranked_and_holds_nothing_unexpected(recs):
    saved = recs["saving_usd"].to_list()  # one view: the same order as $ per week
    assert saved == sorted(saved, reverse=True)
    assert sorted(zip(recs["kind"], recs["target"], strict=True)) == sorted((k, t) for k, t, *_ in EXPECTED)
    assert set(recs["kind"]) <= set(KINDS)
    assert len(set(recs["kind"])) == 7  # the seven job kinds this ledger plants


def test_batch_item_carries_the_batch_fields(recs):
    item = _item(recs, "larger_batch", "bs8")
    assert item["current_batch_size"] == 8
    assert item["recommended_batch_size"] == 32 == item["knee_batch_size"]
    assert item["largest_observed_batch_size"] == 32
    assert (item["memory_model"], item["fit_quality"]) == ("fitted", "good")
    assert item["predicted_peak_mem_mib"] == pytest.approx(10240 + 1280 * 32)  # 51200
    assert item["card_mem_mib"] == 81920
    assert item["predicted_throughput_gain_pct"] == pytest.approx(60.0)  # 19200 / 12000 − 1, measured
    assert "√4" in str(item["lr_rule"]) and "warm-up" in str(item["lr_rule"])  # AdamW, global batch × 4
    assert item["confidence_reasons"]
    assert item["action"] not in item["evidence"]  # action once, evidence once


def test_json_items_have_the_contract_fields_only_batch_items_add_batch_fields(recs):
    items = as_json(recs)
    for item in items:
        assert {"kind", "target", "evidence", "action", "usd_per_week", "confidence"} <= item.keys()
        has_batch = "recommended_batch_size" in item
        assert has_batch == (item["kind"] == "larger_batch")
    assert json.loads(json.dumps(items))  # JSON-serialisable as is


def test_each_dollar_is_counted_once_across_overlapping_items(recs):
    for (kind, target), counted in COUNTED.items():
        item = _item(recs, kind, target)
        assert item["counted_saving_usd"] == pytest.approx(counted, abs=1e-6), (kind, target)
        if target in ONE_OFF:
            assert item["counted_usd_per_week"] is None
        else:
            assert item["counted_usd_per_week"] == pytest.approx(counted * 7, abs=1e-6), (kind, target)
    total = savings_total(recs)
    assert total["total_usd_per_week"] == pytest.approx(TOTAL_PER_DAY * 7, abs=0.01)  # $593.60
    assert total["listed_usd_per_week"] == pytest.approx(LISTED_PER_DAY * 7, abs=0.01)
    assert total["overlap_usd_per_week"] == pytest.approx((LISTED_PER_DAY - TOTAL_PER_DAY) * 7, abs=0.01)
    assert total["one_off_saved_usd"] == pytest.approx(ONE_OFF_SAVED, abs=0.01)
    assert (total["items"], total["one_off_items"]) == (len(EXPECTED), len(ONE_OFF))
    assert total["by_kind"]["stop_idle_notebooks"] == 0.0
    assert total["by_kind"]["reclaim_idle"] == pytest.approx((24 + 2) * 7, abs=0.01)
    assert sum(total["by_kind"].values()) == pytest.approx(total["total_usd_per_week"], abs=0.05)
    assert total["by_kind"]["fewer_gpus"] == pytest.approx(28.8 * 7, abs=0.01)  # sc16; over8 is a one-off


def test_overlaps_name_the_other_items_on_the_same_jobs(recs):
    item = _item(recs, "reclaim_idle", "nb2")
    assert item["id"] == "reclaim_idle:nb2"
    assert item["overlaps_with"] == ["mig_slice:nb2", "right_size_gpu:nb2", "stop_idle_notebooks:bob"]
    assert _item(recs, "fewer_gpus", "over8")["overlaps_with"] == []
    assert recs["id"].n_unique() == recs.height


def test_a_subset_of_the_list_is_recounted_on_its_own():
    """The page's kind filter: the alternatives shown are deduplicated among themselves."""
    con = memory_ledger()
    recommend_ledger(con)
    recs = recommendations(con, filters=VIEW, settings=ELASTIC, problems=False)
    con.close()
    cards = recs.filter(pl.col("kind").is_in(["mig_slice", "right_size_gpu"]))
    # per job the larger alternative: tiny1 max(9, 8.57) = 9, nb2 max(12, 11.43) = 12
    assert savings_total(cards)["total_usd_per_week"] == pytest.approx((9 + 12) * 7, abs=0.01)
    assert savings_total(recs.head(0)) == {
        "total_usd_per_week": 0.0,
        "listed_usd_per_week": 0.0,
        "overlap_usd_per_week": 0.0,
        "items": 0,
        "recurring_items": 0,
        "one_off_items": 0,
        "one_off_saved_usd": 0.0,
        "by_kind": {},
    }


def _row(kind: str, lever: str, saving: float, jobs: dict[str, tuple[float, float]]) -> dict[str, object]:
    """A list row by hand: ``jobs`` maps job id → (saving on it, its cost); one view-day, so × 7 a week."""
    return {
        **{c: None for c in RECOMMENDATION_COLUMNS},
        "kind": kind,
        "target": next(iter(jobs)) if len(jobs) == 1 else "someone",
        "lever": lever,
        "saving_usd": saving,
        "usd_per_week": saving * 7,
        "job_ids": list(jobs),
        "job_saving_usd": [s for s, _ in jobs.values()],
        "job_cost_usd": [c for _, c in jobs.values()],
    }


def test_levers_compound_and_alternatives_within_a_lever_count_once():
    """One $100 job with every kind of item, plus a second job sharing a user-level item."""
    rows = [
        _row("right_size_gpu", "price", 50.0, {"j": (50.0, 100.0)}),
        _row("use_spot", "price", 40.0, {"j": (40.0, 100.0)}),  # an alternative price: max(50, 40)
        _row("stop_idle_notebooks", "time", 25.0, {"j": (15.0, 100.0), "k": (10.0, 40.0)}),
        _row("reclaim_idle", "time", 20.0, {"j": (20.0, 100.0)}),  # time on j = max(20 + 10, 15)
        _row("fewer_gpus", "time", 10.0, {"j": (10.0, 100.0)}),  # unused GPUs: disjoint GPU-seconds, added
        _row("larger_batch", "work", 8.0, {"j": (8.0, 100.0)}),
        _row("reclaim_idle", "time", 12.0, {"k": (12.0, 40.0)}),  # time on k = max(12, 10)
    ]
    recs = pl.DataFrame(rows, schema=RECOMMENDATION_COLUMNS)
    # j: levers time 30, price 50, work 8 → 100 × (1 − 0.7 × 0.5 × 0.92) = 67.8
    # k: time 12 → 12
    total = savings_total(recs)
    assert total["total_usd_per_week"] == pytest.approx((67.8 + 12) * 7, abs=0.01)
    # walking the ranked list: right_size 50; use_spot 0; stop 100(1 − .85 × .5) − 50 = 7.5 on j + 10 on k;
    # reclaim j: 100(1 − .8 × .5) − 57.5 = 2.5; reclaim k: 12 − 10 = 2; fewer_gpus j: 100(1 − .7 × .5) − 60 = 5;
    # larger_batch: 67.8 − 65 = 2.8
    assert total["by_kind"] == pytest.approx(
        {
            "right_size_gpu": 350.0,
            "use_spot": 0.0,
            "stop_idle_notebooks": 17.5 * 7,
            "reclaim_idle": (2.5 + 2) * 7,
            "fewer_gpus": 35.0,
            "larger_batch": 2.8 * 7,
        },
        abs=0.01,
    )
    # never more than the job's cost, however much the items claim
    greedy = pl.DataFrame(
        [
            _row("reclaim_idle", "time", 90.0, {"j": (90.0, 100.0)}),
            _row("fewer_gpus", "time", 60.0, {"j": (60.0, 100.0)}),
        ],
        schema=RECOMMENDATION_COLUMNS,
    )
    assert savings_total(greedy)["total_usd_per_week"] == pytest.approx(100 * 7)


def test_multi_gpu_jobs_are_right_sized_only_within_their_interconnect():
    """An 8 × H100-SXM (NVLink) job is not sent to PCIe cards; the same work on one GPU may be."""
    con = memory_ledger()
    set_prices(con)
    profile = {"mem_used_mib": 30000.0, "sm_active_pct": 20.0}
    ingest(
        con,
        jobs=[
            job("multi", 0, 60, gpu_count=8.0, kind="inference", name="serve-8"),
            job("single", 0, 60, kind="inference", name="serve-1"),
        ],
        allocations=[*(alloc("multi", f"hM:{i}", 0, 60) for i in range(8)), alloc("single", "hS:0", 0, 60)],
        samples=[s for i in range(8) for s in series(f"hM:{i}", 0, [30.0] * 60, **profile)]
        + series("hS:0", 0, [30.0] * 60, **profile),
    )
    recs = recommendations(con, filters=VIEW, settings=ELASTIC, problems=False).filter(
        pl.col("kind") == "right_size_gpu"
    )
    con.close()
    by_target = {r["target"]: r for r in recs.to_dicts()}
    # 20 % SM-active × 989.4 / 362.05 = 54.7 % busy on an L40S (PCIe, $1.00), 30000 ≤ 0.9 × 46068: the 1-GPU job
    # moves there, 1 h × (3 − 1); L4 (23034 × 0.9 < 30000) does not hold it
    assert by_target["single"]["action"] == f"Run it on L40S instead of {H100}."
    assert by_target["single"]["saving_usd"] == pytest.approx(1 * (3.00 - 1.00))
    # the 8-GPU job may only move to another NVLink part: A100-80GB, 20 × 989.4 / 312 = 63 % busy, $2.00 ≤ 0.9 × $3
    assert by_target["multi"]["action"] == f"Run it on {A100} instead of {H100}."
    assert by_target["multi"]["saving_usd"] == pytest.approx(8 * 1 * (3.00 - 2.00))


def test_scaling_advice_says_1_gpu_not_1_gpus():
    con = memory_ledger()
    set_prices(con)
    family = {"model": "s-1b", "precision": "bf16", "batch_size": 8, "seq_len": 2048}
    ingest(
        con,
        jobs=[
            job("one", EARLIER, EARLIER + 60, name="scale-1"),
            job("four", 0, 60, gpu_count=4.0, name="scale-4"),
        ],
        training_runs=[
            run("one", tokens_per_s=10000.0, **family),
            run("four", tokens_per_s=20000.0, **family),
        ],
    )
    item = _item(recommendations(con, filters=VIEW, settings=ELASTIC, problems=False), "fewer_gpus", "four")
    con.close()
    # 20000/4 = 5000 per GPU vs 10000 on one: 4 GPU-h × $3 × (1 − 0.5)
    assert item["saving_usd"] == pytest.approx(4 * 3.00 * 0.5)
    assert item["action"].startswith("Run on 1 GPU instead of 4 unless")
    assert "at 1 GPU " in item["evidence"] and "on 1 GPU cost" in item["evidence"]


def test_no_items_below_the_minimum_and_none_for_an_empty_view():
    con = memory_ledger()
    recommend_ledger(con)
    assert recommendations(con, filters=VIEW, min_usd_per_week=1000, problems=False).is_empty()
    assert recommendations(con, filters=Filters(teams=("nobody",))).is_empty()
    con.close()


def test_one_pass_gives_each_list_that_recommendations_gives():
    """recommendation_lists runs the rules once and draws every list from that pass (gpuledger/items/scan.py
    asks for two a week): each list is, frame for frame, what recommendations() gives for its floor and
    ``problems``; an empty view gives an empty list for each."""
    con = memory_ledger()
    recommend_ledger(con)
    lists = (Listing(), Listing(0.0, False), Listing(0.0, True), Listing(1000.0, False), Listing(60.0, False))
    got = recommendation_lists(con, lists, filters=VIEW, settings=ELASTIC)
    assert len(got) == len(lists)
    for listing_, frame_ in zip(lists, got, strict=True):
        expected = recommendations(
            con,
            filters=VIEW,
            settings=ELASTIC,
            min_usd_per_week=listing_.min_usd_per_week,
            problems=listing_.problems,
        )
        assert frame_.to_dicts() == expected.to_dicts()
        assert frame_.schema == expected.schema
    # not vacuous: the lists differ (problems merge items; the floor leaves some out; 1000 leaves all out)
    assert got[0].height < got[1].height and 0 < got[4].height < got[1].height and got[3].is_empty()
    # the kinds keyword as in recommendations
    (batch,) = recommendation_lists(
        con, [Listing(0.0, False)], filters=VIEW, settings=ELASTIC, kinds=["larger_batch"]
    )
    assert (
        batch.to_dicts()
        == recommendations(
            con, filters=VIEW, settings=ELASTIC, min_usd_per_week=0.0, problems=False, kinds=["larger_batch"]
        ).to_dicts()
    )
    empty = recommendation_lists(con, lists, filters=Filters(teams=("nobody",)))
    assert [f.is_empty() for f in empty] == [True] * len(lists)
    assert all(f.schema == pl.Schema(RECOMMENDATION_COLUMNS) for f in empty)
    con.close()


def test_team_filter_keeps_only_that_teams_jobs():
    con = memory_ledger()
    recommend_ledger(con)
    con.execute("UPDATE jobs SET team = 'vision' WHERE job_id = 'tiny1'")
    recs = recommendations(con, filters=Filters(since=DAY, until=DAY, teams=("vision",)))
    assert set(recs["target"]) == {"tiny1"}
    con.close()


def test_view_window_is_floored_at_one_day_and_scales_longer_views():
    con = memory_ledger()
    recommend_ledger(con)
    lo, hi, days = view_window(con, VIEW, horizon(con))
    assert (lo.hour, hi.hour, days) == (0, 12, 1.0)  # 12 h of data → floored at 1 day
    # without --since the month-earlier runs open the view: 30 days + 12 h
    lo, hi, days = view_window(con, Filters(), hi)
    assert days == pytest.approx(30.5)
    con.close()


def test_cli_recommend_json_and_text(tmp_path):
    from gpuledger.ledger.db import writer

    db = tmp_path / "ledger.duckdb"
    env_settings = tmp_path / "settings.toml"
    with writer(str(db)) as con:
        recommend_ledger(con)
    # the command re-syncs the price sheet from settings: give it the test prices there
    prices = "\n".join(
        f'[[price]]\ngpu_model = "{m}"\ntier = "{t}"\nusd_per_gpu_hour = {u}\neffective_from = 2025-01-01\nsource = "test"\n'
        for m, t, u in (
            ("H100-SXM-80GB", "on_demand", 3.0),
            ("H100-SXM-80GB", "spot", 1.5),
            ("A100-80GB", "on_demand", 2.0),
            ("L40S", "on_demand", 1.0),
            ("L4", "on_demand", 0.5),
        )
    )
    env_settings.write_text(prices + '\n[clusters.c1]\nbilling = "per_job"\n')  # spot saves on c1 by itself
    args = [
        "--db",
        str(db),
        "--settings",
        str(env_settings),
        "--since",
        "2025-03-03",
        "--until",
        "2025-03-03",
    ]
    # the command's main() in this process (tests/conftest.py gpuledger), as a user's shell would run it
    out = gpuledger("recommend", *args, "--json")
    assert out.returncode == 0, out.stderr
    items = json.loads(out.stdout)
    spot = next(i for i in items if i["kind"] == "use_spot")
    assert spot["target"] == "spot1"
    # the shipped sheet also prices other models (e.g. cheaper spot rows), so only kinds whose dollars
    # depend on the H100 prices alone are pinned here: use_spot uses the H100 spot row
    assert spot["saving_usd"] == pytest.approx(24 * (3.00 - 1.50 * 1.10), abs=0.01)
    assert spot["usd_per_week"] is None  # a one-off: it would have saved that, once
    text = gpuledger("recommend", *args, "--limit", "3")
    assert text.returncode == 0, text.stderr
    assert text.stdout.count(" · confidence ") == 3
    every = json.loads(gpuledger("recommend", *args, "--json", "--limit", "0").stdout)
    total = json.loads(gpuledger("recommend", *args, "--total", "--json").stdout)
    # the object sums the whole list (not the --limit'ed part): counted items to the total, items to listed
    assert total["items"] == len(every)
    assert total["total_usd_per_week"] == pytest.approx(
        sum(i["counted_usd_per_week"] or 0 for i in every), abs=0.05
    )
    assert total["listed_usd_per_week"] == pytest.approx(sum(i["usd_per_week"] or 0 for i in every), abs=0.05)
    assert {"addressable_usd", "addressed_usd", "by_part"} <= total["coverage"].keys()
    # one problem, one action: alice's notebook (reclaim_idle nb1 and stop_idle_notebooks alice share its idle
    # seconds) is one item, the other its alternative; no target twice, and the total is the problems' sum
    assert total["total_usd_per_week"] == total["listed_usd_per_week"]
    assert total["overlap_usd_per_week"] == 0.0
    assert len({i["target"] for i in every}) == len(every)
    kinds_on_nb1 = [i["kind"] for i in every if "nb1" in i["job_ids"]]
    assert len(kinds_on_nb1) == 1, kinds_on_nb1
    (nb1,) = (i for i in every if "nb1" in i["job_ids"])
    assert nb1["alternatives"] and nb1["owner_type"] == "team" and nb1["owner"] == nb1["team"]
    assert f"Possible savings: ${total['total_usd_per_week']:,.2f}/week" in text.stdout


def test_demo_fleet_every_planted_kind_is_found(demo_db):
    with writer(demo_db) as con:
        _every_planted_kind_is_found(con)


DEMO_ELASTIC = Settings(
    clusters={c: ClusterSettings(billing="per_job") for c in ("atlas", "borealis", "cirrus")}
)


def _every_planted_kind_is_found(con):
    # the job rules on clusters billed per job (spot and a smaller GPU save there by themselves) ...
    recs = recommendations(con, min_usd_per_week=0.0, settings=DEMO_ELASTIC, problems=False)
    names = dict(con.execute("SELECT job_id, name FROM jobs").fetchall())
    found = {
        (k, "-".join(names[j].split("-")[:2]))
        for k, ids in zip(recs["kind"], recs["job_ids"], strict=True)
        for j in ids
        if j in names  # capacity items concern a cluster, not a job
    }
    planted = {
        ("stop_idle_notebooks", "notebook-idle"),
        ("reclaim_idle", "notebook-idle"),
        ("larger_batch", "small-batch"),
        ("right_size_gpu", "oversized-serve"),
        ("fewer_gpus", "scaling-lm13b"),
        ("use_spot", "ckpt-ondemand"),
        ("mig_slice", "tiny-embed"),
        ("fewer_gpus", "overalloc-whisper"),
    }
    assert planted <= found, sorted(planted - found)
    # the failed lm-7b family gets a checkpoint interval; borealis' partly used capacity a release
    assert ("checkpoint_interval", "failed-lm7b") in found
    # ... and the capacity rules on the demo's own settings (capacity paid for whether held or not)
    assert "release_capacity" in set(recommendations(con, min_usd_per_week=0.0, problems=False)["kind"])
    states = dict(con.execute("SELECT job_id, state FROM jobs").fetchall())
    for b in recs.filter(pl.col("kind") == "larger_batch").to_dicts():
        # never above 2× the family's largest observed batch on a fitted memory model ...
        if b["memory_model"] == "fitted":
            assert b["recommended_batch_size"] <= 2 * b["largest_observed_batch_size"], b
        # ... and never on a failed, cancelled, timed-out or OOM run
        assert all(states[j] in ("COMPLETED", "RUNNING") for j in b["job_ids"]), b


def test_a_family_card_names_its_largest_run_and_breaks_float_ties_by_job_id() -> None:
    """Three runs of one family: b saves the most; a and c save the same, up to float rounding (the same
    job shape summed in another order). The card names b, then a before c whatever order they came in."""
    from analytics.advice_common import Recommendation
    from analytics.recommend import _families

    def one(job: str, saving: float) -> Recommendation:
        return Recommendation(
            kind="right_size",
            target_type="job",
            target=job,
            user_name="u",
            team="t",
            evidence=f"Job {job}",
            action="fewer GPUs",
            saving_usd=saving,
            confidence="high",
            job_ids=(job,),
            job_saving_usd=(saving,),
            job_cost_usd=(10 * saving,),
            lever="config",
            addresses=("underused",),
            recurring=False,
        )

    jobs = pl.DataFrame({"job_id": ["c/3", "a/1", "b/2"], "name": [f"ft-run-{i}" for i in range(3)]})
    for order in (["c/3", "a/1", "b/2"], ["a/1", "b/2", "c/3"]):
        savings = {"a/1": 100.0, "b/2": 250.0, "c/3": 100.00000000000003}
        (card,) = _families([one(j, savings[j]) for j in order], jobs)
        assert card.target_type == "family"
        assert card.job_ids == ("b/2", "a/1", "c/3")
        assert str(card.evidence).endswith("The largest: Job b/2")
        assert card.saving_usd == pytest.approx(450.0)


def _same_items(part: pl.DataFrame, whole: pl.DataFrame, kinds: set[str]) -> None:
    """The items of ``kinds`` in the whole list, field for field, bar what is counted across kinds."""
    drop = ("counted_saving_usd", "counted_usd_per_week", "overlaps_with", "id")
    expected = whole.filter(pl.col("kind").is_in(list(kinds))).drop(drop)
    assert part.drop(drop).to_dicts() == expected.to_dicts()


def test_asking_for_some_kinds_gives_those_items_of_the_whole_list():
    """recommendations(kinds=...) runs only the steps those kinds need (the Training page asks for
    larger_batch alone); each item must be the one the whole list holds, one kind at a time and in groups
    that share work (consolidate_inference leaves out what right_size and mig_slice size)."""
    con = memory_ledger()
    recommend_ledger(con)
    whole = recommendations(con, filters=VIEW, settings=ELASTIC, problems=False)
    present = set(whole["kind"])
    assert len(present) >= 7, present  # the hand ledger plants most job kinds: the comparison is not vacuous
    for kind in KINDS:
        _same_items(
            recommendations(con, filters=VIEW, settings=ELASTIC, problems=False, kinds=[kind]), whole, {kind}
        )
    for group in ({"larger_batch", "fewer_gpus"}, {"consolidate_inference", "right_size_gpu"}):
        _same_items(
            recommendations(con, filters=VIEW, settings=ELASTIC, problems=False, kinds=group), whole, group
        )
    # the counted dollars of a subset are counted over it alone: they sum to its own total
    part = recommendations(
        con, filters=VIEW, settings=ELASTIC, problems=False, kinds=["reclaim_idle", "stop_idle_notebooks"]
    )
    assert part["counted_usd_per_week"].sum() == pytest.approx(savings_total(part)["total_usd_per_week"])
    with pytest.raises(ValueError, match="unknown recommendation kind"):
        recommendations(con, filters=VIEW, settings=ELASTIC, problems=False, kinds=["larger_batches"])
    con.close()


def test_demo_fleet_each_kind_alone_is_the_whole_lists(demo_db):
    with writer(demo_db) as con:
        whole = recommendations(con, problems=False)
        # the failure and capacity kinds too, which the hand ledger lacks
        assert {"checkpoint_interval", "release_capacity", "larger_batch"} <= set(whole["kind"])
        for kind in sorted(set(whole["kind"])):
            _same_items(recommendations(con, kinds=[kind], problems=False), whole, {kind})


def test_whole_list_total_and_coverage_equal_a_recount_and_a_plain_loop(demo_db):
    """savings_total(whole=True) sums the list's own counted columns instead of counting again: the same
    figures as counting the list again, to the cent; coverage (frames) equals a plain loop over the jobs'
    parts, written out here as the rule says it."""
    from analytics.recommend import view_coverage
    from analytics.waste import WASTE_PARTS, job_waste

    with writer(demo_db) as con:
        recs = recommendations(con)
        assert recs.height > 50
        assert savings_total(recs, whole=True) == savings_total(recs)
        # a part of the list is counted by itself: its counted columns are the whole list's, not its own
        part = recs.filter(pl.col("kind") == "right_size_gpu")
        assert savings_total(part)["total_usd_per_week"] >= float(part["counted_usd_per_week"].sum()) - 0.01
        got = view_coverage(con, recs)
        hit = {
            (j, a)
            for ids, adds in zip(recs["job_ids"], recs["addresses"], strict=True)
            for j in ids
            for a in adds
        }
        expect = {p: [0.0, 0.0] for p in WASTE_PARTS[:3]}
        for row in job_waste(con).iter_rows(named=True):
            for p in WASTE_PARTS[:3]:
                expect[p][0] += row[p] or 0.0
                expect[p][1] += (row[p] or 0.0) if (row["job_id"], p) in hit else 0.0
        for p, (waste_usd, addressed_usd) in expect.items():
            assert got["by_part"][p] == {
                "usd": round(waste_usd, 2),
                "addressed_usd": round(addressed_usd, 2),
            }
        assert any(v[1] > 0 for v in expect.values())
