"""``gpuledger collect nvml``: the command line of the NVML sampler (collectors/nvml_sampler.py)."""

from __future__ import annotations

import argparse
import sys

from collectors.base import IngestOptions
from collectors.nvml_api import NvmlApi, PynvmlApi
from collectors.nvml_sampler import NvmlSampler
from gpuledger.cli.commands._common import add_db_options, print_json
from gpuledger.cli.live.repeat import stop_on_signals
from gpuledger.ledger.errors import LedgerError


def add_collect_parser(sub: argparse._SubParsersAction) -> None:

    p = sub.add_parser(
        "nvml",
        help="sample this machine's GPUs and GPU processes through NVML",
        description="Sample every GPU (utilization, memory, power, energy, temperature, SM clock, throttle "
        "reasons, ECC/XID, GPM SM/tensor activity on Hopper+) and every GPU process with its job, writing "
        "one transaction per --flush. SIGTERM/SIGINT flush and exit 0.",
    )
    p.add_argument("--interval", type=float, default=10.0, help="seconds between samples (default 10)")
    p.add_argument("--duration", type=float, help="stop after this many seconds (default: run until stopped)")
    p.add_argument(
        "--flush", type=float, default=60.0, help="seconds between writes to the ledger (default 60)"
    )
    p.add_argument(
        "--cluster", help="cluster name: prefixes Slurm job ids (cluster/123) like the sacct collector"
    )
    p.add_argument("--host", help="host name recorded for the GPUs (default: this machine's short name)")
    p.add_argument(
        "--job-map-dir",
        help="dcgm-exporter HPC job-mapping directory (files named by GPU index with job ids)",
    )
    p.add_argument("--proc-root", default="/proc", help=argparse.SUPPRESS)
    p.add_argument(
        "--replay",
        metavar="CSV",
        help="replay a recorded `nvidia-smi --query-gpu=... --format=csv` log instead of the driver (demos, tests)",
    )
    p.add_argument("--replay-columns", help=argparse.SUPPRESS)
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--json", action="store_true", help="print the run summary as JSON")
    add_db_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpuledger.ledger.settings import load_settings

    if args.interval <= 0 or args.flush <= 0:
        raise LedgerError("--interval and --flush must be positive numbers of seconds")
    settings = load_settings(args.settings)
    api: NvmlApi
    if args.replay:
        from collectors.nvml_replay import ReplayNvml

        columns = tuple(c.strip() for c in args.replay_columns.split(",")) if args.replay_columns else None
        api = ReplayNvml(args.replay, columns=columns, loop=True)
    else:
        api = PynvmlApi()
    with stop_on_signals() as stop:
        sampler = NvmlSampler(
            api,
            db=args.db,
            interval_s=args.interval,
            flush_s=args.flush,
            host=args.host,
            cluster=args.cluster,
            proc_root=args.proc_root,
            job_map_dir=args.job_map_dir,
            opts=IngestOptions.from_settings(settings, cluster=args.cluster),
            stop=stop,
            log=(lambda _m: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True)),
        )
        summary = sampler.run(duration_s=args.duration)
    if args.json:
        print_json(summary.as_dict())
    elif not args.quiet:
        print(
            f"nvml: {summary.ticks} rounds, {summary.samples} samples, {summary.processes} process rows, "
            f"{summary.events} events in {summary.flushes} flush(es)"
        )
    return 0
