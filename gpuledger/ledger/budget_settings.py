"""``[[budget]]`` and ``[alerts]`` settings (docs/settings.md): what each team or cluster may spend per
period, and when gpuledger says so. Parsed here, in the ledger layer, so every face reads one definition;
gpuledger/budgets/ computes the figures and gpuledger/alerts/ sends them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuledger.ledger.addresses import address_problem
from gpuledger.ledger.errors import SettingsError

PERIODS = ("week", "month", "quarter")
SCOPES = ("team", "cluster", "fleet")
DEFAULT_THRESHOLDS = (50.0, 80.0, 100.0)


@dataclass(frozen=True)
class Budget:
    """A budget: ``amount_usd`` per ``period`` for one team, one cluster or the whole fleet."""

    scope: str  # team | cluster | fleet
    target: str | None  # the team's or cluster's name; None for the fleet
    amount_usd: float
    period: str = "month"
    thresholds_pct: tuple[float, ...] = DEFAULT_THRESHOLDS
    notify: tuple[str, ...] = ()  # addresses told when a threshold is crossed (beside [alerts] mail_to)

    @property
    def name(self) -> str:
        """``team:nlp``, ``cluster:atlas`` or ``fleet``: the budget's key in alerts and --json."""
        return f"{self.scope}:{self.target}" if self.target else self.scope


@dataclass(frozen=True)
class AlertSettings:
    mail_to: tuple[str, ...] = ()  # admins: every alert
    webhook_url: str | None = None  # a Slack-compatible JSON POST ({"text": ...})
    cooldown_hours: float = 24.0  # the same rule and scope fire at most once in this long
    spend_change_pct: float = 20.0  # a week's spend this far above (or below) its baseline
    baseline_days: int = 28  # ... the mean week of the days before it (Kubecost: 30 days)
    waste_share_pct: float = 50.0  # a team's waste over this share of its spend in a week
    unheld_min_usd: float = 100.0  # new capacity no job held: at least this many $ in the week


def _num(path: Path, key: str, value: Any, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= float(value) <= hi:
        raise SettingsError(path, key, f"must be a number between {lo:g} and {hi:g}, got {value!r}")
    return float(value)


def _addresses(path: Path, key: str, value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(a, str) for a in items):
        raise SettingsError(path, key, 'must be an address or a list of addresses, e.g. "lead@example.org"')
    out = tuple(a.strip() for a in items if a.strip())
    for a in out:
        if problem := address_problem(a):
            raise SettingsError(path, key, f"{a!r} {problem}")
    return out


def parse_budgets(path: Path, raw: Any) -> tuple[Budget, ...]:
    """``[[budget]]`` rows: exactly one of ``team``, ``cluster`` or ``fleet = true``; ``amount_usd``; ``period``
    (week, month, quarter; default month); ``thresholds_pct`` (default [50, 80, 100]); ``notify``."""
    if not isinstance(raw, list):
        raise SettingsError(path, "budget", "must be an array of tables ([[budget]])")
    out: list[Budget] = []
    for i, row in enumerate(raw):
        key = f"budget[{i}]"
        if not isinstance(row, dict):
            raise SettingsError(path, key, "must be a table")
        unknown = row.keys() - {
            "team",
            "cluster",
            "fleet",
            "amount_usd",
            "period",
            "thresholds_pct",
            "notify",
        }
        if unknown:
            raise SettingsError(path, f"{key}.{sorted(unknown)[0]}", "is not a known budget setting")
        named = [s for s in ("team", "cluster") if s in row] + (["fleet"] if row.get("fleet") is True else [])
        if len(named) != 1:
            raise SettingsError(path, key, "must name exactly one of team, cluster or fleet = true")
        scope = named[0]
        target = None
        if scope != "fleet":
            target = row[scope]
            if not isinstance(target, str) or not target:
                raise SettingsError(path, f"{key}.{scope}", f"must be a name, got {target!r}")
        if "amount_usd" not in row:
            raise SettingsError(path, f"{key}.amount_usd", "is required")
        period = row.get("period", "month")
        if period not in PERIODS:
            raise SettingsError(path, f"{key}.period", f"must be one of {', '.join(PERIODS)}, got {period!r}")
        pcts = row.get("thresholds_pct", list(DEFAULT_THRESHOLDS))
        if not isinstance(pcts, list) or not pcts:
            raise SettingsError(
                path, f"{key}.thresholds_pct", "must be a list of percentages, e.g. [50, 80, 100]"
            )
        thresholds = tuple(sorted({_num(path, f"{key}.thresholds_pct", p, 1.0, 1000.0) for p in pcts}))
        budget = Budget(
            scope=scope,
            target=target,
            amount_usd=_num(path, f"{key}.amount_usd", row["amount_usd"], 0.01, 1e12),
            period=period,
            thresholds_pct=thresholds,
            notify=_addresses(path, f"{key}.notify", row.get("notify", [])),
        )
        if any(b.name == budget.name and b.period == budget.period for b in out):
            raise SettingsError(path, key, f"a second {period} budget for {budget.name}")
        out.append(budget)
    return tuple(out)


_ALERT_NUMBERS = {
    "cooldown_hours": (0.0, 8760.0),
    "spend_change_pct": (1.0, 10_000.0),
    "baseline_days": (7.0, 366.0),
    "waste_share_pct": (1.0, 100.0),
    "unheld_min_usd": (0.0, 1e9),
}


def parse_alerts(path: Path, raw: Any) -> AlertSettings:
    """``[alerts]``: mail_to, webhook_url (http or https), cooldown_hours and the rules' limits."""
    if raw is None:
        return AlertSettings()
    if not isinstance(raw, dict):
        raise SettingsError(path, "alerts", "must be a table")
    unknown = raw.keys() - {"mail_to", "webhook_url", *_ALERT_NUMBERS}
    if unknown:
        raise SettingsError(path, f"alerts.{sorted(unknown)[0]}", "is not a known setting")
    values: dict[str, Any] = {}
    for name, (lo, hi) in _ALERT_NUMBERS.items():
        if name in raw:
            values[name] = _num(path, f"alerts.{name}", raw[name], lo, hi)
    if "baseline_days" in values:
        values["baseline_days"] = int(values["baseline_days"])
    if "mail_to" in raw:
        values["mail_to"] = _addresses(path, "alerts.mail_to", raw["mail_to"])
    url = raw.get("webhook_url")
    if url is not None:
        if (
            not isinstance(url, str)
            or not url.startswith(("http://", "https://"))
            or any(c in url for c in " \r\n")
        ):
            raise SettingsError(path, "alerts.webhook_url", f"must be an http(s) URL, got {url!r}")
        values["webhook_url"] = url
    return AlertSettings(**values)
