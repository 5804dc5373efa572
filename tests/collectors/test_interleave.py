"""Two series of one GPU that interleave in time count its time once (collectors/interleave.py)."""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest

from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from gpuledger.ledger.db import ensure_schema
from tests.conftest import dataset, write

UTC = IngestOptions(tz="UTC")
HEADER = "timestamp, uuid, name, utilization.gpu [%], power.draw [W]\n"
INSIDE = "samples inside the time of another series of the same GPU (counted once)"


def _log(seconds: list[int], util: int = 50) -> str:
    return HEADER + "".join(
        f"2025/03/01 10:{s // 60:02d}:{s % 60:02d}.000, GPU-ab, NVIDIA H100 80GB HBM3, {util} %, 300.00 W\n"
        for s in seconds
    )


def _ledger() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    ensure_schema(con)
    return con


def _covered(con: duckdb.DuckDBPyConnection) -> tuple[float, float, float]:
    """Σ interval over samples, the rollup's covered seconds, and energy (J) from Σ power × interval."""
    return con.execute(
        """SELECT (SELECT sum(interval_s) FROM samples), (SELECT sum(covered_s) FROM samples_minute),
                  (SELECT sum(power_w * interval_s) FROM samples)"""
    ).fetchall()[0]


@pytest.mark.parametrize("first", ["minutes", "half-minutes"])
def test_a_log_split_in_two_files_counts_the_gpu_time_once(tmp_path, first):
    """A: 10:00, 10:01, 10:02, 10:03 (cadence 60 s); B: 10:00:30 ... 10:03:30. Each alone covers 240 s;
    together they cover 10:00-10:04:30, 270 s, whichever comes first. By hand, A first: B's first three
    minutes lie inside A's span and go; B's last, 10:03:30-10:04:30, is covered by A up to 10:04 and keeps
    the 30 s after, starting at 10:04 (a sample covers [ts, ts + interval), so it moves there). B first: A's 10:00 keeps the 30 s before B's first sample; A's other three lie inside B's span.
    300 W × 270 s = 81,000 J. Before, 480 s either way."""
    a, b = _log([0, 60, 120, 180]), _log([30, 90, 150, 210])
    files = [("a.csv", a), ("b.csv", b)] if first == "minutes" else [("b.csv", b), ("a.csv", a)]
    con = _ledger()
    ingest_file(con, write(tmp_path, *files[0]), opts=UTC)
    report = ingest_file(con, write(tmp_path, *files[1]), opts=UTC)
    assert _covered(con) == (270.0, 270.0, 300.0 * 270)
    assert report.skipped[INSIDE] == 3
    assert report.rows["samples"] == 1
    t0 = dt.datetime(2025, 3, 1, 10)
    kept = t0 + dt.timedelta(seconds=240) if first == "minutes" else t0
    assert con.execute("SELECT ts, interval_s FROM samples WHERE ingest_id = 2").fetchall() == [(kept, 30.0)]


def test_a_second_series_fills_the_first_one_s_silence(tmp_path):
    """A covers 10:00-10:03 (3 samples, 60 s each; its last stands for its cadence), then is silent; B is
    every 60 s from 10:00:30 to 10:05:30. By hand: B's 10:00:30 and 10:01:30 lie inside A's span and go;
    B's 10:02:30 keeps the 30 s after A's end; B's 10:03:30, 10:04:30 and 10:05:30 keep 60 s each:
    180 + 30 + 180 = 390 s, 10:00 to 10:06:30."""
    con = _ledger()
    ingest_file(con, write(tmp_path, "a.csv", _log([0, 60, 120])), opts=UTC)
    report = ingest_file(con, write(tmp_path, "b.csv", _log([30, 90, 150, 210, 270, 330])), opts=UTC)
    assert report.skipped[INSIDE] == 2
    assert _covered(con)[:2] == (390.0, 390.0)


def test_a_new_day_whose_first_poll_is_early_keeps_it(tmp_path):
    """A's last sample (10:02) stands until 10:03; B's first poll comes half a second before that (clock
    jitter). B's sample keeps its time less that half second: 180 + 59.5 + 60 + 60 = 359.5 s, none removed."""
    con = _ledger()
    ingest_file(con, write(tmp_path, "a.csv", _log([0, 60, 120])), opts=UTC)
    b = HEADER + "".join(
        f"2025/03/01 10:0{m}:59.500, GPU-ab, NVIDIA H100 80GB HBM3, 50 %, 300.00 W\n" for m in (2, 3, 4)
    )
    report = ingest_file(con, write(tmp_path, "b.csv", b), opts=UTC)
    assert report.rows["samples"] == 3 and INSIDE not in report.skipped
    assert _covered(con)[:2] == (pytest.approx(359.5), pytest.approx(359.5))


def test_a_third_file_is_measured_against_what_the_second_really_covers(tmp_path):
    """A: 1-s polls 10:00:00-10:00:09, covering [0, 10) s; B: 30-s polls at 0.5, 30.5 and 60.5 s, covering
    [0.5, 90.5); C: 1-s polls at 20-29 s. By hand: B's first sample starts inside A's time and stands for
    [10, 30.5) (it moves to 10 s); C lies wholly inside it and adds nothing: the union [0, 90.5), 90.5 s.
    (With B's sample left at 0.5 s and cut to 20.5 s, C's 21-29 s looked uncovered: 99.5 s.)"""
    con = _ledger()

    def fine(seconds):
        return HEADER + "".join(
            f"2025/03/01 10:00:{s:02d}.000, GPU-ab, NVIDIA H100 80GB HBM3, 50 %, 300.00 W\n" for s in seconds
        )

    coarse = HEADER + "".join(
        f"2025/03/01 10:0{m}:{s:02d}.500, GPU-ab, NVIDIA H100 80GB HBM3, 50 %, 300.00 W\n"
        for m, s in ((0, 0), (0, 30), (1, 0))
    )
    ingest_file(con, write(tmp_path, "a.csv", fine(range(10))), opts=UTC)
    ingest_file(con, write(tmp_path, "b.csv", coarse), opts=UTC)
    report = ingest_file(con, write(tmp_path, "c.csv", fine(range(20, 30))), opts=UTC)
    assert report.skipped[INSIDE] == 10
    assert _covered(con)[:2] == (pytest.approx(90.5), pytest.approx(90.5))
    t0 = dt.datetime(2025, 3, 1, 10)
    assert con.execute("SELECT ts, interval_s FROM samples WHERE ingest_id = 2 ORDER BY ts").fetchall() == [
        (t0 + dt.timedelta(seconds=10), 20.5),
        (t0 + dt.timedelta(seconds=30.5), 30.0),
        (t0 + dt.timedelta(seconds=60.5), 30.0),
    ]


@pytest.mark.parametrize("first", ["fine", "coarse"])
def test_a_sample_at_the_very_time_of_another_series_adds_the_rest_of_its_span(tmp_path, first):
    """A: 1-s polls 10:00:00-10:00:09 at 10 %, covering [0, 10); B: 30-s polls at 0, 30 and 60 s at 50 %,
    covering [0, 90). B's first poll has A's time, so it merges into A's row, which keeps its 1 s: the rest of
    B's span, [10, 30), lands as B's sample at 10 s. By hand, in either order: 90 s, utilization
    (10 × 10 % + 80 × 50 %) / 90 = 45.56 % (A first) or B alone where B covers first (B first: 90 s at 50 %,
    A's 0-s poll merged and its others inside B's time). Before, A first: 70 s."""
    fine = HEADER + "".join(
        f"2025/03/01 10:00:{s:02d}.000, GPU-ab, NVIDIA H100 80GB HBM3, 10 %, 300.00 W\n" for s in range(10)
    )
    coarse = HEADER + "".join(
        f"2025/03/01 10:0{m}:{s:02d}.000, GPU-ab, NVIDIA H100 80GB HBM3, 50 %, 300.00 W\n"
        for m, s in ((0, 0), (0, 30), (1, 0))
    )
    files = [("a.csv", fine), ("b.csv", coarse)] if first == "fine" else [("b.csv", coarse), ("a.csv", fine)]
    con = _ledger()
    for name, text in files:
        ingest_file(con, write(tmp_path, name, text), opts=UTC)
    total, covered, _ = _covered(con)
    assert (total, covered) == (pytest.approx(90.0), pytest.approx(90.0))
    util = con.execute("SELECT sum(util_pct * interval_s) / sum(interval_s) FROM samples").fetchall()[0][0]
    assert util == pytest.approx((10 * 10 + 80 * 50) / 90 if first == "fine" else 50.0)


def test_a_log_ingested_again_as_it_grows_ends_up_as_one_ingest_of_the_whole_log(tmp_path):
    """Polls at 0, 10, 20, 30, 45, 55 s (cadence 10 s; the 15-s gap is under 2.5 × 10). The first ingest saw
    0-30 s: its last poll stands for the cadence, 10 s. The whole log, ingested next, says that poll stood for
    15 s: the row's interval grows to it, no new row. By hand: 10 + 10 + 10 + 15 + 10 + 10 = 65 s, six rows,
    what one ingest of the whole log gives."""
    seconds = [0, 10, 20, 30, 45, 55]
    con = _ledger()
    ingest_file(con, write(tmp_path, "head.csv", _log(seconds[:4])), opts=UTC)
    report = ingest_file(con, write(tmp_path, "whole.csv", _log(seconds)), opts=UTC)
    assert report.rows["samples"] == 2
    assert con.execute("SELECT count(*) FROM samples").fetchall()[0][0] == 6
    assert _covered(con)[:2] == (65.0, 65.0)
    alone = _ledger()
    ingest_file(alone, write(tmp_path, "whole2.csv", _log(seconds)), opts=UTC)
    assert (
        con.execute("SELECT ts, interval_s FROM samples ORDER BY ts").fetchall()
        == alone.execute("SELECT ts, interval_s FROM samples ORDER BY ts").fetchall()
    )


def test_days_one_after_the_other_are_not_interleaved(tmp_path):
    """The next file starts where the last ended: nothing is inside anything, every sample lands."""
    con = _ledger()
    ingest_file(con, write(tmp_path, "a.csv", _log([0, 60, 120])), opts=UTC)
    report = ingest_file(con, write(tmp_path, "b.csv", _log([180, 240, 300])), opts=UTC)
    assert report.rows["samples"] == 3 and INSIDE not in report.skipped
    assert _covered(con)[:2] == (360.0, 360.0)


@pytest.mark.datasets
@pytest.mark.parametrize("first", ["odd", "even"])
def test_a_real_log_cut_into_odd_and_even_lines_covers_its_span_once(tmp_path, first):
    """The eobo nvidia-smi log (one RTX 4090, about 1 s apart, 48 minutes) cut into its odd and even lines:
    before, the two files covered 5,743 GPU-seconds of a 2,880-second log. Now no more than the log's span
    plus one sample's time, and at least what the first file alone covers (plain SQL on each)."""
    lines = dataset("nvidia-smi-csv/eobo0530_vlm_optimization_gpu_log.csv").read_text().splitlines()
    odd = write(tmp_path, "odd.csv", "\n".join([lines[0], *lines[1::2]]) + "\n")
    even = write(tmp_path, "even.csv", "\n".join([lines[0], *lines[2::2]]) + "\n")
    order = [odd, even] if first == "odd" else [even, odd]
    alone = _ledger()
    ingest_file(alone, order[0], opts=UTC)
    first_alone = alone.execute("SELECT sum(interval_s), max(interval_s) FROM samples").fetchall()[0]
    con = _ledger()
    reports = [ingest_file(con, p, opts=UTC) for p in order]
    total, covered, _ = _covered(con)
    span = con.execute("SELECT epoch(max(ts) - min(ts)) FROM samples").fetchall()[0][0]
    assert covered == pytest.approx(total)
    assert first_alone[0] <= total <= span + first_alone[1]
    second = len(lines[1::2]) if first == "even" else len(lines[2::2])
    assert reports[1].rows.get("samples", 0) + reports[1].skipped[INSIDE] == second
