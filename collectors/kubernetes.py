"""Kubernetes pods as jobs: ``kubectl get pods -A -o json`` (``--format kubernetes_pods``).

One job per pod that requests a GPU, in the canonical stage tables every job source writes (``stage_jobs``,
``stage_allocations``; collectors/landing.py lands them). The same reader serves ``gpuledger collect kubernetes``
(collectors/kubernetes_poll.py), which writes the API's pod list in this shape. Meaning (docs/formats-jobs.md
says the same for users):

- ``job_id`` = ``[<cluster>/]<namespace>/<pod>``: the id dcgm-exporter's ``namespace``/``pod`` labels give a
  sample (collectors/dcgm.py), so telemetry and pods meet; ``name`` is the pod's controller (a Job, a
  ReplicaSet) else the pod.
- ``gpu_count``: a container asks ``resources.requests`` (else ``limits``: an extended resource's request
  defaults to its limit) for ``nvidia.com/gpu`` (and ``nvidia.com/gpu.shared``, a time-sliced replica;
  ``amd.com/gpu``) whole GPUs, and ``nvidia.com/mig-<g>g.<mem>gb`` MIG instances, each its share of the card's compute slices (g/7;
  A30 profiles, 6 GB a slice, g/4), the rule sacct's ``gres/gpu:a100_3g.20gb`` follows. The pod holds the
  containers' sum, or its largest init container's when that is more (Kubernetes' effective request).
  Pods that request no GPU are left out and counted.
- ``gpu_model`` from the node's ``nvidia.com/gpu.product`` label (GPU feature discovery) when the list also
  holds the pod's Node (``kubectl get pods,nodes -A -o json``), else the pod's ``nodeSelector`` for it.
- state from ``status.phase``: Pending → PENDING (holds no GPU: the project's rule for pending jobs),
  Running → RUNNING, Succeeded → COMPLETED, Failed → FAILED (OOM when a container was ``OOMKilled``, TIMEOUT
  for ``DeadlineExceeded``; the reason, e.g. ``Evicted``, goes to ``exit_reason``), Unknown → UNKNOWN.
- start = the earliest ``startedAt`` of its containers' (and init containers') running, terminated or last
  terminated states, else ``status.startTime``; end (a finished pod) = the latest ``finishedAt``. A running
  pod's allocation is held at least until the list was taken (a file: the latest time it shows; a poll: the
  poll's time), like sacct's Start + Elapsed; its job keeps no end.
- ``team``: the pod's label named by settings ``[kubernetes] team_label``, else ``[kubernetes.namespace_teams]``
  for its namespace, else the namespace; ``user_name`` from the ``user`` label when there is one.
- allocations: one row per pod on its node (``spec.nodeName``), no GPU id: host-level attribution ties it to
  the node's cards (dcgm's pod label is ``sample_label`` evidence, docs/metrics.md).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import duckdb

from collectors.base import IngestOptions, Sniff
from collectors.validate import name_columns
from gpuledger.ledger.errors import FormatError
from gpuledger.ledger.job_states import OPEN_STATES, POD_PHASES
from gpuledger.ledger.mig import A30_SLICES, CARD_SLICES
from gpuledger.ledger.reference import model_sql_case

WHOLE_GPU = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "amd.com/gpu")
_MIG = re.compile(r"^nvidia\.com/mig-(\d+)g\.(\d+)gb(?:\.shared)?$")
PRODUCT_LABEL = "nvidia.com/gpu.product"
PHASES = POD_PHASES  # gpuledger/ledger/job_states.py: the one table of pod phases
# the states a listed pod can hold its GPUs in (phase Unknown: its node stopped answering, so it may still)
LIVE_STATES = ("RUNNING", "UNKNOWN")
MAX_GPUS_PER_POD = 1024  # a request past this is not a real pod (validate.py caps job counts too)
_QUANTITY = re.compile(r"^\d+(?:\.\d+)?$")
# a pod object's first key (an API pod without kind/apiVersion), and fields only a pod spec/status holds
_API_POD = re.compile(r'^\{\s*"(?:metadata|spec|status|api_version|apiVersion|items|kind)"\s*:')
_POD_FIELDS = ('"containers"', '"restartPolicy"', '"containerStatuses"', '"schedulerName"', '"restart_policy"',
               '"container_statuses"', '"scheduler_name"')  # fmt: skip


def mig_share(g: int, mem_gb: int) -> float:
    """A MIG instance's share of its card: its compute slices over the card's (A30 profiles carry 6 GB a
    slice and the card has 4; A100, H100, H200 and B200 cards have 7)."""
    slices = A30_SLICES if mem_gb == 6 * g else CARD_SLICES
    return min(1.0, g / slices)


def _quantity(path: Path, label: str, resource: str, value: Any) -> float:
    """A GPU quantity (``"1"``, ``2``); anything else (a fraction, ``500m``, a negative) names the pod."""
    text = str(value).strip()
    if isinstance(value, bool) or not _QUANTITY.match(text):
        raise FormatError(path, None, f"{label}: {resource} is not a GPU count: {value!r}")
    n = float(text)
    if n > MAX_GPUS_PER_POD:
        raise FormatError(path, None, f"{label}: {resource} is {text}, above {MAX_GPUS_PER_POD} GPUs")
    return n


def container_gpus(path: Path, label: str, container: Any) -> float:
    """GPUs one container asks for: whole GPUs plus MIG instances as card shares (module docstring)."""
    if not isinstance(container, dict):
        return 0.0
    res = container.get("resources") or {}
    if not isinstance(res, dict):
        raise FormatError(path, None, f"{label}: a container's resources must be a map")
    requests, limits = res.get("requests") or {}, res.get("limits") or {}
    if not isinstance(requests, dict) or not isinstance(limits, dict):
        raise FormatError(path, None, f"{label}: resources.requests/limits must be maps")
    total = 0.0
    for resource in set(requests) | set(limits):
        mig = _MIG.match(resource)
        if resource not in WHOLE_GPU and not mig:
            continue
        n = _quantity(path, label, resource, requests.get(resource, limits.get(resource)))
        total += n * (mig_share(int(mig.group(1)), int(mig.group(2))) if mig else 1.0)
    return total


def _time(path: Path, label: str, field: str, value: Any) -> dt.datetime | None:
    """An RFC 3339 time (``2025-09-01T23:53:36Z``) → naive UTC; None when absent."""
    if value in (None, ""):
        return None
    try:
        t = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise FormatError(path, None, f"{label}: {field} is not a time: {value!r}") from None
    if t.tzinfo is None:
        return t
    return t.astimezone(dt.UTC).replace(tzinfo=None)


def _statuses(status: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key in ("initContainerStatuses", "containerStatuses"):
        items = status.get(key) or []
        out.extend(s for s in items if isinstance(s, dict))
    return out


def _times(path: Path, label: str, status: dict[str, Any]) -> tuple[list[dt.datetime], list[dt.datetime]]:
    """startedAt and finishedAt of every container state of the pod (current and last)."""
    starts, ends = [], []
    for s in _statuses(status):
        for which in ("state", "lastState"):
            state = s.get(which) or {}
            if not isinstance(state, dict):
                continue
            for kind in ("running", "terminated"):
                st = state.get(kind)
                if not isinstance(st, dict):
                    continue
                if t := _time(path, label, f"{which}.{kind}.startedAt", st.get("startedAt")):
                    starts.append(t)
                if kind == "terminated" and (
                    t := _time(path, label, f"{which}.terminated.finishedAt", st.get("finishedAt"))
                ):
                    ends.append(t)
    return starts, ends


def _state(phase: Any, status: dict[str, Any]) -> tuple[str, str | None]:
    """(ledger state, exit_reason) of a pod."""
    reason = status.get("reason") if isinstance(status.get("reason"), str) else None
    state = PHASES.get(str(phase), "UNKNOWN")
    killed = [
        (s.get("state") or {}).get("terminated", {}) or {}
        for s in _statuses(status)
        if isinstance(s.get("state"), dict)
    ]
    codes = [k for k in killed if isinstance(k, dict) and k.get("exitCode") not in (None, 0)]
    if state == "FAILED":
        if any(isinstance(k, dict) and k.get("reason") == "OOMKilled" for k in killed):
            state = "OOM"
        elif reason == "DeadlineExceeded":
            state = "TIMEOUT"
    why = [reason] if reason else []
    why += [f"{k.get('reason') or 'exit'} {k.get('exitCode')}" for k in codes]
    return state, "; ".join(why) or None


def _pod_team(pod_labels: dict[str, Any], namespace: str, opts: IngestOptions) -> str:
    if opts.team_label and isinstance(pod_labels.get(opts.team_label), str) and pod_labels[opts.team_label]:
        return str(pod_labels[opts.team_label])
    return dict(opts.namespace_teams).get(namespace, namespace)


def _latest(path: Path, label: str, meta: dict[str, Any], status: dict[str, Any]) -> dt.datetime | None:
    """The latest time a pod's record shows (created, started, finished, a condition changed)."""
    starts, ends = _times(path, label, status)
    seen = [*starts, *ends]
    for value in (meta.get("creationTimestamp"), status.get("startTime")):
        if isinstance(value, str) and (t := _time(path, label, "a time", value)):
            seen.append(t)
    seen += [
        t
        for c in status.get("conditions") or []
        if isinstance(c, dict)
        and (t := _time(path, label, "conditions.lastTransitionTime", c.get("lastTransitionTime")))
    ]
    return max(seen, default=None)


# maps whose keys are the user's (labels, resource names), not API field names: never renamed
_USER_MAPS = frozenset(
    {"labels", "annotations", "limits", "requests", "node_selector", "capacity", "allocatable"}
)


def camel_keys(value: Any, *, user_map: bool = False) -> Any:
    """The Kubernetes Python client's ``to_dict()`` form (``api_version``, ``container_statuses``,
    ``started_at``) in the API's camelCase; labels, annotations and resource maps keep their keys."""
    if isinstance(value, list):
        return [camel_keys(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for k, v in value.items():
        key = (
            k if user_map or not isinstance(k, str) else re.sub(r"_([a-z])", lambda m: m.group(1).upper(), k)
        )
        out[key] = v if user_map else camel_keys(v, user_map=k in _USER_MAPS)
    return out


def _snake_case(doc: dict[str, Any]) -> bool:
    """Is ``doc`` a client's ``to_dict()`` (snake_case API fields) rather than the API's JSON?"""
    return "api_version" in doc or any(
        isinstance(item, dict)
        and ("api_version" in item or "container_statuses" in (item.get("status") or {}))
        for item in ([doc] + (doc.get("items") if isinstance(doc.get("items"), list) else []))[:50]
    )


def pod_items(path: Path, doc: Any) -> tuple[list[Any], bool]:
    """The pod items of a document and whether it is one pod: a list (``kubectl get pods -o json``, a
    ``PodList`` from the API, ``pods,nodes``), or a single pod — ``kubectl get pod NAME -o json``
    (``kind: Pod``) or an API pod object without ``kind``/``apiVersion`` (an item of a list saved on its own:
    the API leaves both out of list items), recognised by its ``metadata`` and ``spec`` or ``status``. The
    Python client's ``to_dict()`` form (snake_case fields) is read as the API's."""
    if not isinstance(doc, dict):
        raise FormatError(path, 1, "not a Kubernetes list: the document is not a JSON object")
    if _snake_case(doc):
        doc = camel_keys(doc)
    if doc.get("kind") == "Pod" or (
        "items" not in doc and "kind" not in doc and isinstance(doc.get("metadata"), dict)
        and ("spec" in doc or "status" in doc)
    ):  # fmt: skip
        return [doc], True
    items = doc.get("items")
    if not isinstance(items, list):
        raise FormatError(path, 1, 'no "items" list: not the output of kubectl get pods -o json')
    return items, False


def read_pods(
    path: Path, doc: Any, opts: IngestOptions, listed_at: dt.datetime | None = None
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The job rows (one per pod that requests a GPU) of a pod list or a single pod, and the report's notes.

    ``listed_at``: when the list was taken (a poll knows); a file does not say, and its latest timestamp (any
    pod's creation, start, finish or condition change) stands for it: the list was taken no earlier, so a
    running pod is held at least until then, the same for the same bytes whenever and however the file is
    read (its modification time changes with every copy and upload).

    A pod without ``spec`` (a CPU pod trimmed from a capture) asks for no GPU. In a list, a pod that cannot be
    read (a GPU count of ``-1``, a time that is none, no name) is left out and counted with its name and
    reason, so one bad item does not refuse the pods beside it; a single pod that cannot be read is an error."""
    items, single = pod_items(path, doc)
    products: dict[str, str] = {}
    for item in items:
        if isinstance(item, dict) and item.get("kind") == "Node":
            meta = item.get("metadata") or {}
            product = (meta.get("labels") or {}).get(PRODUCT_LABEL)
            if isinstance(meta.get("name"), str) and isinstance(product, str):
                products[meta["name"]] = product
    rows: list[dict[str, Any]] = []
    notes = {"pods that request no GPU": 0, "non-pod items": 0}
    unreadable: list[str] = []
    latest: dt.datetime | None = None  # the latest time the document shows (without listed_at)
    for i, pod in enumerate(items):
        if not isinstance(pod, dict) or pod.get("kind", "Pod") != "Pod":
            notes["non-pod items"] += int(not (isinstance(pod, dict) and pod.get("kind") == "Node"))
            continue
        try:
            row, seen = _read_pod(path, i, pod, products, opts, listed_at, single)
        except FormatError as exc:
            if single:
                raise
            unreadable.append(exc.reason)
            continue
        if seen is not None:
            latest = seen if latest is None else max(latest, seen)
        if row is None:
            notes["pods that request no GPU"] += 1
        else:
            rows.append(row)
    until = listed_at or latest
    for r in rows:  # a running pod is held until the list was taken
        if r["held_until_ts"] is not None and until is not None:
            r["held_until_ts"] = max(until, r["held_until_ts"])
    if unreadable:
        shown = "; ".join(unreadable[:3]) + (
            f"; and {len(unreadable) - 3} more" if len(unreadable) > 3 else ""
        )
        notes[f"pods left out, unreadable ({shown})"] = len(unreadable)
    return rows, {k: v for k, v in notes.items() if v}


def _read_pod(
    path: Path,
    i: int,
    pod: dict[str, Any],
    products: dict[str, str],
    opts: IngestOptions,
    listed_at: dt.datetime | None,
    single: bool,
) -> tuple[dict[str, Any] | None, dt.datetime | None]:
    """One pod's job row (None when it asks for no GPU) and the latest time it shows (None with
    ``listed_at``); a pod that cannot be read raises FormatError naming it."""
    meta, spec, status = pod.get("metadata"), pod.get("spec"), pod.get("status")
    where = "the pod" if single else f"items[{i}]"
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise FormatError(path, None, f"{where}: a pod without metadata.name")
    spec = {} if spec is None else spec  # no spec: a trimmed CPU pod, it asks for no GPU
    status = {} if status is None else status
    if not isinstance(spec, dict) or not isinstance(status, dict):
        raise FormatError(path, None, f"{where} ({meta['name']}): spec and status must be objects")
    namespace = str(meta.get("namespace") or "default")
    label = f"{where} ({namespace}/{meta['name']})"
    seen = _latest(path, label, meta, status) if listed_at is None else None
    apps = [container_gpus(path, label, c) for c in spec.get("containers") or []]
    inits = [container_gpus(path, label, c) for c in spec.get("initContainers") or []]
    gpus = max(sum(apps), max(inits, default=0.0))
    if gpus <= 0:
        return None, seen
    starts, ends = _times(path, label, status)
    start = min(starts) if starts else _time(path, label, "status.startTime", status.get("startTime"))
    state, why = _state(status.get("phase"), status)
    end = None
    if state not in (*OPEN_STATES, *LIVE_STATES) and start is not None:
        # a finished pod ends at its containers' last finishedAt, else at its last condition change
        # (a pod killed before its statuses were written), else it held its GPUs for no time
        changed = [
            t
            for c in status.get("conditions") or []
            if isinstance(c, dict)
            and (t := _time(path, label, "conditions.lastTransitionTime", c.get("lastTransitionTime")))
        ]
        end = max(ends) if ends else max([t for t in changed if t >= start], default=start)
    if end is not None and start is not None and end < start:
        raise FormatError(path, None, f"{label}: finishedAt {end} is before startedAt {start}")
    pod_labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    owners = [o for o in meta.get("ownerReferences") or [] if isinstance(o, dict)]
    owner = next((o.get("name") for o in owners if o.get("controller")), None)
    node = spec.get("nodeName") if isinstance(spec.get("nodeName"), str) else None
    selector = spec.get("nodeSelector") if isinstance(spec.get("nodeSelector"), dict) else {}
    model = products.get(node or "") or selector.get(PRODUCT_LABEL)
    prefix = f"{opts.cluster}/" if opts.cluster else ""
    row = {
        "job_id": f"{prefix}{namespace}/{meta['name']}",
        "cluster": opts.cluster,
        "user_name": pod_labels.get("user") if isinstance(pod_labels.get("user"), str) else None,
        "team": _pod_team(pod_labels, namespace, opts),
        "project": namespace,
        "name": str(owner or meta["name"]),
        "gpu_model_raw": str(model) if model else None,
        "gpu_count": gpus,
        "submit_ts": _time(path, label, "metadata.creationTimestamp", meta.get("creationTimestamp")),
        "start_ts": start,
        "end_ts": end,
        "held_until_ts": start if state in LIVE_STATES else None,
        "state": state,
        "exit_reason": why,
        "host": node,
        "row_label": label,
    }
    return row, seen


class KubernetesPods:
    name = "kubernetes_pods"
    description = (
        "Kubernetes pods: kubectl get pods -A -o json (pods,nodes for GPU models), GPU and MIG requests"
    )

    def sniff(self, path: Path, head: str) -> Sniff:
        text = head.lstrip("\ufeff").lstrip()
        if not text.startswith("{"):
            return Sniff(0)
        if ('"apiVersion"' in text or '"api_version"' in text) and ('"kind": "List"' in text or '"PodList"' in text or '"kind": "Pod"' in text
                                       or '"kind":"List"' in text or '"kind":"Pod"' in text):  # fmt: skip
            return Sniff(0.95 if '"containers"' in text or '"items": []' in text else 0.6)
        if _API_POD.match(text) and sum(f in text for f in _POD_FIELDS) >= 2:
            return Sniff(
                0.8
            )  # a pod without kind/apiVersion (a list's item saved alone), a client's to_dict()
        return Sniff(0)

    def stage(
        self,
        con: duckdb.DuckDBPyConnection,
        path: Path,
        opts: IngestOptions,
        listed_at: dt.datetime | None = None,
    ) -> dict[str, int]:
        """Stage the pod list in ``path``; ``listed_at`` is when it was taken, where the caller knows (a poll)."""
        try:
            doc = json.loads(path.read_bytes())
        except json.JSONDecodeError as exc:
            raise FormatError(path, exc.lineno, f"not valid JSON: {exc.msg}") from None
        except UnicodeDecodeError:
            raise FormatError(path, None, "not valid JSON: the file is not UTF-8 text") from None
        rows, notes = read_pods(path, doc, opts, listed_at)
        stage_rows(con, rows, self.name)
        return notes


_COLUMNS = {
    "job_id": "VARCHAR",
    "cluster": "VARCHAR",
    "user_name": "VARCHAR",
    "team": "VARCHAR",
    "project": "VARCHAR",
    "name": "VARCHAR",
    "gpu_model_raw": "VARCHAR",
    "gpu_count": "DOUBLE",
    "submit_ts": "TIMESTAMP",
    "start_ts": "TIMESTAMP",
    "end_ts": "TIMESTAMP",
    "held_until_ts": "TIMESTAMP",
    "state": "VARCHAR",
    "exit_reason": "VARCHAR",
    "host": "VARCHAR",
    "row_label": "VARCHAR",
}


def stage_rows(con: duckdb.DuckDBPyConnection, rows: list[dict[str, Any]], source: str) -> None:
    """``stage_jobs`` and ``stage_allocations`` from :func:`read_pods`' rows; a pod listed twice keeps its last."""
    cols = ", ".join(f"{c} {t}" for c, t in _COLUMNS.items())
    con.execute(f"CREATE TEMP TABLE k8s_pods ({cols})")
    if rows:
        con.executemany(
            f"INSERT INTO k8s_pods VALUES ({', '.join('?' for _ in _COLUMNS)})",
            [[r[c] for c in _COLUMNS] for r in rows],
        )
    con.execute(
        f"""CREATE TEMP TABLE stage_jobs AS
            SELECT job_id, '{source}' AS source, cluster, user_name, team, project, name, 'other' AS kind,
                   coalesce({model_sql_case("gpu_model_raw")}, gpu_model_raw) AS gpu_model, gpu_count,
                   submit_ts, start_ts, end_ts, state, exit_reason, held_until_ts, host, row_label
            FROM k8s_pods QUALIFY row_number() OVER (PARTITION BY job_id ORDER BY rowid DESC) = 1"""
    )
    con.execute(
        """CREATE TEMP TABLE stage_allocations AS
           SELECT job_id, host, NULL::VARCHAR AS gpu_id, gpu_count, start_ts,
                  coalesce(end_ts, held_until_ts) AS end_ts, row_label
           FROM stage_jobs WHERE start_ts IS NOT NULL AND host IS NOT NULL"""
    )
    for c in ("held_until_ts", "host"):
        con.execute(f"ALTER TABLE stage_jobs DROP COLUMN {c}")
    con.execute("DROP TABLE temp.k8s_pods")
    name_columns(
        con,
        "jobs",
        {
            "gpu_count": "nvidia.com/gpu",
            "start_ts": "startedAt",
            "end_ts": "finishedAt",
            "submit_ts": "creationTimestamp",
        },
    )
    name_columns(
        con, "allocations", {"gpu_count": "nvidia.com/gpu", "start_ts": "startedAt", "end_ts": "finishedAt"}
    )
