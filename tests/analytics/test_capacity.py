"""Observed capacity: GPUs that report telemetry are paid for while they report; unallocated = capacity − held,
moment by moment at the price in force; per-job billing; unknown-model jobs consume capacity."""

from __future__ import annotations

import pytest

from analytics.summary import summary
from analytics.waste import PARTS, unallocated, waste_totals
from gpuledger.ledger.reference import load_reference
from gpuledger.ledger.settings import Capacity, ClusterSettings, Settings
from tests.analytics.build import H100, alloc, at, gpu, ingest, job, series, set_test_prices

RATE = 4.0  # H100 on_demand in the test sheet


def _cloud(con, settings: Settings) -> None:
    """8 H100s on cluster c1 reporting every minute for 6 h; 8 one-GPU jobs hold them for the first 3 h."""
    load_reference(con, settings)
    set_test_prices(con)
    gpus = [f"n1:{i}" for i in range(8)]
    ingest(
        con,
        jobs=[job(f"j{i}", 0, 180) for i in range(8)],
        allocations=[alloc(f"j{i}", g, 0, 180) for i, g in enumerate(gpus)],
        samples=[s for g in gpus for s in series(g, 0, [90.0] * 180 + [0.0] * 180)],
        gpus=[gpu(g) for g in gpus],
    )


def test_cloud_gpus_reporting_6h_held_3h_leave_24_gpu_hours_unallocated(ledger):
    _cloud(ledger, Settings())
    un = unallocated(ledger).row(0, named=True)
    # observed: 8 GPUs × (first sample .. last sample + its 60 s interval) = 8 × 6 h = 48 GPU-h; held 8 × 3 h
    assert un["capacity_basis"] == "observed"
    assert un["observed_gpu_hours"] == pytest.approx(48.0)
    assert un["allocated_gpu_hours"] == pytest.approx(24.0)
    assert un["unallocated_gpu_hours"] == pytest.approx(24.0)
    assert un["unallocated_usd"] == pytest.approx(24 * RATE)  # $96
    s = summary(ledger)
    assert s["waste"]["unallocated_usd"] == pytest.approx(96.0)
    assert s["spend_usd"] == pytest.approx(8 * 3 * RATE + 96.0)  # jobs $96 + unallocated $96
    assert round(sum(s["waste"][p] for p in PARTS), 2) == round(s["spend_usd"], 2)


def test_per_job_billing_has_no_unallocated(ledger):
    settings = Settings(clusters={"c1": ClusterSettings(billing="per_job")})
    _cloud(ledger, settings)
    assert unallocated(ledger, settings=settings).height == 0
    totals = waste_totals(ledger, settings=settings)
    assert totals["unallocated_usd"] == 0.0
    assert totals["spend_usd"] == pytest.approx(8 * 3 * RATE)  # only the jobs


def test_a_silence_longer_than_the_gap_setting_stops_the_capacity(ledger):
    set_test_prices(ledger)
    # one GPU held 0-60 min; it reports 0-60 and 120-180 min: a 60-min silence
    ingest(
        ledger,
        jobs=[job("j", 0, 60)],
        allocations=[alloc("j", "n1:0", 0, 60)],
        samples=series("n1:0", 0, [50.0] * 60) + series("n1:0", 120, [0.0] * 60),
        gpus=[gpu("n1:0")],
    )
    # gap 30 min (default): observed 1 h + 1 h; held 1 h → 1 GPU-h unallocated
    assert unallocated(ledger).row(0, named=True)["observed_gpu_hours"] == pytest.approx(2.0)
    assert unallocated(ledger).row(0, named=True)["unallocated_gpu_hours"] == pytest.approx(1.0)
    # gap 90 min: the silence is bridged, observed 0-180 min = 3 GPU-h → 2 unallocated
    long = Settings(capacity_gap_minutes=90)
    assert unallocated(ledger, settings=long).row(0, named=True)["observed_gpu_hours"] == pytest.approx(3.0)
    assert unallocated(ledger, settings=long).row(0, named=True)["unallocated_gpu_hours"] == pytest.approx(
        2.0
    )


def test_unallocated_is_priced_at_the_price_in_force_hour_by_hour(ledger):
    settings = Settings(clusters={"c1": ClusterSettings(capacity=(Capacity(H100, 2),))})
    load_reference(ledger, settings)
    set_test_prices(ledger)
    # the H100 price rises from $4 to $6 at midnight of 2025-03-04 (T0 is 2025-03-03 00:00)
    ledger.execute(
        "INSERT INTO prices VALUES (?, 'on_demand', NULL, DATE '2025-03-04', 6.0, 'test', DATE '2025-03-04', "
        "'sheet', NULL)",
        [H100],
    )
    # one job holds 1 of the 2 declared GPUs for 36 h: 1 GPU-h free each hour, 24 h at $4 then 12 h at $6
    ingest(ledger, jobs=[job("j", 0, 36 * 60)])
    un = unallocated(ledger, settings=settings).row(0, named=True)
    assert un["unallocated_gpu_hours"] == pytest.approx(36.0)
    assert un["unallocated_usd"] == pytest.approx(24 * 4.0 + 12 * 6.0)  # $168, not 36 × a window mean
    assert un["usd_per_gpu_hour"] == pytest.approx(168 / 36)


def test_unknown_model_jobs_consume_capacity_as_unpriced_held_hours(ledger):
    settings = Settings(clusters={"c1": ClusterSettings(capacity=(Capacity(H100, 4),))})
    load_reference(ledger, settings)
    set_test_prices(ledger)
    # 4 declared H100 for 10 h; a 1-GPU H100 job for 10 h and a 2-GPU job of unknown model for 10 h
    ingest(ledger, jobs=[job("k", 0, 600), job("u", 0, 600, gpu_model=None, gpu_count=2.0)])
    un = unallocated(ledger, settings=settings).row(0, named=True)
    assert un["capacity_gpu_hours"] == pytest.approx(40.0)
    assert un["allocated_gpu_hours"] == pytest.approx(10.0)
    assert un["unknown_model_gpu_hours"] == pytest.approx(20.0)
    assert un["unallocated_gpu_hours"] == pytest.approx(10.0)  # 40 − 10 − 20, not 30
    totals = waste_totals(ledger, settings=settings)
    assert totals["unallocated_usd"] == pytest.approx(10 * RATE)
    assert totals["unpriced_gpu_hours"] == pytest.approx(20.0)  # the unknown-model job: unpriced, held


def test_declared_and_observed_take_whichever_covers_more(ledger):
    settings = Settings(clusters={"c1": ClusterSettings(capacity=(Capacity(H100, 2),))})
    load_reference(ledger, settings)
    set_test_prices(ledger)
    # 2 declared; 3 GPUs report 0-60 min, one more than declared, and nothing holds them then; a 3-GPU job
    # holds them 60-120 min without telemetry
    cards = ("n1:0", "n1:1", "n1:2")
    ingest(
        ledger,
        jobs=[job("j", 60, 120, gpu_count=3.0)],
        samples=[s for g in cards for s in series(g, 0, [0.0] * 60)],
        gpus=[gpu(g) for g in cards],
        allocations=[alloc("j", g, 60, 120) for g in cards],
    )
    un = unallocated(ledger, settings=settings).row(0, named=True)
    assert un["capacity_basis"] == "declared+observed"
    # 0-60: max(2 declared, 3 observed) = 3, none held; 60-120: max(2, 0) = 2 with 3 held (1 beyond)
    assert un["capacity_gpu_hours"] == pytest.approx(3 + 2)
    assert un["allocated_gpu_hours"] == pytest.approx(2.0)
    assert un["oversubscribed_gpu_hours"] == pytest.approx(1.0)
    assert un["unallocated_gpu_hours"] == pytest.approx(3.0)


def test_billing_and_gap_settings_are_validated(tmp_path):
    from gpuledger.ledger.errors import SettingsError
    from gpuledger.ledger.settings import load_settings

    good = tmp_path / "good.toml"
    good.write_text('[thresholds]\ncapacity_gap_minutes = 90\n[clusters.lab]\nbilling = "per_job"\n')
    s = load_settings(good)
    assert s.capacity_gap_minutes == 90.0 and s.clusters["lab"].billing == "per_job"
    assert Settings().clusters.get("lab", ClusterSettings()).billing == "always_on"  # the default
    bad = tmp_path / "bad.toml"
    bad.write_text('[clusters.lab]\nbilling = "sometimes"\n')
    with pytest.raises(SettingsError, match=r"clusters\.lab\.billing.*must be one of always_on, per_job"):
        load_settings(bad)


def _unclaimed(con, settings: Settings) -> None:
    """Job j holds host x1 (its one H100, named by host only, as sacct does) 0-60 min; x1 and x2 each report
    one sample a minute 0-120 min. No job names x2: it is billed as its pseudo-job unattributed:x2:0."""
    load_reference(con, settings)
    set_test_prices(con)
    ingest(
        con,
        jobs=[job("j", 0, 60)],
        allocations=[
            {
                "job_id": "j",
                "host": "x1",
                "gpu_id": None,
                "gpu_count": 1.0,
                "start_ts": at(0),
                "end_ts": at(60),
            }
        ],
        samples=series("x1:0", 0, [50.0] * 120) + series("x2:0", 0, [30.0] * 120),
        gpus=[gpu("x1:0"), gpu("x2:0")],
    )


@pytest.mark.parametrize("declared", [0, 2])
def test_an_unclaimed_card_is_billed_once_and_takes_no_other_cards_free_time(ledger, declared):
    settings = Settings(
        clusters={"c1": ClusterSettings(capacity=(Capacity(H100, declared),) if declared else ())}
    )
    _unclaimed(ledger, settings)
    # 2 cards × 2 h = 4 card-hours exist: j 1 h ($4), x1's second hour free ($4), x2's pseudo-job 2 h ($8).
    # Before: x2's pseudo-job was held time but not capacity, so it took x1's free hour: $12, 1 GPU-h
    # "oversubscribed".
    totals = waste_totals(ledger, settings=settings)
    assert totals["unallocated_usd"] == pytest.approx(1 * RATE)
    assert totals["spend_usd"] == pytest.approx(4 * RATE)
    assert totals["oversubscribed_gpu_hours"] == pytest.approx(0.0)
    un = unallocated(ledger, settings=settings).row(0, named=True)
    assert un["capacity_gpu_hours"] == pytest.approx(4.0)  # x1 2 h + x2 2 h (its pseudo-job's span)
    assert un["allocated_gpu_hours"] == pytest.approx(3.0)  # j 1 h + the pseudo-job 2 h


def test_a_job_on_a_host_without_telemetry_takes_no_reporting_card_s_free_time(ledger):
    """Cluster c1 declares nothing. Card n1:0 reports 0-120 min and job j holds it 0-60 min; job k holds host
    n2 (sacct's NodeList) 0-120 min and n2 reports nothing. Both hosts exist: j $4, n1:0's free hour
    unallocated ($4), k's 2 h billed by allocation, unmeasured ($8): $16. Before, k's held time was taken from
    n1:0's free time: $12, and 1 GPU-h "oversubscribed"."""
    set_test_prices(ledger)
    ingest(
        ledger,
        jobs=[job("j", 0, 60), job("k", 0, 120)],
        allocations=[alloc("j", "n1:0", 0, 60),
                     {"job_id": "k", "host": "n2", "gpu_id": None, "gpu_count": 1.0, "start_ts": at(0),
                      "end_ts": at(120)}],
        samples=series("n1:0", 0, [90.0] * 120),
        gpus=[gpu("n1:0")],
    )  # fmt: skip
    totals = waste_totals(ledger)
    assert totals["unallocated_usd"] == pytest.approx(1 * RATE)
    assert totals["unmeasured_usd"] == pytest.approx(2 * RATE)
    assert totals["spend_usd"] == pytest.approx(4 * RATE)
    assert totals["oversubscribed_gpu_hours"] == pytest.approx(0.0)
    # with the cluster's size declared (2 GPUs), k's time is inside it: the declaration wins
    settings = Settings(clusters={"c1": ClusterSettings(capacity=(Capacity(H100, 2),))})
    load_reference(ledger, settings)
    set_test_prices(ledger)
    declared = waste_totals(ledger, settings=settings)
    assert declared["unallocated_usd"] == pytest.approx(1 * RATE)  # 2 × 2 h − j 1 h − k 2 h
    assert declared["spend_usd"] == pytest.approx(4 * RATE)
