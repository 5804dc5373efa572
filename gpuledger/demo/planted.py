"""The twelve planted scenarios (waste-and-demo contract, docs/demo.md): one copy fits in two days.

:func:`plant_episode` lays one copy out on fixed nodes, starting ``e0`` seconds into the window; longer
windows get a copy every week. Each planted job's name starts with its scenario's prefix (``notebook-idle-``,
``small-batch-``, ...) so tests and readers can find it. Scenario 12 (capacity that is only partly allocated)
is the borealis capacity row written by demo.py, not a job.
"""

from __future__ import annotations

import numpy as np

from gpuledger.demo.fleet import (
    BURSTY,
    BUSY_IDLE,
    DAY,
    DIURNAL,
    EPISODE_EVERY_S,
    EPISODE_S,
    HOUR,
    NOTEBOOK,
    SPECS,
    STEADY,
    UNUSED,
    Fleet,
    Job,
    Profile,
    lm_run,
    serve_run,
    tick,
)

H100 = SPECS["H100-SXM-80GB"]
A100 = SPECS["A100-80GB"]
L40S = SPECS["L40S"]

# Planted GPU memory models (MiB): fixed = weights + grads + AdamW states + CUDA context; + per sample.
GPT2_FIXED_MIB, GPT2_PER_SAMPLE_MIB = 6500.0, 1200.0
BERT_FIXED_MIB, BERT_PER_SAMPLE_MIB = 6000.0, 900.0


def _u(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(rng.uniform(lo, hi))


def plant_episode(fleet: Fleet, rng: np.random.Generator, e0: int, ep: int, window_s: int) -> list[Job]:
    """One copy of scenarios 1–11, ``e0`` seconds into the window; ``ep`` numbers the copy."""

    def a(n: int) -> list[int]:  # the GPUs of atlas node n
        return list(fleet.node("atlas", n))

    def b(n: int) -> list[int]:
        return list(fleet.node("borealis", n))

    def c(n: int) -> list[int]:
        return list(fleet.node("cirrus", n))

    sfx = f"w{ep + 1}"
    jobs: list[Job] = []

    def at(hours: float) -> int:
        return e0 + tick(hours * HOUR)

    # 4. scaling: lm-13b, one config, at 8, 16 and 32 GPUs; per-GPU tokens/s falls to 90 % and 70 %.
    per_gpu_8 = 3900.0 + 100 * ep
    for gpus, eff, util, t0 in ((8, 1.0, 92.0, 1), (16, 0.9, 85.0, 8), (32, 0.7, 68.0, 15)):
        held = [g for n in range(gpus // 8) for g in a(n)]
        start, end = at(t0), at(t0 + 6)
        jobs.append(
            Job(
                f"scaling-lm13b-{gpus}g-{sfx}",
                "atlas",
                "bjorn",
                "llm-core",
                "pretrain-13b",
                "training",
                held,
                start,
                end,
                profiles=[Profile(STEADY, util, 3, 71000 + 400 * (gpus // 8))] * gpus,
                run=lm_run(
                    "lm-13b",
                    gpus=gpus,
                    spec=H100,
                    mfu=0,
                    runtime_s=end - start,
                    batch_size=4,
                    grad_accum=8,
                    peak_mem_mib=71000 + 400 * (gpus // 8),
                    tokens_per_s_per_gpu=per_gpu_8 * eff,
                ),
            )
        )

    # 5. failed: a 16-GPU pre-training run dies after 1–3 days; its last checkpoint is 9–14 h earlier.
    fail_h = 28.0 if ep == 0 else _u(rng, 36, 64)
    fail_h = min(fail_h, (window_s - e0) / HOUR - 2.5)
    start, end = at(2), at(2 + fail_h)
    lost = tick(_u(rng, 9, 14) * HOUR)
    jobs.append(
        Job(
            f"failed-lm7b-pretrain-{sfx}",
            "atlas",
            "amara",
            "llm-core",
            "pretrain-7b",
            "training",
            a(4) + a(5),
            start,
            end,
            state="FAILED",
            exit_reason="NCCL watchdog timeout on rank 11 (Xid 79 on atlas-n05)",
            checkpoint_s=end - lost,
            profiles=[Profile(STEADY, 91, 4, 68000)] * 16,
            run=lm_run(
                "lm-7b",
                gpus=16,
                spec=H100,
                mfu=0.41,
                runtime_s=end - start,
                batch_size=4,
                grad_accum=8,
                peak_mem_mib=68000,
                grad_noise_scale=2048.0,
            ),
        )
    )

    # 9. busy-idle: util 95 % but SM-active ~20 %, tensor-active ~1 % (a debug loop of tiny kernels).
    start, end = at(24), at(36)
    jobs.append(
        Job(
            f"busy-idle-moe-debug-{sfx}",
            "atlas",
            "chen",
            "llm-core",
            "pretrain-13b",
            "training",
            a(2),
            start,
            end,
            profiles=[Profile(BUSY_IDLE, 95, 2, 52000, sm_ratio=0.21, tensor_ratio=0.01)] * 8,
            run=lm_run(
                "lm-1.3b",
                gpus=8,
                spec=H100,
                mfu=0.018,
                runtime_s=end - start,
                batch_size=8,
                peak_mem_mib=52000,
            ),
        )
    )

    # 10. hot: four GPUs of atlas-n03 throttle (power cap + thermal slowdown) at ≥ 85 °C.
    start, end = at(24), at(36)
    jobs.append(
        Job(
            f"hot-lm7b-sft-{sfx}",
            "atlas",
            "ugo",
            "applied-ml",
            "support-bot",
            "fine-tune",
            a(3),
            start,
            end,
            profiles=[Profile(STEADY, 90, 4, 61000)] * 4 + [Profile(STEADY, 90, 4, 61000, hot=True)] * 4,
            run=lm_run(
                "lm-7b", gpus=8, spec=H100, mfu=0.30, runtime_s=end - start, batch_size=4, peak_mem_mib=61000
            ),
        )
    )

    # 11. overalloc: 8 GPUs held, 6 of them at 0 % (the script only used cuda:0 and cuda:1).
    start, end = at(2), at(14)
    jobs.append(
        Job(
            f"overalloc-whisper-ft-{sfx}",
            "atlas",
            "lucas",
            "speech",
            "asr-multilingual",
            "fine-tune",
            a(6),
            start,
            end,
            profiles=[Profile(STEADY, 84, 6, 38000)] * 2 + [Profile(UNUSED, mem_mib=512)] * 6,
            run=lm_run(
                "whisper-medium",
                gpus=8,
                spec=H100,
                mfu=0.07,
                runtime_s=end - start,
                batch_size=16,
                peak_mem_mib=38000,
            ),
        )
    )

    # 8. input-bound: bursts at ~90 % and near-zero dips every few samples (the data loader starves it).
    start, end = at(16), at(28)
    jobs.append(
        Job(
            f"input-bound-vit-{sfx}",
            "atlas",
            "gabriela",
            "vision",
            "vit-foundation",
            "training",
            a(6),
            start,
            end,
            profiles=[Profile(BURSTY, 90, 0, 44000)] * 8,
            run=lm_run(
                "vit-l16",
                gpus=8,
                spec=H100,
                mfu=0.12,
                runtime_s=end - start,
                batch_size=64,
                peak_mem_mib=44000,
            ),
        )
    )

    # 6. ckpt-ondemand: checkpointed every 30 min, restart-tolerant, but on the on-demand tier.
    for cluster, held, spec, t0, hours, model, mem in (
        ("atlas", a(7), H100, 1, 14, "lm-1.3b", 42000),
        ("cirrus", c(11), L40S, 4, 12, "embed-base", 21000),
    ):
        start, end = at(t0), at(t0 + hours)
        jobs.append(
            Job(
                f"ckpt-ondemand-{model}-{sfx}",
                cluster,
                "priya",
                "search",
                "embeddings",
                "training",
                held,
                start,
                end,
                tier="on_demand",
                checkpoint_s=end - 15 * 60,
                profiles=[Profile(STEADY, 88, 5, mem)] * len(held),
                run=lm_run(
                    model,
                    gpus=len(held),
                    spec=spec,
                    mfu=0.38,
                    runtime_s=end - start,
                    batch_size=16,
                    peak_mem_mib=mem,
                ),
            )
        )

    # 3. oversized: 1-GPU inference and LoRA fine-tunes on 80 GB H100s using < 16 GB and few FLOPs.
    for i, (kind, model, mem, util) in enumerate(
        (
            ("inference", "lm-1.3b", 9800, 24),
            ("inference", "embed-base", 5200, 18),
            ("fine-tune", "lm-1.3b", 14200, 30),
            ("fine-tune", "gpt2-medium", 11800, 27),
        )
    ):
        start, end = at(22), at(34)
        name = "serve" if kind == "inference" else "lora"
        jobs.append(
            Job(
                f"oversized-{name}-{model}-{sfx}-{i}",
                "atlas",
                "valentina" if kind == "inference" else "wen",
                "applied-ml",
                "doc-qa",
                kind,
                [a(7)[i]],
                start,
                end,
                state="CANCELLED" if kind == "inference" else "COMPLETED",
                exit_reason="cancelled by user" if kind == "inference" else None,
                profiles=[Profile(DIURNAL if kind == "inference" else STEADY, util, 8, mem)],
                run=serve_run(model, runtime_s=end - start, requests_per_s=3.5, tokens_per_request=180)
                if kind == "inference"
                else lm_run(
                    model, gpus=1, spec=H100, mfu=0.04, runtime_s=end - start, batch_size=8, peak_mem_mib=mem
                ),
            )
        )

    # 1. notebook-idle: interactive notebooks opened at 16:00, used ~2 h, then idle 8–14 h overnight.
    for j, (cluster, gpu, user, team, project) in enumerate(
        (
            ("atlas", a(7)[4], "hiro", "vision", "detector-v3"),
            ("atlas", a(7)[5], "dmitri", "llm-core", "pretrain-7b"),
            ("borealis", b(3)[6], "mei", "speech", "tts"),
            ("borealis", b(3)[7], "rosa", "search", "ranker-2026"),
        )
    ):
        active = tick(_u(rng, 1.5, 2.5) * HOUR)
        idle = tick(_u(rng, 8.5, 13.5) * HOUR)
        start = at(16 + 0.25 * j)
        end = start + active + idle
        spec = H100 if cluster == "atlas" else A100
        jobs.append(
            Job(
                f"notebook-idle-{user}-{sfx}",
                cluster,
                user,
                team,
                project,
                "interactive",
                [gpu],
                start,
                end,
                state="TIMEOUT" if j % 2 else "CANCELLED",
                exit_reason="wall-clock limit reached" if j % 2 else "cancelled by user",
                profiles=[Profile(NOTEBOOK, 45, 25, 0.2 * spec.memory_mib, idle_after_s=active)],
            )
        )

    # 2. small-batch: per-GPU batch 8 at 25–40 % util using 12–20 GB of 80 GB; gpt2-medium at 4, 6, 8.
    for i, (model, batch, fixed, per_sample, util, gns) in enumerate(
        (
            ("gpt2-medium", 4, GPT2_FIXED_MIB, GPT2_PER_SAMPLE_MIB, 26, 384.0),
            ("gpt2-medium", 6, GPT2_FIXED_MIB, GPT2_PER_SAMPLE_MIB, 31, 384.0),
            ("gpt2-medium", 8, GPT2_FIXED_MIB, GPT2_PER_SAMPLE_MIB, 36, 384.0),
            ("bert-large", 8, BERT_FIXED_MIB, BERT_PER_SAMPLE_MIB, 33, None),
            ("bert-large", 8, BERT_FIXED_MIB, BERT_PER_SAMPLE_MIB, 38, None),
        )
    ):
        mem = fixed + per_sample * batch
        start, end = at(2), at(12 if model == "bert-large" else 14)
        jobs.append(
            Job(
                f"small-batch-{model}-b{batch}-{sfx}-{i}",
                "borealis",
                "xavier" if model == "gpt2-medium" else "quentin",
                "applied-ml" if model == "gpt2-medium" else "search",
                "support-bot" if model == "gpt2-medium" else "ranker-2026",
                "training",
                [b(0)[i]],
                start,
                end,
                profiles=[Profile(STEADY, util, 4, mem)],
                run=lm_run(
                    model,
                    gpus=1,
                    spec=A100,
                    mfu=0.0035 * util,
                    runtime_s=end - start,
                    batch_size=batch,
                    peak_mem_mib=mem,
                    grad_noise_scale=gns,
                ),
            )
        )

    # 7. tiny: 1-GPU jobs using < 10 GB at < 30 % util on MIG-capable A100s.
    for i, (kind, mem, util) in enumerate(
        (("other", 4300, 14), ("inference", 6100, 22), ("other", 7800, 18), ("inference", 5200, 11))
    ):
        start, end = at(3), at(9)
        jobs.append(
            Job(
                f"tiny-{'eval' if kind == 'other' else 'embed'}-{sfx}-{i}",
                "borealis",
                "tomasz" if kind == "inference" else "kavya",
                "search" if kind == "inference" else "vision",
                "embeddings" if kind == "inference" else "detector-v3",
                kind,
                [b(1)[i]],
                start,
                end,
                profiles=[Profile(DIURNAL if kind == "inference" else STEADY, util, 5, mem)],
                run=serve_run("embed-base", runtime_s=end - start, requests_per_s=12, tokens_per_request=1)
                if kind == "inference"
                else None,
            )
        )
    assert all(j.end_s <= e0 + 3 * DAY for j in jobs)
    return jobs


def outages(fleet: Fleet, window_s: int) -> list[tuple[list[int], int, int]]:
    """Telemetry gaps: borealis-n00's exporter is down 08:00–11:00 UTC on the first day of every copy.

    The small-batch jobs there keep running (and costing); their samples are missing, so that time is
    unmeasured, not idle. Returns (GPU indices, start_s, end_s).
    """
    node = list(fleet.node("borealis", 0))
    return [
        (node, e0 + 8 * HOUR, e0 + 11 * HOUR) for e0 in range(0, window_s - EPISODE_S + 1, EPISODE_EVERY_S)
    ]
