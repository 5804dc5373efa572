"""``--replace`` never removes a sample another ingest still holds (collectors/provenance.py ``delete_ingests``).

On cuts of a real nvidia-smi log (2,619 samples, one RTX 4090 at 1 s; ../shared/datasets), through
``ingest_file`` as the CLI calls it. Counts are worked by hand from the line numbers of the cuts: data line N
of the log is sample N.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from collectors import ingest
from collectors.base import IngestOptions
from collectors.ingest import ingest_file
from gpuledger.ledger.rollup import rebuild_rollup
from tests.conftest import dataset, write

UTC = IngestOptions(tz="UTC")
LOG = "nvidia-smi-csv/eobo0530_vlm_optimization_gpu_log.csv"
ALREADY = "samples already in the ledger"


@pytest.fixture(scope="module")
def lines() -> list[str]:
    """The log's header and its 2,619 data lines (index 1..2619 = sample 1..2619)."""
    text = dataset(LOG).read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(text) == 1 + 2619
    return text


def cut(lines: list[str], folder: Path, name: str, first: int, last: int) -> Path:
    """A file with the header and samples ``first``..``last`` (both included)."""
    return write(folder, name, lines[0] + "".join(lines[first : last + 1]))


def replace(**kw: object) -> IngestOptions:
    return IngestOptions(tz="UTC", replace=True, **kw)  # type: ignore[arg-type]


def count(con: duckdb.DuckDBPyConnection, sql: str = "SELECT count(*) FROM samples") -> object:
    return con.execute(sql).fetchall()[0][0]


def owners(con: duckdb.DuckDBPyConnection) -> list[tuple[int, int]]:
    return con.execute("SELECT ingest_id, count(*) FROM samples GROUP BY 1 ORDER BY 1").fetchall()


def assert_rollup_is_a_rebuild(con: duckdb.DuckDBPyConnection) -> None:
    """The per-minute rollup left by the ingests and removals equals one rebuilt from the samples."""
    cols = "minute, gpu_id, job_id, n, covered_s, util_s, idle_s, power_j, pairs_n"
    kept = con.execute(f"SELECT {cols} FROM samples_minute ORDER BY minute, gpu_id").fetchall()
    con.execute("BEGIN TRANSACTION")
    rebuild_rollup(con, idle_util_pct=UTC.idle_util_pct)
    rebuilt = con.execute(f"SELECT {cols} FROM samples_minute ORDER BY minute, gpu_id").fetchall()
    con.execute("ROLLBACK")
    assert len(kept) == len(rebuilt) > 0
    for a, b in zip(kept, rebuilt, strict=True):
        assert a[:4] == b[:4] and a[4:] == pytest.approx(b[4:], abs=1e-3)


@pytest.mark.parametrize("overlap_bytes", [0, 10**12], ids=["hashed-while-staging", "hashed-first"])
def test_logrotate_keeps_the_rotated_file_that_was_reported_already_ingested(
    ledger, lines, tmp_path, monkeypatch, overlap_bytes
):
    # gpu.csv holds samples 1–1,500 (--replace, as a cron job runs it); logrotate renames it gpu.csv.1 and
    # nvidia-smi starts a new gpu.csv with samples 1,501–2,619. gpu.csv.1 is the same bytes: "already ingested
    # (ingest #1)", found before staging or (a big file, collectors/ingest.py OVERLAP_HASH_BYTES) after. The
    # next --replace gpu.csv replaces what gpu.csv held, not what gpu.csv.1 still holds.
    monkeypatch.setattr(ingest, "OVERLAP_HASH_BYTES", overlap_bytes)
    first = ingest_file(ledger, cut(lines, tmp_path, "gpu.csv", 1, 1500), opts=replace())
    assert first.rows["samples"] == 1500
    (tmp_path / "gpu.csv").rename(tmp_path / "gpu.csv.1")
    rotated = ingest_file(ledger, tmp_path / "gpu.csv.1", opts=UTC)
    assert rotated.already and rotated.ingest_id == first.ingest_id
    new = ingest_file(ledger, cut(lines, tmp_path, "gpu.csv", 1501, 2619), opts=replace())
    assert new.rows["samples"] == 2619 - 1500 == 1119
    assert new.replaced == []  # ingest #1 is gpu.csv.1's now
    assert count(ledger) == 1500 + 1119 == 2619  # was 1,119: ingest #1 was deleted by its old source key
    assert ledger.execute("SELECT ingest_id, path FROM ingests ORDER BY 1").fetchall() == [
        (first.ingest_id, str(tmp_path / "gpu.csv.1")),
        (new.ingest_id, str(tmp_path / "gpu.csv")),
    ]
    assert count(ledger, "SELECT count(*) FROM ingest_sources") == 0  # the alias became the owner
    assert_rollup_is_a_rebuild(ledger)


def test_replacing_the_rotated_copy_keeps_what_the_live_file_holds(ledger, lines, tmp_path):
    # the other way round: gpu.csv.1, found already ingested under gpu.csv, is itself replaced by a
    # shorter file (samples 1–1,000): gpu.csv still holds all 1,500, so none goes
    first = ingest_file(ledger, cut(lines, tmp_path, "gpu.csv", 1, 1500), opts=UTC)
    copy = write(tmp_path, "gpu.csv.1", (tmp_path / "gpu.csv").read_text(encoding="utf-8"))
    assert ingest_file(ledger, copy, opts=UTC).already
    shorter = ingest_file(ledger, cut(lines, tmp_path, "gpu.csv.1", 1, 1000), opts=replace())
    assert shorter.replaced == [] and shorter.skipped[ALREADY] == 1000
    assert count(ledger) == 1500
    assert owners(ledger) == [(first.ingest_id, 1500)]
    # gpu.csv goes: the 1,000 samples gpu.csv.1 holds stay, now gpu.csv.1's; the other 500 go
    gone = ingest_file(ledger, cut(lines, tmp_path, "gpu.csv", 2001, 2001), opts=replace())
    assert gone.replaced == [first.ingest_id]
    assert owners(ledger) == [(shorter.ingest_id, 1000), (gone.ingest_id, 1)]
    assert_rollup_is_a_rebuild(ledger)


def test_overlapping_halves_replace_of_the_first_keeps_the_overlap_the_second_holds(ledger, lines, tmp_path):
    # first_half.csv: samples 1–1,500; second_half.csv: 1,201–2,619. Its 300 samples 1,201–1,500 are
    # "already in the ledger", rows of the first ingest that the second holds too.
    first = ingest_file(ledger, cut(lines, tmp_path, "first_half.csv", 1, 1500), opts=UTC)
    second = ingest_file(ledger, cut(lines, tmp_path, "second_half.csv", 1201, 2619), opts=UTC)
    assert second.rows["samples"] == 2619 - 1500 == 1119 and second.skipped[ALREADY] == 300
    assert count(ledger, "SELECT count(*) FROM held_rows") == 300
    # the first file cut shorter (1–1,200) and replaced: 1,200 + the second's 1,419 = 2,619 (was 2,319: the
    # 300 overlapping samples went with the first ingest)
    shorter = ingest_file(ledger, cut(lines, tmp_path, "first_half.csv", 1, 1200), opts=replace())
    assert shorter.replaced == [first.ingest_id] and shorter.rows["samples"] == 1200
    assert count(ledger) == 1200 + 1419 == 2619
    assert owners(ledger) == [(second.ingest_id, 1119 + 300), (shorter.ingest_id, 1200)]
    assert count(ledger, "SELECT count(*) FROM held_rows") == 0  # the second owns its overlap now
    assert_rollup_is_a_rebuild(ledger)


def test_replacing_the_second_half_removes_only_what_it_added(ledger, lines, tmp_path):
    # the other side of the overlap: the second file (1,201–2,619) replaced by sample 2,619 alone removes its
    # own 1,119 samples, never the 300 the first file owns: 1,500 + the 1 it brings again
    first = ingest_file(ledger, cut(lines, tmp_path, "a.csv", 1, 1500), opts=UTC)
    ingest_file(ledger, cut(lines, tmp_path, "b.csv", 1201, 2619), opts=UTC)
    last = ingest_file(ledger, cut(lines, tmp_path, "b.csv", 2619, 2619), opts=replace())
    assert owners(ledger) == [(first.ingest_id, 1500), (last.ingest_id, 1)]
    assert count(ledger, "SELECT count(*) FROM held_rows") == 0  # the removed ingest's claims went with it
    assert_rollup_is_a_rebuild(ledger)


def test_replace_of_a_copy_under_another_name_keeps_the_original(ledger, lines, tmp_path):
    # a.csv (samples 1–100), then its copy b.csv with --replace: the same bytes land again, every sample
    # already there and held by both. Before, --replace removed any ingest with the same bytes, so a later
    # --replace of b.csv by a shorter file (samples 1–10) took a.csv's 90 others with it.
    a = ingest_file(ledger, cut(lines, tmp_path, "a.csv", 1, 100), opts=UTC)
    b = write(tmp_path, "b.csv", (tmp_path / "a.csv").read_text(encoding="utf-8"))
    copy = ingest_file(ledger, b, opts=replace())
    assert copy.replaced == [] and copy.rows["samples"] == 0 and copy.skipped[ALREADY] == 100
    shorter = ingest_file(ledger, cut(lines, tmp_path, "b.csv", 1, 10), opts=replace())
    assert shorter.replaced == [copy.ingest_id]
    assert owners(ledger) == [(a.ingest_id, 100)]


def test_a_log_reingested_as_it_grows_keeps_one_holder_per_sample_and_survives_rotation(
    ledger, lines, tmp_path
):
    # a cron job ingests gpu.csv hourly without --replace while nvidia-smi appends: samples 1–500, 1–1,000,
    # 1–1,500. Each run holds every earlier sample again; only the latest run's claim is kept (one holder
    # per source): 500 held rows after the second run, 1,000 (not 500 + 1,000) after the third.
    runs = [
        ingest_file(ledger, cut(lines, tmp_path, "gpu.csv", 1, last), opts=UTC) for last in (500, 1000, 1500)
    ]
    assert [r.rows["samples"] for r in runs] == [500, 500, 500]
    assert ledger.execute("SELECT ingest_id, count(*) FROM held_rows GROUP BY 1").fetchall() == [
        (runs[2].ingest_id, 1000)
    ]
    # logrotate: gpu.csv.1 is the third run's bytes (already ingested); the new gpu.csv (1,501–2,619) with
    # --replace removes the first two runs, whose samples the third (now gpu.csv.1's) holds
    (tmp_path / "gpu.csv").rename(tmp_path / "gpu.csv.1")
    assert ingest_file(ledger, tmp_path / "gpu.csv.1", opts=UTC).ingest_id == runs[2].ingest_id
    new = ingest_file(ledger, cut(lines, tmp_path, "gpu.csv", 1501, 2619), opts=replace())
    assert new.replaced == [runs[0].ingest_id, runs[1].ingest_id]
    assert owners(ledger) == [(runs[2].ingest_id, 1500), (new.ingest_id, 1119)]  # 2,619
    assert count(ledger, "SELECT count(*) FROM held_rows") == 0
    assert_rollup_is_a_rebuild(ledger)
