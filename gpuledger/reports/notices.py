"""Per-user notices: one short mail per user about the week's worst patterns of their own jobs, with the $,
in the jobstats voice (what happened, what it cost, what to change).

Patterns (each from the analytics the report uses; thresholds in :class:`Thresholds`):

- ``idle_gpus``: GPUs a job held while they sat idle — ``reclaim_idle`` items (idle stretches) and
  ``fewer_gpus`` items of the time lever (GPUs held but never used), analytics/recommend.py;
- ``failed_no_checkpoint``: training, fine-tune or other jobs that ended failed (analytics/waste.py
  ``failed``) with no checkpoint known (``jobs.last_checkpoint_ts`` NULL): their whole cost is lost;
- ``oversized_gpu``: a much cheaper GPU or a MIG slice would have done the same work (``right_size_gpu``,
  ``mig_slice``);
- ``small_batch``: the per-GPU batch is at least ``batch_factor`` times smaller than what fits
  (``larger_batch``).

A finding below ``min_usd`` is not worth a mail; each user gets at most ``max_items``, the costliest first.
The cooldown: a finding (user, pattern, job) already sent within ``cooldown_days`` is not sent again; sent
notices are remembered in the ledger's ``notices`` table. The mail text comes from a Jinja2 template a site
can replace (``--template FILE``; ``--print-template`` prints the default, :data:`DEFAULT_TEMPLATE`),
rendered in a sandbox.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from analytics.filters import Filters
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.settings import Settings
from gpuledger.reports import fmt

# The shipped template; `gpuledger notify --print-template` writes it out for a site to edit (--template).
DEFAULT_TEMPLATE = """\
Subject: Your GPU jobs in {{ period }}: {{ total_usd | usd }} you could get back
Hello {{ user }},

This is an automatic note from gpuledger about your own GPU jobs in {{ period }}.
{{ findings | length }} pattern(s) cost {{ total_usd | usd }} of GPU time{% if team %} on team {{ team }}'s budget{% endif %}:

{% for f in findings %}
{{ loop.index }}. {{ f.title }}: {{ f.usd | usd }}
   {{ f.evidence }}
   What to change: {{ f.advice }}

{% endfor %}
Nothing here is a rule broken; it is money and GPU time others in the queue could have used.
You get a note at most once every {{ thresholds.cooldown_days | num(0) }} days for the same job, and only
for patterns over {{ thresholds.min_usd | usd }}. Questions: reply to this mail.
"""
PATTERNS = {
    "idle_gpus": "Idle GPUs",
    "failed_no_checkpoint": "Failed without a checkpoint",
    "oversized_gpu": "A GPU far bigger than needed",
    "small_batch": "A batch far too small",
}


@dataclass(frozen=True)
class Thresholds:
    """When a pattern is worth a mail (CLI: --min-usd, --batch-factor, --max-items, --cooldown-days)."""

    min_usd: float = 10.0  # a finding must have cost at least this much in the period
    batch_factor: float = 4.0  # small_batch: the batch that fits is at least this many times larger
    max_items: int = 3  # findings per mail, the costliest first
    cooldown_days: float = 14.0  # the same (user, pattern, job) is not sent again within this many days


@dataclass(frozen=True)
class Finding:
    kind: str  # a key of PATTERNS
    target: str  # job id
    usd: float  # what the pattern cost in the period
    evidence: str
    advice: str

    @property
    def title(self) -> str:
        return PATTERNS[self.kind]


@dataclass(frozen=True)
class Notice:
    user: str
    team: str | None
    address: str | None
    period: str
    findings: tuple[Finding, ...]
    in_cooldown: tuple[Finding, ...] = field(default=())

    @property
    def total_usd(self) -> float:
        return sum(f.usd for f in self.findings)


def _failed_advice() -> str:
    return (
        "Save a checkpoint at least every hour (Trainer save_steps, Lightning ModelCheckpoint, or your own "
        "torch.save), so a crash costs only the time since the last one; and run a few steps on 1 GPU "
        "before a long multi-GPU run."
    )


def findings(
    con: duckdb.DuckDBPyConnection, *, filters: Filters, settings: Settings, thresholds: Thresholds
) -> dict[str, list[tuple[str | None, Finding]]]:
    """user → [(team, finding)] for the period, every finding at or above ``min_usd``."""
    from analytics.filters import horizon
    from analytics.recommend import recommendations
    from analytics.waste import job_waste

    as_of = horizon(con)
    recs = recommendations(con, filters=filters, settings=settings, as_of=as_of)
    out: dict[str, list[tuple[str | None, Finding]]] = {}

    def add(user: Any, team: Any, f: Finding) -> None:
        if user and f.usd >= thresholds.min_usd:
            out.setdefault(str(user), []).append((team, f))

    for r in recs.filter(pl.col("target_type") == "job").to_dicts():
        kind = None
        if r["kind"] == "reclaim_idle" or (r["kind"] == "fewer_gpus" and r.get("lever") == "time"):
            kind = "idle_gpus"
        elif r["kind"] in ("right_size_gpu", "mig_slice"):
            kind = "oversized_gpu"
        elif r["kind"] == "larger_batch":
            cur, new = r.get("current_batch_size"), r.get("recommended_batch_size")
            if cur and new and new >= thresholds.batch_factor * cur:
                kind = "small_batch"
        if kind:
            add(
                r["user_name"],
                r["team"],
                Finding(kind, str(r["target"]), float(r["saving_usd"]), r["evidence"], r["action"]),
            )
    checkpointed = {
        r[0] for r in con.execute("SELECT job_id FROM jobs WHERE last_checkpoint_ts IS NOT NULL").fetchall()
    }
    failed = job_waste(con, filters=filters, settings=settings, as_of=as_of).filter(
        pl.col("failed") & pl.col("failed_usd").is_not_null() & ~pl.col("job_id").is_in(list(checkpointed))
    )
    for j in failed.to_dicts():
        name = f" ({j['name']})" if j.get("name") and j["name"] != j["job_id"] else ""
        evidence = (
            f"Job {j['job_id']}{name} held {fmt.num(j['gpu_count'], 0)} × {j['gpu_model']} for "
            f"{fmt.num(j['gpu_hours'] / j['gpu_count'] if j['gpu_count'] else None)} h "
            f"({fmt.num(j['gpu_hours'])} GPU-hours) and ended {j['state']} with no checkpoint: all "
            f"{fmt.usd(j['failed_usd'])} of it is lost."
        )
        add(
            j["user_name"],
            j["team"],
            Finding(
                "failed_no_checkpoint", str(j["job_id"]), float(j["failed_usd"]), evidence, _failed_advice()
            ),
        )
    # one finding per (pattern, job): the larger, when two items name the same job and pattern
    for user, items in out.items():
        best: dict[tuple[str, str], tuple[str | None, Finding]] = {}
        for team, f in items:
            key = (f.kind, f.target)
            if key not in best or f.usd > best[key][1].usd:
                best[key] = (team, f)
        out[user] = sorted(best.values(), key=lambda tf: (-tf[1].usd, tf[1].kind, tf[1].target))
    return out


def recently_sent(con: duckdb.DuckDBPyConnection, now: dt.datetime, days: float) -> set[tuple[str, str, str]]:
    """(user, kind, target) of the notices sent within ``days`` before ``now``."""
    if days <= 0:
        return set()
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'notices'"
    ).fetchall()[0][0]
    if not exists:
        return set()
    rows = con.execute(
        "SELECT user_name, kind, target FROM notices WHERE sent_ts > ?", [now - dt.timedelta(days=days)]
    ).fetchall()
    return {(str(u), str(k), str(t)) for u, k, t in rows}


def address_for(user: str, domain: str | None) -> str | None:
    """A user name that is an address is used as it is; else user@domain when a domain is given."""
    if "@" in user:
        return user
    if domain and user and all(c.isalnum() or c in "._-+" for c in user):
        return f"{user}@{domain}"
    return None


def build_notices(
    con: duckdb.DuckDBPyConnection,
    *,
    filters: Filters,
    settings: Settings,
    thresholds: Thresholds,
    period: str,
    domain: str | None,
    now: dt.datetime,
) -> list[Notice]:
    """One Notice per user with at least one finding outside the cooldown (users with findings only in
    cooldown come back with empty ``findings`` and the rest in ``in_cooldown``)."""
    sent = recently_sent(con, now, thresholds.cooldown_days)
    out = []
    for user, items in sorted(
        findings(con, filters=filters, settings=settings, thresholds=thresholds).items()
    ):
        fresh = [f for _, f in items if (user, f.kind, f.target) not in sent]
        held = tuple(f for _, f in items if (user, f.kind, f.target) in sent)
        out.append(
            Notice(
                user=user,
                team=items[0][0],
                address=address_for(user, domain),
                period=period,
                findings=tuple(fresh[: thresholds.max_items]),
                in_cooldown=held,
            )
        )
    return out


def load_template(path: str | None):  # type: ignore[no-untyped-def]
    """The Jinja2 template (the site's file, else the shipped one), in a sandbox: a template can format
    what it is given, never reach Python objects beyond it."""
    from jinja2 import StrictUndefined, TemplateSyntaxError
    from jinja2.sandbox import SandboxedEnvironment

    source_path = Path(path) if path else Path("(default notice template)")
    try:
        source = source_path.read_text(encoding="utf-8") if path else DEFAULT_TEMPLATE
    except OSError as exc:
        raise LedgerError(f"{source_path}: cannot read the template: {exc.strerror}") from None
    env = SandboxedEnvironment(
        undefined=StrictUndefined, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True
    )
    env.filters["usd"] = fmt.usd
    env.filters["num"] = fmt.num
    try:
        return env.from_string(source), source_path
    except TemplateSyntaxError as exc:
        raise LedgerError(f"{source_path}:{exc.lineno}: template error: {exc.message}") from None


def render_notice(template: Any, notice: Notice, thresholds: Thresholds, source: Path) -> tuple[str, str]:
    """(subject, body): the template's first line is ``Subject: …``, the rest the body."""
    from jinja2 import TemplateError

    from gpuledger.ledger.text import neutral, neutral_lines

    def plain(value: object) -> object:  # a name as the mail shows it: no line end can forge a line
        return neutral(value) if isinstance(value, str) else value

    context = {
        "user": plain(notice.user),
        "team": plain(notice.team),
        "period": notice.period,
        "total_usd": notice.total_usd,
        "findings": [
            {k: plain(v) for k, v in (asdict(f) | {"title": f.title}).items()} for f in notice.findings
        ],
        "thresholds": asdict(thresholds),
    }
    try:
        text = template.render(**context)
    except TemplateError as exc:
        line = getattr(exc, "lineno", None)
        raise LedgerError(f"{source}{':' + str(line) if line else ''}: template error: {exc}") from None
    first, _, body = text.partition("\n")
    if not first.lower().startswith("subject:"):
        raise LedgerError(f"{source}:1: the template's first line must be 'Subject: …'")
    return neutral(first.split(":", 1)[1].strip()), neutral_lines(body.lstrip("\n"))


def record_sent(con: duckdb.DuckDBPyConnection, notice: Notice, now: dt.datetime) -> None:
    """Remember a sent notice (one row per finding) for the cooldown; the caller owns the transaction."""
    for f in notice.findings:
        con.execute(
            "INSERT INTO notices VALUES (?, ?, ?, ?, ?, ?, ?)",
            [notice.user, f.kind, f.target, f.usd, notice.period, notice.address or "", now],
        )
