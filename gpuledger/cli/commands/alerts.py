"""``gpuledger alerts``: what crossed a line (budget thresholds, spend against its baseline, a team's waste share,
new capacity no job held), sent once each by mail and webhook (gpuledger/alerts/, docs/metrics.md "Alerts")."""

from __future__ import annotations

import argparse

from gpuledger.alerts.run import Outcome, judge_ledger, send
from gpuledger.cli.commands._common import add_db_options, print_json
from gpuledger.cli.times import day
from gpuledger.ledger.db import sync_reference
from gpuledger.ledger.settings import load_settings
from gpuledger.ledger.text import neutral
from gpuledger.reports import mail


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "alerts",
        help="send what crossed a line (budgets, spend jumps, waste share, unheld capacity) once, by mail and webhook",
        description="Judges the ledger as of its last day (or --as-of DAY: as it stood at that day's end) and sends "
        "each new alert once, by mail (--smtp, to [alerts] mail_to, the budget's notify and the team's "
        "[reports.team_mail]) and by webhook ([alerts] webhook_url or --webhook). What was sent is kept in the "
        "ledger: a re-run sends nothing new. --dry-run lists and sends nothing.",
    )
    p.add_argument("--as-of", type=day, help="judge the ledger as it stood at the end of this UTC day")
    p.add_argument("--dry-run", action="store_true", help="list what would be sent; send and record nothing")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    p.add_argument("--webhook", metavar="URL", help="post to this URL instead of [alerts] webhook_url")
    m = p.add_argument_group("mail")
    m.add_argument("--smtp", metavar="URL", help="smtp://[user@]host[:port][?starttls=1] or smtps://…")
    m.add_argument("--starttls", action="store_true", help="upgrade an smtp:// connection with STARTTLS")
    m.add_argument("--smtp-password-env", default=mail.PASSWORD_ENV, metavar="VAR")
    m.add_argument("--smtp-cafile", metavar="PEM")
    m.add_argument("--mail-from", metavar="ADDR", help="sender (default gpuledger@this host)")
    add_db_options(p)
    p.set_defaults(func=run)


def render(o: Outcome, dry_run: bool) -> str:
    if o.judged_day is None:
        return "the ledger is empty: nothing to judge"
    lines = [f"judged as of {o.judged_day}"]
    verb = "would send" if dry_run else "sent"
    for title, alerts in ((verb, o.new), ("already sent", o.already), ("held by the cooldown", o.cooling)):
        lines.append(f"{title}: {len(alerts)}")
        lines += [f"  [{a.rule}] {neutral(a.message)}" for a in alerts]
    if o.channels:
        lines.append(f"channels: {', '.join(o.channels)}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    sync_reference(args.db, settings)
    outcome = judge_ledger(args.db, settings, args.as_of)
    if not args.dry_run:
        if args.webhook and not args.webhook.startswith(("http://", "https://")):
            raise mail.LedgerError(f"--webhook: must be an http(s) URL, got {args.webhook!r}")
        send(
            args.db,
            settings,
            outcome,
            smtp=mail.parse_smtp_url(args.smtp, starttls=args.starttls) if args.smtp else None,
            sender=args.mail_from or mail.default_sender(),
            password_env=args.smtp_password_env,
            cafile=args.smtp_cafile,
            webhook_url=args.webhook,
        )
    if args.json:
        print_json(outcome.as_json())
    else:
        print(render(outcome, args.dry_run))
    return 0
