"""The parser contract: what a parser is (:class:`Parser`, its :class:`Sniff`), the options every source
lands with (:class:`IngestOptions`), what an ingest reports (:class:`IngestReport`) and how a file finds its
parser (:func:`choose_parser`, sniffing :func:`read_head`).

A parser only *stages*: inside the caller's transaction it creates TEMP tables named ``stage_<table>``
holding canonical columns (any subset of the target table's columns; see gpuledger/ledger/schema.py) and raises
``FormatError(path, line, reason)`` for anything it cannot read. The landing (collectors/landing.py) merges the
stage into the ledger, provenance (collectors/provenance.py) records where it came from, and the ingest driver
(collectors/ingest.py) runs the three in one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import duckdb

from collectors.gpu_facts import GpuFacts
from gpuledger.ledger.errors import FormatError, UnknownFormatError

if TYPE_CHECKING:
    from gpuledger.ledger.settings import Settings

HEAD_BYTES = 64 * 1024


@dataclass(frozen=True)
class IngestOptions:
    cluster: str | None = None  # cluster name for sources that do not carry one
    tz: str | None = None  # IANA zone of naive local timestamps; None = this machine's zone
    job_id: str | None = None  # tie a training log to this job
    host: str | None = None  # host name for sources that carry none (nvidia-smi CSV: HOST:INDEX)
    quiet: bool = False  # no progress bar (it shows only on a terminal, for files of PROGRESS_MIN_BYTES+)
    columns: tuple[str, ...] | None = None  # field names for header-less files (nvidia-smi noheader)
    replace: bool = False  # drop what an earlier version of this source brought in
    source_key: str | None = None  # what --replace matches on; default the absolute path
    default_tier: str = "on_demand"
    cluster_tiers: tuple[tuple[str, str], ...] = ()  # (cluster, tier) from settings
    idle_util_pct: float = 5.0  # for the rollup's idle seconds
    idle_min_minutes: float = 30.0  # for the rollup's idle stretches (settings thresholds.idle_min_minutes)
    target_util_pct: float = 60.0  # for the rollup's under-used seconds (settings thresholds.target_util_pct)
    skip_bad_rows: bool = False  # land the plausible rows, record the others in rejected_rows (validate.py)
    max_job_days: float = 365.0  # a longer job is implausible (settings thresholds.max_job_days)
    max_gzip_ratio: float = 250.0  # a .gz inflating past this is refused (settings ingest.max_gzip_ratio)
    # nvidia-smi CSV: the header line comes back later in the file (True), or not (False); None: the parser
    # finds out, reading past the file's head only when its reader fails (collectors/nvidia_smi_csv.py)
    header_repeats: bool | None = None
    gpu: GpuFacts | None = None  # --gpu-model/--gpu-count: what ran the jobs that name no GPU (gpu_facts.py)
    # Kubernetes pods (collectors/kubernetes.py): a pod's team is its label team_label, else its namespace's
    # entry here, else the namespace (settings [kubernetes])
    team_label: str | None = None
    namespace_teams: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings, **source: Any) -> IngestOptions:
        """Options for one source (``source``: cluster, tz, host, ...) with everything the settings decide —
        pricing tiers and the rollup's thresholds — taken from ``settings``, the same way for every writer
        (CLI ingest, demo, upload page, live collectors), so a rollup never mixes thresholds."""
        return cls(
            default_tier=settings.default_tier,
            cluster_tiers=tuple((c, s.tier) for c, s in settings.clusters.items() if s.tier),
            idle_util_pct=settings.idle_util_pct,
            idle_min_minutes=settings.idle_min_minutes,
            target_util_pct=settings.target_util_pct,
            max_job_days=getattr(settings, "max_job_days", 365.0),
            max_gzip_ratio=getattr(settings, "max_gzip_ratio", 250.0),
            team_label=getattr(settings, "kubernetes_team_label", None),
            namespace_teams=tuple(sorted(getattr(settings, "kubernetes_namespace_teams", {}).items())),
            **source,
        )


@dataclass(frozen=True)
class Sniff:
    """How sure a parser is that it reads a file (0 = not mine, 1 = certain), and why not when it is not."""

    score: float
    complaint: str = ""


class Parser(Protocol):
    name: str  # the --format value
    description: str  # one line for --help and the README

    def sniff(self, path: Path, head: str) -> Sniff: ...

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        """Create TEMP ``stage_*`` tables; return rows skipped on purpose, by reason."""
        ...


@dataclass
class IngestReport:
    path: str
    format: str
    ingest_id: int | None
    rows: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    already: bool = False  # same content was ingested before: nothing written
    replaced: list[int] = field(default_factory=list)  # earlier ingests removed by --replace
    seconds: float = 0.0
    rejected: list[dict[str, object]] = field(default_factory=list)  # --skip-bad-rows: rows left out, why
    priced: str | None = None  # --gpu-model: what the jobs that name no GPU were priced as, in words
    unpriced: list[str] = field(default_factory=list)  # its jobs that still name no GPU model or count
    unpriced_hosts: list[str] = field(
        default_factory=list
    )  # of those, priced once their hosts' telemetry lands
    held_no_gpu: list[str] = field(
        default_factory=list
    )  # of those, never started or asked for no GPU: held none
    bytes_read: int = 0  # of the file, every one (collectors/source_file.py): its size

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "format": self.format,
            "ingest_id": self.ingest_id,
            "rows": self.rows,
            "skipped": self.skipped,
            "already_ingested": self.already,
            "replaced_ingests": self.replaced,
            "seconds": round(self.seconds, 3),
            "rejected_rows": self.rejected,
            "priced_as": self.priced,
            "jobs_without_gpu": self.unpriced,
            "jobs_priced_by_host_telemetry": self.unpriced_hosts,
            "jobs_held_no_gpu": self.held_no_gpu,
            "bytes_read": self.bytes_read,
        }


def read_head(path: Path) -> str:
    with path.open("rb") as fh:
        raw = fh.read(HEAD_BYTES)
    if raw.startswith(b"\x1f\x8b"):
        import gzip

        with gzip.open(path, "rb") as gz:
            raw = gz.read(HEAD_BYTES)
    return raw.decode("utf-8", errors="replace")


def choose_parser(path: Path, fmt: str, parsers: dict[str, Parser]) -> Parser:
    if fmt != "auto":
        if fmt not in parsers:
            raise UnknownFormatError(
                path, None, f"unknown format {fmt!r}; known: {', '.join(sorted(parsers))}"
            )
        return parsers[fmt]
    if not path.exists():
        raise FormatError(path, None, "no such file")
    if path.stat().st_size == 0:
        raise FormatError(path, None, "the file is empty")
    head = read_head(path)
    scored = [(p.sniff(path, head), p) for p in parsers.values()]
    scored.sort(key=lambda sp: sp[0].score, reverse=True)
    best_sniff, best = scored[0]
    if best_sniff.score > 0:
        return best
    closest = next((s for s, _ in scored if s.complaint), None)
    hint = f"; closest: {closest.complaint}" if closest else ""
    raise UnknownFormatError(
        path, None, f"no parser recognises this file (tried {', '.join(sorted(parsers))}){hint}"
    )
