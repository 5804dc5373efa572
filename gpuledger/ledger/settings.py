"""User settings: thresholds, energy prices, price overrides, per-cluster tier and capacity.

Loaded from a TOML file (``--settings``, else ``$GPULEDGER_SETTINGS``, else ``data/settings.toml`` when it
exists, else the defaults below) into frozen dataclasses. Every invalid value raises ``SettingsError`` naming
its key. The file format is documented in docs/settings.md; ``data/settings.example.toml`` is a template.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuledger.ledger.access import AccessSettings, AuthSettings, parse_access, parse_auth
from gpuledger.ledger.addresses import address_problem
from gpuledger.ledger.budget_settings import AlertSettings, Budget, parse_alerts, parse_budgets
from gpuledger.ledger.errors import SettingsError
from gpuledger.ledger.guard_policy import GuardSettings, parse_guard
from gpuledger.ledger.text import neutral

TIERS = ("on_demand", "spot", "reserved", "on_prem")
BILLING = ("always_on", "per_job")  # [clusters.X] billing: is capacity nobody holds paid for?


@dataclass(frozen=True)
class PriceRow:
    gpu_model: str
    tier: str
    usd_per_gpu_hour: float
    effective_from: dt.date
    source: str
    source_date: dt.date
    cluster: str | None = None


@dataclass(frozen=True)
class Capacity:
    gpu_model: str
    gpu_count: float


@dataclass(frozen=True)
class ClusterSettings:
    tier: str | None = None  # pricing tier of jobs on this cluster that name none
    capacity: tuple[Capacity, ...] = ()
    billing: str = (
        "always_on"  # always_on: capacity nobody holds is paid for (unallocated) | per_job: it is not
    )


@dataclass(frozen=True)
class Settings:
    idle_util_pct: float = 5.0
    idle_min_minutes: float = 30.0
    target_util_pct: float = 60.0
    usd_per_kwh: float = 0.12
    gco2e_per_kwh: float = 390.0
    default_tier: str = "on_demand"
    batch_safety_fraction: float = 0.9
    # the recommender's thresholds ([recommend], docs/settings.md; read by analytics/advice_*.py)
    mig_max_util_pct: float = 30.0  # mig_slice: only jobs busy under this share of one GPU
    spot_rework_pct: float = 10.0  # use_spot: the spot price plus this much work redone after preemptions
    spot_checkpoint_max_gap_hours: float = 2.0  # use_spot: last checkpoint at most this long before the end
    serve_low_util_pct: float = 50.0  # consolidate_inference: a service busy under this when active
    capacity_demand_percentile: float = 95.0  # release_capacity: the demand kept (nearest rank)
    idle_cluster_busy_pct: float = 10.0  # scale_down_idle: a cluster whose held GPUs were busier is not idle
    scale_down_after_minutes: float = 30.0  # the scale-down the capacity advice proposes
    checkpoint_write_gbps: float = 2.0  # checkpoint_interval: the rate a checkpoint is written at
    checkpoint_min_seconds: float = 60.0  # ... at least this long
    checkpoint_default_seconds: float = 300.0  # ... this long when the run names no parameter count
    early_fail_minutes: float = 20.0  # test_small_first: a multi-GPU run failing this soon after its start
    notebook_idle_stop_minutes: float = 60.0
    max_job_days: float = (
        365.0  # a job or allocation longer than this is implausible (collectors/validate.py)
    )
    # observed capacity: a GPU's telemetry stops being paid-for capacity at a silence longer than this
    capacity_gap_minutes: float = 30.0
    prices: tuple[PriceRow, ...] = ()
    clusters: dict[str, ClusterSettings] = field(default_factory=dict)
    max_upload_mb: float = 100.0  # the dashboard's upload limit (Streamlit's server.maxUploadSize)
    upload_memory_mb: float = 1024.0  # DuckDB memory_limit of the Upload page's in-memory ledger
    upload_seconds: float = (
        120.0  # the Upload page's worker is stopped past this (gpuledger/upload/worker.py)
    )
    upload_worker_mb: float = 2048.0  # ... or past this resident memory (DuckDB's share: upload_memory_mb)
    # host names the dashboard answers to besides localhost, 127.0.0.1, ::1 and its bind address
    allowed_hosts: tuple[str, ...] = ()  # dashboard.allowed_hosts (gpuledger/web/hosts.py)
    max_gzip_ratio: float = 250.0  # a .gz that inflates past this many times its size is refused (a bomb)
    auth: AuthSettings | None = None  # [auth]: OIDC sign-in for the dashboard (None: off)
    access: AccessSettings = field(default_factory=AccessSettings)  # [access]: who sees which teams
    # [reports.team_mail]: team -> the addresses `report --per-team DIR --mail-to` sends its report to
    team_mail: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # [kubernetes]: a pod's team (collectors/kubernetes.py): its label team_label, else namespace_teams[ns],
    # else the namespace itself
    kubernetes_team_label: str | None = None
    kubernetes_namespace_teams: dict[str, str] = field(default_factory=dict)
    guard: GuardSettings = field(
        default_factory=GuardSettings
    )  # [guard]: idle-job policies (guard_policy.py)
    # [[budget]] (gpuledger/ledger/budget_settings.py); in the fingerprint: a page's budget figures follow it
    budgets: tuple[Budget, ...] = ()
    alerts: AlertSettings = field(default_factory=AlertSettings)  # [alerts]
    source: str = "defaults"

    def cluster_tier(self, cluster: str | None) -> str:
        """The tier a cluster's capacity is bought at: its own ``[clusters.X] tier``, else
        ``pricing.default_tier`` (capacity nobody held, idle GPUs and what-if spot moves are priced at it)."""
        own = self.clusters.get(cluster) if cluster is not None else None
        return (own.tier if own is not None and own.tier else None) or self.default_tier

    def fingerprint(self) -> str:
        """Stable hash of everything that changes a number; stored with synced reference data."""
        payload = asdict(self)
        payload.pop("source")
        for who_sees_what in (
            "max_upload_mb",
            "upload_memory_mb",
            "upload_seconds",
            "upload_worker_mb",
            "allowed_hosts",
            "max_gzip_ratio",
            "auth",
            "access",
            "team_mail",
            "guard",
        ):
            payload.pop(who_sees_what)  # no figure depends on these
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


_SCALARS: dict[str, tuple[str, str, float, float]] = {
    # toml key -> (section, field, min, max)
    "thresholds.idle_util_pct": ("thresholds", "idle_util_pct", 0.0, 100.0),
    "thresholds.idle_min_minutes": ("thresholds", "idle_min_minutes", 0.0, 1440.0),
    "thresholds.target_util_pct": ("thresholds", "target_util_pct", 0.0, 100.0),
    "thresholds.notebook_idle_stop_minutes": ("thresholds", "notebook_idle_stop_minutes", 1.0, 10080.0),
    "thresholds.max_job_days": ("thresholds", "max_job_days", 1.0, 36500.0),
    "thresholds.capacity_gap_minutes": ("thresholds", "capacity_gap_minutes", 1.0, 10080.0),
    "energy.usd_per_kwh": ("energy", "usd_per_kwh", 0.0, 10.0),
    "energy.gco2e_per_kwh": ("energy", "gco2e_per_kwh", 0.0, 2000.0),
    "recommend.batch_safety_fraction": ("recommend", "batch_safety_fraction", 0.1, 1.0),
    "recommend.mig_max_util_pct": ("recommend", "mig_max_util_pct", 0.0, 100.0),
    "recommend.spot_rework_pct": ("recommend", "spot_rework_pct", 0.0, 1000.0),
    "recommend.spot_checkpoint_max_gap_hours": ("recommend", "spot_checkpoint_max_gap_hours", 0.0, 8760.0),
    "recommend.serve_low_util_pct": ("recommend", "serve_low_util_pct", 0.0, 100.0),
    "recommend.capacity_demand_percentile": ("recommend", "capacity_demand_percentile", 1.0, 100.0),
    "recommend.idle_cluster_busy_pct": ("recommend", "idle_cluster_busy_pct", 0.0, 100.0),
    "recommend.scale_down_after_minutes": ("recommend", "scale_down_after_minutes", 1.0, 10080.0),
    "recommend.checkpoint_write_gbps": ("recommend", "checkpoint_write_gbps", 0.001, 10_000.0),
    "recommend.checkpoint_min_seconds": ("recommend", "checkpoint_min_seconds", 0.0, 86_400.0),
    "recommend.checkpoint_default_seconds": ("recommend", "checkpoint_default_seconds", 1.0, 86_400.0),
    "recommend.early_fail_minutes": ("recommend", "early_fail_minutes", 0.0, 10080.0),
    "dashboard.max_upload_mb": ("dashboard", "max_upload_mb", 1.0, 10_000.0),
    "dashboard.upload_memory_mb": ("dashboard", "upload_memory_mb", 64.0, 1_048_576.0),
    "dashboard.upload_seconds": ("dashboard", "upload_seconds", 1.0, 86_400.0),
    "dashboard.upload_worker_mb": ("dashboard", "upload_worker_mb", 128.0, 1_048_576.0),
    "ingest.max_gzip_ratio": ("ingest", "max_gzip_ratio", 10.0, 100_000.0),
}
_SECTIONS = {
    "thresholds",
    "energy",
    "pricing",
    "recommend",
    "price",
    "clusters",
    "dashboard",
    "ingest",
    "auth",
    "access",
    "reports",
    "kubernetes",
    "guard",
    "budget",
    "alerts",
}


def _number(path: Path, key: str, value: Any, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SettingsError(path, key, f"must be a number, got {value!r}")
    if not lo <= float(value) <= hi:
        raise SettingsError(path, key, f"must be between {lo:g} and {hi:g}, got {value!r}")
    return float(value)


def _date(path: Path, key: str, value: Any) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            pass
    raise SettingsError(path, key, f"must be a date like 2025-01-31, got {value!r}")


def _tier(path: Path, key: str, value: Any) -> str:
    if value not in TIERS:
        raise SettingsError(path, key, f"must be one of {', '.join(TIERS)}, got {value!r}")
    return str(value)


def parse_price_rows(path: Path, rows: Any, prefix: str = "price") -> tuple[PriceRow, ...]:
    """Validate ``[[price]]`` rows (shared by the shipped sheet and user overrides)."""
    if not isinstance(rows, list):
        raise SettingsError(path, prefix, "must be an array of tables ([[price]])")
    out = []
    required = {"gpu_model", "tier", "usd_per_gpu_hour", "effective_from", "source"}
    allowed = required | {"source_date", "cluster"}
    for i, row in enumerate(rows):
        key = f"{prefix}[{i}]"
        if not isinstance(row, dict):
            raise SettingsError(path, key, "must be a table")
        missing = required - row.keys()
        if missing:
            raise SettingsError(path, f"{key}.{sorted(missing)[0]}", "is required")
        unknown = row.keys() - allowed
        if unknown:
            raise SettingsError(path, f"{key}.{sorted(unknown)[0]}", "is not a known price field")
        if not isinstance(row["gpu_model"], str) or not row["gpu_model"]:
            raise SettingsError(path, f"{key}.gpu_model", "must be a GPU model name from the catalog")
        cluster = row.get("cluster")
        if cluster is not None and not isinstance(cluster, str):
            raise SettingsError(path, f"{key}.cluster", "must be a string")
        effective = _date(path, f"{key}.effective_from", row["effective_from"])
        out.append(
            PriceRow(
                gpu_model=row["gpu_model"],
                tier=_tier(path, f"{key}.tier", row["tier"]),
                usd_per_gpu_hour=_number(
                    path, f"{key}.usd_per_gpu_hour", row["usd_per_gpu_hour"], 0.0, 1000.0
                ),
                effective_from=effective,
                source=str(row["source"]),
                source_date=_date(path, f"{key}.source_date", row.get("source_date", effective)),
                cluster=cluster,
            )
        )
    return tuple(out)


def _clusters(path: Path, raw: Any) -> dict[str, ClusterSettings]:
    if not isinstance(raw, dict):
        raise SettingsError(path, "clusters", "must be a table of [clusters.NAME] tables")
    out: dict[str, ClusterSettings] = {}
    for name, body in raw.items():
        key = f"clusters.{name}"
        if not isinstance(body, dict):
            raise SettingsError(path, key, "must be a table")
        unknown = body.keys() - {"tier", "capacity", "billing"}
        if unknown:
            raise SettingsError(path, f"{key}.{sorted(unknown)[0]}", "is not a known cluster setting")
        tier = _tier(path, f"{key}.tier", body["tier"]) if "tier" in body else None
        caps = []
        for i, cap in enumerate(body.get("capacity", [])):
            ckey = f"{key}.capacity[{i}]"
            if not isinstance(cap, dict) or not isinstance(cap.get("gpu_model"), str):
                raise SettingsError(path, f"{ckey}.gpu_model", "is required (a catalog GPU model)")
            caps.append(
                Capacity(cap["gpu_model"], _number(path, f"{ckey}.gpu_count", cap.get("gpu_count"), 0, 1e7))
            )
        billing = body.get("billing", "always_on")
        if billing not in BILLING:
            raise SettingsError(
                path, f"{key}.billing", f"must be one of {', '.join(BILLING)}, got {billing!r}"
            )
        out[name] = ClusterSettings(tier=tier, capacity=tuple(caps), billing=str(billing))
    return out


def _team_mail(path: Path, raw: Any) -> dict[str, tuple[str, ...]]:
    """``[reports.team_mail]``: team = "addr" or ["addr", ...] (a comma-separated string is a list too)."""
    if not isinstance(raw, dict):
        raise SettingsError(path, "reports", "must be a table")
    unknown = raw.keys() - {"team_mail"}
    if unknown:
        raise SettingsError(path, f"reports.{sorted(unknown)[0]}", "is not a known setting")
    table = raw.get("team_mail", {})
    if not isinstance(table, dict):
        raise SettingsError(path, "reports.team_mail", 'must be a table of team = "address"')
    out: dict[str, tuple[str, ...]] = {}
    for team, value in table.items():
        key = f"reports.team_mail.{team}"
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(a, str) for a in items):
            raise SettingsError(
                path, key, 'must be an address or a list of addresses, e.g. "lead@example.org"'
            )
        addresses = tuple(a.strip() for a in items if a.strip())
        if not addresses:
            raise SettingsError(path, key, "names no address")
        for a in addresses:
            if problem := address_problem(a):
                raise SettingsError(path, key, f"{a!r} {problem}")
        out[neutral(team)] = addresses  # as the ledger stores and the report shows a team's name
    return out


def _kubernetes(path: Path, raw: Any) -> dict[str, Any]:
    """``[kubernetes]``: ``team_label`` (a pod label naming its team) and ``namespace_teams`` (namespace → team)."""
    if not isinstance(raw, dict):
        raise SettingsError(path, "kubernetes", "must be a table")
    unknown = raw.keys() - {"team_label", "namespace_teams"}
    if unknown:
        raise SettingsError(path, f"kubernetes.{sorted(unknown)[0]}", "is not a known setting")
    out: dict[str, Any] = {}
    if "team_label" in raw:
        if not isinstance(raw["team_label"], str) or not raw["team_label"]:
            raise SettingsError(
                path, "kubernetes.team_label", f"must be a label name, got {raw['team_label']!r}"
            )
        out["kubernetes_team_label"] = raw["team_label"]
    teams = raw.get("namespace_teams", {})
    if not isinstance(teams, dict):
        raise SettingsError(path, "kubernetes.namespace_teams", 'must be a table of namespace = "team"')
    for ns, team in teams.items():
        if not isinstance(team, str) or not team:
            raise SettingsError(
                path, f"kubernetes.namespace_teams.{ns}", f"must be a team name, got {team!r}"
            )
    out["kubernetes_namespace_teams"] = dict(teams)
    return out


def _host_names(path: Path, raw: Any) -> tuple[str, ...]:
    """``dashboard.allowed_hosts``: a list of host names or addresses (no scheme, port or path)."""
    key = "dashboard.allowed_hosts"
    if not isinstance(raw, list):
        raise SettingsError(path, key, 'must be a list of host names, like ["gpu.example.com"]')
    for name in raw:
        if not isinstance(name, str) or not name.strip() or any(c in name for c in "/@ *,\t"):
            raise SettingsError(
                path, key, f"must hold host names (no scheme, path or wildcard), got {name!r}"
            )
    return tuple(n.strip().lower() for n in raw)


def from_dict(data: dict[str, Any], path: Path) -> Settings:
    unknown = data.keys() - _SECTIONS
    if unknown:
        raise SettingsError(path, sorted(unknown)[0], "is not a known section")
    values: dict[str, Any] = {}
    for dotted, (section, fld, lo, hi) in _SCALARS.items():
        sect = data.get(section, {})
        if not isinstance(sect, dict):
            raise SettingsError(path, section, "must be a table")
        name = dotted.split(".", 1)[1]
        if name in sect:
            values[fld] = _number(path, dotted, sect[name], lo, hi)
    for section in ("thresholds", "energy", "recommend", "dashboard", "ingest"):
        known = {k.split(".", 1)[1] for k in _SCALARS if k.startswith(section + ".")}
        extra = set(data.get(section, {})) - known - ({"allowed_hosts"} if section == "dashboard" else set())
        if extra:
            raise SettingsError(path, f"{section}.{sorted(extra)[0]}", "is not a known setting")
    pricing = data.get("pricing", {})
    if not isinstance(pricing, dict) or set(pricing) - {"default_tier"}:
        bad = sorted(set(pricing) - {"default_tier"}) if isinstance(pricing, dict) else [""]
        raise SettingsError(path, f"pricing.{bad[0]}".rstrip("."), "is not a known setting")
    if "default_tier" in pricing:
        values["default_tier"] = _tier(path, "pricing.default_tier", pricing["default_tier"])
    if "price" in data:
        values["prices"] = parse_price_rows(path, data["price"])
    if "clusters" in data:
        values["clusters"] = _clusters(path, data["clusters"])
    if "kubernetes" in data:
        values.update(_kubernetes(path, data["kubernetes"]))
    if "allowed_hosts" in data.get("dashboard", {}):
        values["allowed_hosts"] = _host_names(path, data["dashboard"]["allowed_hosts"])
    values["auth"] = parse_auth(path, data.get("auth"))
    values["access"] = parse_access(path, data.get("access"))
    if "reports" in data:
        values["team_mail"] = _team_mail(path, data["reports"])
    if "guard" in data:
        values["guard"] = parse_guard(path, data["guard"], address_problem)
    if "budget" in data:
        values["budgets"] = parse_budgets(path, data["budget"])
    values["alerts"] = parse_alerts(path, data.get("alerts"))
    settings = Settings(**values, source=str(path))
    if settings.idle_util_pct >= settings.target_util_pct:
        raise SettingsError(path, "thresholds.idle_util_pct", "must be below thresholds.target_util_pct")
    return settings


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """The settings in force: ``--settings`` > ``$GPULEDGER_SETTINGS`` > user > system > checkout > defaults
    (gpuledger/ledger/paths.py)."""
    from gpuledger.ledger.paths import choose_settings

    chosen = choose_settings(path).path
    if chosen is None:
        return Settings()
    p = Path(chosen)
    try:
        data = tomllib.loads(read_settings_text(p))
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(p, "(syntax)", str(exc)) from None
    return from_dict(data, p)


MAX_SETTINGS_BYTES = 2**20  # a settings file is a few KB; /dev/zero or a log named by mistake is not one


def read_settings_text(p: Path) -> str:
    """The text of settings file ``p``: a regular file (a FIFO is opened without waiting for a writer, then
    refused, like a directory or a device), of at most MAX_SETTINGS_BYTES, in UTF-8; else a SettingsError
    saying which."""
    import stat

    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise SettingsError(p, "(file)", "does not exist") from None
    except OSError as exc:
        raise SettingsError(p, "(file)", f"cannot be read: {(exc.strerror or str(exc)).lower()}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "a pipe" if stat.S_ISFIFO(mode) else "a device"
        raise SettingsError(p, "(file)", f"is {kind}, not a settings file (a regular TOML file)")
    with os.fdopen(fd, "rb") as fh:
        try:
            data = fh.read(MAX_SETTINGS_BYTES + 1)
        except OSError as exc:
            raise SettingsError(
                p, "(file)", f"cannot be read: {(exc.strerror or str(exc)).lower()}"
            ) from None
    if len(data) > MAX_SETTINGS_BYTES:
        raise SettingsError(
            p, "(file)", f"is larger than {MAX_SETTINGS_BYTES // 2**20} MiB: not a settings file"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SettingsError(
            p, "(file)", f"line {line} holds a byte that is not UTF-8 text (save it as UTF-8)"
        ) from None
