"""``guard replay``: hand-worked on small ledgers (tests/guard/ledgers.py), and it changes nothing in the ledger.

Policy ``idle`` everywhere below unless a test says otherwise: util at or under the ledger's 5 %, warn at 60
idle minutes, cancel at 120, memory floor 50 %, bob exempt; H100 at $4.00/GPU-h.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gpuledger.guard.replay import replay
from gpuledger.guard.steps import BUSY, IDLE, UNKNOWN, Segment, simulate
from gpuledger.ledger.db import memory_ledger, sync_reference, writer
from gpuledger.ledger.settings import from_dict
from tests.analytics.build import T0, alloc, gpu, ingest, job, set_test_prices
from tests.conftest import gpuledger
from tests.guard.ledgers import fill_five, five_min

DAY = dt.date(2025, 3, 3)
IDLE_POLICY = {
    "name": "idle",
    "warn_minutes": 60,
    "cancel_minutes": 120,
    "memory_floor_pct": 50,
    "exemptions": {"users": ["bob"]},
}


def settings(*policies: dict[str, Any]) -> Any:
    return from_dict({"guard": {"policy": list(policies or [IDLE_POLICY])}}, Path("s.toml"))


def at(minutes: float) -> str:
    return (T0 + dt.timedelta(minutes=minutes)).isoformat(sep=" ")


@pytest.fixture(scope="module")
def five() -> Any:
    con = memory_ledger()
    fill_five(con)
    yield con
    con.close()


def by_job(out: dict[str, Any], policy: int = 0) -> dict[str, dict[str, Any]]:
    return {j["job_id"]: j for j in out["policies"][policy]["jobs"]}


def steps(row: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["step"], s["at"]) for s in row["steps"]]


def test_the_five_jobs_by_hand(five):
    out = replay(five, since=DAY, until=DAY, settings=settings())
    jobs = by_job(out)
    # idle from its second hour: run from 60 min; warn at 60 + 60 = 120, cancel at 60 + 120 = 180;
    # saved 1 GPU × (300 − 180) min = 2 GPU-h × $4 = $8
    idle2 = jobs["a/idle2"]
    assert steps(idle2) == [("warn", at(120)), ("cancel", at(180))]
    assert (idle2["saved_gpu_hours"], idle2["saved_usd"]) == (pytest.approx(2.0), pytest.approx(8.0))
    assert [s["idle_gpu_hours"] for s in idle2["steps"]] == [pytest.approx(1.0), pytest.approx(2.0)]
    assert [s["idle_usd"] for s in idle2["steps"]] == [pytest.approx(4.0), pytest.approx(8.0)]
    # bob's: the same steps, marked exempt, in no total
    assert jobs["a/exempt"]["exempt"] == "user bob" and steps(jobs["a/exempt"]) == steps(idle2)
    # busy again: both GPUs idle 0-90 min, warned at 60, busy from 90 (before the cancel at 120): a false alarm
    again = jobs["a/busy_again"]
    assert steps(again) == [("warn", at(60))]
    assert again["steps"][0]["idle_gpu_hours"] == pytest.approx(2.0)  # 2 GPUs × 1 h
    assert again["busy_again"] == [at(90)] and again["cancelled_at"] is None
    # idle after a burst: busy 0-30, idle 30-360; warn 90, cancel 150; saved (360 − 150) min = 3.5 GPU-h = $14
    burst = jobs["a/burst"]
    assert steps(burst) == [("warn", at(90)), ("cancel", at(150))]
    assert (burst["saved_gpu_hours"], burst["saved_usd"]) == (pytest.approx(3.5), pytest.approx(14.0))
    # full memory at 0 %: 79,000 / 81,559 MiB = 96.9 % ≥ the 50 % floor: never idle, not listed
    assert "a/fullmem" not in jobs
    assert out["policies"][0]["totals"] == {
        "jobs_warned": 3,  # idle2, busy_again, burst
        "jobs_cancelled": 2,  # idle2, burst
        "saved_gpu_hours": pytest.approx(5.5),  # 2 + 3.5
        "saved_usd": pytest.approx(22.0),  # 8 + 14
        "false_alarms": 1,
        "jobs_exempt": 1,
        "jobs_without_telemetry": 0,
    }


def test_without_the_memory_floor_the_full_memory_job_is_cancelled(five):
    no_floor = {k: v for k, v in IDLE_POLICY.items() if k != "memory_floor_pct"}
    jobs = by_job(replay(five, since=DAY, until=DAY, settings=settings(no_floor)))
    # 0 % from its start: warn 60, cancel 120, saved (300 − 120) min = 3 GPU-h = $12
    assert steps(jobs["a/fullmem"]) == [("warn", at(60)), ("cancel", at(120))]
    assert jobs["a/fullmem"]["saved_usd"] == pytest.approx(12.0)


def test_from_start_misses_the_job_idle_after_a_burst_and_catches_the_one_idle_from_its_start(five):
    fixed = dict(IDLE_POLICY, window="from_start")
    jobs = by_job(replay(five, since=DAY, until=DAY, settings=settings(fixed)))
    assert "a/burst" not in jobs and "a/idle2" not in jobs  # both were busy first
    assert steps(jobs["a/busy_again"]) == [("warn", at(60))]  # idle from its start until 90


def test_notify_only_and_a_second_warning(five):
    notify = {"name": "n", "warn_minutes": 60, "warn_again_minutes": 100, "memory_floor_pct": 50}
    out = replay(five, since=DAY, until=DAY, settings=settings(notify))
    jobs = by_job(out)
    assert steps(jobs["a/idle2"]) == [("warn", at(120)), ("warn_again", at(160))]
    assert out["policies"][0]["cancels"] is False
    assert out["policies"][0]["totals"]["jobs_cancelled"] == 0
    # busy_again's run ends at 90, before its second warning (100): one warning only
    assert steps(jobs["a/busy_again"]) == [("warn", at(60))]


def test_the_window_selects_steps(five):
    assert (
        by_job(replay(five, since=dt.date(2025, 3, 4), until=dt.date(2025, 3, 5), settings=settings())) == {}
    )


def test_scope_and_an_account_exemption(five):
    elsewhere = dict(IDLE_POLICY, scope={"clusters": ["other"]})
    assert by_job(replay(five, since=DAY, until=DAY, settings=settings(elsewhere))) == {}
    team = dict(IDLE_POLICY, exemptions={"accounts": ["nlp"]})
    out = replay(five, since=DAY, until=DAY, settings=settings(team))
    assert out["policies"][0]["totals"]["jobs_exempt"] == 4
    assert out["policies"][0]["totals"]["jobs_cancelled"] == 0


def test_a_fraction_of_the_gpus(ledger):
    """2 GPUs: g1 0 % for 0-200 min then 80 %, g2 0 % for 0-90 then 80 %; job 0-240. gpu_fraction 0.5: idle
    while one of two is idle, so from 0 to 200: warn 60, cancel 120, saved 2 GPUs × 2 h = 4 GPU-h = $16.
    gpu_fraction 1: idle only 0-90: a warning at 60 and a false alarm at 90."""
    ingest(
        ledger,
        jobs=[job("f/half", 0, 240, gpu_count=2.0)],
        gpus=[gpu("k1:0"), gpu("k2:0")],
        allocations=[alloc("f/half", "k1:0", 0, 240), alloc("f/half", "k2:0", 0, 240)],
        samples=five_min("k1:0", 0, [0.0] * 40 + [80.0] * 8) + five_min("k2:0", 0, [0.0] * 18 + [80.0] * 30),
    )
    set_test_prices(ledger)
    half = {"name": "half", "warn_minutes": 60, "cancel_minutes": 120, "gpu_fraction": 0.5}
    row = by_job(replay(ledger, since=DAY, until=DAY, settings=settings(half)))["f/half"]
    assert steps(row) == [("warn", at(60)), ("cancel", at(120))]
    assert row["saved_usd"] == pytest.approx(16.0)
    whole = dict(half, name="whole", gpu_fraction=1.0)
    row = by_job(replay(ledger, since=DAY, until=DAY, settings=settings(whole)))["f/half"]
    assert steps(row) == [("warn", at(60))] and row["busy_again"] == [at(90)]


def test_a_gap_in_telemetry_breaks_an_idle_run(ledger):
    """0 % samples for 0-50 min and 70-190 min (a 20-minute silence, more than 1.5 × the 5-minute interval):
    the runs are 0-50 and 70-190; warn at 70 + 60 = 130, cancel at 190 = the run's end: not before it, so none."""
    ingest(
        ledger,
        jobs=[job("g/gap", 0, 190)],
        gpus=[gpu("m1:0")],
        allocations=[alloc("g/gap", "m1:0", 0, 190)],
        samples=five_min("m1:0", 0, [0.0] * 10) + five_min("m1:0", 70, [0.0] * 24),
    )
    p = {"name": "p", "warn_minutes": 60, "cancel_minutes": 120}
    row = by_job(replay(ledger, since=DAY, until=DAY, settings=settings(p)))["g/gap"]
    assert steps(row) == [("warn", at(130))]


def test_interactive_jobs_are_spared_their_first_hours(ledger):
    """An interactive 1-GPU job at 0 % for 0-300 min, spared for 2 h: its idle run counts from 120 min:
    warn 180, cancel 240, saved 1 h = $4. A 2-GPU interactive job is not spared: warn 60, cancel 120."""
    ingest(
        ledger,
        jobs=[
            job("i/one", 0, 300, kind="interactive"),
            job("i/two", 0, 300, kind="interactive", gpu_count=2.0),
        ],
        gpus=[gpu("n1:0"), gpu("n2:0"), gpu("n3:0")],
        allocations=[
            alloc("i/one", "n1:0", 0, 300),
            alloc("i/two", "n2:0", 0, 300),
            alloc("i/two", "n3:0", 0, 300),
        ],
        samples=five_min("n1:0", 0, [0.0] * 60)
        + five_min("n2:0", 0, [0.0] * 60)
        + five_min("n3:0", 0, [0.0] * 60),
    )
    set_test_prices(ledger)
    p = {"name": "p", "warn_minutes": 60, "cancel_minutes": 120,
         "exemptions": {"interactive_max_gpus": 1, "interactive_max_hours": 2}}  # fmt: skip
    jobs = by_job(replay(ledger, since=DAY, until=DAY, settings=settings(p)))
    assert steps(jobs["i/one"]) == [("warn", at(180)), ("cancel", at(240))]
    assert jobs["i/one"]["saved_usd"] == pytest.approx(4.0)
    assert steps(jobs["i/two"]) == [("warn", at(60)), ("cancel", at(120))]


# -- the steps alone: quiet hours, cooldown, checkpoint signal ------------------------------------------


def seg(a: float, b: float, state: str) -> Segment:
    return Segment(T0 + dt.timedelta(minutes=a), T0 + dt.timedelta(minutes=b), state)


def policy(**kw: Any) -> Any:
    return settings({"name": "p", **kw}).guard.policies[0]


def test_quiet_hours_hold_steps_and_the_cancel_keeps_its_distance_from_the_warning():
    """Idle from 21:00 to 12:00 next day; quiet 22:00-07:00. Warn due 22:00 → 07:00; cancel due 23:00 but no
    sooner than 07:00 + (120 − 60) min = 08:00."""
    out = simulate(
        [seg(21 * 60, 36 * 60, IDLE)], policy(warn_minutes=60, cancel_minutes=120, quiet_hours="22:00-07:00")
    )
    assert [(s.step, s.at) for s in out.steps] == [
        ("warn", T0 + dt.timedelta(hours=31)),
        ("cancel", T0 + dt.timedelta(hours=32)),
    ]


def test_cooldown_records_a_second_warning_without_mail():
    segs = [seg(0, 70, IDLE), seg(70, 80, BUSY), seg(80, 150, IDLE), seg(150, 600, UNKNOWN)]
    out = simulate(segs, policy(warn_minutes=60, cooldown_minutes=120))
    assert [(s.at, s.mailed) for s in out.steps] == [
        (T0 + dt.timedelta(minutes=60), True),
        (T0 + dt.timedelta(minutes=140), False),  # 80 min after the first: inside the 120-minute cooldown
    ]
    assert out.busy_again == (
        T0 + dt.timedelta(minutes=70),
    )  # the unknown after the second run is no false alarm


def test_a_checkpoint_signal_comes_first_and_the_cancel_after_the_grace():
    p = policy(warn_minutes=60, cancel_minutes=120, checkpoint_signal="USR1", grace_minutes=10)
    out = simulate([seg(0, 200, IDLE)], p)
    assert [(s.step, s.at) for s in out.steps][1:] == [
        ("signal", T0 + dt.timedelta(minutes=120)),
        ("cancel", T0 + dt.timedelta(minutes=130)),
    ]
    saved = simulate([seg(0, 125, IDLE)], p)  # it saved and exited within the grace: no cancel
    assert [s.step for s in saved.steps] == ["warn", "signal"] and saved.cancelled_at is None


# -- the command ---------------------------------------------------------------------------------------------


SETTINGS_TOML = """
[[price]]
gpu_model = "H100-SXM-80GB"
tier = "on_demand"
usd_per_gpu_hour = 4.0
effective_from = 2025-01-01
source = "test"

[[guard.policy]]
name = "idle"
warn_minutes = 60
cancel_minutes = 120
memory_floor_pct = 50
[guard.policy.exemptions]
users = ["bob"]
"""


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_the_command_gives_the_hand_worked_figures_and_changes_nothing(tmp_path: Path):
    db = str(tmp_path / "l.duckdb")
    toml = tmp_path / "s.toml"
    toml.write_text(SETTINGS_TOML, encoding="utf-8")
    with writer(db) as con:
        fill_five(con)
    sync_reference(
        db, from_dict(__import__("tomllib").loads(SETTINGS_TOML), toml)
    )  # what any reading command does
    con = duckdb.connect(db, read_only=True)
    tables = {
        t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
        for (t,) in con.execute("SHOW TABLES").fetchall()
    }
    con.close()
    before = _digest(db)
    done = gpuledger(
        "guard",
        "replay",
        "--since",
        "2025-03-03",
        "--until",
        "2025-03-03",
        "--json",
        "--db",
        db,
        "--settings",
        str(toml),
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["policies"][0]["totals"] == {
        "jobs_warned": 3, "jobs_cancelled": 2, "saved_gpu_hours": 5.5, "saved_usd": 22.0, "false_alarms": 1, "jobs_exempt": 1,
        "jobs_without_telemetry": 0,
    }  # fmt: skip
    assert by_job(out)["a/idle2"]["cancelled_at"] == at(180)
    text = gpuledger(
        "guard",
        "replay",
        "--since",
        "2025-03-03",
        "--until",
        "2025-03-03",
        "--db",
        db,
        "--settings",
        str(toml),
    )
    assert (
        "policy idle (cancels), 2025-03-03 – 2025-03-03: 3 job(s) warned, 2 cancelled, 5.50 GPU-hours and $22.00 saved, 1 false alarm(s), 1 exempt"
        in text.stdout
    )
    assert (
        "a/busy_again (alice): warn 2025-03-03 01:00; busy again 2025-03-03 01:30 (false alarm)"
        in text.stdout
    )
    assert _digest(db) == before  # the file, byte for byte
    con = duckdb.connect(db, read_only=True)
    after = {
        t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
        for (t,) in con.execute("SHOW TABLES").fetchall()
    }
    con.close()
    assert after == tables


def test_the_command_without_policies_or_with_an_unknown_one(tmp_path: Path):
    db = str(tmp_path / "l.duckdb")
    none = gpuledger(
        "guard",
        "replay",
        "--since",
        "2025-03-03",
        "--until",
        "2025-03-03",
        "--db",
        db,
        env={"GPULEDGER_SETTINGS": None},
    )
    assert none.returncode == 2 and "no [[guard.policy]] in the settings" in none.stderr
    toml = tmp_path / "s.toml"
    toml.write_text(SETTINGS_TOML, encoding="utf-8")
    bad = gpuledger(
        "guard",
        "replay",
        "--since",
        "2025-03-03",
        "--until",
        "2025-03-03",
        "--policy",
        "nope",
        "--db",
        db,
        "--settings",
        str(toml),
    )
    assert (
        bad.returncode == 2 and bad.stderr.strip() == "error: --policy 'nope': no such policy (known: idle)"
    )


def test_a_saving_across_a_price_change_is_priced_day_by_day(ledger):
    """The H100 price falls from $4 to $2 on 2025-03-04. A job 20:00 (Mar 3) to 04:00 (Mar 4), busy until 21:00
    then 0 %: warn 22:00, cancel 23:00; saved 23:00-04:00 = 5 GPU-h: 1 h at $4 + 4 h at $2 = $12 (the cancel
    day's price alone would say $20)."""
    ingest(
        ledger,
        jobs=[job("p/night", 20 * 60, 28 * 60)],
        gpus=[gpu("q1:0")],
        allocations=[alloc("p/night", "q1:0", 20 * 60, 28 * 60)],
        samples=five_min("q1:0", 20 * 60, [90.0] * 12 + [0.0] * 84),
    )
    set_test_prices(ledger)
    ledger.execute(
        "INSERT INTO prices VALUES ('H100-SXM-80GB', 'on_demand', NULL, DATE '2025-03-04', 2.0, 't', DATE '2025-03-04', 'sheet', NULL)"
    )
    p = {"name": "p", "warn_minutes": 60, "cancel_minutes": 120}
    row = by_job(replay(ledger, since=DAY, until=dt.date(2025, 3, 4), settings=settings(p)))["p/night"]
    assert steps(row) == [("warn", at(22 * 60)), ("cancel", at(23 * 60))]
    assert row["saved_gpu_hours"] == pytest.approx(5.0)
    assert row["saved_usd"] == pytest.approx(1 * 4.0 + 4 * 2.0)


def test_a_job_without_telemetry_is_not_judged_and_counted_so(ledger):
    """A scheduler record with no sample tied to it (a node without an exporter): no step, counted apart."""
    ingest(ledger, jobs=[job("n/blind", 0, 600, gpu_count=8.0)])
    out = replay(ledger, since=DAY, until=DAY, settings=settings({"name": "p", "warn_minutes": 60}))
    assert out["policies"][0]["jobs"] == []
    assert out["policies"][0]["totals"]["jobs_without_telemetry"] == 1
