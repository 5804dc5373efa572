"""Schema version 9 stores the split of shared cards (``gpu_shares``): a version-8 ledger gets it filled on
open, and where it holds a shared card its rollups (built with each sample counted for one job) are marked
stale, and rebuilt at the next sync (sync_reference, as after a change of thresholds)."""

from __future__ import annotations

import duckdb

from gpuledger.ledger.db import writer
from gpuledger.ledger.rollup import ensure_rollup, thresholds
from gpuledger.ledger.rollup_thresholds import stored_thresholds
from gpuledger.ledger.schema import SCHEMA_VERSION, current_version
from tests.analytics.build import at, gpu, ingest, job, series, set_test_prices
from tests.analytics.test_shared_samples import _b1_jobs, _b1_telemetry, _check_b1


def _as_version_8(path: str) -> None:
    """What version 8 wrote: no gpu_shares (the split was computed per query)."""
    with duckdb.connect(path) as old:
        old.execute("DROP TABLE gpu_shares")
        old.execute("UPDATE schema_meta SET value = '8' WHERE key = 'schema_version'")


def test_a_version_8_ledger_with_a_shared_card_gets_its_shares_and_a_stale_rollup(db_path):
    with writer(db_path) as con:
        set_test_prices(con)
        ingest(con, **_b1_jobs(), **_b1_telemetry())
    _as_version_8(db_path)
    with writer(db_path) as con:
        assert current_version(con) == SCHEMA_VERSION >= 9
        # a and b share b1's one card for the hour: ½ each (declared 1 card each, 1 beyond the share)
        assert con.execute("SELECT * FROM gpu_shares ORDER BY job_id").fetchall() == [
            ("a", "b1:0", at(0), at(60), 0.5, 0.5),
            ("b", "b1:0", at(0), at(60), 0.5, 0.5),
        ]
        assert stored_thresholds(con) is None  # stale: the next sync (sync_reference) rebuilds them
        ensure_rollup(con, thresholds(5.0, 30.0, 60.0))
        set_test_prices(con)  # opening synced the shipped price sheet
        _check_b1(con)  # raw samples, then the rebuilt rollups: the hand-worked figures


def test_a_version_8_ledger_without_sharing_keeps_its_rollup(db_path):
    with writer(db_path) as con:
        set_test_prices(con)
        ingest(con, jobs=[job("a", 0, 60)], samples=series("n1:0", 0, [50.0] * 60), gpus=[gpu("n1:0")])
        before = stored_thresholds(con)
    _as_version_8(db_path)
    with writer(db_path) as con:
        assert con.execute("SELECT count(*) FROM gpu_shares").fetchone()[0] == 0
        assert before is not None and stored_thresholds(con) == before
