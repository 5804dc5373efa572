"""Shared GPUs split by per-process SM utilization (nvidia-smi pmon) where it is known, else by declared
fraction, else equally — the shares of one GPU-second sum to one and the jobs together pay for one GPU.

Every expected figure is plain arithmetic at the round test price (H100 $4.00/GPU-h, tests/analytics/build.py)
or a plain-SQL sum; never another output of the cost code.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from analytics.cost import SHARED_SEGMENTS_SQL, job_costs
from analytics.waste import PARTS, unallocated, waste_totals
from collectors.base import IngestOptions, land, next_ingest_id, run_in_transaction
from collectors.ingest import ingest_file
from tests.analytics.build import T0, alloc, gpu, ingest, job, series, set_test_prices
from tests.collectors.test_attribution import HEADER, sacct_row, smi_csv
from tests.collectors.test_attribution import T0 as SACCT_T0

RATE = 4.0
PMON_HEAD = (
    "#Date       Time        gpu         pid   type     sm    mem    enc    dec    jpg    ofa     fb   ccpm    command\n"
    "#YYYYMMDD   HH:MM:SS    Idx           #    C/G      %      %      %      %      %      %     MB     MB    name\n"
)


def pmon(
    path: Path,
    t0: dt.datetime,
    minutes: int,
    sm: dict[int, object],
    *,
    every_s: int = 10,
    after_min: float | None = None,
    sm_after: dict[int, object] | None = None,
) -> Path:
    """``nvidia-smi pmon -s um -o DT -d every_s`` of GPU 0 for ``minutes``: one line per pid in ``sm`` (pid →
    SM %, ``-`` for no sample) per poll; from minute ``after_min`` on, the readings of ``sm_after``."""
    lines = [PMON_HEAD]
    for k in range(minutes * 60 // every_s):
        t = t0 + dt.timedelta(seconds=k * every_s)
        now = sm_after if after_min is not None and k * every_s >= after_min * 60 else sm
        if not now:
            lines.append(
                f" {t:%Y%m%d}   {t:%H:%M:%S}      0           -     -      -      -      -      -      -      -      -      -    -\n"
            )
        for pid, value in now.items():
            lines.append(
                f" {t:%Y%m%d}   {t:%H:%M:%S}      0  {pid:>10}     C  {value:>5}      1      -      -      -      -   1000      0    python\n"
            )
    path.write_text("".join(lines), encoding="utf-8")
    return path


def costs(con) -> dict[str, dict]:
    return {r["job_id"]: r for r in job_costs(con).iter_rows(named=True)}


def _two_jobs_on_one_card(con, tmp_path, fractions=(1.0, 1.0), **pmon_args):
    """Jobs a and b hold GPU h1:0 (index 0 of host h1) for the first hour; each ran its own pmon log (--job)."""
    set_test_prices(con)
    ingest(
        con,
        jobs=[job(j, 0, 60, gpu_count=d) for j, d in zip("ab", fractions, strict=True)],
        allocations=[
            {**alloc(j, "h1:0", 0, 60), "gpu_count": d} for j, d in zip("ab", fractions, strict=True)
        ],
        samples=series("h1:0", 0, [50.0] * 60),
        gpus=[{**gpu("h1:0"), "gpu_index": 0}],
    )
    for j, readings in pmon_args.items():
        log = pmon(tmp_path / f"{j}.log", T0, 60, **readings)
        ingest_file(con, log, opts=IngestOptions(tz="UTC", host="h1", job_id=j))


def test_sm_60_and_20_split_the_card_3_to_1(ledger, tmp_path):
    _two_jobs_on_one_card(ledger, tmp_path, a={"sm": {1001: 60}}, b={"sm": {2002: 20}})
    rows = costs(ledger)
    # the card: 1 GPU × 1 h × $4 = $4.00; a used 60 of the 80 SM-% the two used: 3/4 of it
    assert rows["a"]["cost_usd"] == pytest.approx(1 * 1 * RATE * 60 / 80)  # $3.00
    assert rows["b"]["cost_usd"] == pytest.approx(1 * 1 * RATE * 20 / 80)  # $1.00
    assert round(rows["a"]["cost_usd"], 2) + round(rows["b"]["cost_usd"], 2) == 4.00  # the card, to the cent
    assert rows["a"]["gpu_hours"] == pytest.approx(0.75)
    assert rows["b"]["oversubscribed_gpu_hours"] == pytest.approx(0.75)  # declared 1 GPU-h, share 0.25
    totals = waste_totals(ledger)
    assert totals["spend_usd"] == pytest.approx(4.0)  # never billed twice
    assert round(sum(totals[p] for p in PARTS), 2) == round(totals["spend_usd"], 2)
    un = unallocated(ledger).row(0, named=True)
    assert un["unallocated_gpu_hours"] == pytest.approx(0.0)  # the two hold the reporting card exactly


def test_polls_with_no_sm_activity_fall_back_to_the_declared_split(ledger, tmp_path):
    # first half hour 60 / 20; second half both processes report "-" (no SM sample): equal halves
    set_test_prices(ledger)
    ingest(
        ledger,
        jobs=[job("a", 0, 60), job("b", 0, 60)],
        allocations=[alloc("a", "h1:0", 0, 60), alloc("b", "h1:0", 0, 60)],
        samples=series("h1:0", 0, [50.0] * 60),
        gpus=[{**gpu("h1:0"), "gpu_index": 0}],
    )
    for j, pid, value in (("a", 1001, 60), ("b", 2002, 20)):
        log = pmon(tmp_path / f"{j}.log", T0, 60, {pid: value}, after_min=30, sm_after={pid: "-"})
        ingest_file(ledger, log, opts=IngestOptions(tz="UTC", host="h1", job_id=j))
    rows = costs(ledger)
    # a: ½ h × $4 × 3/4 + ½ h × $4 × 1/2 = $1.50 + $1.00; b: $0.50 + $1.00
    assert rows["a"]["cost_usd"] == pytest.approx(0.5 * RATE * 0.75 + 0.5 * RATE * 0.5)
    assert rows["b"]["cost_usd"] == pytest.approx(0.5 * RATE * 0.25 + 0.5 * RATE * 0.5)
    assert rows["a"]["cost_usd"] + rows["b"]["cost_usd"] == pytest.approx(RATE)


def test_oversubscribed_fractions_follow_the_sm_shares(ledger, tmp_path):
    # gpu_milli-style 0.75 + 0.75 of one card: by declared fraction ½ each; pmon says 60 / 20 → ¾ and ¼
    _two_jobs_on_one_card(ledger, tmp_path, (0.75, 0.75), a={"sm": {1001: 60}}, b={"sm": {2002: 20}})
    rows = costs(ledger)
    assert rows["a"]["cost_usd"] == pytest.approx(RATE * 0.75)
    assert rows["b"]["cost_usd"] == pytest.approx(RATE * 0.25)
    assert rows["a"]["oversubscribed_gpu_hours"] == pytest.approx(0.75 - 0.75)
    assert rows["b"]["oversubscribed_gpu_hours"] == pytest.approx(0.75 - 0.25)


def test_sacct_jobs_time_slicing_one_card_resolved_from_an_nvml_pid_map(ledger, tmp_path):
    """The real deployment: sacct names only the host; a node-level pmon log names pids; the NVML sampler saw
    which job each pid belongs to (SLURM_JOB_ID). The pmon rows get their jobs, put both jobs on the card
    (process evidence) and split its hour 3:1."""
    set_test_prices(ledger)
    ingest_file(ledger, smi_csv(tmp_path, "n1", gpus=1, minutes=60), opts=IngestOptions(tz="UTC", host="n1"))
    log = pmon(tmp_path / "n1.log", SACCT_T0, 60, {1001: 60, 2002: 20})
    ingest_file(ledger, log, opts=IngestOptions(tz="UTC", host="n1"))
    assert ledger.execute("SELECT count(*) FROM processes WHERE job_id IS NOT NULL").fetchall() == [(0,)]

    def nvml_map():  # one snapshot per pid, as the NVML sampler stages it
        ledger.execute(
            """CREATE TEMP TABLE stage_processes AS
               SELECT ?::TIMESTAMP AS ts, 'n1:0' AS gpu_id, unnest([1001, 2002]) AS pid, 'python' AS process_name,
                      1000.0 AS used_mem_mib, unnest(['ci/101', 'ci/102']) AS job_id""",
            [SACCT_T0 + dt.timedelta(minutes=10)],
        )
        land(ledger, next_ingest_id(ledger), IngestOptions())

    run_in_transaction(ledger, nvml_map)
    sacct = tmp_path / "s.txt"
    sacct.write_text(
        "\n".join([HEADER, sacct_row(101, 1, "n1", 0, 60), sacct_row(102, 1, "n1", 0, 60)]) + "\n"
    )
    ingest_file(ledger, sacct, opts=IngestOptions(tz="UTC"))
    # every pmon row now names its job (pid 1001 → ci/101, 2002 → ci/102)
    assert ledger.execute(
        "SELECT pid, job_id, count(*) FROM processes WHERE interval_s IS NOT NULL GROUP BY ALL ORDER BY 1"
    ).fetchall() == [(1001, "ci/101", 360), (2002, "ci/102", 360)]
    ties = ledger.execute("SELECT job_id, gpu_id, evidence FROM host_attribution ORDER BY 1").fetchall()
    assert ties == [("ci/101", "n1:0", "process"), ("ci/102", "n1:0", "process")]
    rows = costs(ledger)
    assert rows["ci/101"]["cost_usd"] == pytest.approx(RATE * 0.75)
    assert rows["ci/102"]["cost_usd"] == pytest.approx(RATE * 0.25)
    # the card's hour, in plain SQL over its samples: Σ interval_s / 3600 × $4
    card = ledger.execute(
        "SELECT sum(interval_s) / 3600.0 * 4.0 FROM samples WHERE gpu_id = 'n1:0'"
    ).fetchall()[0][0]
    assert round(rows["ci/101"]["cost_usd"] + rows["ci/102"]["cost_usd"], 2) == round(card, 2)


def test_per_job_logs_polled_at_different_times_still_split_3_to_1(ledger, tmp_path):
    # a's log polls at :00, :10, ...; b's at :05, :15, ...: each reading holds over its own 10 s poll, so at
    # every second both are known (60 and 20) — except b's first 5 s, before its first poll (declared ½)
    set_test_prices(ledger)
    ingest(
        ledger,
        jobs=[job("a", 0, 60), job("b", 0, 60)],
        allocations=[alloc("a", "h1:0", 0, 60), alloc("b", "h1:0", 0, 60)],
        samples=series("h1:0", 0, [50.0] * 60),
        gpus=[{**gpu("h1:0"), "gpu_index": 0}],
    )
    for j, pid, value, start in (("a", 1001, 60, T0), ("b", 2002, 20, T0 + dt.timedelta(seconds=5))):
        log = pmon(tmp_path / f"{j}.log", start, 60, {pid: value})
        ingest_file(ledger, log, opts=IngestOptions(tz="UTC", host="h1", job_id=j))
    rows = costs(ledger)
    # b's log ends 5 s after the hour (its last poll) but the stretch ends at the hour
    first = 5 / 3600  # hours split ½ / ½
    assert rows["a"]["cost_usd"] == pytest.approx(RATE * (first * 0.5 + (1 - first) * 0.75))
    assert rows["b"]["cost_usd"] == pytest.approx(RATE * (first * 0.5 + (1 - first) * 0.25))
    assert rows["a"]["cost_usd"] + rows["b"]["cost_usd"] == pytest.approx(RATE)
    # every piece of the hour: the two shares sum to one, and the pieces tile the hour once per job
    pieces = ledger.execute(
        f"""SELECT s_from, sum(share), count(*), any_value(epoch(s_to - s_from))
            FROM ({SHARED_SEGMENTS_SQL}) GROUP BY s_from"""
    ).fetchall()
    assert all(abs(total - 1) < 1e-9 and n == 2 for _, total, n, _ in pieces)
    assert sum(secs for *_, secs in pieces) == pytest.approx(3600)


def test_a_job_without_any_reading_keeps_the_declared_split(ledger, tmp_path):
    # only a ran pmon (--job a): b's use of the card is unknown, so the hour is split ½ / ½, not all to a
    _two_jobs_on_one_card(ledger, tmp_path, a={"sm": {1001: 60}})
    rows = costs(ledger)
    assert rows["a"]["cost_usd"] == pytest.approx(RATE / 2)
    assert rows["b"]["cost_usd"] == pytest.approx(RATE / 2)


def test_a_node_level_log_without_a_job_s_process_gives_it_no_share(ledger, tmp_path):
    # one log of the node (no --job): both processes for the first half hour, only a's for the second —
    # the node's log lists every process, so b had none then and a uses the card alone
    set_test_prices(ledger)
    ingest(
        ledger,
        jobs=[job("a", 0, 60), job("b", 0, 60)],
        allocations=[alloc("a", "h1:0", 0, 60), alloc("b", "h1:0", 0, 60)],
        samples=series("h1:0", 0, [50.0] * 60),
        gpus=[{**gpu("h1:0"), "gpu_index": 0}],
    )

    def nvml_map():  # which job each pid belongs to (the NVML sampler's SLURM_JOB_ID)
        ledger.execute(
            """CREATE TEMP TABLE stage_processes AS
               SELECT ?::TIMESTAMP AS ts, 'h1:0' AS gpu_id, unnest([1001, 2002]) AS pid, 'python' AS process_name,
                      1000.0 AS used_mem_mib, unnest(['a', 'b']) AS job_id""",
            [T0 + dt.timedelta(minutes=1)],
        )
        land(ledger, next_ingest_id(ledger), IngestOptions())

    run_in_transaction(ledger, nvml_map)
    log = pmon(tmp_path / "node.log", T0, 60, {1001: 60, 2002: 20}, after_min=30, sm_after={1001: 60})
    ingest_file(ledger, log, opts=IngestOptions(tz="UTC", host="h1"))
    rows = costs(ledger)
    # a: ½ h × $4 × ¾ + ½ h × $4 × 1 = $3.50; b: ½ h × $4 × ¼ = $0.50
    assert rows["a"]["cost_usd"] == pytest.approx(0.5 * RATE * 0.75 + 0.5 * RATE)
    assert rows["b"]["cost_usd"] == pytest.approx(0.5 * RATE * 0.25)


def test_the_same_poll_in_two_logs_counts_once(ledger, tmp_path):
    # the node's log (both jobs) and a's own log (--job a) report the same polls: a's 60 is not 120
    set_test_prices(ledger)
    ingest(
        ledger,
        jobs=[job("a", 0, 60), job("b", 0, 60)],
        allocations=[alloc("a", "h1:0", 0, 60), alloc("b", "h1:0", 0, 60)],
        samples=series("h1:0", 0, [50.0] * 60),
        gpus=[{**gpu("h1:0"), "gpu_index": 0}],
    )

    def nvml_map():  # b's pid (a's is known from a's own log)
        ledger.execute(
            """CREATE TEMP TABLE stage_processes AS
               SELECT ?::TIMESTAMP AS ts, 'h1:0' AS gpu_id, 2002 AS pid, 'python' AS process_name,
                      1000.0 AS used_mem_mib, 'b' AS job_id""",
            [T0 + dt.timedelta(minutes=1)],
        )
        land(ledger, next_ingest_id(ledger), IngestOptions())

    run_in_transaction(ledger, nvml_map)
    own = pmon(tmp_path / "a.log", T0, 60, {1001: 60})
    ingest_file(ledger, own, opts=IngestOptions(tz="UTC", host="h1", job_id="a"))
    ingest_file(
        ledger,
        pmon(tmp_path / "node.log", T0, 60, {1001: 60, 2002: 20}),
        opts=IngestOptions(tz="UTC", host="h1"),
    )
    assert ledger.execute(
        "SELECT count(*) FROM processes WHERE interval_s IS NOT NULL AND job_id IS NULL"
    ).fetchall() == [(0,)]
    rows = costs(ledger)
    # summed, a would read 120 against b's 20 (6/7); once: 60 / 20
    assert rows["a"]["cost_usd"] == pytest.approx(RATE * 0.75)
    assert rows["b"]["cost_usd"] == pytest.approx(RATE * 0.25)
