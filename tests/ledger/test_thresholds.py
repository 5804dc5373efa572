"""gpuledger/ledger/thresholds.py: one frozen object; the settings' keys flow into it; two thresholds, not one."""

from __future__ import annotations

import dataclasses

import pytest

from gpuledger.ledger.settings import Settings
from gpuledger.ledger.thresholds import DEFAULT, thresholds


def test_the_settings_values_are_the_thresholds_in_force():
    t = thresholds(Settings(idle_util_pct=7.0, target_util_pct=55.0, batch_safety_fraction=0.8))
    assert (t.idle_util_pct, t.target_util_pct, t.batch_safety_fraction) == (7.0, 55.0, 0.8)
    assert t.burst_util_pct == DEFAULT.burst_util_pct  # no settings key: fixed


def test_the_object_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT.burst_util_pct = 99.0  # type: ignore[misc]


def test_a_swing_burst_and_a_saturated_batch_are_two_thresholds():
    # both were HIGH_UTIL_PCT: 70 in job_signals.py (the burst after a dip), 85 in batch_size.py (a run busy
    # enough that a larger batch offers little); each keeps its value under its own name
    assert (DEFAULT.dip_util_pct, DEFAULT.burst_util_pct, DEFAULT.batch_saturated_util_pct) == (
        10.0,
        70.0,
        85.0,
    )
