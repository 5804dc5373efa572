"""The demo fleet's plan: clusters, people, and every job with the story its telemetry will tell.

Everything here is plain Python over a few thousand jobs (never per sample): a seeded ``numpy`` generator
draws the background workload, a per-GPU occupancy grid (5-minute slots) places it around the planted
scenarios, and each job carries a :class:`Profile` per GPU that gpuledger/demo/build.py turns into 60 s telemetry
in DuckDB SQL. The same seed and window give the same plan, bit for bit.

Times are integer seconds from the window start (midnight UTC ``days`` before ``end``); a job ending after
the window is still RUNNING at the end. docs/demo.md describes the fleet and each planted scenario.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

SLOT_S = 300  # occupancy grid resolution
TICK_S = 60  # telemetry cadence; every job boundary is a multiple of it
HOUR = 3600
DAY = 86400
EPISODE_S = 2 * DAY  # one copy of the planted scenarios fits in two days
EPISODE_EVERY_S = 7 * DAY  # and repeats weekly in longer windows

# Telemetry patterns (demo.py's SQL switches on these codes).
IDLE, STEADY, NOTEBOOK, BURSTY, BUSY_IDLE, DIURNAL, UNUSED = range(7)


@dataclass(frozen=True)
class GpuSpec:
    model: str  # gpu_catalog.model
    model_raw: str  # what nvidia-smi calls it
    memory_mib: float  # memory.total as nvidia-smi reports it
    tdp_w: float
    idle_w: float
    max_clock_mhz: float
    idle_clock_mhz: float
    profiling: bool  # DCGM SM-active / tensor-active available (the H100 nodes run dcgm-exporter)
    bf16_tflops: float


SPECS = {
    "H100-SXM-80GB": GpuSpec(
        "H100-SXM-80GB", "NVIDIA H100 80GB HBM3", 81559, 700, 72, 1980, 345, True, 989.4
    ),
    "A100-80GB": GpuSpec("A100-80GB", "NVIDIA A100-SXM4-80GB", 81920, 400, 58, 1410, 210, False, 312),
    "L4": GpuSpec("L4", "NVIDIA L4", 23034, 72, 16, 2040, 210, False, 121),
    "A10G": GpuSpec("A10G", "NVIDIA A10G", 23028, 300, 25, 1710, 210, False, 70),
    "L40S": GpuSpec("L40S", "NVIDIA L40S", 46068, 350, 35, 2520, 210, False, 362.05),
}


@dataclass(frozen=True)
class Gpu:
    idx: int
    gpu_id: str  # a stable, UUID-shaped id as nvidia-smi would print it
    host: str
    index: int
    cluster: str
    node: int  # node number within the cluster
    spec: GpuSpec


@dataclass(frozen=True)
class Cluster:
    name: str
    tier: str  # pricing tier of its jobs unless a job says otherwise
    nodes: tuple[tuple[int, ...], ...]  # GPU indices per node


@dataclass
class Fleet:
    gpus: list[Gpu]
    clusters: dict[str, Cluster]

    def node(self, cluster: str, n: int) -> tuple[int, ...]:
        return self.clusters[cluster].nodes[n]


def _uuid(host: str, index: int) -> str:
    h = hashlib.sha256(f"gpuledger-demo:{host}:{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def build_fleet() -> Fleet:
    """atlas: 8 × 8 H100 (on_demand); borealis: 4 × 8 A100-80GB (on-prem); cirrus: 16 × 1 L4/A10G/L40S."""
    layout = [
        ("atlas", "on_demand", [("H100-SXM-80GB", 8)] * 8),
        ("borealis", "on_prem", [("A100-80GB", 8)] * 4),
        ("cirrus", "spot", [("L4", 1)] * 6 + [("A10G", 1)] * 5 + [("L40S", 1)] * 5),
    ]
    gpus: list[Gpu] = []
    clusters: dict[str, Cluster] = {}
    for name, tier, nodes in layout:
        node_idx = []
        for n, (model, per_node) in enumerate(nodes):
            host = f"{name}-n{n:02d}"
            ids = []
            for i in range(per_node):
                gpus.append(Gpu(len(gpus), _uuid(host, i), host, i, name, n, SPECS[model]))
                ids.append(len(gpus) - 1)
            node_idx.append(tuple(ids))
        clusters[name] = Cluster(name, tier, tuple(node_idx))
    return Fleet(gpus, clusters)


TEAMS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # team: (users, projects)
    "llm-core": (("amara", "bjorn", "chen", "dmitri", "esther", "farid"), ("pretrain-7b", "pretrain-13b")),
    "vision": (("gabriela", "hiro", "ines", "jonas", "kavya"), ("detector-v3", "vit-foundation")),
    "speech": (("lucas", "mei", "nikolai", "oluwaseun"), ("asr-multilingual", "tts")),
    "search": (("priya", "quentin", "rosa", "sven", "tomasz"), ("ranker-2026", "embeddings")),
    "applied-ml": (("ugo", "valentina", "wen", "xavier", "yusuf"), ("support-bot", "doc-qa")),
}


@dataclass(frozen=True)
class LmModel:
    name: str
    params: float
    n_layers: int
    hidden_size: int
    seq_len: int

    def flops_per_token(self) -> float:
        """6·N plus the attention term 12·L·H·S (docs/metrics.md, MFU)."""
        return 6 * self.params + 12 * self.n_layers * self.hidden_size * self.seq_len


MODELS = {
    m.name: m
    for m in (
        LmModel("lm-1.3b", 1.3e9, 24, 2048, 2048),
        LmModel("lm-7b", 6.7e9, 32, 4096, 4096),
        LmModel("lm-13b", 13.0e9, 40, 5120, 4096),
        LmModel("gpt2-medium", 3.55e8, 24, 1024, 1024),
        LmModel("bert-large", 3.4e8, 24, 1024, 512),
        LmModel("vit-l16", 3.04e8, 24, 1024, 197),
        LmModel("whisper-medium", 7.69e8, 24, 1024, 1500),
        LmModel("embed-base", 1.1e8, 12, 768, 512),
    )
}


@dataclass(frozen=True)
class Profile:
    """How one GPU of a job behaves; demo.py's telemetry SQL reads these fields."""

    pattern: int
    util: float = 0.0  # centre of util_pct
    amp: float = 0.0  # ± spread (uniform) or diurnal amplitude
    mem_mib: float = 0.0  # memory used while the job runs
    sm_ratio: float = 0.85  # SM-active ≈ util × sm_ratio (H100s only)
    tensor_ratio: float = 0.45  # tensor-active ≈ util × tensor_ratio (H100s only)
    hot: bool = False  # thermal/power throttling, temperature ≥ 85 °C
    idle_after_s: int | None = None  # from this many seconds after start: 0–2 % util (idle notebook)


@dataclass
class Job:
    name: str
    cluster: str
    user: str
    team: str
    project: str
    kind: str  # training | fine-tune | inference | interactive | other
    gpus: list[int]
    start_s: int
    end_s: int
    state: str = "COMPLETED"
    exit_reason: str | None = None
    tier: str | None = None  # None: the cluster's tier
    submit_wait_s: int = 0
    checkpoint_s: int | None = None  # last checkpoint, seconds from window start
    profiles: list[Profile] = field(default_factory=list)  # one per GPU
    run: dict[str, object] | None = None  # training_runs columns
    job_id: str = ""


class Grid:
    """Which GPU is held during which 5-minute slot: the background workload is placed around the plan."""

    def __init__(self, n_gpus: int, window_s: int) -> None:
        self.slots = -(-window_s // SLOT_S)
        self.busy = np.zeros((n_gpus, self.slots), dtype=bool)

    def _span(self, start_s: int, end_s: int) -> slice:
        return slice(start_s // SLOT_S, min(self.slots, -(-end_s // SLOT_S)))

    def free(self, gpus: list[int] | tuple[int, ...], start_s: int, end_s: int) -> np.ndarray:
        return ~self.busy[list(gpus), self._span(start_s, end_s)].any(axis=1)

    def take(self, gpus: list[int], start_s: int, end_s: int) -> None:
        self.busy[gpus, self._span(start_s, end_s)] = True


def tick(seconds: float) -> int:
    """Round to the telemetry cadence."""
    return round(seconds / TICK_S) * TICK_S


def user_of(rng: np.random.Generator, team: str) -> tuple[str, str]:
    users, projects = TEAMS[team]
    return str(users[rng.integers(len(users))]), str(projects[rng.integers(len(projects))])


def lm_run(
    model: str,
    *,
    gpus: int,
    spec: GpuSpec,
    mfu: float,
    runtime_s: float,
    batch_size: int,
    peak_mem_mib: float,
    precision: str = "bf16",
    optimizer: str = "adamw",
    grad_accum: int = 1,
    grad_noise_scale: float | None = None,
    tokens_per_s_per_gpu: float | None = None,
) -> dict[str, object]:
    """A training_runs row whose throughput is consistent with ``mfu`` on ``spec`` (or given outright)."""
    m = MODELS[model]
    per_gpu = tokens_per_s_per_gpu or mfu * spec.bf16_tflops * 1e12 / m.flops_per_token()
    tokens_per_s = per_gpu * gpus
    tokens = tokens_per_s * runtime_s
    samples = tokens / m.seq_len
    global_batch = batch_size * grad_accum * gpus
    return {
        "model": model,
        "params": m.params,
        "n_layers": m.n_layers,
        "hidden_size": m.hidden_size,
        "precision": precision,
        "optimizer": optimizer,
        "batch_size": batch_size,
        "grad_accum": grad_accum,
        "global_batch_size": global_batch,
        "seq_len": m.seq_len,
        "tokens": round(tokens),
        "samples": round(samples),
        "epochs": round(tokens / 20e9, 4),
        "steps": int(samples // global_batch),
        "runtime_s": float(runtime_s),
        "peak_mem_mib": round(peak_mem_mib),
        "samples_per_s": round(samples / runtime_s, 3) if runtime_s else None,
        "tokens_per_s": round(tokens_per_s, 1),
        "grad_noise_scale": grad_noise_scale,
        "total_flos": tokens * m.flops_per_token(),
    }


def serve_run(
    model: str, *, runtime_s: float, requests_per_s: float, tokens_per_request: float
) -> dict[str, object]:
    m = MODELS[model]
    requests = requests_per_s * runtime_s
    return {
        "model": model,
        "params": m.params,
        "n_layers": m.n_layers,
        "hidden_size": m.hidden_size,
        "precision": "bf16",
        "runtime_s": float(runtime_s),
        "requests": round(requests),
        "generated_tokens": round(requests * tokens_per_request),
        "tokens_per_s": round(requests_per_s * tokens_per_request, 1),
    }
