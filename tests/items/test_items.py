"""Items across weeks on a generated six-week ledger (tests/items/weeks_ledger.py): each planted habit is one
item whose id holds from week to week, its history is what was recorded, and the saving measured after a fix
is the planted weekly waste, worked out here from card-hours × price."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable

import pytest

from gpuledger.items import store, tracker
from gpuledger.items.key import item_id
from gpuledger.items.measure import measure
from gpuledger.items.scan import scan
from gpuledger.ledger.access import Scope
from gpuledger.ledger.db import memory_ledger, writer
from tests.conftest import filled_once, gpuledger
from tests.items.weeks_ledger import PRICE_H100, build

ALICE = "reclaim_idle:family:alice/notebook-idle"
CAROL = "larger_batch:family:carol/small-batch"
BOB = "reclaim_idle:family:bob/nb"
WEEK3, WEEK4 = "2025-03-17", "2025-03-24"  # Mondays of weeks 3 and 4
# planted: alice's notebook sat 8 h idle on an H100 each week before her fix
ALICE_WASTE = 8 * PRICE_H100  # $24.00 a week
# carol's batch-8 run took 8 h for work batch 32 does in 8 × 12,000 / 19,200 = 5 h: 3 card-hours a week
CAROL_WASTE = (8 - 8 * 12000 / 19200) * PRICE_H100  # $9.00 a week


@pytest.fixture(scope="module")
def _planted(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], str]:
    return filled_once(tmp_path_factory, build)


def _actions(db: str, *args: str) -> list[dict[str, object]]:
    r = gpuledger("actions", "--json", "--db", db, *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _set(db: str, iid: str, *args: str) -> None:
    r = gpuledger("actions", "set", iid, "--db", db, *args)
    assert r.returncode == 0, r.stderr


def test_planted_fixes_give_each_item_its_history_and_the_planted_saving(db_path: str, _planted) -> None:
    db = _planted(db_path)
    before = {it["key"]: it for it in _actions(db)}
    assert {ALICE, CAROL, BOB} <= set(before)
    assert before[ALICE]["id"] == item_id(ALICE) and before[ALICE]["status"] == "open"
    assert before[ALICE]["first_seen"] == "2025-03-03" and before[ALICE]["team"] == "nlp"
    assert before[ALICE]["measured_usd_per_week"] is None and before[ALICE]["measured_weeks"] == 0
    _set(
        db, item_id(ALICE), "--status", "done", "--at", WEEK3, "--note", "idle culler on", "--owner", "alice"
    )
    _set(db, item_id(CAROL), "--status", "ack", "--at", "2025-03-20")
    _set(db, item_id(CAROL), "--status", "done", "--at", WEEK4)
    after = {it["key"]: it for it in _actions(db)}
    alice, carol = after[ALICE], after[CAROL]
    assert [(h["at"], h["status"], h["note"]) for h in alice["history"]] == [
        ("2025-03-17 00:00:00", "done", "idle culler on")
    ]
    assert alice["owner"] == "alice" and alice["history"][0]["by"]
    assert [h["status"] for h in carol["history"]] == ["acknowledged", "done"]
    # weeks 1–2 before (the fix took effect on week 3's Monday), weeks 3–6 after
    assert abs(alice["measured_usd_per_week"] - ALICE_WASTE) <= 0.05 * ALICE_WASTE
    assert (alice["baseline_weeks"], alice["measured_weeks"]) == (2, 4)
    assert abs(carol["measured_usd_per_week"] - CAROL_WASTE) <= 0.05 * CAROL_WASTE
    assert (carol["baseline_weeks"], carol["measured_weeks"]) == (3, 3)
    assert alice["held"] is True and carol["held"] is True and not alice["did_not_hold"]
    assert alice["predicted_usd_per_week"] is not None
    done = _actions(db, "--status", "done")
    assert {it["key"] for it in done} == {ALICE, CAROL}
    assert {it["key"] for it in _actions(db, "--team", "vision")} == {BOB}


def test_a_dismissed_item_stays_dismissed_and_is_never_new_again(db_path: str, _planted) -> None:
    db = _planted(db_path)
    r = gpuledger("actions", "set", item_id(BOB), "--status", "dismissed", "--db", db)
    assert r.returncode == 1 and "reason" in r.stderr  # a dismissal needs --note
    _set(db, item_id(BOB), "--status", "dismissed", "--at", "2025-03-12", "--note", "shared demo box")
    with writer(db) as con:
        sc = scan(con)
        # the auto-stop item's waste is all the user's notebook idle (8 h × $3), not the stop's share (7 h)
        assert sc.waste_of("stop_idle_notebooks:user:alice", sc.weeks[0]) == pytest.approx(ALICE_WASTE)
        assert sc.waste_of("stop_idle_notebooks:user:alice", sc.weeks[2]) == 0.0  # fixed from week 3
        for week in sc.weeks[2:]:
            assert BOB in sc.listed[week]  # the habit is still there every week
            its = tracker.items(
                con, week_scan=sc, as_of=dt.datetime.combine(week, dt.time()) + dt.timedelta(days=7)
            )
            g = tracker.groups(its, week, sc)
            assert BOB not in {it["key"] for it in g["new"] + g["still_open"]}
            assert next(it for it in its if it["key"] == BOB)["status"] == "dismissed"


def test_a_problem_that_returns_after_done_reopens_and_says_so(tmp_path) -> None:
    db = str(tmp_path / "relapse.duckdb")
    with writer(db) as con:
        build(con, relapse=5)  # alice's idle hours come back in week 5
    _set(db, item_id(ALICE), "--status", "done", "--at", WEEK3)
    alice = next(it for it in _actions(db) if it["key"] == ALICE)
    assert alice["status"] == "open" and alice["reopened"] and alice["did_not_hold"]
    reopen = alice["history"][-1]
    # reopened at the end of week 5 (Monday of week 6), by the ledger, saying which week and how much
    assert (reopen["at"], reopen["status"], reopen["by"]) == ("2025-04-07 00:00:00", "open", "gpuledger")
    assert "2025-W14" in reopen["note"] and "$24.00" in reopen["note"]
    # measured over the weeks it was done: weeks 3, 4, 5 → 24 − (0 + 0 + 24) / 3
    assert alice["measured_weeks"] == 3
    assert alice["measured_usd_per_week"] == pytest.approx(ALICE_WASTE - ALICE_WASTE / 3, abs=0.05)
    # the reopen is stored once: a second reading finds it and adds none
    again = next(it for it in _actions(db) if it["key"] == ALICE)
    assert len(again["history"]) == 2
    with writer(db) as con:
        n = con.execute("SELECT count(*) FROM action_history WHERE changed_by = 'gpuledger'").fetchone()[0]
    assert n == 1


def test_roles_a_lead_changes_only_their_teams_items() -> None:
    con = memory_ledger()
    nlp = {
        "id": item_id(ALICE),
        "key": ALICE,
        "kind": "reclaim_idle",
        "target_type": "family",
        "target": "alice/notebook-idle",
        "team": "nlp",
        "first_seen": dt.date(2025, 3, 3),
    }
    ops = {**nlp, "id": "ops", "key": "release_capacity:cluster:c1/H100", "team": None}
    lead = Scope(who="lead@example.com", teams=("vision",))
    viewer = Scope(who="someone@example.com")
    for who, item in (
        (lead, nlp),
        (viewer, nlp),
        (lead, ops),
        (Scope("nlp@example.com", teams=("nlp",)), ops),
    ):
        with pytest.raises(store.NotAllowed):
            store.change(con, item, status="done", by=who.who, scope=who)
    store.change(
        con, nlp, status="done", by="nlp@example.com", scope=Scope("nlp@example.com", teams=("nlp",))
    )
    store.change(con, ops, status="ack", by="admin@example.com", scope=Scope("admin@example.com", admin=True))
    assert con.execute("SELECT count(*) FROM action_history").fetchone()[0] == 2


def test_a_snooze_ends_after_its_last_day() -> None:
    weeks = []
    assert (
        measure(
            weeks,
            lambda w: 0.0,
            first_seen=dt.date(2025, 3, 3),
            done_at=dt.datetime(2025, 3, 3),
            until=None,
            predicted_usd_per_week=None,
        ).usd_per_week
        is None
    )
    snooze = store.Change("x", dt.datetime(2025, 3, 10), "snoozed", "a", until=dt.date(2025, 3, 20))
    assert tracker._status((snooze,), dt.datetime(2025, 3, 20, 12))[0] == "snoozed"
    assert tracker._status((snooze,), dt.datetime(2025, 3, 21))[0] == "open"


def test_measure_is_the_difference_of_weekly_means_around_the_change() -> None:
    weeks = [dt.date(2025, 3, 3) + dt.timedelta(days=7 * i) for i in range(6)]
    waste = dict(zip(weeks, [10.0, 12.0, 11.0, 2.0, 0.0, 1.0], strict=True))
    # done on Wednesday of week 3: week 3 is in neither side; before = weeks 1–2, after = weeks 4–6
    m = measure(
        weeks,
        waste.__getitem__,
        first_seen=weeks[0],
        done_at=dt.datetime(2025, 3, 19),
        until=None,
        predicted_usd_per_week=None,
    )
    assert m.before == tuple(weeks[:2]) and m.after == tuple(weeks[3:])
    assert m.usd_per_week == pytest.approx((10 + 12) / 2 - (2 + 0 + 1) / 3)
    assert m.held is True
    back = measure(
        weeks,
        dict(zip(weeks, [10, 10, 0, 0, 6, 0], strict=True)).__getitem__,
        first_seen=weeks[0],
        done_at=dt.datetime(2025, 3, 17),
        until=None,
        predicted_usd_per_week=None,
    )
    assert back.returned_week == weeks[4] and back.held is False  # 6 ≥ half of 10


def _done(db: str, marks: dict[str, str]) -> None:
    """Record done changes through the store (what `actions set` calls), as an admin."""
    with writer(db) as con:
        its = {it["key"]: it for it in tracker.items(con)}
        for key, day in marks.items():
            store.change(
                con, its[key], status="done", by="admin", scope=None, at=dt.datetime.fromisoformat(day)
            )


def test_the_weekly_report_shows_new_still_open_done_and_the_quarters_measured_savings(
    db_path, _planted, tmp_path
) -> None:
    db = _planted(db_path)
    _done(db, {ALICE: WEEK3, CAROL: WEEK4})
    first = json.loads(gpuledger("report", "--week", "2025-W10", "--format", "json", "--db", db).stdout)[
        "items"
    ]
    assert {it["key"] for it in first["new"]} == {ALICE, BOB, CAROL} and first["still_open"] == []
    r = gpuledger("report", "--week", "2025-W13", "--format", "json", "--db", db)
    assert r.returncode == 0, r.stderr
    g = json.loads(r.stdout)["items"]
    assert g["week"] == "2025-W13" and g["new"] == []
    assert [(it["key"], it["weeks_open"]) for it in g["still_open"]] == [(BOB, 4)]
    assert g["still_open"][0]["cost_since_first_seen_usd"] == pytest.approx(4 * 24.0)  # 4 weeks × 8 h × $3
    assert [it["key"] for it in g["done"]] == [CAROL]
    # the quarter so far: alice's weeks 3 and 4 at $24 each, carol's week 4 at $9
    assert g["quarter"] == "2025-Q1"
    assert g["quarter_measured_usd"] == pytest.approx(2 * ALICE_WASTE + CAROL_WASTE, abs=0.05)
    html = gpuledger("report", "--week", "2025-W13", "--format", "html", "--db", db).stdout
    assert "Actions: new, still open, done (2025-W13)" in html
    assert (
        "Still open: Release idle GPUs · bob/nb" in html
        and "Done: Raise the batch size · carol/small-batch" in html
    )
    assert "$57.00" in html
    team = json.loads(
        gpuledger("report", "--week", "2025-W13", "--team", "vision", "--format", "json", "--db", db).stdout
    )["items"]
    assert [it["key"] for it in team["still_open"]] == [BOB] and team["done"] == []
    csv_text = gpuledger("report", "--week", "2025-W13", "--format", "csv", "--db", db).stdout
    assert f"item_still_open,{item_id(BOB)},weeks_open,4," in csv_text
    assert f"item_done,{item_id(CAROL)},status,done," in csv_text
    # each team's report (the per-team mail's body) holds its own items
    out = tmp_path / "teams"
    r = gpuledger("report", "--week", "2025-W13", "--per-team", str(out), "--format", "json", "--db", db)
    assert r.returncode == 0, r.stderr
    nlp = json.loads((out / "nlp.json").read_text())["items"]
    assert nlp["still_open"] == [] and [it["key"] for it in nlp["done"]] == [CAROL]
    assert nlp["quarter_measured_usd"] == pytest.approx(2 * ALICE_WASTE + CAROL_WASTE, abs=0.05)


def test_only_the_weeks_the_data_cover_whole_are_scanned() -> None:
    from gpuledger.items.scan import complete_weeks

    mon, thu, sun = dt.date(2025, 3, 3), dt.date(2025, 3, 6), dt.datetime(2025, 3, 23, 12)
    # data from Monday 2025-03-03 to Sunday 2025-03-23: weeks 10, 11, 12
    assert complete_weeks(mon, sun) == [mon, dt.date(2025, 3, 10), dt.date(2025, 3, 17)]
    # from a Thursday: its week is partial, the next Monday starts; to a Saturday: that week is partial
    assert complete_weeks(thu, dt.datetime(2025, 3, 22, 23)) == [dt.date(2025, 3, 10)]


def test_an_auto_stop_item_measures_all_the_notebook_idle_it_removed() -> None:
    """Two idle notebook families of one user are one problem whose best action is the per-user auto-stop
    (2 × (8 − 1) h × $3 = $42 beats each family's $24 of idle); fixed from week 3, it measures the whole
    idle it removed: 2 notebooks × 8 idle card-hours × $3.00 = $48.00 a week."""
    con = memory_ledger()
    build(con, second_notebook=True)
    sc = scan(con)
    key = "stop_idle_notebooks:user:alice"
    assert key in sc.listed[sc.weeks[0]] and ALICE not in sc.listed[sc.weeks[0]]
    item = next(it for it in tracker.items(con, week_scan=sc) if it["key"] == key)
    store.change(con, item, status="done", by="admin", scope=None, at=dt.datetime.fromisoformat(WEEK3))
    done = next(it for it in tracker.items(con, week_scan=sc) if it["key"] == key)
    planted = 2 * 8 * PRICE_H100
    assert abs(done["measured_usd_per_week"] - planted) <= 0.05 * planted
    assert (done["baseline_weeks"], done["measured_weeks"]) == (2, 4)
    assert done["predicted_usd_per_week"] < planted  # the auto-stop's own estimate leaves the first hour


def test_done_again_after_a_reopen_measures_against_the_weeks_since_the_reopen() -> None:
    from gpuledger.items.scan import WeekScan

    weeks = tuple(dt.date(2025, 3, 3) + dt.timedelta(days=7 * i) for i in range(8))
    waste = [10.0, 10.0, 0.0, 0.0, 10.0, 10.0, 0.0, 0.0]
    sc = WeekScan(weeks, None, {}, {w: {"k": x} for w, x in zip(weeks, waste, strict=True)})
    monday = {n: dt.datetime.combine(weeks[n - 1], dt.time()) for n in range(1, 9)}
    stored = [
        store.Change("i", monday[3], "done", "a", change_id=1),
        store.Change("i", monday[7], "done", "a", change_id=2),
    ]
    tl = tracker.timeline(sc, "k", stored, weeks[0], monday[8] + dt.timedelta(days=7), 10.0)
    # done in week 3; week 5's $10 is back (≥ half of the $10 before): reopened at the end of week 5
    assert [(c.at, c.status, c.by) for c in tl.changes] == [
        (monday[3], "done", "a"),
        (monday[6], "open", "gpuledger"),
        (monday[7], "done", "a"),
    ]
    # done again in week 7: the baseline is week 6 (since the reopen), not weeks 3–6 with the fixed weeks in it
    m = tl.measurement
    assert m is not None and m.before == (weeks[5],) and m.after == (weeks[6], weeks[7])
    assert m.usd_per_week == 10.0 and m.held is True
