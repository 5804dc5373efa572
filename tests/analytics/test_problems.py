"""One problem, one action (analytics/problems.py, issue 37 item 3): items sharing a job or a target are one
problem with its best action; spot and a smaller GPU only where capacity is elastic or next to its release;
every item has an owner; the report's top actions are distinct problems with a team's own among them."""

from __future__ import annotations

import json
from typing import Any

import duckdb
import polars as pl
import pytest

from analytics.advice_common import Recommendation
from analytics.problems import one_per_problem, owner_of, top_actions, where_paid_for
from analytics.recommend import KIND_LABELS, recommendations
from gpuledger.ledger.db import memory_ledger
from gpuledger.ledger.settings import ClusterSettings, Settings
from tests.analytics.recommend_ledgers import recommend_ledger
from tests.analytics.test_recommend import ELASTIC, VIEW
from tests.conftest import gpuledger


def _it(kind: str, target: str, jobs: list[str], saving: float, **extra: Any) -> Recommendation:
    return Recommendation(
        kind=kind,
        target_type=extra.pop("target_type", "job"),
        target=target,
        job_ids=tuple(jobs),
        saving_usd=saving,
        usd_per_week=saving * 7,
        confidence=extra.pop("confidence", "medium"),
        team=extra.pop("team", "nlp"),
        user_name="alice",
        action="Do it.",
        evidence="",
        job_saving_usd=(saving,) * len(jobs),
        job_cost_usd=(None,) * len(jobs),
        lever="time",
        addresses=(),
        recurring=True,
    )


def test_items_sharing_a_job_or_a_target_are_one_problem_with_the_best_action() -> None:
    items = [
        _it("mig_slice", "j1", ["j1"], 10.0),
        _it("larger_batch", "j1", ["j1"], 12.0),  # opposite cure for the same job: one of the two stays
        _it("stop_idle_notebooks", "alice", ["j2", "j3"], 5.0, target_type="user"),
        _it("reclaim_idle", "j3", ["j3"], 5.0, confidence="high"),  # j3 ties alice's user item: one problem
        _it("right_size_gpu", "fam", ["j4"], 2.0, target_type="family"),
        _it("right_size_gpu", "fam", ["j5"], 3.0, target_type="family"),  # same target, other jobs
        _it("fewer_gpus", "j6", ["j6"], 1.0),
    ]
    out = one_per_problem(items, KIND_LABELS)
    assert [(o.kind, o.target) for o in out] == [
        ("larger_batch", "j1"),
        ("reclaim_idle", "j3"),  # $5 = $5: the surer confidence
        ("right_size_gpu", "fam"),
        ("fewer_gpus", "j6"),
    ]
    assert out[0].alternatives == ("Use a MIG slice: $70.00/week",)  # 10 × 7
    assert out[1].alternatives == ("Auto-stop idle notebooks: $35.00/week",)
    assert out[2].saving_usd == 3.0 and out[2].job_ids == ("j5",)
    assert out[3].alternatives == ()


def test_a_move_to_spot_or_another_gpu_saves_only_where_capacity_is_elastic_or_released() -> None:
    view = pl.DataFrame({"job_id": ["a", "b"], "cluster": ["c1", "c2"], "gpu_model": ["H100", "A100"]})
    spot_a = _it("use_spot", "a", ["a"], 4.0)
    size_b = _it("right_size_gpu", "b", ["b"], 3.0)
    paid = Settings()  # every cluster paid for whether held or not
    assert where_paid_for([spot_a, size_b], view, paid) == []
    # c1 billed per job: its spot advice saves by itself and stays as it is
    per_job = Settings(clusters={"c1": ClusterSettings(billing="per_job")})
    assert where_paid_for([spot_a, size_b], view, per_job) == [spot_a]
    # next to a capacity item for c2's A100s, the smaller GPU stays, with the release in its action
    cap = _it("offpeak_capacity", "c2/A100", ["capacity:c2:A100"], 50.0, target_type="cluster")
    (kept_cap, kept_b) = where_paid_for([cap, size_b], view, paid)
    assert kept_cap is cap
    assert kept_b.action.startswith("Do it. Then release (or scale down) the A100 on c2 it frees")


def test_owner_is_the_team_or_the_clusters_operators() -> None:
    assert owner_of("job", "j1", "nlp", "alice") == ("team", "nlp")
    assert owner_of("job", "j1", None, "alice") == ("team", "alice")  # no team: the user
    assert owner_of("cluster", "atlas/H100", "unallocated", None) == ("operators", "operators of atlas")


def test_top_actions_keep_a_teams_own_next_to_the_operators() -> None:
    recs = pl.DataFrame(
        {
            "target": ["c1/A", "c2/B", "c3/C", "c4/D", "j1", "c5/E", "j2", "j3"],
            "owner_type": ["operators"] * 4 + ["team", "operators", "team", "team"],
        }
    )
    assert top_actions(recs, 5)["target"].to_list() == ["c1/A", "c2/B", "c3/C", "j1", "j2"]
    assert top_actions(recs.head(3), 5)["target"].to_list() == ["c1/A", "c2/B", "c3/C"]


def test_hand_ledger_one_item_per_job() -> None:
    con = memory_ledger()
    recommend_ledger(con)
    every = recommendations(con, filters=VIEW, settings=ELASTIC, problems=False)
    merged = recommendations(con, filters=VIEW, settings=ELASTIC)
    con.close()
    jobs = [j for ids in merged["job_ids"].to_list() for j in ids]
    assert len(jobs) == len(set(jobs)) and merged["target"].is_unique().all()
    # tiny1: a smaller GPU 6 h × (2.00 − 0.50) = $9 beats a 2g.20gb slice 1 × A100 6 h × $2 × (1 − 2/7) = $8.57
    (tiny1,) = merged.filter(pl.col("target") == "tiny1").to_dicts()
    assert tiny1["kind"] == "right_size_gpu" and tiny1["saving_usd"] == pytest.approx(9.0)
    assert tiny1["alternatives"] == [f"Use a MIG slice: ${12 * (1 - 2 / 7) * 7:,.2f}/week"]
    # every job of the rules' list is still in one problem
    assert set(jobs) == {j for ids in every["job_ids"].to_list() for j in ids}


def test_paid_for_cluster_gets_no_spot_or_smaller_gpu_without_its_release() -> None:
    con = memory_ledger()
    recommend_ledger(con)
    elastic = set(recommendations(con, filters=VIEW, settings=ELASTIC, problems=False)["kind"])
    paid = recommendations(con, filters=VIEW, settings=Settings(), problems=False)
    con.close()
    assert {"use_spot", "right_size_gpu"} <= elastic  # the rules find them ...
    # ... but c1 is paid for whether held or not and has no capacity item here: the moves would save nothing
    assert not set(paid["kind"]) & {"use_spot", "right_size_gpu", "release_capacity", "offpeak_capacity"}


def test_demo_one_item_per_target_and_the_total_is_the_problems_sum(demo_db: str) -> None:
    con = duckdb.connect(demo_db, read_only=True)
    try:
        recs = recommendations(con, min_usd_per_week=0.0)
    finally:
        con.close()
    assert recs.height > 10 and recs["target"].is_unique().all()
    jobs = [j for ids in recs["job_ids"].to_list() for j in ids]
    assert len(jobs) == len(set(jobs))
    assert set(recs["owner_type"]) == {"team", "operators"}
    every = json.loads(gpuledger("recommend", "--json", "--limit", "0", "--db", demo_db).stdout)
    total = json.loads(gpuledger("recommend", "--total", "--json", "--db", demo_db).stdout)
    assert len({i["target"] for i in every}) == len(every)
    assert {"owner", "owner_type", "alternatives"} <= every[0].keys()
    problems = sum(i["usd_per_week"] for i in every if i["usd_per_week"] is not None)
    assert total["total_usd_per_week"] == pytest.approx(problems, abs=0.005 * len(every))
    assert total["overlap_usd_per_week"] == 0.0
    report = json.loads(gpuledger("report", "--format", "json", "--db", demo_db).stdout)
    top = report["actions"]["top"]
    assert len({a["target"] for a in top}) == len(top) == 5
    owners = [a["owner"] for a in top]
    assert (
        any(o.startswith("operators of") for o in owners)
        and sum(not o.startswith("operators") for o in owners) >= 2
    )
