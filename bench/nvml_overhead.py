"""CPU cost of the NVML sampler per sample per GPU, driven by the replay fake (no GPU needed).

What is measured: the sampler's own work per round (building readings, job attribution from a /proc tree
with cached pids, buffering) and its flushes (Arrow tables → stage tables → land() → commit, one transaction
per 60 s of recorded time), as process CPU seconds (DuckDB's threads included). What is NOT measured: the
driver calls themselves; the fake answers from memory, so real NVML adds its own cost per call (typically
tens of microseconds per query on a local GPU; nvmlDeviceGetComputeRunningProcesses is the slowest).

Usage: python bench/nvml_overhead.py [--gpus 8] [--rounds 2000] [--procs 2]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import tempfile
import time
from pathlib import Path

from collectors.nvml_api import ProcessReading
from collectors.nvml_replay import ReplayNvml
from collectors.nvml_sampler import NvmlSampler

MIB = 1024 * 1024


def synthetic_log(path: Path, gpus: int, rounds: int) -> None:
    """An nvidia-smi --query-gpu CSV with units, 1 s apart, deterministic values."""
    start = dt.datetime(2026, 1, 5, 9, 0, 0)
    lines = [
        "timestamp, index, name, utilization.gpu [%], utilization.memory [%], memory.used [MiB], "
        "memory.total [MiB], power.draw [W], temperature.gpu, clocks.sm [MHz]"
    ]
    for r in range(rounds):
        ts = (start + dt.timedelta(seconds=r)).strftime("%Y/%m/%d %H:%M:%S.000")
        for g in range(gpus):
            u = (r * 7 + g * 13) % 101
            lines.append(
                f"{ts}, {g}, NVIDIA H100 80GB HBM3, {u} %, {u // 2} %, {20000 + u * 100} MiB, 81559 MiB, "
                f"{100 + u * 5}.25 W, {40 + u // 5}, 1980 MHz"
            )
    path.write_text("\n".join(lines) + "\n")


def fake_proc(root: Path, pids: list[int]) -> None:
    for pid in pids:
        d = root / str(pid)
        d.mkdir(parents=True)
        (d / "environ").write_bytes(f"SLURM_JOB_ID={pid}\0SLURM_CLUSTER_NAME=bench\0".encode())
        (d / "comm").write_text("python\n")


class TimedSampler(NvmlSampler):
    """Splits the CPU time between sampling rounds and flushes."""

    round_cpu = 0.0
    flush_cpu = 0.0

    def sample_once(self, ts: dt.datetime) -> None:
        t = time.process_time()
        super().sample_once(ts)
        self.round_cpu += time.process_time() - t

    def flush(self, *, final: bool = False) -> int | None:
        t = time.process_time()
        try:
            return super().flush(final=final)
        finally:
            self.flush_cpu += time.process_time() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--procs", type=int, default=2, help="processes per GPU (each with a Slurm job)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuledger-nvml-bench-") as tmp:
        work = Path(tmp)
        log = work / "gpu.csv"
        synthetic_log(log, args.gpus, args.rounds)
        procs = {
            g: [ProcessReading(1000 + g * 10 + k, (2000 + k) * MIB) for k in range(args.procs)]
            for g in range(args.gpus)
        }
        fake_proc(work / "proc", [p.pid for ps in procs.values() for p in ps])
        replay = ReplayNvml(log, processes=procs)
        sampler = TimedSampler(
            replay,
            db=str(work / "ledger.duckdb"),
            interval_s=1.0,
            flush_s=60.0,
            host="bench",
            proc_root=work / "proc",
            clock=replay.clock(),
        )
        wall = time.perf_counter()
        cpu = time.process_time()
        summary = sampler.run(max_ticks=args.rounds)
        cpu = time.process_time() - cpu
        wall = time.perf_counter() - wall
        n = summary.samples
        result = {
            "gpus": args.gpus,
            "rounds": args.rounds,
            "samples": n,
            "process_rows": summary.processes,
            "flushes": summary.flushes,
            "wall_s": round(wall, 3),
            "cpu_s_total": round(cpu, 3),
            "cpu_s_per_sample_per_gpu_rounds": sampler.round_cpu / n,
            "cpu_s_per_sample_per_gpu_flushes": sampler.flush_cpu / n,
            "cpu_s_per_sample_per_gpu_total": cpu / n,
            "cpu_s_per_flush": sampler.flush_cpu / summary.flushes,
            # a default deployment: 8 GPUs every 10 s, a flush a minute = 48 samples + 1 flush per 60 s
            "cpu_pct_8_gpus_10s_interval_60s_flush": round(
                100 * (48 * sampler.round_cpu / n + sampler.flush_cpu / summary.flushes) / 60.0, 3
            ),
            "ledger_bytes": (work / "ledger.duckdb").stat().st_size,
            "note": "replay fake: driver call cost excluded",
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
