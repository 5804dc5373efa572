"""The demo fleet's telemetry (one sample per TICK_S = 60 s), computed column-wise with numpy (never a Python loop per sample).

Every GPU reports for the whole window: its timeline is cut into segments (one per job it held, idle
segments between), which tile it exactly, so each sample is its segment's profile (found by one
``searchsorted`` over the segments' (GPU, start) keys) plus seeded noise. The samples come out in time order,
a day of polls at a time (Arrow tables that build.py appends to ``stage_samples``), each poll listing the
GPUs in fleet order, as a collector writes them. The noise is still drawn GPU by GPU for the whole window
(so the values are those of every earlier version) and sliced per chunk; the energy counter's running sum
carries over from chunk to chunk. Measured on 28 days (9 M samples): ~10 s on a busy 2-core machine,
~300 MiB peak for the plan and the telemetry together (GPU-major chunks of 16 GPUs peaked at ~1.8 GiB with
DuckDB's share). numpy rather than DuckDB SQL: the values must stay those of numpy's seeded generators,
and the SQL version (~15 s) spent most of its time in the energy counter's window over every sample.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from gpuledger.demo.fleet import (
    BURSTY,
    DIURNAL,
    IDLE,
    NOTEBOOK,
    TICK_S,
    UNUSED,
    Fleet,
    Job,
    Profile,
)

NOTEBOOK_BLOCK_S = 600  # a notebook is used or left alone in 10-minute blocks
NOTEBOOK_ACTIVE = 0.4  # share of blocks in use (before an idle notebook's idle_after_s)
BURST_PERIOD = 5  # input-bound: of every 5 samples ...
BURST_ON = 3  # ... 3 burst, 2 dip
GPU_IDLE = 0x1  # NVML clocks_event_reasons: GpuIdle
HOT_REASONS = 0x4 | 0x20 | 0x40  # SwPowerCap | SwThermalSlowdown | HwThermalSlowdown
POWER_CAP = 0x4
# Polls computed at a time: one day of the 112-GPU fleet (322,560 samples, ~40 MB of numpy temporaries)
# rather than the whole window (~1 GB for 28 days' 9 M samples), with the same values.
CHUNK_TICKS = 2880


def segments(fleet: Fleet, jobs: list[Job], window_s: int) -> list[tuple[int, int, int, Profile | None]]:
    """(gpu index, start_s, end_s, profile or None for idle) tiling every GPU's window, in GPU-then-time order."""
    per_gpu: dict[int, list[tuple[int, int, Profile]]] = {g.idx: [] for g in fleet.gpus}
    for job in jobs:
        for rank, g in enumerate(job.gpus):
            per_gpu[g].append((job.start_s, min(job.end_s, window_s), job.profiles[rank]))
    out: list[tuple[int, int, int, Profile | None]] = []
    for g, spans in per_gpu.items():
        cursor = 0
        for start, end, prof in sorted(spans, key=lambda s: s[0]):
            if start < cursor:
                raise AssertionError(f"GPU {g} is held twice at {start}")
            if start > cursor:
                out.append((g, cursor, start, None))
            out.append((g, start, end, prof))
            cursor = end
        if cursor < window_s:
            out.append((g, cursor, window_s, None))
    return out


def telemetry(
    fleet: Fleet,
    jobs: list[Job],
    *,
    lo: np.datetime64,
    window_s: int,
    seed: int,
    gaps: Sequence[tuple[list[int], int, int]] = (),
) -> pa.Table:
    """One row per GPU per TICK_S: the ``samples`` columns (gpu_id as a dictionary-encoded string); all of
    :func:`telemetry_chunks` in one table.
    """
    return pa.concat_tables(
        list(telemetry_chunks(fleet, jobs, lo=lo, window_s=window_s, seed=seed, gaps=gaps))
    )


def telemetry_chunks(
    fleet: Fleet,
    jobs: list[Job],
    *,
    lo: np.datetime64,
    window_s: int,
    seed: int,
    gaps: Sequence[tuple[list[int], int, int]] = (),
    chunk_ticks: int = CHUNK_TICKS,
) -> Iterator[pa.Table]:
    """The telemetry in time order, ``chunk_ticks`` polls at a time; within a poll the GPUs in fleet order
    (what ``nvidia-smi -l`` or a scrape loop writes, so each staged chunk appends to the ones before).
    Rows and values are those of one table built at once: the noise is drawn for the whole fleet first (GPU
    by GPU, as it always was) and sliced per chunk; the energy counter carries its running sum from chunk
    to chunk.

    util is an integer percent like nvidia-smi's; SM-/tensor-active are NULL except on GPUs with profiling
    (the H100s); the energy counter starts at a per-GPU offset (energy since driver load) and adds
    power × TICK_S per sample; idle GPUs report 0 %, no memory, idle power and the GpuIdle throttle bit.
    ``gaps`` (GPU indices, start_s, end_s) are exporter outages: no samples there.
    """
    all_segs = segments(fleet, jobs, window_s)
    n_gpus, per_gpu = len(fleet.gpus), window_s // TICK_S
    assert sum((e - s) // TICK_S for _, s, e, _ in all_segs) == n_gpus * per_gpu
    rng = np.random.default_rng([seed, 30])
    u1_all = rng.random(n_gpus * per_gpu, dtype=np.float32).reshape(n_gpus, per_gpu)
    u2_all = rng.random(n_gpus * per_gpu, dtype=np.float32).reshape(n_gpus, per_gpu)
    in_use = rng.random((n_gpus, window_s // NOTEBOOK_BLOCK_S + 1)) < NOTEBOOK_ACTIVE
    energy0 = np.round(np.random.default_rng([seed, 31]).uniform(1e8, 5e9, n_gpus))
    plan = _Plan(fleet, all_segs, window_s)
    ids = pa.array([g.gpu_id for g in fleet.gpus], type=pa.string())
    ran = np.zeros(n_gpus)  # each GPU's sum of power × TICK_S before the chunk (float64, summed in order)
    for k0 in range(0, per_gpu, chunk_ticks):
        k1 = min(per_gpu, k0 + chunk_ticks)
        table, ran = _chunk(
            plan, k0, k1, lo, u1_all[:, k0:k1].T, u2_all[:, k0:k1].T, in_use, energy0, ran, ids, gaps
        )
        yield table


class _Plan:
    """Each segment's profile fields as arrays, found per (poll, GPU) by one ``searchsorted``; and each
    GPU's card, as a row that broadcasts over a chunk's polls."""

    def __init__(self, fleet: Fleet, segs: list[tuple[int, int, int, Profile | None]], window_s: int) -> None:
        self.window_s = window_s
        self.n_gpus = len(fleet.gpus)
        # segments tile each GPU's window in GPU-then-time order: (gpu, start) keys increase
        self.key = np.array([g * window_s + s for g, s, _, _ in segs], dtype=np.int64)

        def seg(fn: Any, dtype: Any) -> np.ndarray:
            return np.array([fn(p, s) for _, s, _, p in segs], dtype=dtype)

        self.pattern = seg(lambda p, s: p.pattern if p else IDLE, np.int8)
        self.base = seg(lambda p, s: p.util if p else 0.0, np.float32)
        self.amp = seg(lambda p, s: p.amp if p else 0.0, np.float32)
        self.mem = seg(lambda p, s: p.mem_mib if p else 0.0, np.float32)
        self.sm_ratio = seg(lambda p, s: p.sm_ratio if p else 0.0, np.float32)
        self.tensor_ratio = seg(lambda p, s: p.tensor_ratio if p else 0.0, np.float32)
        self.hot = seg(lambda p, s: bool(p and p.hot), np.bool_)
        never = np.iinfo(np.int64).max
        self.idle_from = seg(lambda p, s: s + p.idle_after_s if p and p.idle_after_s else never, np.int64)

        def spec(fn: Any, dtype: Any = np.float32) -> np.ndarray:
            return np.array([fn(g.spec) for g in fleet.gpus], dtype=dtype)[None, :]

        self.tdp, self.idle_w = spec(lambda s: s.tdp_w), spec(lambda s: s.idle_w)
        self.memory_mib = spec(lambda s: s.memory_mib)
        self.profiling = spec(lambda s: s.profiling, np.bool_)
        self.max_clock = spec(lambda s: s.max_clock_mhz)
        self.idle_clock = spec(lambda s: s.idle_clock_mhz)

    def segment(self, t: np.ndarray) -> np.ndarray:
        """The segment index of every (poll, GPU): ``t`` is the polls' seconds, a column."""
        gpus = np.arange(self.n_gpus, dtype=np.int64)[None, :]
        return np.searchsorted(self.key, gpus * self.window_s + t, side="right") - 1


def _chunk(
    plan: _Plan,
    k0: int,
    k1: int,
    lo: np.datetime64,
    u1: np.ndarray,
    u2: np.ndarray,
    in_use: np.ndarray,
    energy0: np.ndarray,
    ran: np.ndarray,
    ids: pa.Array,
    gaps: Sequence[tuple[list[int], int, int]],
) -> tuple[pa.Table, np.ndarray]:
    """Polls k0..k1-1 of every GPU: arrays shaped (poll, GPU), so ``ravel()`` is time order. ``u1``/``u2``
    are the chunk's noise, ``ran`` each GPU's energy sum before it; returns the rows and the sums after."""
    n_gpus = plan.n_gpus
    t = (np.arange(k0, k1, dtype=np.int64) * TICK_S)[:, None]
    t = np.broadcast_to(t, (k1 - k0, n_gpus))
    seg = plan.segment(t)
    gpu = np.broadcast_to(np.arange(n_gpus, dtype=np.int32)[None, :], t.shape)
    pattern, base, amp, mem = plan.pattern[seg], plan.base[seg], plan.amp[seg], plan.mem[seg]
    sm_ratio, tensor_ratio, hot = plan.sm_ratio[seg], plan.tensor_ratio[seg], plan.hot[seg]
    idle_from = plan.idle_from[seg]

    steady = base + amp * (2 * u1 - 1)
    util = np.select(
        [
            (pattern == IDLE) | (pattern == UNUSED),
            pattern == NOTEBOOK,
            pattern == BURSTY,
            pattern == DIURNAL,
        ],
        [
            np.float32(0),
            np.where(in_use[gpu, t // NOTEBOOK_BLOCK_S], steady, 3 * u1),
            np.where((t // TICK_S) % BURST_PERIOD < BURST_ON, base - 4 + 8 * u1, 4 * u1),
            base + amp * np.sin(2 * np.pi * ((t % 86400) / 3600 - 9) / 24) + 4 * (2 * u1 - 1),
        ],
        steady,
    )
    util = np.where(t >= idle_from, 2.49 * u1, util)  # an idle notebook: 0–2 %
    util = np.clip(np.rint(util), 0, 100).astype(np.float32)

    tdp, idle_w = plan.tdp, plan.idle_w
    power = np.where(
        hot,
        tdp * (0.96 + 0.04 * u2),
        np.where(
            util == 0,
            idle_w + 3 * u2,
            idle_w + (tdp - idle_w) * (util / 100) ** 0.85 * (0.88 + 0.12 * u2),
        ),
    )
    power = np.round(power, 1).astype(np.float32)
    # the counter's running sum, in poll order per GPU, continued from the previous chunk
    summed = np.cumsum(np.concatenate([ran[None, :], power.astype(np.float64) * TICK_S]), axis=0)[1:]
    energy = energy0[None, :] + summed
    no_prof = np.where(plan.profiling, np.float32(0), np.float32(np.nan))  # NaN → NULL where dcgm is absent
    max_clock = plan.max_clock

    def col(x: np.ndarray) -> pa.Array:
        return pa.array(np.broadcast_to(x, t.shape).ravel(), from_pandas=True)  # NaN → NULL

    table = pa.table(
        {
            "ts": pa.array(lo + t.ravel().astype("timedelta64[s]"), type=pa.timestamp("us")),
            "gpu_id": pa.DictionaryArray.from_arrays(pa.array(gpu.ravel(), type=pa.int32()), ids),
            "util_pct": col(util),
            "mem_util_pct": col(np.rint(util * 0.45 * (0.8 + 0.4 * u2)).astype(np.float32)),
            "mem_used_mib": col(
                np.where(pattern == IDLE, 0, np.rint(mem * (0.96 + 0.04 * u2))).astype(np.float32)
            ),
            "mem_total_mib": col(plan.memory_mib),
            "power_w": col(power),
            "energy_j": col(energy),
            "temp_c": col(np.rint(np.where(hot, 85 + 5 * u2, 31 + 0.4 * util + 3 * u2)).astype(np.float32)),
            "sm_active_pct": col(
                (np.round(np.minimum(100, util * sm_ratio * (0.95 + 0.1 * u2)), 1) + no_prof).astype(
                    np.float32
                )
            ),
            "tensor_active_pct": col(
                (np.round(np.minimum(100, util * tensor_ratio * (0.9 + 0.2 * u1)), 1) + no_prof).astype(
                    np.float32
                )
            ),
            "sm_clock_mhz": col(
                np.where(
                    util == 0,
                    plan.idle_clock,
                    np.where(hot, np.round(max_clock * 0.7), max_clock),
                ).astype(np.float32)
            ),
            "throttle_reasons": col(
                np.where(
                    hot, np.where(u2 < 0.8, HOT_REASONS, POWER_CAP), np.where(util == 0, GPU_IDLE, 0)
                ).astype(np.uint64)
            ),
        }
    )
    ran = summed[-1]
    if not gaps:
        return table, ran
    missing = np.zeros(t.shape, dtype=np.bool_)
    for gpus, start, end in gaps:
        missing |= np.isin(gpu, gpus) & (t >= start) & (t < end)
    return table.filter(pa.array(~missing.ravel())), ran
