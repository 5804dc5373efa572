"""The guard's actions on the outside world: signal or cancel a Slurm job (``scancel``), delete a Kubernetes pod
(lightkube). Nothing else in gpuledger touches a scheduler; the live loop (gpuledger/guard/live.py) calls these
only under ``--enforce``, and a cancel only with ``[guard] allow_cancel = true`` too.

Each returns an :class:`Answer`: whether the scheduler accepted, and its own words (kept in
``guard_actions.answer``). A failure is an answer, never an exception: one job the scheduler refuses must not
stop the guard acting on the others.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
from dataclasses import dataclass

KUBERNETES_SOURCES = ("kubernetes_pods", "kubernetes")
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Answer:
    ok: bool
    text: str
    planned_end: dt.datetime | None = None  # the job's end as its scheduler planned it, before the cancel


@dataclass(frozen=True)
class KubeTarget:
    """How to reach the API: a URL without credentials (a local API, the tests' replay), else the kubeconfig
    (``context`` in it) or the in-cluster service account."""

    server: str | None = None
    kubeconfig: str | None = None
    context: str | None = None


def scheduler(source: str) -> str:
    """``kubernetes`` for a pod's job, else ``slurm``."""
    return "kubernetes" if source in KUBERNETES_SOURCES else "slurm"


def slurm_id(job_id: str) -> str:
    """The id scancel takes: ``<cluster>/<id>`` → ``<id>``, an earlier attempt's ``#<n>`` dropped."""
    raw = job_id.rsplit("/", 1)[-1].split("#", 1)[0]
    if not re.fullmatch(r"\d+(_\d+)?(\+\d+)?", raw):
        raise ValueError(f"{job_id!r} is not a Slurm job id")
    return raw


def pod_of(job_id: str) -> tuple[str, str]:
    """``[<cluster>/]<namespace>/<pod>`` → (namespace, pod)."""
    parts = job_id.split("/")
    if len(parts) < 2:
        raise ValueError(f"{job_id!r} is not <namespace>/<pod>")
    return parts[-2], parts[-1]


def scancel(job_id: str, *, signal: str | None = None, command: str = "scancel") -> Answer:
    """``scancel [--signal=SIG --full] ID``: with a signal the batch shell and every step get it and the job
    goes on; without, the job is cancelled."""
    try:
        args = [command, *([f"--signal={signal}", "--full"] if signal else []), slurm_id(job_id)]
    except ValueError as exc:
        return Answer(False, str(exc))
    planned = None if signal else slurm_planned_end(job_id)
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Answer(False, f"{' '.join(args)}: {exc}")
    said = " ".join((done.stdout + done.stderr).split())
    text = f"{' '.join(args)}: exit {done.returncode}" + (f": {said}" if said else "")
    return Answer(done.returncode == 0, text, planned)


def slurm_planned_end(job_id: str, *, command: str = "squeue") -> dt.datetime | None:
    """The end Slurm plans for a running job (``squeue -o %e``: its start + time limit), in UTC; None when it
    has none (no limit, not running) or squeue does not answer."""
    try:
        args = [command, "-h", "-j", slurm_id(job_id), "-o", "%e"]
        done = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
            env={**os.environ, "TZ": "UTC"},
        )
        return dt.datetime.fromisoformat(done.stdout.strip()) if done.returncode == 0 else None
    except (ValueError, OSError, subprocess.TimeoutExpired):
        return None


def slurm_qos(job_id: str, *, command: str = "squeue") -> str | None:
    """A running job's QOS (``squeue -o %q``); None when squeue does not say."""
    try:
        args = [command, "-h", "-j", slurm_id(job_id), "-o", "%q"]
        done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (ValueError, OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def _client(target: KubeTarget):  # type: ignore[no-untyped-def]
    import httpx2
    from lightkube import Client, KubeConfig

    if target.server:
        from lightkube.config.models import Cluster, User

        config = KubeConfig.from_one(cluster=Cluster(server=target.server), user=User())
    elif target.kubeconfig:
        config = KubeConfig.from_file(target.kubeconfig)
    else:
        config = KubeConfig.from_env()
    return Client(
        config=config.get(target.context) if target.context else config, timeout=httpx2.Timeout(TIMEOUT_S)
    )


def pod_labels(job_id: str, target: KubeTarget) -> dict[str, str] | None:
    """A pod's labels as the API has them now; None when it cannot say (no client, no pod, no answer)."""
    try:
        import httpx2
        from lightkube import ApiError, ConfigError
        from lightkube.resources.core_v1 import Pod
    except ImportError:
        return None
    try:
        namespace, name = pod_of(job_id)
        pod = _client(target).get(Pod, name, namespace=namespace)
    except (ValueError, ApiError, ConfigError, httpx2.HTTPError, OSError):
        return None  # unknown: the job is then not spared by a label
    return dict(pod.metadata.labels or {}) if pod.metadata is not None else None


def delete_pod(job_id: str, target: KubeTarget, *, grace_seconds: int | None = None) -> Answer:
    """Delete the pod (its controller may start another: the guard stops this one). ``grace_seconds`` is the
    pod's termination grace period (SIGTERM, then SIGKILL after it): the checkpoint signal of a pod."""
    try:
        namespace, name = pod_of(job_id)
    except ValueError as exc:
        return Answer(False, str(exc))
    try:
        import httpx2
        from lightkube import ApiError, ConfigError
        from lightkube.resources.core_v1 import Pod
    except ImportError:
        return Answer(False, "pod deletion needs the lightkube client: pip install 'gpuledger[kubernetes]'")
    try:
        _client(target).delete(Pod, name, namespace=namespace, grace_period=grace_seconds)
    except ConfigError as exc:
        return Answer(False, f"no Kubernetes configuration: {exc}")
    except ApiError as exc:
        return Answer(False, f"DELETE pod {namespace}/{name}: {exc.status.code} {exc.status.message}")
    except (httpx2.HTTPError, OSError) as exc:
        return Answer(False, f"DELETE pod {namespace}/{name}: the API did not answer: {exc}")
    return Answer(True, f"DELETE pod {namespace}/{name}: accepted")
