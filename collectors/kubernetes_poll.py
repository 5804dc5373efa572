"""``gpuledger collect kubernetes``: poll the Kubernetes API for pods and land them as jobs.

Each poll lists every pod (all namespaces, in pages of :data:`CHUNK`) and every node through `lightkube`
(the optional extra ``gpuledger[kubernetes]``), with the kubeconfig (``--kubeconfig``, else ``$KUBECONFIG``,
else ``~/.kube/config``) or, inside a cluster, the pod's service account. The list is written as one
``kubectl get pods,nodes -A -o json`` document and read by the ``kubernetes_pods`` reader
(collectors/kubernetes.py), so a poll and a file land the same jobs; a running pod is held at least until
the poll.

A pod is a snapshot: once deleted it is gone from the API. A pod the ledger last saw running that is no
longer listed has ended between the poll that last saw it and this one; its record is closed at the last
time it was seen running (its allocation's end), state COMPLETED, ``exit_reason`` "gone from the API" (a
finished pod that was listed has its own final record). The poll time is kept in ``collector_state`` under
``kubernetes:<cluster>`` in the same transaction as the jobs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from collectors.base import (
    IngestOptions,
    next_ingest_id,
    quote,
    run_in_transaction,
)
from collectors.kubernetes import LIVE_STATES, KubernetesPods
from collectors.landing import land_and_record
from gpuledger.ledger.db import writer
from gpuledger.ledger.errors import CollectorError

CHUNK = 500  # pods per API request (the list continues with the server's token)
GONE = "gone from the API"


@dataclass
class KubePollReport:
    collector: str
    polled_at: dt.datetime
    pods_read: int = 0
    ingest_id: int | None = None
    rows: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "collector": self.collector,
            "polled_at": self.polled_at.isoformat(),
            "pods_read": self.pods_read,
            "ingest_id": self.ingest_id,
            "rows": self.rows,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 3),
        }


def list_cluster(
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    server: str | None = None,
    timeout_s: float = 30.0,
) -> dict[str, Any]:
    """Every pod and node as one ``kind: List`` document (the shape ``kubectl get pods,nodes -A -o json`` prints).

    ``server`` (a URL, no credentials) is for a local API such as a test's replay; otherwise the kubeconfig
    or the in-cluster service account. Any failure is one CollectorError sentence."""
    try:
        import httpx2
        from lightkube import ALL_NS, ApiError, Client, ConfigError, KubeConfig
        from lightkube.resources.core_v1 import Node, Pod
    except ImportError:
        raise CollectorError(
            "collect kubernetes needs the lightkube client: pip install 'gpuledger[kubernetes]'"
        ) from None
    try:
        if server:
            from lightkube.config.models import Cluster, User

            config = KubeConfig.from_one(cluster=Cluster(server=server), user=User())
        elif kubeconfig:
            config = KubeConfig.from_file(kubeconfig)
        else:
            config = KubeConfig.from_env()
        client = Client(config=config.get(context) if context else config, timeout=httpx2.Timeout(timeout_s))
        pods = [
            dict(p.to_dict(), kind="Pod", apiVersion="v1")
            for p in client.list(Pod, namespace=ALL_NS, chunk_size=CHUNK)
        ]
        try:
            nodes = [
                dict(n.to_dict(), kind="Node", apiVersion="v1") for n in client.list(Node, chunk_size=CHUNK)
            ]
        except ApiError as exc:
            if exc.status.code != 403:
                raise
            nodes = []  # a role that may list pods but not nodes: GPU models come from nodeSelectors only
    except ConfigError as exc:
        raise CollectorError(f"no Kubernetes configuration: {exc}") from None
    except ApiError as exc:
        raise CollectorError(
            f"the Kubernetes API refused the list: {exc.status.code} {exc.status.message}"
        ) from None
    except (httpx2.HTTPError, OSError) as exc:
        raise CollectorError(f"the Kubernetes API did not answer: {exc}") from None
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": pods + nodes}


def collector_key(cluster: str | None) -> str:
    return f"kubernetes:{cluster or 'default'}"


def _close_vanished(con: duckdb.DuckDBPyConnection, cluster: str | None, polled_at: dt.datetime) -> int:
    """Stage a closing record for each pod the ledger has running on this cluster that the list no longer
    holds (module docstring). Returns how many."""
    con.execute(
        f"""INSERT INTO stage_jobs BY NAME
            SELECT j.job_id, j.source, j.cluster, j.user_name, j.team, j.project, j.name, j.kind, j.gpu_model,
                   j.gpu_count, j.submit_ts, j.start_ts, coalesce(a.last_seen, j.start_ts) AS end_ts,
                   'COMPLETED' AS state, '{GONE}' AS exit_reason, 'ledger record' AS row_label
            FROM jobs j
            LEFT JOIN (SELECT job_id, max(end_ts) AS last_seen FROM allocations GROUP BY job_id) a USING (job_id)
            WHERE j.source = 'kubernetes_pods' AND j.state IN ({", ".join(map(quote, LIVE_STATES))})
              AND j.cluster IS NOT DISTINCT FROM ? AND j.start_ts <= ?
              AND j.job_id NOT IN (SELECT job_id FROM stage_jobs)""",
        [cluster, polled_at],
    )
    con.execute(
        """INSERT INTO stage_allocations BY NAME
           SELECT a.job_id, a.host, a.gpu_id, a.gpu_count, a.start_ts, a.end_ts, 'ledger record' AS row_label
           FROM allocations a JOIN stage_jobs s ON s.job_id = a.job_id AND s.exit_reason = ?""",
        [GONE],
    )
    return int(con.execute("SELECT count(*) FROM stage_jobs WHERE exit_reason = ?", [GONE]).fetchall()[0][0])


def poll(
    db: str | None,
    *,
    cluster: str | None = None,
    opts: IngestOptions | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    server: str | None = None,
    timeout_s: float = 30.0,
) -> KubePollReport:
    """List the cluster's pods and nodes, land the pods as jobs, record the poll; one transaction."""
    started = time.perf_counter()
    key = collector_key(cluster)
    polled_at = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    doc = list_cluster(kubeconfig=kubeconfig, context=context, server=server, timeout_s=timeout_s)
    report = KubePollReport(key, polled_at)
    report.pods_read = sum(1 for i in doc["items"] if i.get("kind") == "Pod")
    opts = dataclasses.replace(opts or IngestOptions(), cluster=cluster or (opts.cluster if opts else None))
    text = json.dumps(doc, sort_keys=True, default=str)
    digest = hashlib.sha256((text + polled_at.isoformat()).encode()).hexdigest()
    source = f"kubernetes://{cluster or 'default'}"
    with tempfile.TemporaryDirectory(prefix="gpuledger-k8s-") as tmp:
        path = Path(tmp) / "pods.json"
        path.write_text(text, encoding="utf-8")
        with writer(db) as con:

            def work() -> KubePollReport:
                ingest_id = next_ingest_id(con)
                report.skipped = KubernetesPods().stage(con, path, opts, listed_at=polled_at)
                if gone := _close_vanished(con, opts.cluster, polled_at):
                    report.skipped[
                        f"running pods no longer listed, closed at their last sighting ({GONE})"
                    ] = gone
                report.rows = land_and_record(
                    con,
                    ingest_id,
                    opts,
                    source=source,
                    source_key=source,
                    sha256=digest,
                    fmt="kubernetes_pods",
                    skipped=report.skipped,
                )
                report.ingest_id = ingest_id
                con.execute(
                    "INSERT OR REPLACE INTO collector_state VALUES (?, ?, ?, ?)",
                    [key, polled_at, polled_at, json.dumps({"pods_read": report.pods_read})],
                )
                return report

            run_in_transaction(con, work)  # type: ignore[arg-type]
    report.seconds = time.perf_counter() - started
    return report
