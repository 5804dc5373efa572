"""The attempts of a requeued job across separate dumps (collectors/attempts.py): every attempt billed to its job.

Job 42 holds 8 × H100. Attempt 1 runs on n1 from 00:00 for 15 min (8 × 0.25 h = 2 GPU-h), then is requeued
(or preempted, or its node fails; or a poll saw it RUNNING with Elapsed 00:15); attempt 2 runs on n2 from
01:00 to 02:00 (8 × 1 h = 8 GPU-h). Dump 1 lists attempt 1, dump 2 (plain sacct, no -D) attempt 2. Money is
GPU-hours × $2.99, the price sheet's H100 on-demand rate.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import duckdb
import polars as pl
import pytest

from analytics.summary import summary
from analytics.waste import job_waste
from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from gpuledger.ledger.settings import Settings
from tests.analytics.oracle import ORACLE
from tests.conftest import write

T = dt.datetime
T0 = T(2026, 3, 1)
H100_USD = 2.99
UTC = IngestOptions(tz="UTC")
HEADER = "JobIDRaw|Cluster|JobName|User|Account|State|Start|End|Elapsed|AllocTRES|NodeList"
TRES = "gres/gpu:h100=8,gres/gpu=8"
FIRST = {
    "REQUEUED": f"42|ci|train|bob|cv|REQUEUED|2026-03-01T00:00:00|2026-03-01T00:15:00|00:15:00|{TRES}|n1",
    "PREEMPTED": f"42|ci|train|bob|cv|PREEMPTED|2026-03-01T00:00:00|2026-03-01T00:15:00|00:15:00|{TRES}|n1",
    "NODE_FAIL": f"42|ci|train|bob|cv|NODE_FAIL|2026-03-01T00:00:00|2026-03-01T00:15:00|00:15:00|{TRES}|n1",
    "RUNNING": f"42|ci|train|bob|cv|RUNNING|2026-03-01T00:00:00|Unknown|00:15:00|{TRES}|n1",
}
SECOND = f"42|ci|train|bob|cv|COMPLETED|2026-03-01T01:00:00|2026-03-01T02:00:00|01:00:00|{TRES}|n2"
ATTEMPT_1_USD = 8 * 0.25 * H100_USD  # $5.98
ATTEMPT_2_USD = 8 * 1 * H100_USD  # $23.92


def dump(tmp_path: Path, name: str, *rows: str) -> Path:
    return write(tmp_path, name, "\n".join([HEADER, *rows]) + "\n")


def smi_csv(tmp_path: Path, host: str, minutes: int = 120) -> Path:
    """nvidia-smi --query-gpu=timestamp,index,name,utilization.gpu --format=csv -l 60: 8 cards, n1's at 50 %,
    n2's at 60 % (two files of the same bytes would be one source)."""
    lines = ["timestamp, index, name, utilization.gpu [%]"]
    for m in range(minutes):
        ts = (T0 + dt.timedelta(minutes=m)).strftime("%Y/%m/%d %H:%M:%S.000")
        lines += [f"{ts}, {i}, NVIDIA H100 80GB HBM3, {40 + 10 * int(host[-1])} %" for i in range(8)]
    return write(tmp_path, f"{host}.csv", "\n".join(lines) + "\n")


def snapshot(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple]]:
    """What the ledger says of the job, whichever ingest brought it."""
    return {
        "jobs": con.execute(
            """SELECT job_id, attempt, attempt_of, state, start_ts, end_ts, gpu_count, attribution
               FROM jobs ORDER BY job_id"""
        ).fetchall(),
        "allocations": con.execute(
            "SELECT job_id, host, gpu_count, start_ts, end_ts FROM allocations ORDER BY job_id, host"
        ).fetchall(),
        "samples": con.execute(
            """SELECT job_id, g.host, count(*), min(ts), max(ts) FROM samples JOIN gpus g USING (gpu_id)
               GROUP BY ALL ORDER BY ALL"""
        ).fetchall(),
        "minutes": con.execute(
            "SELECT job_id, count(*), sum(n), sum(covered_s), sum(idle_run_s) FROM samples_minute GROUP BY ALL ORDER BY ALL"
        ).fetchall(),
    }


def costs(con: duckdb.DuckDBPyConnection) -> dict[str, dict]:
    return {r["job_id"]: r for r in job_waste(con).iter_rows(named=True)}


@pytest.mark.parametrize("state", list(FIRST))
@pytest.mark.parametrize("order", ["in-order", "out-of-order"])
def test_each_attempt_from_its_own_dump_is_billed_to_the_job(ledger, tmp_path, state, order):
    one = dump(tmp_path, "monday.txt", FIRST[state])
    two = dump(tmp_path, "tuesday.txt", SECOND)
    for path in [one, two] if order == "in-order" else [two, one]:
        ingest_file(ledger, path, opts=UTC)
    # a running record followed by a later attempt was requeued: it ended at Start + Elapsed
    first_state = "REQUEUED" if state == "RUNNING" else state
    assert snapshot(ledger)["jobs"] == [
        ("ci/42", 2, "ci/42", "COMPLETED", T(2026, 3, 1, 1), T(2026, 3, 1, 2), 8.0, "none"),
        ("ci/42#1", 1, "ci/42", first_state, T0, T(2026, 3, 1, 0, 15), 8.0, "none"),
    ]
    c = costs(ledger)
    assert c["ci/42#1"]["cost_usd"] == pytest.approx(ATTEMPT_1_USD)
    assert c["ci/42"]["cost_usd"] == pytest.approx(ATTEMPT_2_USD)
    # disrupted with no checkpoint: the whole first attempt is lost; the completed one has no telemetry
    assert c["ci/42#1"]["failed_usd"] == pytest.approx(ATTEMPT_1_USD)
    s = summary(ledger, settings=Settings())
    assert s["spend_usd"] == pytest.approx(ATTEMPT_1_USD + ATTEMPT_2_USD)  # $29.90: both attempts
    assert s["gpu_hours"] == pytest.approx(2 + 8)
    assert s["jobs"] == 1  # one job, two attempts


@pytest.mark.parametrize("state", ["PREEMPTED", "RUNNING"])
def test_with_telemetry_each_attempt_holds_its_own_cards(ledger, tmp_path, state):
    """n1 and n2 report 8 cards each, every minute 00:00-02:00 (32 card-hours, $95.68). Attempt 1 holds n1's
    cards 00:00-00:15 (2 GPU-h), attempt 2 n2's 01:00-02:00 (8 GPU-h); the rest is unallocated. Before, the
    second dump replaced the first: attempt 1's 2 GPU-h became unallocated capacity (and a running record's
    open span kept n1's cards to the horizon)."""
    for host in ("n1", "n2"):
        ingest_file(ledger, smi_csv(tmp_path, host), opts=IngestOptions(tz="UTC", host=host))
    ingest_file(ledger, dump(tmp_path, "monday.txt", FIRST[state]), opts=UTC)
    ingest_file(ledger, dump(tmp_path, "tuesday.txt", SECOND), opts=UTC)
    # plain SQL: the samples each attempt holds (one a minute per card)
    assert snapshot(ledger)["samples"] == [
        ("ci/42", "n2", 8 * 60, T(2026, 3, 1, 1), T(2026, 3, 1, 1, 59)),
        ("ci/42#1", "n1", 8 * 15, T0, T(2026, 3, 1, 0, 14)),
        (None, "n1", 8 * 105, T(2026, 3, 1, 0, 15), T(2026, 3, 1, 1, 59)),
        (None, "n2", 8 * 60, T0, T(2026, 3, 1, 0, 59)),
    ]
    c = costs(ledger)
    assert c["ci/42#1"]["cost_usd"] == pytest.approx(ATTEMPT_1_USD)
    assert c["ci/42"]["cost_usd"] == pytest.approx(ATTEMPT_2_USD)
    # the minute rollup the renamed rows were re-rolled into gives what the raw samples give, part by part
    parts = [
        "cost_usd",
        "productive_usd",
        "idle_allocated_usd",
        "underused_usd",
        "failed_usd",
        "unmeasured_usd",
    ]
    raw = {r["job_id"]: r for r in job_waste(ledger, source=ORACLE).iter_rows(named=True)}
    for job in ("ci/42", "ci/42#1"):
        assert {p: c[job][p] for p in parts} == {p: pytest.approx(raw[job][p]) for p in parts}, job
    s = summary(ledger, settings=Settings())
    assert s["spend_usd"] == pytest.approx(2 * 8 * 2 * H100_USD)  # every card-hour once: $95.68
    # unallocated: 32 card-hours less the attempts' 2 + 8
    assert s["waste"]["unallocated_usd"] == pytest.approx((32 - 2 - 8) * H100_USD)
    assert s["jobs"] == 1


@pytest.mark.parametrize("state", ["NODE_FAIL", "RUNNING"])
def test_either_order_replace_and_reingest_give_the_same_ledger(ledger, tmp_path, state):
    for host in ("n1", "n2"):
        ingest_file(ledger, smi_csv(tmp_path, host), opts=IngestOptions(tz="UTC", host=host))
    telemetry = snapshot(ledger)["samples"]
    one = dump(tmp_path, "monday.txt", FIRST[state])
    two = dump(tmp_path, "tuesday.txt", SECOND)
    ingest_file(ledger, one, opts=UTC)
    ingest_file(ledger, two, opts=UTC)
    expected = snapshot(ledger)
    replace = IngestOptions(tz="UTC", replace=True)
    for path in (one, two):
        ingest_file(ledger, path, opts=replace)  # --replace of the same file
        assert snapshot(ledger) == expected, path.name
    for path in (one, two):
        copy = tmp_path / f"again-{path.name}"
        shutil.copy(path, copy)
        copy.write_text(copy.read_text() + "\n")  # other bytes, the same records
        ingest_file(ledger, copy, opts=UTC)
        assert snapshot(ledger) == expected, copy.name
    # the other order, on a ledger with the same telemetry
    other = duckdb.connect()
    from gpuledger.ledger.db import memory_ledger

    other = memory_ledger()
    for host in ("n1", "n2"):
        ingest_file(other, smi_csv(tmp_path, host), opts=IngestOptions(tz="UTC", host=host))
    assert snapshot(other)["samples"] == telemetry
    ingest_file(other, two, opts=UTC)
    ingest_file(other, one, opts=UTC)
    assert snapshot(other) == expected
    other.close()


def test_a_third_attempt_between_two_landed_ones_is_numbered_by_start(ledger, tmp_path):
    """Attempts arrive 3, 1, 2 (three plain dumps): they are numbered by start whatever the order, and the
    latest is the job's row."""
    third = f"42|ci|train|bob|cv|COMPLETED|2026-03-01T03:00:00|2026-03-01T03:30:00|00:30:00|{TRES}|n1"
    second = f"42|ci|train|bob|cv|PREEMPTED|2026-03-01T01:00:00|2026-03-01T01:30:00|00:30:00|{TRES}|n2"
    for name, row in (("c.txt", third), ("a.txt", FIRST["REQUEUED"]), ("b.txt", second)):
        ingest_file(ledger, dump(tmp_path, name, row), opts=UTC)
    assert ledger.execute(
        "SELECT job_id, attempt, attempt_of, state FROM jobs ORDER BY start_ts"
    ).fetchall() == [
        ("ci/42#1", 1, "ci/42", "REQUEUED"),
        ("ci/42#2", 2, "ci/42", "PREEMPTED"),
        ("ci/42", 3, "ci/42", "COMPLETED"),
    ]
    assert ledger.execute("SELECT job_id, host FROM allocations ORDER BY start_ts").fetchall() == [
        ("ci/42#1", "n1"),
        ("ci/42#2", "n2"),
        ("ci/42", "n1"),
    ]


def test_a_sacct_d_dump_after_a_plain_one_is_the_same_ledger(ledger, tmp_path):
    """A plain dump landed attempt 1 as the job; a later ``sacct -D`` lists both attempts: the same two rows as
    the -D dump alone gives."""
    ingest_file(ledger, dump(tmp_path, "plain.txt", FIRST["REQUEUED"]), opts=UTC)
    ingest_file(ledger, dump(tmp_path, "all.txt", FIRST["REQUEUED"], SECOND), opts=UTC)
    from gpuledger.ledger.db import memory_ledger

    alone = memory_ledger()
    ingest_file(alone, dump(tmp_path, "all.txt", FIRST["REQUEUED"], SECOND), opts=UTC)
    assert snapshot(ledger) == snapshot(alone)
    assert [r[0] for r in snapshot(ledger)["jobs"]] == ["ci/42", "ci/42#1"]
    alone.close()


JOBS_HEADER = "job_id,user,team,cluster,gpu_model,gpu_count,start,end,state,last_checkpoint\n"


def test_a_jobs_table_keeps_each_attempt_and_its_badput_since_its_checkpoint(ledger, tmp_path):
    """The rule is the landing's, not sacct's: a jobs table's two exports of job 42. Attempt 1 was preempted
    at 00:15 with a checkpoint at 00:10: it loses 8 GPUs × 5 min = 0.667 GPU-h, $1.99; attempt 2 completed."""
    one = write(
        tmp_path,
        "a.csv",
        JOBS_HEADER
        + "42,bob,cv,ci,H100,8,2026-03-01T00:00:00,2026-03-01T00:15:00,PREEMPTED,2026-03-01T00:10:00\n",
    )
    two = write(
        tmp_path,
        "b.csv",
        JOBS_HEADER + "42,bob,cv,ci,H100,8,2026-03-01T01:00:00,2026-03-01T02:00:00,COMPLETED,\n",
    )
    ingest_file(ledger, two, opts=UTC)
    ingest_file(ledger, one, opts=UTC)
    assert ledger.execute(
        "SELECT job_id, attempt, last_checkpoint_ts FROM jobs ORDER BY start_ts"
    ).fetchall() == [
        ("42#1", 1, T(2026, 3, 1, 0, 10)),
        ("42", 2, None),  # the retry's own checkpoint is not known
    ]
    c = costs(ledger)
    assert c["42#1"]["failed_usd"] == pytest.approx(8 * 5 / 60 * H100_USD)  # $1.99
    assert c["42#1"]["cost_usd"] + c["42"]["cost_usd"] == pytest.approx(ATTEMPT_1_USD + ATTEMPT_2_USD)


def test_a_pending_record_after_a_running_one_is_the_same_attempt(ledger, tmp_path):
    """A pending record's start is the scheduler's guess: after a record that has not ended it is the same
    attempt, updated in place (it holds no GPU), as before."""
    ingest_file(ledger, dump(tmp_path, "a.txt", FIRST["RUNNING"]), opts=UTC)
    pending = f"42|ci|train|bob|cv|PENDING|2026-03-01T05:00:00|Unknown|00:00:00|{TRES}|None assigned"
    ingest_file(ledger, dump(tmp_path, "b.txt", pending), opts=UTC)
    assert ledger.execute("SELECT job_id, state, start_ts, attempt FROM jobs").fetchall() == [
        ("ci/42", "PENDING", None, None)
    ]


def test_job_counts_count_a_requeued_job_once(tmp_path):
    """Through the CLI: two attempts of ci/42 and job ci/7 (1 × H100, 1 h) are 2 jobs in ``summary --json``,
    ``cost --by team`` and the overview's team row; ``jobs --json`` lists one row per attempt (its own cost:
    the rows sum to spend) with ``attempt`` and ``attempt_of`` naming the job it is billed to."""
    import json

    from analytics.cost import cost_by
    from analytics.filters import Filters
    from analytics.overview import team_rows
    from tests.conftest import gpuledger

    other = "7|ci|eval|bob|cv|COMPLETED|2026-03-01T05:00:00|2026-03-01T06:00:00|01:00:00|gres/gpu:h100=1,gres/gpu=1|n3"
    db = str(tmp_path / "ledger.duckdb")
    settings = write(tmp_path, "settings.toml", "")
    files = [dump(tmp_path, "monday.txt", FIRST["PREEMPTED"], other), dump(tmp_path, "tuesday.txt", SECOND)]
    common = ["--db", db, "--settings", str(settings)]
    assert gpuledger("ingest", *common, "--tz", "UTC", *map(str, files)).returncode == 0
    done = gpuledger("summary", *common, "--json")
    assert done.returncode == 0, done.stderr
    s = json.loads(done.stdout)
    assert s["jobs"] == 2  # ci/42 (two attempts) and ci/7; 3 rows before
    assert s["spend_usd"] == pytest.approx(ATTEMPT_1_USD + ATTEMPT_2_USD + 1 * H100_USD)
    rows = json.loads(gpuledger("jobs", *common, "--json").stdout)
    got = {r["job_id"]: (r["attempt"], r["attempt_of"], r["cost_usd"]) for r in rows}
    assert got == {
        "ci/42": (2, "ci/42", pytest.approx(ATTEMPT_2_USD)),
        "ci/42#1": (1, "ci/42", pytest.approx(ATTEMPT_1_USD)),
        "ci/7": (None, None, pytest.approx(H100_USD)),
    }
    info = json.loads(gpuledger("info", *common, "--json").stdout)
    assert info["ledger"]["jobs"] == 2
    with duckdb.connect(db, read_only=True) as con:
        assert cost_by(con, by="team")["jobs"].to_list() == [2]
        teams = team_rows(con, filters=Filters(), settings=Settings())
        assert teams.filter(pl.col("team") == "cv")["jobs"].to_list() == [2]


def test_thousands_of_jobs_requeued_at_once_are_renamed_whole(ledger, tmp_path):
    """20,000 jobs (1 × H100, 1 h each), landed twice, every tenth requeued in the next dump: 2,000 rows become
    ``<id>#1`` while the new records take ``<id>``. Renamed in one UPDATE, DuckDB checked the key chunk by
    chunk and met a job id a later chunk had not moved away yet (a constraint error, found by a 20,000-job
    benchmark)."""
    n, every = 20_000, 10

    def row(i: int, hour: int) -> str:
        return (
            f"{i}|ci|j|bob|cv|COMPLETED|2026-03-0{1 + hour // 24}T{hour % 24:02d}:00:00"
            f"|2026-03-0{1 + (hour + 1) // 24}T{(hour + 1) % 24:02d}:00:00|01:00:00|gres/gpu:h100=1,gres/gpu=1"
            f"|n{i % 50}"
        )

    first = [row(i, i % 24) for i in range(n)]
    ingest_file(ledger, dump(tmp_path, "a.txt", *first), opts=UTC)
    ingest_file(ledger, dump(tmp_path, "a-again.txt", *first, ""), opts=UTC)  # the same records re-landed
    again = dump(tmp_path, "b.txt", *(row(i, 24 + i % 24) for i in range(0, n, every)))
    ingest_file(ledger, again, opts=UTC)
    requeued = n // every
    assert ledger.execute(
        """SELECT count(*), count(DISTINCT coalesce(attempt_of, job_id)),
                  count(*) FILTER (WHERE job_id = attempt_of AND attempt = 2 AND day(start_ts) = 2),
                  count(*) FILTER (WHERE job_id = attempt_of || '#1' AND attempt = 1 AND day(start_ts) = 1)
           FROM jobs"""
    ).fetchall() == [(n + requeued, n, requeued, requeued)]
    assert summary(ledger, settings=Settings())["spend_usd"] == pytest.approx((n + requeued) * H100_USD)


def test_a_sacct_json_dump_and_a_text_dump_are_attempts_of_one_job(ledger, tmp_path):
    """The rule is the landing's for every shape sacct comes in: attempt 1 from ``sacct --json`` (Monday),
    attempt 2 from ``sacct -P`` (Tuesday) give the ledger two text dumps give."""
    import json

    start = int(T0.replace(tzinfo=dt.UTC).timestamp())
    job = {
        "job_id": 42,
        "cluster": "ci",
        "user": "bob",
        "account": "cv",
        "name": "train",
        "nodes": "n1",
        "state": {"current": ["PREEMPTED"]},
        "time": {"submission": start, "start": start, "end": start + 15 * 60, "elapsed": 15 * 60},
        "tres": {
            "allocated": [
                {"type": "gres", "name": "gpu", "count": 8},
                {"type": "gres", "name": "gpu:h100", "count": 8},
            ]
        },
    }
    monday = write(tmp_path, "monday.json", json.dumps({"meta": {"Slurm": {}}, "jobs": [job]}))
    ingest_file(ledger, monday, opts=UTC)
    ingest_file(ledger, dump(tmp_path, "tuesday.txt", SECOND), opts=UTC)
    from gpuledger.ledger.db import memory_ledger

    text = memory_ledger()
    ingest_file(text, dump(tmp_path, "monday.txt", FIRST["PREEMPTED"]), opts=UTC)
    ingest_file(text, dump(tmp_path, "tuesday.txt", SECOND), opts=UTC)
    assert snapshot(ledger) == snapshot(text)
    assert [r[:3] for r in snapshot(ledger)["jobs"]] == [("ci/42", 2, "ci/42"), ("ci/42#1", 1, "ci/42")]
    text.close()


def test_a_slurm_poll_after_a_dump_lands_the_retry_beside_the_first_attempt(tmp_path):
    """The Slurm poller shares the landing: Monday's dump has attempt 1 (preempted); the poll (a fake sacct
    answering in the poller's fields) sees the retry completed on n2. Both attempts are the job's."""
    from collectors.slurm_poll import FIELDS, poll
    from gpuledger.ledger.db import writer

    db = str(tmp_path / "ledger.duckdb")
    with writer(db) as con:
        ingest_file(con, dump(tmp_path, "monday.txt", FIRST["PREEMPTED"]), opts=UTC)
    retry = (
        "42|42|train|bob|cv|gpu|COMPLETED|2026-03-01T00:20:00|2026-03-01T01:00:00|2026-03-01T02:00:00|01:00:00"
        f"|{TRES}||n2|1|0:0|ci||"
    )
    answer = write(tmp_path, "answer.txt", "\n".join(["|".join(FIELDS), retry]) + "\n")
    sacct = write(tmp_path, "sacct", f"#!/bin/sh\ncat {answer}\n")
    sacct.chmod(0o755)
    report = poll(db, cluster="ci", since=T0, sacct=str(sacct), scontrol=str(tmp_path / "none"))
    assert report.rows["jobs"] == 1
    with duckdb.connect(db, read_only=True) as con:
        assert [r[:4] for r in snapshot(con)["jobs"]] == [
            ("ci/42", 2, "ci/42", "COMPLETED"),
            ("ci/42#1", 1, "ci/42", "PREEMPTED"),
        ]
        assert summary(con, settings=Settings())["spend_usd"] == pytest.approx(ATTEMPT_1_USD + ATTEMPT_2_USD)


def test_a_replaced_dump_that_no_longer_lists_the_retry_leaves_one_attempt(ledger, tmp_path):
    """Tuesday's dump is exported again without job 42 (``--replace``): the job is its Monday attempt alone,
    ``ci/42`` again with no attempt number, $5.98; nothing of the retry is left."""
    ingest_file(ledger, dump(tmp_path, "monday.txt", FIRST["PREEMPTED"]), opts=UTC)
    tuesday = dump(tmp_path, "tuesday.txt", SECOND)
    ingest_file(ledger, tuesday, opts=UTC)
    other = f"7|ci|eval|bob|cv|COMPLETED|2026-03-01T05:00:00|2026-03-01T06:00:00|01:00:00|{TRES}|n3"
    dump(tmp_path, "tuesday.txt", other)
    ingest_file(ledger, tuesday, opts=IngestOptions(tz="UTC", replace=True))
    assert snapshot(ledger)["jobs"] == [
        ("ci/42", None, None, "PREEMPTED", T0, T(2026, 3, 1, 0, 15), 8.0, "none"),
        ("ci/7", None, None, "COMPLETED", T(2026, 3, 1, 5), T(2026, 3, 1, 6), 8.0, "none"),
    ]
    assert snapshot(ledger)["allocations"] == [
        ("ci/42", "n1", 8.0, T0, T(2026, 3, 1, 0, 15)),
        ("ci/7", "n3", 8.0, T(2026, 3, 1, 5), T(2026, 3, 1, 6)),
    ]
    assert costs(ledger)["ci/42"]["cost_usd"] == pytest.approx(ATTEMPT_1_USD)
