"""Judge, send and remember: one ``gpuledger alerts`` run (a dry run judges and lists only)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from analytics.shared import sharing
from gpuledger.alerts import deliver, state
from gpuledger.alerts.rules import Alert, judge
from gpuledger.budgets.status import as_of
from gpuledger.ledger.db import reader, writer
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.settings import Settings
from gpuledger.reports import mail


@dataclass
class Outcome:
    judged_day: dt.date | None
    new: list[Alert] = field(default_factory=list)  # sent now (or, in a dry run, that would be)
    already: list[Alert] = field(default_factory=list)  # sent before
    cooling: list[Alert] = field(default_factory=list)  # its rule and scope sent within the cooldown
    channels: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        def rows(alerts: list[Alert]) -> list[dict[str, Any]]:
            return [{"key": a.key, "rule": a.rule, "scope": a.scope, "message": a.message} for a in alerts]

        return {
            "judged_day": self.judged_day.isoformat() if self.judged_day else None,
            "new": rows(self.new),
            "already_sent": rows(self.already),
            "cooldown": rows(self.cooling),
            "channels": self.channels,
        }


def judge_ledger(db: str | None, settings: Settings, day: dt.date | None) -> Outcome:
    """The alerts as of ``day``, split into new, already sent and held back by the cooldown."""
    with reader(db) as con, sharing(con):
        at = as_of(con, day)
        if at is None:
            return Outcome(None)
        alerts = judge(con, settings, at)
        sent = state.sent_keys(con)
        last = state.last_judged(con)
    out = Outcome(at.day)
    cooldown = dt.timedelta(hours=settings.alerts.cooldown_hours)
    for a in alerts:
        if a.key in sent:
            out.already.append(a)
            continue
        before = last.get((a.rule, a.scope))
        if (
            before is not None
            and a.rule not in ("budget", "budget_forecast")
            and dt.timedelta(days=(at.day - before).days) < cooldown
        ):
            out.cooling.append(a)
        else:
            out.new.append(a)
    return out


def send(
    db: str | None,
    settings: Settings,
    outcome: Outcome,
    *,
    smtp: mail.SmtpTarget | None,
    sender: str,
    password_env: str = mail.PASSWORD_ENV,
    cafile: str | None = None,
    webhook_url: str | None = None,
    now: dt.datetime | None = None,
) -> None:
    """Send the new alerts by mail (to each one's recipients) and webhook, then record them; a channel that
    fails raises before anything is recorded, so the next run sends again."""
    if not outcome.new or outcome.judged_day is None:
        return
    url = webhook_url or settings.alerts.webhook_url
    by_address: dict[str, list[Alert]] = {}
    for a in outcome.new:
        for address in deliver.recipients(a, settings.alerts.mail_to, settings.team_mail):
            by_address.setdefault(address, []).append(a)
    if smtp is None and url is None:
        raise LedgerError(
            "no channel to send alerts by: give --smtp URL (to [alerts] mail_to and the teams' addresses) or set "
            "[alerts] webhook_url; --dry-run lists them"
        )
    if smtp is not None and not by_address:
        raise LedgerError(
            "--smtp: no address to mail: set [alerts] mail_to, a budget's notify or [reports.team_mail]"
        )
    if smtp is not None:
        with mail.Mailer(smtp, password_env=password_env, cafile=cafile) as m:
            deliver.mail_alerts(m, sender, by_address)
        outcome.channels.append("mail")
    if url is not None:
        for a in outcome.new:
            deliver.post_webhook(url, a)
        outcome.channels.append("webhook")
    stamp = now or dt.datetime.now(dt.UTC).replace(tzinfo=None)
    with writer(db) as con:
        con.execute("BEGIN")
        for a in outcome.new:
            state.record(con, a, outcome.judged_day, outcome.channels, stamp)
        con.execute("COMMIT")
