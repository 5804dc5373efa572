"""Real input files for the hand-worked allocation shapes of tests/analytics/test_allocation_shapes.py (issue 41):
``kubectl get pods,nodes -A -o json``, dcgm-exporter text with sample timestamps and ``sacct -P`` text, each
as a user's file would hold them, landed through ``gpuledger ingest``'s own path (collectors.ingest.ingest_file).

Every scenario starts at T0 (2025-03-03 00:00 UTC); prices are set by :func:`set_prices` so that each figure
is card-hours × a round price.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import duckdb

from tests.analytics.build import T0

UUID_PREFIX = "GPU-"


def iso(minutes: float) -> str:
    return (T0 + dt.timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_prices(con: duckdb.DuckDBPyConnection, prices: dict[str, float]) -> None:
    """Replace the sheet by one on_demand row per catalog model, in force since 2020."""
    con.execute("DELETE FROM prices")
    for model, usd in prices.items():
        con.execute(
            "INSERT INTO prices VALUES (?, 'on_demand', NULL, DATE '2020-01-01', ?, 'test price', "
            "DATE '2020-01-01', 'sheet', NULL)",
            [model, usd],
        )


def pod(name: str, resource: str, start_min: float, end_min: float, node: str = "n1") -> dict[str, object]:
    """A finished pod asking one ``resource`` (``nvidia.com/mig-3g.40gb``, ``nvidia.com/gpu``) on ``node``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": iso(start_min)},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {resource: "1"}}}]},
        "status": {
            "phase": "Succeeded",
            "startTime": iso(start_min),
            "containerStatuses": [
                {
                    "name": "c",
                    "state": {
                        "terminated": {"startedAt": iso(start_min), "finishedAt": iso(end_min), "exitCode": 0}
                    },
                }
            ],
        },
    }


def pods_file(path: Path, pods: list[dict[str, object]], product: str = "NVIDIA-A100-SXM4-80GB") -> Path:
    """``kubectl get pods,nodes -A -o json``: the pods and node n1 labelled with its GPU product."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": product}},
    }
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [*pods, node]}))
    return path


def dcgm_lines(
    host: str,
    index: int,
    model: str,
    start_min: float,
    end_min: float,
    *,
    value: float = 90.0,
    instance: tuple[str, str] | None = None,
    pods: tuple[str, ...] = (),
    job: str | None = None,
    step_min: float = 5,
) -> list[str]:
    """One series of a card (``GPU-<host>-<index>``), or of its MIG instance ``instance`` = (GPU_I_ID,
    profile), scraped every ``step_min`` minutes over [start_min, end_min): DCGM_FI_DEV_GPU_UTIL for a card,
    DCGM_FI_PROF_GR_ENGINE_ACTIVE (a ratio) for an instance, labelled with each of ``pods`` (one series each,
    as dcgm-exporter writes pods time-sharing a GPU) or with the Slurm ``job`` (hpc_job)."""
    base = int(T0.replace(tzinfo=dt.UTC).timestamp() * 1000)
    labels = f'gpu="{index}",UUID="{UUID_PREFIX}{host}-{index}",modelName="{model}",Hostname="{host}"'
    metric, v = "DCGM_FI_DEV_GPU_UTIL", value
    if instance:
        labels += f',GPU_I_ID="{instance[0]}",GPU_I_PROFILE="{instance[1]}"'
        metric, v = "DCGM_FI_PROF_GR_ENGINE_ACTIVE", value / 100
    if job:
        labels += f',hpc_job="{job}"'
    owners = [f',namespace="ml",pod="{p}"' for p in pods] or [""]
    out = []
    t = start_min
    while t < end_min - 1e-9:
        ms = base + round(t * 60_000)
        out += [f"{metric}{{{labels}{o}}} {v} {ms}" for o in owners]
        t += step_min
    return out


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


SACCT_HEADER = (
    "JobID|Cluster|JobName|User|Account|Partition|State|ExitCode|Submit|Start|End|Elapsed|AllocTRES|NodeList"
)


def sacct_row(job: str, tres: str, nodes: str, start_min: float, end_min: float, cluster: str = "c1") -> str:
    """One finished job of ``sacct -P`` (UTC times), ``tres`` its AllocTRES (``gres/gpu:a100=1,node=1``)."""
    elapsed = int(end_min - start_min)
    return (
        f"{job}|{cluster}|train|alice|nlp|gpu|COMPLETED|0:0|{iso(start_min)[:-1]}|{iso(start_min)[:-1]}|"
        f"{iso(end_min)[:-1]}|{elapsed // 60:02d}:{elapsed % 60:02d}:00|{tres}|{nodes}"
    )


def sacct_file(path: Path, rows: list[str]) -> Path:
    return write_lines(path, [SACCT_HEADER, *rows])
