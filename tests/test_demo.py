"""The demo fleet: deterministic, a no-op when re-run, and every planted scenario there as promised.

Every property is checked with plain SQL over the ledger the demo landed (never by asking the generator),
on a 2-day demo (one copy of each scenario) to keep the suite fast. The full 28-day build is measured by
hand (docs/demo.md gives the figures).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from gpuledger.cli.main import main
from gpuledger.demo.build import DEFAULT_END, DEMO_MEMORY_LIMIT, _bounded_memory, build_demo, ensure_demo
from gpuledger.demo.fleet import TICK_S
from gpuledger.ledger.db import memory_ledger, reader, writer
from gpuledger.ledger.errors import LedgerError
from tests.conftest import DEMO_DAYS, copy_demo, write

DAYS = DEMO_DAYS  # the demo copy_demo holds
LO = dt.datetime(2026, 11, 21)  # DEFAULT_END (2026-11-23) minus 2 days
HI = dt.datetime(2026, 11, 23)
PER_DAY = 86_400 // TICK_S  # one sample per GPU every TICK_S (60 s): 1,440 a day
OUTAGE = 3 * 3600 // TICK_S  # borealis-n00's 3-hour exporter outage: 180 samples per GPU
# 2 days × 1,440 samples a day × 112 GPUs, less the outage's 8 GPUs × 180
SAMPLES = 2 * PER_DAY * 112 - 8 * OUTAGE
PREFIXES = (
    "notebook-idle-",
    "small-batch-",
    "oversized-",
    "scaling-",
    "failed-",
    "ckpt-ondemand-",
    "tiny-",
    "input-bound-",
    "busy-idle-",
    "hot-",
    "overalloc-",
)
# Tables the demo writes; ingests is compared without its wall-clock column.
CHECKED = ("gpus", "samples", "jobs", "allocations", "training_runs", "capacity", "samples_minute", "prices")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[duckdb.DuckDBPyConnection]:
    """The 2-day demo, built once per test run in another process or worker (tests/conftest.py): the rerun
    test below builds it again here and compares every table with this copy."""
    with writer(copy_demo(tmp_path_factory.mktemp("demo") / "demo.duckdb")) as con:
        yield con


def rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None) -> list[tuple]:
    return con.execute(sql, params or []).fetchall()


def one(con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None) -> object:
    return rows(con, sql, params)[0][0]


def checksums(con: duckdb.DuckDBPyConnection) -> dict[str, tuple]:
    out = {t: tuple(rows(con, f"SELECT count(*), bit_xor(hash(t)) FROM {t} t")[0]) for t in CHECKED}
    out["ingests"] = tuple(rows(con, "SELECT path, content_sha256, format, rows_json FROM ingests")[0])
    return out


def test_deterministic_rerun_is_a_no_op_and_another_demo_replaces_it(demo: duckdb.DuckDBPyConnection) -> None:
    con = memory_ledger()
    first = build_demo(con, days=DAYS, seed=7, end=DEFAULT_END)
    assert first["samples"] == SAMPLES
    assert checksums(con) == checksums(demo)  # same seed and end: the same ledger
    assert build_demo(con, days=DAYS) == {}
    assert checksums(con) == checksums(demo)
    assert one(con, "SELECT count(*) FROM ingests") == 1
    # another seed and end: a different ledger that replaces the first, in the new window only
    build_demo(con, days=DAYS, seed=9, end=dt.date(2026, 11, 24))
    differs = {t for t, v in checksums(con).items() if v != checksums(demo)[t]}
    assert {"samples", "jobs", "allocations", "ingests"} <= differs
    assert rows(con, "SELECT count(*), min(format) FROM ingests") == [(1, "demo")]
    assert rows(con, "SELECT count(*), min(ts), max(ts) FROM samples") == [
        (SAMPLES, dt.datetime(2026, 11, 22), dt.datetime(2026, 11, 24) - dt.timedelta(seconds=TICK_S))
    ]
    assert one(con, "SELECT count(*) FROM jobs WHERE start_ts < '2026-11-22'") == 0


def test_too_short_a_demo_is_refused() -> None:
    with pytest.raises(LedgerError, match="at least 2 days"):
        build_demo(memory_ledger(), days=1)


def test_fleet_shape(demo: duckdb.DuckDBPyConnection) -> None:
    assert rows(demo, "SELECT cluster, model, count(*) FROM gpus GROUP BY ALL ORDER BY ALL") == [
        ("atlas", "H100-SXM-80GB", 64),
        ("borealis", "A100-80GB", 32),
        ("cirrus", "A10G", 5),
        ("cirrus", "L4", 6),
        ("cirrus", "L40S", 5),
    ]
    assert one(demo, "SELECT count(DISTINCT team) FROM jobs") == 5
    assert one(demo, "SELECT count(DISTINCT user_name) FROM jobs") >= 20
    assert {r[0] for r in rows(demo, "SELECT DISTINCT kind FROM jobs")} == {
        "training",
        "fine-tune",
        "inference",
        "interactive",
        "other",
    }
    states = {r[0] for r in rows(demo, "SELECT DISTINCT state FROM jobs")}
    assert {"COMPLETED", "FAILED", "CANCELLED"} <= states
    # every planted name is unique to its scenario: no background job borrows a prefix
    for prefix in PREFIXES:
        assert one(demo, "SELECT count(*) FROM jobs WHERE starts_with(name, ?)", [prefix]) > 0, prefix


def test_telemetry_covers_every_gpu_every_tick_but_one_outage(demo: duckdb.DuckDBPyConnection) -> None:
    per_host = rows(
        demo,
        """SELECT host = 'borealis-n00', min(n), max(n) FROM (
               SELECT g.host, count(*) AS n FROM samples s JOIN gpus g USING (gpu_id) GROUP BY g.gpu_id, g.host)
           GROUP BY 1 ORDER BY 1""",
    )
    # 2 days × 86,400 s / 60 s; borealis-n00 misses 08:00–11:00 on the first day (3 h = 180 samples)
    assert per_host == [(False, 2 * PER_DAY, 2 * PER_DAY), (True, 2 * PER_DAY - OUTAGE, 2 * PER_DAY - OUTAGE)]
    assert rows(
        demo,
        """SELECT min(ts), max(ts) FROM samples s JOIN gpus g USING (gpu_id)
           WHERE g.host = 'borealis-n00' AND ts BETWEEN '2026-11-21 07:00' AND '2026-11-21 12:00'
             AND ts > '2026-11-21 07:59:30'""",
    ) == [(dt.datetime(2026, 11, 21, 11), dt.datetime(2026, 11, 21, 12))]
    # a sample stands for TICK_S, also the one before the outage (a gap is unknown time, not idle)
    assert one(demo, "SELECT count(*) FROM samples WHERE interval_s <> ?", [TICK_S]) == 0
    assert rows(demo, "SELECT min(ts), max(ts) FROM samples") == [(LO, HI - dt.timedelta(seconds=TICK_S))]
    # the energy counter never goes backwards, grows by power × TICK_S, and kept counting through the outage
    steps = rows(
        demo,
        f"""SELECT epoch(ts - prev_ts) = {TICK_S}, count(*) FILTER (WHERE abs(d - power_w * {TICK_S}) > 0.01),
                  count(*) FILTER (WHERE d <= 0) FROM (
               SELECT ts, lag(ts) OVER w AS prev_ts, energy_j - lag(energy_j) OVER w AS d, power_w
               FROM samples WINDOW w AS (PARTITION BY gpu_id ORDER BY ts))
           WHERE d IS NOT NULL GROUP BY 1 ORDER BY 1""",
    )
    assert steps[0][0] is False and steps[0][2] == 0  # 8 steps over the outage: all positive
    assert steps[1] == (True, 0, 0)
    # SM-/tensor-active only where dcgm-exporter runs (the H100s)
    assert rows(
        demo,
        """SELECT g.model, count(s.sm_active_pct) > 0 FROM samples s JOIN gpus g USING (gpu_id)
           GROUP BY 1 ORDER BY 1""",
    ) == [("A100-80GB", False), ("A10G", False), ("H100-SXM-80GB", True), ("L4", False), ("L40S", False)]


def test_samples_are_attributed_through_allocations(demo: duckdb.DuckDBPyConnection) -> None:
    covered = one(
        demo,
        """SELECT count(*) FROM samples s WHERE EXISTS (
               SELECT 1 FROM allocations a WHERE a.gpu_id = s.gpu_id AND s.ts >= a.start_ts
               AND (a.end_ts IS NULL OR s.ts < a.end_ts))""",
    )
    assert covered == one(demo, "SELECT count(job_id) FROM samples") > 0
    # an allocated GPU is never held by two jobs at once
    overlaps = one(
        demo,
        """SELECT count(*) FROM allocations a JOIN allocations b
           ON a.gpu_id = b.gpu_id AND a.job_id < b.job_id
          AND a.start_ts < coalesce(b.end_ts, 'infinity') AND b.start_ts < coalesce(a.end_ts, 'infinity')""",
    )
    assert overlaps == 0
    # idle time between jobs: GPUs report 0 % with the GpuIdle throttle bit
    assert rows(demo, "SELECT max(util_pct), min(throttle_reasons) FROM samples WHERE job_id IS NULL") == [
        (0.0, 1)
    ]


def per_job(con: duckdb.DuckDBPyConnection, prefix: str, select: str) -> list[tuple]:
    return rows(
        con,
        f"""SELECT j.name, {select} FROM jobs j JOIN samples s USING (job_id)
            WHERE starts_with(j.name, ?) GROUP BY j.name ORDER BY j.name""",
        [prefix],
    )


def test_notebook_idle_sits_at_0_to_2_pct_for_8_to_14_h(demo: duckdb.DuckDBPyConnection) -> None:
    got = rows(
        demo,
        f"""WITH s AS (
               SELECT j.name, j.kind, j.gpu_model, s.ts, s.util_pct <= 2 AS low,
                      row_number() OVER (PARTITION BY j.job_id ORDER BY s.ts)
                    - row_number() OVER (PARTITION BY j.job_id, s.util_pct <= 2 ORDER BY s.ts) AS island
               FROM jobs j JOIN samples s USING (job_id) WHERE starts_with(j.name, 'notebook-idle-'))
           SELECT name, any_value(kind), any_value(gpu_model), max(n) * {TICK_S} / 3600.0 AS idle_h FROM (
               SELECT name, kind, gpu_model, island, count(*) AS n FROM s WHERE low GROUP BY ALL) GROUP BY name""",
    )
    assert len(got) == 4
    for name, kind, model, idle_h in got:
        assert kind == "interactive" and model in ("H100-SXM-80GB", "A100-80GB"), name
        assert 8 <= idle_h <= 14, (name, idle_h)


def test_small_batch_runs_are_underused_with_a_batch_family(demo: duckdb.DuckDBPyConnection) -> None:
    got = rows(
        demo,
        """SELECT j.name, avg(s.util_pct), max(s.mem_used_mib), max(s.mem_total_mib), any_value(r.batch_size),
                  any_value(r.precision), any_value(r.optimizer), any_value(r.peak_mem_mib),
                  any_value(r.tokens_per_s), any_value(r.seq_len), any_value(j.kind)
           FROM jobs j JOIN samples s USING (job_id) JOIN training_runs r USING (job_id)
           WHERE starts_with(j.name, 'small-batch-') GROUP BY j.name""",
    )
    assert len(got) == 5
    for name, util, mem_max, total, batch, prec, opt, peak, tps, seq, kind in got:
        assert 25 <= util <= 40 and kind == "training", name
        assert total >= 80000 and mem_max <= peak, name
        assert (prec, opt) == ("bf16", "adamw") and tps > 0 and seq > 0, name
        if batch == 8:
            assert 12 * 1024 <= peak <= 20 * 1024, name
    family = rows(
        demo,
        """SELECT r.model, count(DISTINCT r.batch_size), regr_r2(r.peak_mem_mib, r.batch_size)
           FROM jobs j JOIN training_runs r USING (job_id) WHERE starts_with(j.name, 'small-batch-')
           GROUP BY 1 HAVING count(DISTINCT r.batch_size) >= 2""",
    )
    assert family and family[0][1] >= 3 and family[0][2] > 0.999  # memory is linear in the batch


def test_outage_leaves_small_batch_time_unmeasured(demo: duckdb.DuckDBPyConnection) -> None:
    got = rows(
        demo,
        """SELECT j.name, epoch(j.end_ts - j.start_ts), sum(s.interval_s) FROM jobs j JOIN samples s USING (job_id)
           WHERE starts_with(j.name, 'small-batch-') GROUP BY ALL""",
    )
    assert len(got) == 5
    for name, held_s, covered_s in got:
        assert held_s - covered_s == 3 * 3600, name


def test_oversized_and_tiny_jobs_use_little_of_big_cards(demo: duckdb.DuckDBPyConnection) -> None:
    for name, model, kind, mem in per_job(
        demo, "oversized-", "any_value(j.gpu_model), any_value(j.kind), max(s.mem_used_mib)"
    ):
        assert model == "H100-SXM-80GB" and kind in ("inference", "fine-tune") and mem < 16 * 1024, name
    tiny = rows(
        demo,
        """SELECT j.name, j.gpu_count, c.mig_capable, max(s.mem_used_mib), avg(s.util_pct)
           FROM jobs j JOIN samples s USING (job_id) JOIN gpu_catalog c ON c.model = j.gpu_model
           WHERE starts_with(j.name, 'tiny-') GROUP BY ALL""",
    )
    assert len(tiny) == 4
    for name, count, mig, mem, util in tiny:
        assert count == 1 and mig and mem < 10 * 1024 and util < 30, name


def test_scaling_family_loses_per_gpu_throughput(demo: duckdb.DuckDBPyConnection) -> None:
    got = rows(
        demo,
        """SELECT j.gpu_count, r.model, r.batch_size, r.seq_len, r.tokens_per_s / j.gpu_count
           FROM jobs j JOIN training_runs r USING (job_id) WHERE starts_with(j.name, 'scaling-') ORDER BY 1""",
    )
    assert [g for g, *_ in got] == [8, 16, 32]
    assert len({tuple(r[1:4]) for r in got}) == 1  # one model and config
    base = got[0][4]
    assert got[1][4] / base == pytest.approx(0.9) and got[2][4] / base == pytest.approx(0.7)


def test_failed_runs_lose_hours_since_their_last_checkpoint(demo: duckdb.DuckDBPyConnection) -> None:
    got = rows(
        demo,
        """SELECT name, state, kind, gpu_count, epoch(end_ts - start_ts) / 3600, epoch(end_ts - last_checkpoint_ts) / 3600
           FROM jobs WHERE starts_with(name, 'failed-')""",
    )
    assert got
    for name, state, kind, gpus, hours, lost_h in got:
        assert state == "FAILED" and kind == "training" and gpus >= 16, name
        assert 24 <= hours <= 72 and lost_h >= 8, name


def test_checkpointed_on_demand_runs(demo: duckdb.DuckDBPyConnection) -> None:
    got = rows(
        demo,
        "SELECT pricing_tier, kind, state, last_checkpoint_ts IS NOT NULL FROM jobs WHERE starts_with(name, 'ckpt-ondemand-')",
    )
    assert got and set(got) == {("on_demand", "training", "COMPLETED", True)}


def test_input_bound_alternates_bursts_and_dips(demo: duckdb.DuckDBPyConnection) -> None:
    got = rows(
        demo,
        """WITH s AS (SELECT j.job_id, s.gpu_id, s.util_pct,
                             lag(s.util_pct) OVER (PARTITION BY j.job_id, s.gpu_id ORDER BY s.ts) AS prev
                      FROM jobs j JOIN samples s USING (job_id) WHERE starts_with(j.name, 'input-bound-'))
           SELECT avg((util_pct < 10)::INT), avg((util_pct > 70)::INT),
                  avg(((util_pct < 10) <> (prev < 10))::INT) FROM s GROUP BY job_id""",
    )
    assert got
    for low, high, switches in got:
        # 2 of every 5 samples dip below 10 %, 3 burst above 70 %, and it switches twice per 5 samples
        assert low == pytest.approx(0.4, abs=0.01) and high == pytest.approx(0.6, abs=0.01)
        assert switches == pytest.approx(0.4, abs=0.01)


def test_busy_but_unproductive_hot_and_overallocated(demo: duckdb.DuckDBPyConnection) -> None:
    for name, util, sm, tensor in per_job(
        demo, "busy-idle-", "avg(s.util_pct), avg(s.sm_active_pct), avg(s.tensor_active_pct)"
    ):
        assert util >= 90 and 15 <= sm <= 25 and tensor <= 2, name
    for name, hot_gpus, max_temp in per_job(
        demo,
        "hot-",
        "count(DISTINCT CASE WHEN s.throttle_reasons & 96 <> 0 THEN s.gpu_id END), max(s.temp_c)",
    ):
        assert hot_gpus >= 1 and max_temp >= 85, name
    got = rows(
        demo,
        """SELECT name, any_value(gpu_count), count(*) FILTER (WHERE mx = 0) FROM (
               SELECT j.name, j.gpu_count, s.gpu_id, max(s.util_pct) AS mx FROM jobs j JOIN samples s USING (job_id)
               WHERE starts_with(j.name, 'overalloc-') GROUP BY ALL) GROUP BY name""",
    )
    assert got and all(count == 8 and zero == 6 for _, count, zero in got)


def test_borealis_capacity_is_only_partly_allocated(demo: duckdb.DuckDBPyConnection) -> None:
    assert rows(demo, "SELECT cluster, gpu_model, gpu_count, start_ts, end_ts FROM capacity") == [
        ("borealis", "A100-80GB", 32.0, LO, HI)
    ]
    allocated_h = one(
        demo,
        """SELECT sum(epoch(least(coalesce(end_ts, ?::TIMESTAMP), ?::TIMESTAMP) - start_ts)) / 3600
           FROM allocations a JOIN gpus g USING (gpu_id) WHERE g.cluster = 'borealis'""",
        [HI, HI],
    )
    capacity_h = 32 * 48
    assert 0.1 * capacity_h < allocated_h < 0.8 * capacity_h
    assert (
        one(demo, "SELECT usd_per_gpu_hour FROM prices WHERE cluster = 'borealis' AND tier = 'on_prem'")
        == 1.10
    )


def test_planted_waste_is_visible_in_dollars(demo: duckdb.DuckDBPyConnection) -> None:
    """Plain SQL: idle notebook time and failed runs at the on-demand price, unallocated on-prem capacity."""
    idle_usd = one(
        demo,
        """SELECT sum(s.interval_s / 3600 * p.usd_per_gpu_hour) FROM jobs j JOIN samples s USING (job_id)
           JOIN prices p ON p.gpu_model = j.gpu_model AND p.tier = 'on_demand' AND p.cluster IS NULL
           WHERE starts_with(j.name, 'notebook-idle-') AND s.util_pct <= 2""",
    )
    # 4 notebooks × ≥ 8 h × at least the A100 on-demand $1.79/GPU-h
    assert idle_usd > 4 * 8 * 1.79
    failed_usd = one(
        demo,
        """SELECT sum(j.gpu_count * epoch(j.end_ts - j.start_ts) / 3600 * p.usd_per_gpu_hour) FROM jobs j
           JOIN prices p ON p.gpu_model = j.gpu_model AND p.tier = 'on_demand' AND p.cluster IS NULL
           WHERE starts_with(j.name, 'failed-')""",
    )
    assert failed_usd > 16 * 24 * 2.99  # 16 H100 for over a day
    unused_gpu_h = one(
        demo,
        """SELECT sum(s.interval_s) / 3600 FROM samples s JOIN gpus g USING (gpu_id)
           WHERE g.cluster = 'borealis' AND s.job_id IS NULL""",
    )
    assert unused_gpu_h > 0.2 * 32 * 48


def test_cli_demo_json_then_no_op(db_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--db", db_path, "--days", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["already"] is False and out["rows"]["samples"] == SAMPLES and out["seconds"] > 0
    # the items' weeks are scanned once and kept beside the ledger for the first cold page (items/sidecar.py)
    assert len(list(Path(db_path + ".scans").glob("*.json"))) == 1
    assert main(["demo", "--db", db_path, "--days", "2"]) == 0
    assert "already in the ledger; nothing written" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--db", db_path, "--days", "1"])
    assert exc.value.code == 2
    assert "must be between 2 and 366 days, got 1" in capsys.readouterr().err


def test_ensure_demo_fills_only_an_empty_ledger(
    db_path: str, tmp_path, demo: duckdb.DuckDBPyConnection
) -> None:
    assert ensure_demo(db_path, days=2) is True
    assert ensure_demo(db_path, days=2) is False
    with reader(db_path) as con:
        assert one(con, "SELECT count(*) FROM ingests WHERE format = 'demo'") == 1
        # built into a file under the demo's lower memory limit (spilling): the same ledger as in memory
        assert checksums(con) == checksums(demo)
    other = str(tmp_path / "own.duckdb")
    jobs = write(
        tmp_path,
        "jobs.csv",
        "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state\n"
        "1,ann,ml,lab,A100-80GB,1,2026-01-01T00:00:00,2026-01-01T01:00:00,COMPLETED\n",
    )
    assert main(["ingest", "--db", other, str(jobs)]) == 0
    assert ensure_demo(other, days=2) is False
    with reader(other) as con:
        assert one(con, "SELECT count(*) FROM jobs") == 1


def _limit(con: duckdb.DuckDBPyConnection) -> float:
    """memory_limit in MiB, as DuckDB prints it (to 0.1 of its unit: what a restored setting round-trips to)."""
    value, unit = str(one(con, "SELECT current_setting('memory_limit')")).split()
    return round(float(value) * {"KiB": 2**-10, "MiB": 1, "GiB": 2**10, "TiB": 2**20}[unit], 1)


def test_demo_memory_limit_is_lowered_for_a_file_and_put_back(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPULEDGER_MEMORY_LIMIT", raising=False)
    probe = duckdb.connect()
    probe.execute(f"SET memory_limit = '{DEMO_MEMORY_LIMIT}'")
    lowered = _limit(probe)  # DuckDB's spelling of 600MB
    with writer(db_path) as con:
        before = _limit(con)
        with _bounded_memory(con):
            assert _limit(con) == lowered != before
        assert _limit(con) == pytest.approx(before, abs=0.11)
        monkeypatch.setenv("GPULEDGER_MEMORY_LIMIT", "2GB")  # the user's choice is left alone
        with _bounded_memory(con):
            assert _limit(con) == pytest.approx(before, abs=0.11)
    mem = memory_ledger()  # an in-memory ledger has nowhere to spill to
    before = _limit(mem)
    monkeypatch.delenv("GPULEDGER_MEMORY_LIMIT")
    with _bounded_memory(mem):
        assert _limit(mem) == before


def test_headline_money_follows_observed_capacity_and_checkpoints(demo: duckdb.DuckDBPyConnection) -> None:
    """Plain SQL: atlas (no declared capacity) pays for its reporting H100s, so what its jobs did not hold
    is unallocated; a failed run's waste is only the time after its last checkpoint."""
    from analytics.waste import job_waste, unallocated

    un = {r["cluster"]: r for r in unallocated(demo).iter_rows(named=True)}
    atlas = un["atlas"]
    assert atlas["capacity_basis"] == "observed"
    # each atlas GPU reports without a gap from its first sample to its last (+ TICK_S), inside the window
    observed_h = one(
        demo,
        """SELECT sum(epoch(least(e, ?) - greatest(f, ?))) / 3600 FROM (
               SELECT min(s.ts) AS f, max(s.ts + to_seconds(s.interval_s)) AS e
               FROM samples s JOIN gpus g USING (gpu_id) WHERE g.cluster = 'atlas' GROUP BY s.gpu_id)""",
        [HI, LO],
    )
    held_h = one(
        demo,
        """SELECT sum(gpu_count * epoch(least(coalesce(end_ts, ?), ?) - greatest(start_ts, ?))) / 3600
           FROM jobs WHERE cluster = 'atlas' AND start_ts < ? AND coalesce(end_ts, ?) > ?""",
        [HI, HI, LO, HI, HI, LO],
    )
    assert atlas["observed_gpu_hours"] == pytest.approx(observed_h, rel=1e-9)
    assert atlas["oversubscribed_gpu_hours"] == pytest.approx(0.0, abs=1e-9)
    assert atlas["unallocated_gpu_hours"] == pytest.approx(observed_h - held_h, rel=1e-9)
    assert atlas["unallocated_usd"] == pytest.approx((observed_h - held_h) * 2.99, rel=1e-9)  # H100 on-demand
    # failed runs whose checkpoint lies inside the window: failed_usd = GPUs × (end − checkpoint) × price
    expected = rows(
        demo,
        """SELECT j.job_id, j.gpu_count * epoch(j.end_ts - j.last_checkpoint_ts) / 3600 * p.usd_per_gpu_hour
           FROM jobs j JOIN prices p ON p.gpu_model = j.gpu_model AND p.tier = j.pricing_tier AND p.cluster IS NULL
           WHERE starts_with(j.name, 'failed-') AND j.last_checkpoint_ts >= ? AND j.end_ts <= ?""",
        [LO, HI],
    )
    assert expected
    w = {r["job_id"]: r for r in job_waste(demo).iter_rows(named=True)}
    for job_id, lost_usd in expected:
        assert w[job_id]["failed_usd"] == pytest.approx(lost_usd, rel=1e-9), job_id
        assert w[job_id]["failed_basis"] == "lost after the last checkpoint"
        assert w[job_id]["failed_checkpointed_usd"] > 0


def test_out_of_memory_is_one_error_line_and_the_ledger_keeps_nothing(tmp_path) -> None:
    """A build that overruns the writer's memory limit (here a 20 MB one) ends with one ``error:`` line
    saying so and how to raise it, exit 1, no traceback, and no row of it in the ledger. A real process:
    what a shell sees."""
    import os
    import subprocess
    import sys

    db = tmp_path / "oom.duckdb"
    env = {**os.environ, "GPULEDGER_MEMORY_LIMIT": "20MB"}
    env.pop("GPULEDGER_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-m", "gpuledger.cli.main", "demo", "--days", "2", "--db", str(db)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the ledger's writer ran out of memory (20MB)")
    assert "GPULEDGER_MEMORY_LIMIT" in lines[0]
    with reader(str(db)) as con:
        assert con.execute("SELECT count(*) FROM samples").fetchall() == [(0,)]
        assert con.execute("SELECT count(*) FROM ingests").fetchall() == [(0,)]
