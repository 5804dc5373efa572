"""The recommender's thresholds are settings ([recommend], docs/settings.md): each key read from the file
with its range, and a changed value changes the figure it should, worked by hand on the hand-built ledger of
tests/analytics/test_recommend.py (H100 $3.00 on demand, $1.50 spot)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl
import pytest

from analytics.recommend import recommendations
from gpuledger.ledger.db import memory_ledger
from gpuledger.ledger.errors import SettingsError
from gpuledger.ledger.settings import Settings, from_dict
from tests.analytics.recommend_ledgers import recommend_ledger
from tests.analytics.test_recommend import ELASTIC, VIEW


@pytest.fixture(scope="module")
def con():
    c = memory_ledger()
    recommend_ledger(c)
    yield c
    c.close()


def _items(con, kind: str, **changes: float) -> pl.DataFrame:
    s = dataclasses.replace(ELASTIC, **changes)
    recs = recommendations(con, filters=VIEW, settings=s, problems=False, min_usd_per_week=0.0, kinds=[kind])
    return recs.filter(pl.col("kind") == kind)


def test_spot_rework_and_checkpoint_gap_come_from_settings(con) -> None:
    # spot1: 2 GPUs × 12 h = 24 GPU-h at $3.00; spot $1.50 with no rework: 24 × (3.00 − 1.50)
    (item,) = _items(con, "use_spot", spot_rework_pct=0.0).to_dicts()
    assert item["saving_usd"] == pytest.approx(24 * (3.00 - 1.50))
    assert "plus 0 % rework" in item["evidence"]
    # its last checkpoint is 30 min before its end: a 15-minute limit leaves it out
    assert _items(con, "use_spot", spot_checkpoint_max_gap_hours=0.25).is_empty()


def test_mig_limit_comes_from_settings(con) -> None:
    # tiny1 runs at 20 % utilization (15 % SM-active) and nb2 at 16 % outside its idle stretch:
    # under the default 30 % both get a slice; under 15 % neither
    assert set(_items(con, "mig_slice")["target"]) == {"tiny1", "nb2"}
    assert _items(con, "mig_slice", mig_max_util_pct=15.0).is_empty()


def test_recommend_keys_are_read_with_their_ranges(tmp_path: Path) -> None:
    path = tmp_path / "settings.toml"
    got = from_dict({"recommend": {"spot_rework_pct": 0, "early_fail_minutes": 5}}, path)
    assert (got.spot_rework_pct, got.early_fail_minutes) == (0.0, 5.0)
    assert got.mig_max_util_pct == Settings().mig_max_util_pct == 30.0  # unset: the default
    with pytest.raises(SettingsError, match=r"recommend\.capacity_demand_percentile"):
        from_dict({"recommend": {"capacity_demand_percentile": 0}}, path)
    with pytest.raises(SettingsError, match=r"recommend\.spot_rework"):
        from_dict({"recommend": {"spot_rework": 10}}, path)  # a misspelt key is named
    # a changed threshold changes the settings' fingerprint (the pages' caches are keyed on it)
    assert got.fingerprint() != Settings().fingerprint()
