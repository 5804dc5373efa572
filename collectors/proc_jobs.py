"""Which job a GPU process belongs to, read from /proc, and which job holds a GPU per dcgm-exporter's map.

Tried in this order for a process (the first that answers wins):

1. ``/proc/PID/environ`` ``SLURM_JOB_ID`` (with ``SLURM_CLUSTER_NAME`` → ``<cluster>/<id>``): exact, but
   readable only by the process owner or root;
2. ``/proc/PID/cgroup``: a Slurm job's cgroup path carries ``job_<id>`` (cgroup v1 and v2 layouts), a
   Kubernetes pod's carries ``pod<uid>`` (``kubepods/.../pod<uid>`` or the systemd driver's
   ``kubepods-...-pod<uid_with_underscores>.slice``) → ``pod/<uid>``.

For a whole GPU, the dcgm-exporter HPC job-mapping directory (``--hpc-job-mapping-dir``) holds one file per
GPU index whose lines are the job ids running on it; the first id is used.

Slurm ids get the cluster prefix the sacct collector uses (``ci/123``): from the job's own environment, else
``--cluster``, else the bare id. The root is a parameter so tests can hand in a fake /proc tree.
"""

from __future__ import annotations

import re
from pathlib import Path

_SLURM_CGROUP = re.compile(r"/job_(\d+)(?:/|$)")
_POD_CGROUP = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})", re.IGNORECASE
)


def slurm_job_id(raw: str, cluster: str | None) -> str:
    return f"{cluster}/{raw}" if cluster else raw


def job_from_environ(data: bytes, default_cluster: str | None) -> str | None:
    env = dict(item.split(b"=", 1) for item in data.split(b"\0") if b"=" in item)
    job = env.get(b"SLURM_JOB_ID") or env.get(b"SLURM_JOBID")
    if not job:
        return None
    cluster = env.get(b"SLURM_CLUSTER_NAME")
    return slurm_job_id(job.decode(errors="replace"), cluster.decode() if cluster else default_cluster)


def job_from_cgroup(text: str, default_cluster: str | None) -> str | None:
    m = _SLURM_CGROUP.search(text)
    if m:
        return slurm_job_id(m.group(1), default_cluster)
    m = _POD_CGROUP.search(text)
    if m:
        return "pod/" + m.group(1).replace("_", "-").lower()
    return None


class ProcJobs:
    """Resolve pids to jobs, caching each pid while it stays on a GPU (so /proc is read once per process)."""

    def __init__(self, proc_root: str | Path = "/proc", *, cluster: str | None = None) -> None:
        self.root = Path(proc_root)
        self.cluster = cluster
        self._cache: dict[int, tuple[str | None, str | None]] = {}

    def lookup(self, pid: int) -> tuple[str | None, str | None]:
        """(job_id, process name) for ``pid``; either is None when it cannot be told."""
        hit = self._cache.get(pid)
        if hit is None:
            hit = self._cache[pid] = (self._job(pid), self._name(pid))
        return hit

    def keep_only(self, pids: set[int]) -> None:
        """Forget pids no longer on any GPU: bounded memory, and a reused pid is looked up afresh."""
        for pid in [p for p in self._cache if p not in pids]:
            del self._cache[pid]

    def _job(self, pid: int) -> str | None:
        base = self.root / str(pid)
        try:
            job = job_from_environ((base / "environ").read_bytes(), self.cluster)
            if job:
                return job
        except OSError:  # another user's process: environ is root/owner-only
            pass
        try:
            return job_from_cgroup((base / "cgroup").read_text(errors="replace"), self.cluster)
        except OSError:
            return None

    def _name(self, pid: int) -> str | None:
        try:
            return (self.root / str(pid) / "comm").read_text(errors="replace").strip() or None
        except OSError:
            return None


def jobs_from_mapping_dir(directory: str | Path | None, cluster: str | None) -> dict[int, str]:
    """GPU index → job id from a dcgm-exporter HPC job-mapping directory (files named by GPU index)."""
    if directory is None:
        return {}
    out: dict[int, str] = {}
    try:
        entries = list(Path(directory).iterdir())
    except OSError:
        return {}
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            lines = [ln.strip() for ln in entry.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            continue
        if lines:
            out[int(entry.name)] = slurm_job_id(lines[0], cluster)
    return out
