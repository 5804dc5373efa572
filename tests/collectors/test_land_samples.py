"""Landing samples: a second series for the same GPU and times merges into the rows already there.

The rule (collectors/landing.py ``_land_samples``): a sample whose (gpu_id, ts) is in the ledger is never a
second row — its interval is not counted twice — but it fills that row's NULL columns; a sample with
nothing to add is "already in the ledger". The per-minute rollup follows the merged values.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest

from collectors import ingest, landing
from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from gpuledger.ledger.errors import FormatError
from tests.conftest import dataset, write

UTC = IngestOptions(tz="UTC")
MERGED = "samples merged into existing rows (their empty columns filled)"
ALREADY = "samples already in the ledger"
INSIDE = "samples inside the time of another series of the same GPU (counted once)"

UTIL_ONLY = (
    "timestamp, index, uuid, utilization.gpu [%]\n"
    "2025/03/01 00:00:00.000, 0, GPU-aaaa, 40 %\n"
    "2025/03/01 00:00:01.000, 0, GPU-aaaa, [N/A]\n"
    "2025/03/01 00:00:02.000, 0, GPU-aaaa, 60 %\n"
)
# the same GPU and times from a second logger that also records memory and power
MEM_POWER = (
    "timestamp, index, uuid, utilization.gpu [%], memory.used [MiB], power.draw [W]\n"
    "2025/03/01 00:00:00.000, 0, GPU-aaaa, 99 %, 1000 MiB, 100.00 W\n"  # util known: the ledger's 40 stays
    "2025/03/01 00:00:01.000, 0, GPU-aaaa, 50 %, 2000 MiB, [N/A]\n"  # fills util, memory
    "2025/03/01 00:00:02.000, 0, GPU-aaaa, 60 %, [N/A], [N/A]\n"  # nothing to add
)
NEW_TIME = "2025/03/01 00:00:03.000, 0, GPU-aaaa, 70 %, 3000 MiB, 300.00 W\n"


def _samples(con: duckdb.DuckDBPyConnection) -> list[tuple[object, ...]]:
    return con.execute(
        """SELECT ts, gpu_id, interval_s, util_pct, mem_used_mib, power_w, ingest_id
           FROM samples ORDER BY gpu_id, ts"""
    ).fetchall()


def _rollup_disagrees(con: duckdb.DuckDBPyConnection) -> int:
    """GPU-minutes whose rollup differs from the same sums over raw samples (plain SQL; FLOAT samples
    summed in another order differ by ~1e-6 s, hence the tolerance)."""
    return con.execute(
        """
        WITH raw AS (
            SELECT date_trunc('minute', ts) AS minute, gpu_id, job_id,
                   max(mem_used_mib) AS mem, sum(power_w * interval_s) AS pj,
                   sum(util_pct / 100.0 * interval_s) AS us, sum(interval_s) AS cov
            FROM samples GROUP BY ALL
        )
        SELECT count(*) FROM raw FULL JOIN samples_minute m
            ON m.minute = raw.minute AND m.gpu_id = raw.gpu_id AND m.job_id IS NOT DISTINCT FROM raw.job_id
        WHERE m.mem_used_max_mib IS DISTINCT FROM raw.mem
           OR abs(coalesce(m.power_j, -1) - coalesce(raw.pj, -1)) > 1e-4
           OR abs(coalesce(m.util_s, -1) - coalesce(raw.us, -1)) > 1e-4
           OR abs(coalesce(m.covered_s, -1) - coalesce(raw.cov, -1)) > 1e-4
        """
    ).fetchall()[0][0]


def test_complementary_nvidia_smi_logs_fill_each_other(ledger, tmp_path):
    first = ingest_file(ledger, write(tmp_path, "util.csv", UTIL_ONLY), opts=UTC)
    assert first.rows["samples"] == 3
    second = ingest_file(ledger, write(tmp_path, "mem.csv", MEM_POWER + NEW_TIME), opts=UTC)
    assert second.rows["samples"] == 1  # only 00:00:03 is a new time
    assert second.skipped[MERGED] == 2  # 00:00:00 (memory, power) and 00:00:01 (util, memory)
    assert second.skipped[ALREADY] == 1  # 00:00:02 brings only what the ledger has
    t0 = dt.datetime(2025, 3, 1)
    s = dt.timedelta(seconds=1)
    a, b = first.ingest_id, second.ingest_id
    assert _samples(ledger) == [
        # merged rows keep their interval and ingest; util 40 stays (the ledger's value wins over 99)
        (t0, "GPU-aaaa", 1.0, 40.0, 1000.0, 100.0, a),
        (t0 + s, "GPU-aaaa", 1.0, 50.0, 2000.0, None, a),
        (t0 + 2 * s, "GPU-aaaa", 1.0, 60.0, None, None, a),
        (t0 + 3 * s, "GPU-aaaa", 1.0, 70.0, 3000.0, 300.0, b),
    ]
    # four seconds of samples cover four seconds: nothing counted twice
    assert ledger.execute("SELECT sum(interval_s) FROM samples").fetchall() == [(4.0,)]
    # minute 00:00: mem max(1000, 2000, 3000) = 3000; power 100 W × 1 s + 300 W × 1 s = 400 J
    assert ledger.execute(
        "SELECT mem_used_max_mib, power_j, covered_s FROM samples_minute WHERE gpu_id = 'GPU-aaaa'"
    ).fetchall() == [(3000.0, 400.0, 4.0)]
    assert _rollup_disagrees(ledger) == 0


def test_a_series_of_merges_only_re_rolls_its_minutes(ledger, tmp_path):
    """The second file adds no row at all: its minutes must still be re-rolled (rows keep ingest #1)."""
    ingest_file(ledger, write(tmp_path, "util.csv", UTIL_ONLY), opts=UTC)
    second = ingest_file(ledger, write(tmp_path, "mem.csv", MEM_POWER), opts=UTC)
    assert second.rows["samples"] == 0 and second.skipped[MERGED] == 2
    # mem max(1000, 2000) = 2000 MiB; power 100 W × 1 s = 100 J; util (40 + 50 + 60) % × 1 s = 1.5 s
    assert ledger.execute(
        "SELECT mem_used_max_mib, power_j, util_s FROM samples_minute WHERE gpu_id = 'GPU-aaaa'"
    ).fetchall() == [(2000.0, 100.0, 1.5)]
    assert _rollup_disagrees(ledger) == 0


def test_same_samples_again_change_nothing(ledger, tmp_path):
    text = MEM_POWER + NEW_TIME
    first = ingest_file(ledger, write(tmp_path, "a.csv", text), opts=UTC)
    before = _samples(ledger)
    rollup = ledger.execute("SELECT * FROM samples_minute ORDER BY ALL").fetchall()
    # the same bytes under another name: recognised by content hash, nothing staged
    again = ingest_file(ledger, write(tmp_path, "copy-of-a.csv", text), opts=UTC)
    assert again.already and again.ingest_id == first.ingest_id
    # the same samples in other bytes (nounits form): every sample is already there, none merged
    nounits = text.replace(" %", "").replace(" MiB", "").replace(" W", "")
    other = ingest_file(ledger, write(tmp_path, "a-nounits.csv", nounits), opts=UTC)
    assert other.rows["samples"] == 0
    assert other.skipped[ALREADY] == 4 and MERGED not in other.skipped
    assert _samples(ledger) == before
    assert ledger.execute("SELECT * FROM samples_minute ORDER BY ALL").fetchall() == rollup


def test_genai_duty_cycle_then_memory_series_land_both_columns(ledger):
    duty = dataset("alibaba-v2026-genai/pod_gpu_duty_cycle_anon.head30k.csv")
    memory = dataset("alibaba-v2026-genai/pod_gpu_memory_used_bytes_anon.head30k.csv")
    # independent count, plain SQL over the two files: (pod, time) pairs present in both
    both = duckdb.sql(
        f"""SELECT count(*) FROM read_csv('{duty}') d JOIN read_csv('{memory}') m
            USING (container_ip, timestamp_anon)"""
    ).fetchall()[0][0]
    assert both == 29450
    first = ingest_file(ledger, duty)
    cov = ledger.execute("SELECT sum(interval_s) FROM samples").fetchall()[0][0]
    second = ingest_file(ledger, memory)
    # 30,000 memory rows: 29,450 fill the duty-cycle rows' memory; of the 550 other (pod, time) pairs, those
    # whose whole span the duty-cycle samples already cover add nothing (collectors/interleave.py)
    inside = second.skipped.get(INSIDE, 0)
    assert second.rows["samples"] == 30000 - 29450 - inside
    assert second.skipped == {MERGED: 29450} | ({INSIDE: inside} if inside else {})
    assert ledger.execute(
        "SELECT count(*), count(util_pct), count(mem_used_mib), count(*) FILTER (ingest_id = ?) FROM samples",
        [first.ingest_id],
    ).fetchall() == [(30550 - inside, 30000, 30000 - inside, 30000)]
    # no GPU's samples overlap in time (plain SQL: each ends by its GPU's next one)
    assert not ledger.execute(
        """SELECT count(*) FROM (SELECT ts, interval_s, lead(ts) OVER (PARTITION BY gpu_id ORDER BY ts) AS nx
                                 FROM samples)
           WHERE epoch(nx - ts) < interval_s - 1e-3"""
    ).fetchall()[0][0]
    # both files' first line: pod 23b8eba9…, 1662858720 = 2022-09-11 01:12:00 UTC, duty 0.0 %,
    # 33879490560 B / 1048576 = 32310 MiB
    assert ledger.execute(
        """SELECT util_pct, mem_used_mib FROM samples
           WHERE gpu_id = 'genai:23b8eba99c14e73d454503a55ae96989' AND ts = TIMESTAMP '2022-09-11 01:12:00'"""
    ).fetchall() == [(0.0, 32310.0)]
    # merged rows kept their intervals: coverage grew only by the 550 new samples'
    new_cov = ledger.execute(
        "SELECT sum(interval_s) FROM samples WHERE ingest_id = ?", [second.ingest_id]
    ).fetchall()[0][0]
    assert ledger.execute("SELECT sum(interval_s) FROM samples").fetchall()[0][0] == cov + new_cov
    assert _rollup_disagrees(ledger) == 0


# Two GPUs polled together at 0, 10, 20, 100, 110 s (an 80-s silence after 20 s), the second listed first.
POLLS = [0, 10, 20, 100, 110]
POLL_ROWS = [(s, gpu, 10 + s % 7) for s in POLLS for gpu in ("GPU-bbbb", "GPU-aaaa")]


def _poll_csv(rows: list[tuple[int, str, int]]) -> str:
    body = "".join(f"2025/03/01 00:{s // 60:02d}:{s % 60:02d}.000, {g}, {u} %\n" for s, g, u in rows)
    return "timestamp, uuid, utilization.gpu [%]\n" + body


def test_whole_polls_in_order_get_the_same_intervals_as_the_sorting_path(ledger, tmp_path):
    """A file of whole polls in time order lands by the streaming path (landing._polls_in_order); the same
    rows shuffled take the sorting path. Both give the hand-worked intervals: cadence = median gap 10 s;
    the 80-s gap is over 2.5 × 10 s, so the sample before it stands for 10 s, as does each GPU's last."""
    from collectors import landing

    shuffled = [POLL_ROWS[i] for i in (3, 0, 9, 1, 6, 2, 8, 4, 7, 5)]
    paths = {}
    seen = []
    real = landing._land_polls

    def spy(*args, **kwargs):
        seen.append(True)
        return real(*args, **kwargs)

    landing._land_polls = spy
    try:
        for name, rows in (("ordered", POLL_ROWS), ("shuffled", shuffled)):
            paths[name] = write(tmp_path, f"{name}.csv", _poll_csv(rows))
            con = duckdb.connect()
            from gpuledger.ledger.db import ensure_schema

            ensure_schema(con)
            ingest_file(con, paths[name], opts=UTC)
            got = con.execute(
                "SELECT ts, gpu_id, interval_s, util_pct FROM samples ORDER BY gpu_id, ts"
            ).fetchall()
            assert [r[2] for r in got] == [10.0] * 10, name
            offsets = [(r[1], int((r[0] - dt.datetime(2025, 3, 1)).total_seconds()), r[3]) for r in got]
            assert offsets == sorted((g, s, float(u)) for s, g, u in POLL_ROWS), name
            assert _rollup_disagrees(con) == 0, name
            seen.append(name)
    finally:
        landing._land_polls = real
    # the ordered file took the streaming path, the shuffled one did not
    assert seen == [True, "ordered", "shuffled"]


def test_whole_polls_overlapping_the_ledger_merge_like_the_sorting_path(ledger, tmp_path):
    # the first three polls, then a file of all five: the three already there are not second rows
    ingest_file(ledger, write(tmp_path, "first.csv", _poll_csv(POLL_ROWS[:6])), opts=UTC)
    report = ingest_file(ledger, write(tmp_path, "all.csv", _poll_csv(POLL_ROWS)), opts=UTC)
    assert report.rows["samples"] == 4
    assert report.skipped[ALREADY] == 6
    # the earlier file's last poll (20 s) stood for the cadence, 10 s; the new samples as hand-worked above
    assert ledger.execute("SELECT count(*), sum(interval_s) FROM samples").fetchall() == [(10, 100.0)]
    assert _rollup_disagrees(ledger) == 0


# Files whose rows come in whole multiples of the GPUs, as whole polls do, but are not whole polls in order:
# the streaming landing must see it (landing._polls_in_order) and leave them to the general path. GPU-aaaa reads
# 90 % and GPU-bbbb 10 % in every poll, so a sample given the other GPU's id shows.
_BA = [(s, g, 90 if g == "GPU-aaaa" else 10) for s in (0, 10, 20, 30) for g in ("GPU-bbbb", "GPU-aaaa")]
NOT_WHOLE_POLLS = {
    # the 10-s poll written twice (a logger restarted mid-write): each sample once, 2 duplicates
    "a poll repeated": _BA[:4] + _BA[2:4] + _BA[4:],
    # the 20-s poll lists the GPUs the other way round: each place in the poll holds both GPUs
    "two GPUs swap places": [*_BA[:4], _BA[5], _BA[4], *_BA[6:]],
}


@pytest.mark.parametrize("name", list(NOT_WHOLE_POLLS))
def test_rows_that_only_look_like_whole_polls_land_by_the_general_path(tmp_path, monkeypatch, name):
    """By hand: each GPU has one sample at 0, 10, 20 and 30 s, 10 s apart (cadence 10 s), so every sample
    stands for 10 s (the last for the cadence): 4 samples of 10 s per GPU, aaaa at 90 %, bbbb at 10 %."""
    from gpuledger.ledger.db import ensure_schema

    streamed = []
    real = landing._land_polls

    def spy(*args):
        streamed.append(True)
        return real(*args)

    monkeypatch.setattr(landing, "_land_polls", spy)
    con = duckdb.connect()
    ensure_schema(con)
    report = ingest_file(con, write(tmp_path, "polls.csv", _poll_csv(NOT_WHOLE_POLLS[name])), opts=UTC)
    got = con.execute("SELECT gpu_id, ts, interval_s, util_pct FROM samples ORDER BY gpu_id, ts").fetchall()
    t0 = dt.datetime(2025, 3, 1)
    assert [(g, int((t - t0).total_seconds()), iv, u) for g, t, iv, u in got] == [
        (g, s, 10.0, 90.0 if g == "GPU-aaaa" else 10.0)
        for g in ("GPU-aaaa", "GPU-bbbb")
        for s in (0, 10, 20, 30)
    ]
    assert report.skipped.get(ALREADY, 0) == len(NOT_WHOLE_POLLS[name]) - 8
    assert not streamed
    assert _rollup_disagrees(con) == 0


@pytest.mark.parametrize("chunk", [None, 3], ids=["one-chunk", "chunks-of-3"])
def test_polls_in_time_order_with_a_gpu_missing_land_unsorted_with_the_hand_worked_intervals(
    tmp_path, monkeypatch, chunk
):
    """GPU-bbbb misses the 20-s poll, so the polls are not whole and the general path runs; the rows are in
    time order, so they land as read (landing._in_time_order) rather than sorted. By hand: cadence = median gap
    10 s for both; bbbb's 10 → 30 s gap of 20 s is under 2.5 × 10 s, so its 10-s sample stands for 20 s;
    every GPU's last sample stands for the cadence. The same rows shuffled take the sorting INSERT.
    With chunks of 3 rows the 11 intervals are written by four UPDATEs (landing.LAND_CHUNK), the 20-s one
    first in its chunk: the same answer, every row given its interval once."""
    from collectors import landing
    from gpuledger.ledger.db import ensure_schema

    if chunk:
        monkeypatch.setattr(landing, "LAND_CHUNK", chunk)

    rows = [
        (s, g, 50) for s in range(0, 60, 10) for g in ("GPU-aaaa", "GPU-bbbb") if (s, g) != (20, "GPU-bbbb")
    ]
    expected = [("GPU-aaaa", s, 10.0) for s in range(0, 60, 10)] + [
        ("GPU-bbbb", s, iv) for s, iv in ((0, 10.0), (10, 20.0), (30, 10.0), (40, 10.0), (50, 10.0))
    ]
    answers = []
    real = landing._in_time_order

    def spy(*args):
        answers.append(real(*args))
        return answers[-1]

    landing._in_time_order = spy
    try:
        for name, order in (("ordered", rows), ("shuffled", rows[::-1])):
            con = duckdb.connect()
            ensure_schema(con)
            ingest_file(con, write(tmp_path, f"{name}.csv", _poll_csv(order)), opts=UTC)
            got = con.execute("SELECT gpu_id, ts, interval_s FROM samples ORDER BY gpu_id, ts").fetchall()
            t0 = dt.datetime(2025, 3, 1)
            assert [(g, int((t - t0).total_seconds()), iv) for g, t, iv in got] == expected, name
            stored = [r[0] for r in con.execute("SELECT ts FROM samples ORDER BY rowid").fetchall()]
            assert stored == sorted(stored), f"{name}: samples are stored in time order"
            assert _rollup_disagrees(con) == 0, name
    finally:
        landing._in_time_order = real
    assert answers == [True, False]


@pytest.mark.parametrize("overlap_bytes", [0, 10**12], ids=["hashed-while-staging", "hashed-first"])
def test_the_same_bytes_under_another_name_land_once(ledger, tmp_path, monkeypatch, overlap_bytes):
    """A file's hash is taken on a second thread while it stages (collectors/ingest.py OVERLAP_HASH_BYTES,
    here 0 bytes) or first (a huge threshold): either way a copy of an ingested file under another name
    is reported as already ingested, with the first ingest's id, and adds nothing; the same name again is
    answered from the hash alone; a new file lands with its own hash."""
    import hashlib

    monkeypatch.setattr(ingest, "OVERLAP_HASH_BYTES", overlap_bytes)
    text = (
        "timestamp, index, utilization.gpu [%]\n"
        "2025/03/01 10:00:00.000, 0, 50 %\n"
        "2025/03/01 10:00:10.000, 0, 70 %\n"
    )
    first = ingest_file(ledger, write(tmp_path, "a.csv", text), opts=UTC)
    assert first.rows["samples"] == 2 and not first.already
    copy = ingest_file(ledger, write(tmp_path, "copy-of-a.csv", text), opts=UTC)
    again = ingest_file(ledger, tmp_path / "a.csv", opts=UTC)
    for report in (copy, again):
        assert report.already and report.ingest_id == first.ingest_id
    assert ledger.execute("SELECT count(*), sum(interval_s) FROM samples").fetchall() == [(2, 20.0)]
    other = text.replace("70 %", "71 %")
    third = ingest_file(ledger, write(tmp_path, "b.csv", other), opts=UTC)
    assert not third.already
    assert ledger.execute("SELECT content_sha256 FROM ingests ORDER BY ingest_id").fetchall() == [
        (hashlib.sha256(text.encode()).hexdigest(),),
        (hashlib.sha256(other.encode()).hexdigest(),),
    ]


TOTAL_ONLY = "timestamp, uuid, name, utilization.gpu [%], memory.total [MiB]\n" + "".join(
    f"2025/03/01 10:00:{s:02d}.000, GPU-1111, NVIDIA GeForce RTX 4090, 50 %, 24564 MiB\n" for s in (0, 30)
)
USED_ONLY = "timestamp, uuid, memory.used [MiB]\n" + "".join(
    f"2025/03/01 10:00:{s:02d}.000, GPU-1111, {used} MiB\n" for s, used in ((0, 1000), (30, 25500))
)


@pytest.mark.parametrize("first", ["total", "used"])
def test_a_merge_that_would_make_an_implausible_row_is_refused_with_its_line(ledger, tmp_path, first):
    """Each file is plausible alone; merged, the 10:00:30 row would hold 25,500 MiB used of a 24,564 MiB
    RTX 4090 (used above total). The second file is refused at that row's line (3) whichever came first,
    and the ledger keeps what the first file gave; --skip-bad-rows merges the 10:00:00 row and leaves line 3
    out, recorded in rejected_rows."""
    files = {"total": ("total.csv", TOTAL_ONLY), "used": ("used.csv", USED_ONLY)}
    second = "used" if first == "total" else "total"
    ingest_file(ledger, write(tmp_path, *files[first]), opts=UTC)
    before = _samples(ledger)
    path = write(tmp_path, *files[second])
    with pytest.raises(
        FormatError,
        match=r":3: (memory\.used|the ledger's memory used) is 25,500 MiB, above the memory total \(24,564 MiB\), with the values the ledger has",
    ):
        ingest_file(ledger, path, opts=UTC)
    assert _samples(ledger) == before
    report = ingest_file(ledger, path, opts=IngestOptions(tz="UTC", skip_bad_rows=True))
    assert [r["line"] for r in report.rejected] == [3]
    got = ledger.execute("SELECT ts, mem_used_mib, mem_total_mib FROM samples ORDER BY ts").fetchall()
    t0 = dt.datetime(2025, 3, 1, 10)
    if first == "total":  # the 10:00:30 row keeps its total and no used
        assert got == [(t0, 1000.0, 24564.0), (t0 + dt.timedelta(seconds=30), None, 24564.0)]
    else:  # the 10:00:30 row keeps its used and no total
        assert got == [(t0, 1000.0, 24564.0), (t0 + dt.timedelta(seconds=30), 25500.0, None)]
