"""``gpuledger collect kubernetes``: the command line of the Kubernetes poller (collectors/kubernetes_poll.py)."""

from __future__ import annotations

import argparse

from collectors.base import IngestOptions
from collectors.kubernetes_poll import KubePollReport, poll
from gpuledger.cli import times
from gpuledger.cli.commands._common import add_db_options, print_json
from gpuledger.cli.live.repeat import period, poll_until_stopped


def add_collect_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "kubernetes",
        help="poll the Kubernetes API for pods that request GPUs (jobs, GPUs, teams)",
        description="List every pod and node through the Kubernetes API (lightkube: pip install "
        "'gpuledger[kubernetes]') with the kubeconfig or, inside a cluster, the service account, and land "
        "the pods that request GPUs (nvidia.com/gpu, MIG) as jobs, as `ingest --format kubernetes_pods` does.",
    )
    p.add_argument("--cluster", help="cluster name: prefixes job ids (as dcgm's --cluster does)")
    p.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, else $KUBECONFIG, else ~/.kube/config)"
    )
    p.add_argument("--context", help="kubeconfig context (default: the current one)")
    p.add_argument("--server", help=argparse.SUPPRESS)  # a credential-free API URL (a local replay in tests)
    p.add_argument(
        "--every", type=times.duration, help="poll repeatedly at this period (e.g. 5m) until stopped"
    )
    p.add_argument("--once", action="store_true", help="poll once and exit (the default without --every)")
    p.add_argument(
        "--timeout", type=float, default=30.0, help="seconds one API request may take (default 30)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON report per poll")
    add_db_options(p)
    p.set_defaults(func=run)


def describe(r: KubePollReport) -> str:
    rows = ", ".join(f"{n:,} {t}" for t, n in r.rows.items() if n) or "no rows"
    notes = "".join(f"\n  skipped {n:,}: {why}" for why, n in r.skipped.items())
    return f"{r.collector}: {r.pods_read} pod(s) → {rows} (ingest #{r.ingest_id}, {r.seconds:.2f} s){notes}"


def run(args: argparse.Namespace) -> int:
    from gpuledger.ledger.settings import load_settings

    every = period(once=args.once, every=args.every)
    opts = IngestOptions.from_settings(load_settings(args.settings), cluster=args.cluster, tz="UTC")

    def poll_once() -> KubePollReport:
        return poll(
            args.db,
            cluster=args.cluster,
            opts=opts,
            kubeconfig=args.kubeconfig,
            context=args.context,
            server=args.server,
            timeout_s=args.timeout,
        )

    def show(report: KubePollReport) -> None:
        print_json(report.as_dict()) if args.json else print(describe(report), flush=True)

    poll_until_stopped(poll_once, show, every=every)
    return 0
