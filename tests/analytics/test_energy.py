"""Energy from the counter (with a reset) or from power × time; dollars and CO2e at the settings' rates."""

from __future__ import annotations

import pytest

from analytics.energy import job_energy
from gpuledger.ledger.settings import Settings
from tests.analytics.build import alloc, gpu, ingest, job, series


def test_counter_deltas_with_a_reset_and_power_fallback(ledger):
    # 6 samples a minute apart; counter rises 18 kJ a minute, resets after the 3rd sample.
    counter = [0.0, 18_000.0, 36_000.0, 500.0, 18_500.0, 36_500.0]
    samples = series("h1:0", 0, [90.0] * 6, power_w=250.0)
    for s, e in zip(samples, counter, strict=True):
        s["energy_j"] = e
    ingest(
        ledger,
        jobs=[job("j1", 0, 6)],
        allocations=[alloc("j1", "h1:0", 0, 6)],
        samples=samples,
        gpus=[gpu("h1:0")],
    )
    row = job_energy(ledger, settings=Settings(usd_per_kwh=0.2, gco2e_per_kwh=400)).row(0, named=True)
    # Δ 18 kJ for pairs 1→2, 2→3, 4→5, 5→6 (4 × 18 kJ); the reset pair 3→4 and the last sample (no next)
    # fall back to 250 W × 60 s = 15 kJ each.
    joules = 4 * 18_000 + 2 * 15_000
    assert row["energy_kwh"] == pytest.approx(joules / 3.6e6)
    assert row["energy_usd"] == pytest.approx(joules / 3.6e6 * 0.2)
    assert row["co2e_kg"] == pytest.approx(joules / 3.6e6 * 400 / 1000)
    assert row["energy_coverage"] == pytest.approx(1.0)


def test_no_power_no_energy_is_null(ledger):
    ingest(
        ledger,
        jobs=[job("j1", 0, 5)],
        allocations=[alloc("j1", "h1:0", 0, 5)],
        samples=series("h1:0", 0, [90.0] * 5),
        gpus=[gpu("h1:0")],
    )
    row = job_energy(ledger).row(0, named=True)
    assert row["energy_kwh"] is None and row["energy_coverage"] == 0.0
