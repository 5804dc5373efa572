"""``gpuledger collect SOURCE``: live collection (nvml, prometheus, slurm, kubernetes).

Each live source lives in its own collectors module exposing ``add_collect_parser(sub)``, which adds
``collect <source>`` with ``set_defaults(func=...)``.
"""

from __future__ import annotations

import argparse
import importlib

LIVE_SOURCES = (
    "gpuledger.cli.live.nvml",
    "gpuledger.cli.live.prometheus",
    "gpuledger.cli.live.slurm",
    "gpuledger.cli.live.kubernetes",
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "collect", help="collect live from NVML, a Prometheus server, Slurm accounting or the Kubernetes API"
    )
    live = p.add_subparsers(dest="source", metavar="SOURCE", required=True)
    for name in LIVE_SOURCES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.add_collect_parser(live)
