"""analytics/shared.py: inside a sharing block a view's unallocated capacity and per-job waste are computed
once and equal the plain calls; outside one (or under another key) a write is always seen."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import analytics.capacity as capacity
import analytics.waste as waste
from analytics.filters import Filters
from analytics.shared import sharing
from gpuledger.ledger.settings import Settings
from tests.analytics.build import alloc, gpu, ingest, job, series, set_test_prices

ROOT = Path(__file__).resolve().parents[2]


def _one_gpu(con, minutes: int) -> None:
    # one H100 on c1 reporting every minute, held by a job for the first 60 min
    ingest(
        con,
        jobs=[job(f"j{minutes}", 0, 60)],
        allocations=[alloc(f"j{minutes}", "n1:0", 0, 60)],
        samples=series("n1:0", 0, [50.0] * minutes),
        gpus=[gpu("n1:0")],
    )


def _count_unallocated(monkeypatch) -> list[int]:
    """A list that grows by one each time the unallocated capacity is really computed."""
    calls: list[int] = []
    real = capacity._unallocated_sql
    monkeypatch.setattr(capacity, "_unallocated_sql", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def test_inside_a_block_each_view_is_computed_once_and_equals_the_plain_call(ledger, monkeypatch):
    set_test_prices(ledger)
    _one_gpu(ledger, 180)
    plain_un = waste.unallocated(ledger)
    plain_jobs = waste.job_waste(ledger)
    # observed 3 GPU-h, held 1 → 2 GPU-h unallocated at $4
    assert plain_un["unallocated_usd"].sum() == 2 * 4.0
    calls = _count_unallocated(monkeypatch)
    with sharing(ledger, ("test", 1)):
        for _ in range(3):
            assert waste.unallocated(ledger, filters=Filters(), settings=Settings()).equals(plain_un)
            assert waste.job_waste(ledger, filters=Filters(), settings=Settings()).equals(plain_jobs)
        waste.unallocated(ledger, filters=Filters(clusters=("c1",)), settings=Settings())  # another view
    assert len(calls) == 2
    waste.unallocated(ledger)  # outside any block: computed again
    assert len(calls) == 3


def test_outside_a_block_or_under_a_new_key_a_write_is_seen(ledger):
    set_test_prices(ledger)
    _one_gpu(ledger, 180)
    with sharing(ledger, ("test", 1)):
        before = waste.unallocated(ledger)["unallocated_usd"].sum()
    # 60 more minutes of telemetry (180-240 min): observed 4 GPU-h, held 1 → 3 unallocated
    ingest(ledger, samples=series("n1:0", 180, [0.0] * 60))
    assert before == 2 * 4.0
    assert waste.unallocated(ledger)["unallocated_usd"].sum() == 3 * 4.0
    with sharing(ledger, ("test", 2)):
        assert waste.unallocated(ledger)["unallocated_usd"].sum() == 3 * 4.0


def test_an_omitted_as_of_or_default_keyword_shares_the_result_of_the_explicit_call(ledger, monkeypatch):
    from analytics.filters import horizon

    set_test_prices(ledger)
    _one_gpu(ledger, 180)
    calls = _count_unallocated(monkeypatch)
    with sharing(ledger, ("test", 3)):
        a = waste.unallocated(ledger)
        b = waste.unallocated(ledger, filters=Filters(), settings=Settings(), as_of=horizon(ledger))
        c = waste.unallocated(ledger, as_of=None)
    assert len(calls) == 1
    # observed 3 GPU-h, held 1 → 2 GPU-h unallocated at $4, whichever way it was asked
    assert a["unallocated_usd"].sum() == b["unallocated_usd"].sum() == c["unallocated_usd"].sum() == 2 * 4.0


def test_the_rollup_check_is_made_once_per_block_and_again_after_it(ledger, monkeypatch):
    import analytics.telemetry_source as telemetry_source

    set_test_prices(ledger)
    _one_gpu(ledger, 180)
    calls = []
    real = telemetry_source.rollup_matches
    monkeypatch.setattr(telemetry_source, "rollup_matches", lambda *a: calls.append(1) or real(*a))
    with sharing(ledger, ("test", 4)):
        for _ in range(3):
            telemetry_source.require_rollup(ledger, Settings())
        waste.job_waste(ledger)  # asks for it too
    assert len(calls) == 1
    telemetry_source.require_rollup(ledger, Settings())  # outside any block: asked again
    assert len(calls) == 2


def _temp_tables(con) -> list[str]:
    return [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()]


def test_a_block_runs_the_per_job_costs_once_into_a_temp_table_and_drops_it_after(ledger, monkeypatch):
    from analytics import cost, shared
    from analytics.utilization import utilization_by

    set_test_prices(ledger)
    _one_gpu(ledger, 180)
    plain = (cost.job_costs(ledger), utilization_by(ledger, by="team"), waste.job_waste(ledger))
    made = []
    real = shared.materialized
    monkeypatch.setattr(cost, "materialized", lambda key, sql, p: made.append(key[0]) or real(key, sql, p))
    with sharing(ledger):
        inside = (cost.job_costs(ledger), utilization_by(ledger, by="team"), waste.job_waste(ledger))
        kept = _temp_tables(ledger)
    assert all(a.equals(b) for a, b in zip(plain, inside, strict=True))
    # asked for by every statement, computed once each: the view's job costs, the telemetry-only GPUs (the
    # shared stretches are a ledger table, gpu_shares: nothing to compute)
    assert {"job_costs", "telemetry_only_gpus"} <= set(made)
    assert "shared_segments" not in made
    assert len(kept) == 2, kept
    assert _temp_tables(ledger) == []  # dropped with the block
    # outside a block the sub-query is inlined: a write is seen at once
    assert cost.job_costs_sql(Filters(), None)[0].lstrip().startswith("WITH shared AS")


def test_keyed_blocks_on_one_connection_make_the_per_job_costs_once_and_give_the_plain_figures(ledger):
    """A page run's data functions each open a block under the ledger's key on the run's one connection: the
    second block reads the temp tables the first made, and every figure equals the plain call's."""
    from analytics import cost
    from analytics.recommend import recommendations
    from analytics.summary import summary

    set_test_prices(ledger)
    _one_gpu(ledger, 180)
    plain = (summary(ledger), recommendations(ledger), waste.waste_by_week(ledger), cost.job_costs(ledger))
    with sharing(ledger, ("page", 7)):
        first = summary(ledger)
        made = _temp_tables(ledger)
    assert len(made) == 2, made  # job costs, telemetry-only GPUs: kept for the next block
    with sharing(ledger, ("page", 7)):
        again = (recommendations(ledger), waste.waste_by_week(ledger), cost.job_costs(ledger))
        assert set(made) <= set(_temp_tables(ledger))  # read, not made again
    assert first == plain[0]
    assert all(a.equals(b) for a, b in zip(plain[1:], again, strict=True))
    kept = set(_temp_tables(ledger))
    with sharing(ledger):  # a block without a key still drops what it made
        cost.job_costs(ledger, filters=Filters(clusters=("c9",)))
        assert len(_temp_tables(ledger)) > len(kept)
    assert set(_temp_tables(ledger)) == kept


def test_a_keyed_block_on_a_new_connection_makes_its_temp_tables_again(db_path):
    """Temp tables go with their connection: a block under the same key on another connection (the next
    page run; or one that got the closed one's id()) must not name the old ones."""
    from analytics import cost, shared
    from gpuledger.ledger.db import reader, writer

    with writer(db_path) as con:
        set_test_prices(con)
        _one_gpu(con, 180)
        plain = cost.job_costs(con)
    with reader(db_path) as con:
        with sharing(con, ("file", 1)):
            first = cost.job_costs(con)
        old = dict(shared._state_temps[("file", 1)][id(con)])
    assert old
    with reader(db_path) as con:
        shared._state_temps[("file", 1)][id(con)] = dict(old)  # as if the new connection got the old id()
        with sharing(con, ("file", 1)):
            second = cost.job_costs(con)
            assert not set(old.values()) & set(_temp_tables(con))
    assert plain.equals(first) and plain.equals(second)


def test_a_write_after_a_block_is_seen_by_the_next_block(ledger):
    from analytics import cost

    set_test_prices(ledger)
    _one_gpu(ledger, 180)
    with sharing(ledger):
        before = cost.job_costs(ledger, unattributed=False)["cost_usd"].sum()
    ingest(ledger, jobs=[job("j2", 0, 30)], allocations=[alloc("j2", "n2:0", 0, 30)], gpus=[gpu("n2:0")])
    with sharing(ledger):
        after = cost.job_costs(ledger, unattributed=False)["cost_usd"].sum()
    assert before == 4.0  # 1 h of an H100 at $4
    assert after == 4.0 + 0.5 * 4.0


def test_a_block_without_a_key_inside_a_block_is_that_block(ledger, monkeypatch):
    set_test_prices(ledger)
    _one_gpu(ledger, 180)
    calls = _count_unallocated(monkeypatch)
    with sharing(ledger, ("page", 1)):
        waste.unallocated(ledger)
        with sharing(ledger):  # e.g. a report collected inside a page's data function
            waste.unallocated(ledger)
    assert len(calls) == 1


def test_recommendations_and_diagnoses_of_one_view_compute_its_signals_once(ledger, monkeypatch):
    """The Recommendations page asks for both; each used to compute the view's job signals itself."""
    import analytics.job_signals as signals
    from analytics.diagnoses import diagnoses
    from analytics.recommend import recommendations

    set_test_prices(ledger)
    _one_gpu(ledger, 180)
    plain_recs, plain_diag = recommendations(ledger), diagnoses(ledger)
    calls: list[int] = []
    real = signals.job_signals
    monkeypatch.setattr(signals, "job_signals", lambda *a, **k: calls.append(1) or real(*a, **k))
    with sharing(ledger, ("test", 2)):
        assert recommendations(ledger).equals(plain_recs)
        assert diagnoses(ledger).equals(plain_diag)
    assert len(calls) == 1
    diagnoses(ledger)  # outside any block: computed again
    assert len(calls) == 2


def test_no_module_keeps_a_blocks_temp_table_from_its_import():
    """A module first imported inside a sharing block (a page's data function imports lazily) must not
    build a module-level statement naming that block's temp table: the table is dropped when the block ends,
    and every later statement built from the constant fails (or reads another block's rows)."""
    code = """
import importlib, pkgutil, sys
import analytics
from analytics.shared import sharing
from gpuledger.ledger.db import memory_ledger
con = memory_ledger()
with sharing(con, ("import", 1)):
    for m in pkgutil.iter_modules(analytics.__path__):
        importlib.import_module(f"analytics.{m.name}")
kept = [f"{n}.{k}" for n, mod in list(sys.modules.items()) if n.startswith("analytics")
        for k, v in vars(mod).items() if isinstance(v, str) and "gl_shared" in v]
print(kept)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_the_horizon_is_asked_once_per_block_and_again_after_a_write(ledger, monkeypatch):
    """analytics.filters.horizon is memoised per sharing block (nearly every function asks for it)."""
    import analytics.filters as filters
    import analytics.shared as shared_mod
    from analytics.recommend import recommendations

    set_test_prices(ledger)
    _one_gpu(ledger, 180)
    plain = filters.horizon(ledger)
    calls: list[int] = []
    real = shared_mod._horizon
    monkeypatch.setattr(shared_mod, "_horizon", lambda con: calls.append(1) or real(con))
    with sharing(ledger, ("test", 9)):
        assert filters.horizon(ledger) == plain
        recommendations(ledger)
        waste.waste_by_week(ledger)
    assert len(calls) == 1
    ingest(ledger, samples=series("n1:0", 180, [0.0] * 60))  # 60 more minutes: a later horizon
    assert filters.horizon(ledger) > plain  # outside a block: asked again
    assert len(calls) == 2


def test_recommendations_and_diagnoses_of_one_view_right_size_its_jobs_once(ledger, monkeypatch):
    """Both ask analytics.diagnoses for the view's right-sizing; inside a block it is computed once, and
    both lists equal the plain calls (outside a block each computes it from its own signals)."""
    import analytics.advice_sizing as sizing
    import analytics.diagnoses as diag
    from analytics.recommend import recommendations

    set_test_prices(ledger)
    _one_gpu(ledger, 180)
    plain_recs, plain_diag = recommendations(ledger), diag.diagnoses(ledger)
    calls: list[int] = []
    real = diag.right_size
    counted = lambda *a, **k: calls.append(1) or real(*a, **k)  # noqa: E731
    monkeypatch.setattr(diag, "right_size", counted)
    monkeypatch.setattr(sizing, "right_size", counted)
    with sharing(ledger, ("test", 11)):
        assert recommendations(ledger).equals(plain_recs)
        assert diag.diagnoses(ledger).equals(plain_diag)
    assert len(calls) == 1


def test_the_whole_ledger_reads_are_made_once_per_block_whatever_the_views(ledger, monkeypatch):
    """The rules' reads of the whole ledger (analytics.shared.ledger_frame, ledger_prices: every run, every
    job's checkpoint and busy share, the price book) and the recurrence history do not depend on the view:
    inside a block two views (the items scan's weeks) read each once, and each view's list equals the plain
    call; outside a block every call reads again."""
    import analytics.recurrence as recurrence
    import analytics.shared as shared_mod
    from analytics.recommend import recommendations
    from tests.analytics.recommend_ledgers import DAY, recommend_ledger

    recommend_ledger(ledger)
    views = (Filters(since=DAY, until=DAY), Filters(since=DAY - dt.timedelta(days=1), until=DAY))
    plain = [recommendations(ledger, filters=v, problems=False) for v in views]
    assert plain[0].height > 5  # the hand ledger: most kinds, so the rules that read the ledger whole run
    reads: list[str] = []
    real_frame, real_book, real_history = shared_mod.frame, shared_mod.price_book, recurrence._ledger_history
    monkeypatch.setattr(
        shared_mod, "frame", lambda con, sql, p=None: reads.append(sql) or real_frame(con, sql, p)
    )
    monkeypatch.setattr(shared_mod, "price_book", lambda con: reads.append("price_book") or real_book(con))
    monkeypatch.setattr(
        recurrence, "_ledger_history", lambda con, as_of: reads.append("history") or real_history(con, as_of)
    )
    with sharing(ledger, ("test", 12)):
        for v, expected in zip(views, plain, strict=True):
            assert recommendations(ledger, filters=v, problems=False).equals(expected)
    assert "price_book" in reads and "history" in reads and len(reads) >= 5, reads
    assert len(reads) == len(set(reads)), reads  # each read once for both views
    once = len(reads)
    recommendations(ledger, filters=views[0], problems=False)  # outside a block: each read again
    assert set(reads[once:]) == set(reads[:once])
