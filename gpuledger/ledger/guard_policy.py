"""The guard's policies (``[guard]`` and ``[[guard.policy]]`` in settings.toml): when a job's GPUs count as idle,
which jobs a policy looks at and spares, and the steps it takes (warn, warn again, cancel).

Here, in the ledger layer beside the other settings, so that a bad policy is one ``SettingsError`` naming its key
when the settings load (``gpuledger check``, the dashboard, any command), not when the guard first runs. The guard
itself (gpuledger/guard/) reads these frozen objects; docs/settings.md documents every key.

Defaults as safe as Princeton's Job Defense Shield: a policy without ``cancel_minutes`` only notifies; a cancel
needs both ``gpuledger guard run --enforce`` and ``[guard] allow_cancel = true`` (an admin's switch); ``util_pct``
defaults to the ledger's own idle threshold (``thresholds.idle_util_pct``) and ``gpu_fraction`` to 1 (every GPU
of the job idle, JDS' ``gpu_frac_threshold``).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuledger.ledger.errors import SettingsError

WINDOWS = ("sliding", "from_start")
KINDS = ("training", "fine-tune", "inference", "interactive", "other")
SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP")
_QUIET = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$")


@dataclass(frozen=True)
class Scope:
    """Which jobs a policy looks at; an empty list means every one."""

    clusters: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()  # Slurm partitions
    namespaces: tuple[str, ...] = ()  # Kubernetes namespaces (the ``<namespace>/<pod>`` of a pod's job id)
    kinds: tuple[str, ...] = ()  # jobs.kind


@dataclass(frozen=True)
class Exemptions:
    """Jobs a policy spares. The ledger holds no QOS and no pod labels: ``guard run`` asks the scheduler for them
    before any step (gpuledger/guard/live.py ``scheduler_exemption``); ``guard replay`` cannot apply them."""

    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()  # jobs.team (Slurm Account)
    qos: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()  # "key=value"
    names: tuple[str, ...] = ()  # fnmatch patterns on the job name (JDS: interactive*, sys/dashboard*)
    interactive_max_gpus: float | None = None  # an interactive job of at most this many GPUs...
    interactive_max_hours: float = 0.0  # ...is spared for its first this-many hours


@dataclass(frozen=True)
class Policy:
    name: str
    util_pct: float | None = None  # None: the ledger's thresholds.idle_util_pct
    gpu_fraction: float = 1.0  # this share of the job's GPUs idle makes the job idle
    memory_floor_pct: float | None = None  # a GPU holding at least this share of its memory is not idle
    window: str = "sliding"  # sliding | from_start
    warn_minutes: float = 60.0
    warn_again_minutes: float | None = None
    cancel_minutes: float | None = None  # None: only notify
    checkpoint_signal: str | None = None  # signal the job this long before cancelling (grace_minutes)
    grace_minutes: float = 10.0
    cooldown_minutes: float = 1440.0  # a job warned is not warned again by this policy within this time
    quiet_hours: tuple[dt.time, dt.time] | None = None  # UTC: no mail and no cancel in between
    quiet_weekends: bool = False  # no mail and no cancel on Saturdays and Sundays (UTC)
    scope: Scope = field(default_factory=Scope)
    exemptions: Exemptions = field(default_factory=Exemptions)


@dataclass(frozen=True)
class GuardSettings:
    """``[guard]``: the policies and who acts for them."""

    policies: tuple[Policy, ...] = ()
    allow_cancel: bool = False  # the admin's switch: --enforce cancels only when this is true
    admins: tuple[str, ...] = ()  # addresses the digest of each `guard run` goes to
    mail_domain: str | None = None  # an owner's address is USER@mail_domain

    def policy(self, name: str) -> Policy | None:
        return next((p for p in self.policies if p.name == name), None)


_POLICY_KEYS = {
    "name",
    "util_pct",
    "gpu_fraction",
    "memory_floor_pct",
    "window",
    "warn_minutes",
    "warn_again_minutes",
    "cancel_minutes",
    "checkpoint_signal",
    "grace_minutes",
    "cooldown_minutes",
    "quiet_hours",
    "quiet_weekends",
    "scope",
    "exemptions",
}
_MAX_MINUTES = 525_600.0  # a year


def _num(path: Path, key: str, value: Any, lo: float, hi: float, *, above: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SettingsError(path, key, f"must be a number, got {value!r}")
    if not lo <= float(value) <= hi or (above and float(value) == lo):
        bounds = f"above {lo:g} and at most {hi:g}" if above else f"between {lo:g} and {hi:g}"
        raise SettingsError(path, key, f"must be {bounds}, got {value!r}")
    return float(value)


def _names(path: Path, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise SettingsError(path, key, f'must be a list of names, e.g. ["alice"], got {value!r}')
    return tuple(value)


def _table(path: Path, key: str, value: Any, known: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SettingsError(path, key, "must be a table")
    if unknown := value.keys() - known:
        raise SettingsError(
            path, f"{key}.{sorted(unknown)[0]}", f"is not a known setting (known: {', '.join(sorted(known))})"
        )
    return value


def _quiet(path: Path, key: str, value: Any) -> tuple[dt.time, dt.time]:
    m = _QUIET.match(value) if isinstance(value, str) else None
    if not m:
        raise SettingsError(path, key, f'must be "HH:MM-HH:MM" in UTC, e.g. "22:00-07:00", got {value!r}')
    start, end = dt.time(int(m[1]), int(m[2])), dt.time(int(m[3]), int(m[4]))
    if start == end:
        raise SettingsError(path, key, "starts and ends at the same time")
    return start, end


def _scope(path: Path, key: str, raw: Any) -> Scope:
    body = _table(path, key, raw, {"clusters", "partitions", "namespaces", "kinds"})
    kinds = _names(path, f"{key}.kinds", body.get("kinds", []))
    for k in kinds:
        if k not in KINDS:
            raise SettingsError(path, f"{key}.kinds", f"{k!r} is not a job kind ({', '.join(KINDS)})")
    return Scope(
        clusters=_names(path, f"{key}.clusters", body.get("clusters", [])),
        partitions=_names(path, f"{key}.partitions", body.get("partitions", [])),
        namespaces=_names(path, f"{key}.namespaces", body.get("namespaces", [])),
        kinds=kinds,
    )


def _exemptions(path: Path, key: str, raw: Any) -> Exemptions:
    known = {"users", "accounts", "qos", "labels", "names", "interactive_max_gpus", "interactive_max_hours"}
    body = _table(path, key, raw, known)
    labels = _names(path, f"{key}.labels", body.get("labels", []))
    for label in labels:
        if "=" not in label or label.startswith("="):
            raise SettingsError(path, f"{key}.labels", f'{label!r} is not key=value, e.g. "guard=off"')
    gpus = body.get("interactive_max_gpus")
    hours = body.get("interactive_max_hours")
    if (gpus is None) != (hours is None):
        raise SettingsError(
            path, f"{key}.interactive_max_{'hours' if hours is None else 'gpus'}",
            "is required with the other interactive_max_ key (interactive jobs up to N GPUs are spared for H hours)",
        )  # fmt: skip
    return Exemptions(
        users=_names(path, f"{key}.users", body.get("users", [])),
        accounts=_names(path, f"{key}.accounts", body.get("accounts", [])),
        qos=_names(path, f"{key}.qos", body.get("qos", [])),
        labels=labels,
        names=_names(path, f"{key}.names", body.get("names", [])),
        interactive_max_gpus=None
        if gpus is None
        else _num(path, f"{key}.interactive_max_gpus", gpus, 0, 1e6),
        interactive_max_hours=0.0
        if hours is None
        else _num(path, f"{key}.interactive_max_hours", hours, 0, 8760),
    )


def _policy(path: Path, key: str, raw: Any) -> Policy:
    body = _table(path, key, raw, _POLICY_KEYS)
    name = body.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name or ""):
        raise SettingsError(path, f"{key}.name", f"is required: letters, digits, '_', '-', '.', got {name!r}")
    v: dict[str, Any] = {"name": name}
    if "util_pct" in body:
        v["util_pct"] = _num(path, f"{key}.util_pct", body["util_pct"], 0, 100)
    if "gpu_fraction" in body:
        v["gpu_fraction"] = _num(path, f"{key}.gpu_fraction", body["gpu_fraction"], 0, 1, above=True)
    if "memory_floor_pct" in body:
        v["memory_floor_pct"] = _num(
            path, f"{key}.memory_floor_pct", body["memory_floor_pct"], 0, 100, above=True
        )
    if "window" in body:
        if body["window"] not in WINDOWS:
            raise SettingsError(
                path, f"{key}.window", f"must be one of {', '.join(WINDOWS)}, got {body['window']!r}"
            )
        v["window"] = body["window"]
    for k in ("warn_minutes", "warn_again_minutes", "cancel_minutes", "grace_minutes"):
        if k in body:
            v[k] = _num(path, f"{key}.{k}", body[k], 0, _MAX_MINUTES, above=True)
    if "cooldown_minutes" in body:
        v["cooldown_minutes"] = _num(
            path, f"{key}.cooldown_minutes", body["cooldown_minutes"], 0, _MAX_MINUTES
        )
    if "checkpoint_signal" in body:
        sig = body["checkpoint_signal"]
        if sig not in SIGNALS:
            raise SettingsError(
                path, f"{key}.checkpoint_signal", f"must be one of {', '.join(SIGNALS)}, got {sig!r}"
            )
        v["checkpoint_signal"] = sig
    if "quiet_hours" in body:
        v["quiet_hours"] = _quiet(path, f"{key}.quiet_hours", body["quiet_hours"])
    if "quiet_weekends" in body:
        if not isinstance(body["quiet_weekends"], bool):
            raise SettingsError(path, f"{key}.quiet_weekends", "must be true or false")
        v["quiet_weekends"] = body["quiet_weekends"]
    if "scope" in body:
        v["scope"] = _scope(path, f"{key}.scope", body["scope"])
    if "exemptions" in body:
        v["exemptions"] = _exemptions(path, f"{key}.exemptions", body["exemptions"])
    policy = Policy(**v)
    warn, again, cancel = policy.warn_minutes, policy.warn_again_minutes, policy.cancel_minutes
    if again is not None and again <= warn:
        raise SettingsError(
            path, f"{key}.warn_again_minutes", f"must be after warn_minutes ({warn:g}), got {again:g}"
        )
    last_warning = again if again is not None else warn
    if cancel is not None and cancel <= last_warning:
        raise SettingsError(
            path,
            f"{key}.cancel_minutes",
            f"must be after the last warning ({last_warning:g} min), got {cancel:g}",
        )
    if policy.checkpoint_signal is not None and cancel is None:
        raise SettingsError(
            path, f"{key}.checkpoint_signal", "needs cancel_minutes (the signal comes at the cancel time)"
        )
    return policy


def parse_guard(path: Path, raw: Any, address_problem: Callable[[str], str | None]) -> GuardSettings:
    """``[guard]`` → :class:`GuardSettings`; a SettingsError naming the key for anything wrong. ``address_problem``
    is settings.py's one check of a mail address."""
    body = _table(path, "guard", raw, {"policy", "allow_cancel", "admins", "mail_domain"})
    rows = body.get("policy", [])
    if not isinstance(rows, list):
        raise SettingsError(path, "guard.policy", "must be an array of tables ([[guard.policy]])")
    policies = tuple(_policy(path, f"guard.policy[{i}]", row) for i, row in enumerate(rows))
    seen: set[str] = set()
    for i, p in enumerate(policies):
        if p.name in seen:
            raise SettingsError(path, f"guard.policy[{i}].name", f"{p.name!r} names two policies")
        seen.add(p.name)
    allow = body.get("allow_cancel", False)
    if not isinstance(allow, bool):
        raise SettingsError(path, "guard.allow_cancel", "must be true or false")
    admins = _names(path, "guard.admins", body.get("admins", []))
    for a in admins:
        if problem := address_problem(a):
            raise SettingsError(path, "guard.admins", f"{a!r} {problem}")
    domain = body.get("mail_domain")
    if domain is not None and (not isinstance(domain, str) or not re.fullmatch(r"[A-Za-z0-9.-]+", domain)):
        raise SettingsError(
            path, "guard.mail_domain", f"must be a domain such as example.org, got {domain!r}"
        )
    return GuardSettings(policies=policies, allow_cancel=allow, admins=admins, mail_domain=domain)
