"""The thresholds the analytics judge by, as one frozen object: where each lives, what it means, which are set.

Here, in the ledger layer, because the rollups (gpuledger/ledger/rollup.py) count some of them into their
per-minute columns and the analytics (job signals, diagnoses, batch-size and serving advice) test the same
numbers: before, each module held its own constant and a test kept the rollup's copies equal to job_signals'.

Two of them were both called ``HIGH_UTIL_PCT`` with different values, and they are two thresholds:

- **burst_util_pct (70 %)**: one end of an input-bound *swing*: a sample above it right after one below
  ``dip_util_pct`` (10 %) is the GPU waiting for data, then catching up (analytics/job_signals.py, the rollup's
  ``burst_n``). A burst is a short spike, so a lower bar.
- **batch_saturated_util_pct (85 %)**: at or above it, a job's GPU is already busy and a larger batch offers
  little (analytics/batch_size.py). A property of the whole run's mean, so a higher bar.

Which come from the settings: the fields :func:`thresholds` copies from :class:`Settings` (``[thresholds]``,
``[recommend]`` in settings.toml, docs/settings.md). The rest are fixed here: the signal thresholds are counted
into the rollups when samples land (a change would have to rebuild every rollup; the idle threshold does, via
``rollup_matches``), and the advice thresholds have no settings key yet. A new threshold gets a field here
with its meaning, and its user-facing key in settings.py if it is one a user should set.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuledger.ledger.settings import Settings


@dataclass(frozen=True)
class Thresholds:
    # from the settings ([thresholds], [recommend]; their defaults are Settings')
    idle_util_pct: float  # a sample at or under it is idle
    idle_min_minutes: float  # an idle stretch at least this long is waste
    target_util_pct: float  # under it (outside idle stretches) a job is under-used
    notebook_idle_stop_minutes: float
    capacity_gap_minutes: float
    batch_safety_fraction: float
    # the advice's [recommend] keys (analytics/advice_*.py read them from Settings, whose fields hold the defaults)
    mig_max_util_pct: float
    spot_rework_pct: float
    spot_checkpoint_max_gap_hours: float
    serve_low_util_pct: float
    capacity_demand_percentile: float
    idle_cluster_busy_pct: float
    scale_down_after_minutes: float
    checkpoint_write_gbps: float
    checkpoint_min_seconds: float
    checkpoint_default_seconds: float
    early_fail_minutes: float
    # job signals, counted into the rollups (fixed: see the module docstring)
    dip_util_pct: float = 10.0  # input-bound: a "dip"
    burst_util_pct: float = 70.0  # input-bound: a "burst" (not batch_saturated_util_pct)
    hot_temp_c: float = 85.0
    # NVML clocks_event_reasons bits that mean the GPU slowed itself for power or heat:
    # SwPowerCap 0x4, HwSlowdown 0x8, SwThermalSlowdown 0x20, HwThermalSlowdown 0x40, HwPowerBrakeSlowdown 0x80.
    power_thermal_mask: int = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
    # advice
    batch_saturated_util_pct: float = (
        85.0  # at or above: a larger batch offers little (analytics/batch_size.py)
    )
    # diagnoses (analytics/diagnoses.py)
    busy_util_pct: float = 80.0  # busy_but_unproductive: at least this utilization...
    busy_sm_active_pct: float = 40.0  # ...with SM-active below this,
    busy_tensor_active_pct: float = 5.0  # ...or tensor-active below this (training),
    busy_mfu_pct: float = 10.0  # ...or MFU below this
    input_dip_share: float = 0.10
    input_burst_share: float = 0.30
    input_swing_rate: float = 0.10
    input_min_samples: int = 20
    scaling_efficiency: float = 0.80
    throttle_share: float = 0.10
    idle_gpus_share: float = 0.5  # idle_gpus: at least this share of a job's GPUs idle the whole time
    oversized_min_saving: float = 0.10  # a candidate must be at least 10 % cheaper per GPU-hour
    oversized_max_busy_pct: float = (
        80.0  # ...and run the same work at most this busy (busy × peak ÷ its peak)
    )


# The diagnoses' thresholds (each row of a diagnosis names the one it tested).
DIAGNOSIS_KEYS = (
    "busy_util_pct",
    "busy_sm_active_pct",
    "busy_tensor_active_pct",
    "busy_mfu_pct",
    "input_dip_share",
    "input_burst_share",
    "input_swing_rate",
    "input_min_samples",
    "scaling_efficiency",
    "throttle_share",
    "idle_gpus_share",
    "oversized_min_saving",
    "oversized_max_busy_pct",
)


def thresholds(settings: Settings) -> Thresholds:
    """The thresholds in force under ``settings``: its own values where it has a key, the fixed ones else."""
    return Thresholds(
        idle_util_pct=settings.idle_util_pct,
        idle_min_minutes=settings.idle_min_minutes,
        target_util_pct=settings.target_util_pct,
        notebook_idle_stop_minutes=settings.notebook_idle_stop_minutes,
        capacity_gap_minutes=settings.capacity_gap_minutes,
        batch_safety_fraction=settings.batch_safety_fraction,
        mig_max_util_pct=settings.mig_max_util_pct,
        spot_rework_pct=settings.spot_rework_pct,
        spot_checkpoint_max_gap_hours=settings.spot_checkpoint_max_gap_hours,
        serve_low_util_pct=settings.serve_low_util_pct,
        capacity_demand_percentile=settings.capacity_demand_percentile,
        idle_cluster_busy_pct=settings.idle_cluster_busy_pct,
        scale_down_after_minutes=settings.scale_down_after_minutes,
        checkpoint_write_gbps=settings.checkpoint_write_gbps,
        checkpoint_min_seconds=settings.checkpoint_min_seconds,
        checkpoint_default_seconds=settings.checkpoint_default_seconds,
        early_fail_minutes=settings.early_fail_minutes,
    )


DEFAULT = thresholds(Settings())  # the thresholds of a ledger with no settings file
