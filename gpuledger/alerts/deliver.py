"""The edge: alerts by mail (gpuledger/reports/mail.py's SMTP session) and by webhook (a Slack-compatible JSON
POST: ``{"text": ...}``, which Slack's incoming webhooks, Mattermost and most chat tools take)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterable

from gpuledger.alerts.rules import Alert
from gpuledger.ledger.errors import LedgerError
from gpuledger.reports import mail

WEBHOOK_TIMEOUT_S = 10.0


def post_webhook(url: str, alert: Alert, *, timeout: float = WEBHOOK_TIMEOUT_S) -> None:
    """POST one alert; any answer but 2xx is an error naming the URL's host and the status."""
    body = json.dumps(
        {"text": f"gpuledger: {alert.message}", "rule": alert.rule, "scope": alert.scope, "key": alert.key}
    )
    req = urllib.request.Request(
        url, data=body.encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status = resp.status
    except urllib.error.HTTPError as exc:
        raise LedgerError(f"webhook {req.host}: answered {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise LedgerError(f"webhook {req.host}: cannot post: {reason}") from None
    if not 200 <= status < 300:
        raise LedgerError(f"webhook {req.host}: answered {status}")


def mail_alerts(mailer: mail.Mailer, sender: str, by_address: dict[str, list[Alert]]) -> None:
    """One mail per address with every alert of this run it is told of."""
    for address, alerts in sorted(by_address.items()):
        lines = [f"- {a.message}" for a in alerts]
        subject = f"gpuledger: {len(alerts)} alert{'s' if len(alerts) != 1 else ''}"
        text = "\n".join(["gpuledger alerts:", "", *lines, ""])
        mailer.send(mail.build_message(sender=sender, to=[address], subject=subject, text=text))


def recipients(alert: Alert, admins: Iterable[str], team_mail: dict[str, tuple[str, ...]]) -> list[str]:
    """Admins, the budget's own addresses and the team's [reports.team_mail] addresses, each once."""
    out: list[str] = []
    for a in (*admins, *alert.notify, *(team_mail.get(alert.team, ()) if alert.team else ())):
        if a not in out:
            out.append(a)
    return out
