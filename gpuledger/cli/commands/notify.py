"""``gpuledger notify``: mail each user a short notice about the week's worst patterns of their own jobs
(idle GPUs, failed without a checkpoint, a GPU far bigger than needed, a batch far too small), with the $;
``--dry-run`` prints the mails instead. gpuledger/reports/notices.py holds the rules and the template."""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from analytics.filters import Filters, horizon
from analytics.money import cents
from analytics.shared import sharing
from gpuledger.cli.commands._common import add_db_options, add_filter_options, print_json, require_known
from gpuledger.ledger.db import reader, sync_reference, writer
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.settings import load_settings
from gpuledger.ledger.text import neutral
from gpuledger.reports import mail, notices
from gpuledger.reports.content import last_full_week, previous_period, waste_figures, week_range


def register(sub: argparse._SubParsersAction) -> None:
    d = notices.Thresholds()
    p = sub.add_parser(
        "notify",
        help="mail each user a notice about the week's wasteful patterns of their own jobs (--dry-run prints)",
        description="One mail per user about their own jobs of the week: idle GPUs, failed runs without a "
        "checkpoint, a GPU far bigger than needed, a batch far too small, each with its $ and what to change. "
        "The same notice (user, pattern, job) is not sent twice within --cooldown-days (remembered in the "
        "ledger). Without --week/--since/--until: the last full ISO week of the data (docs/reports.md).",
    )
    p.add_argument("--week", help="ISO week, e.g. 2026-W47 (Monday to Sunday, UTC)")
    add_filter_options(p)
    p.add_argument("--user", action="append", default=[], help="only this user (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="print the mails; send and record nothing")
    p.add_argument("--json", action="store_true", help="with --dry-run: the notices as JSON")
    t = p.add_argument_group("thresholds")
    t.add_argument(
        "--min-usd", type=float, default=d.min_usd, help=f"a pattern's least $ (default {d.min_usd:g})"
    )
    t.add_argument(
        "--batch-factor",
        type=float,
        default=d.batch_factor,
        help=f"small batch: the batch that fits is ≥ this × the current (default {d.batch_factor:g})",
    )
    t.add_argument(
        "--max-items", type=int, default=d.max_items, help=f"patterns per mail (default {d.max_items})"
    )
    t.add_argument(
        "--cooldown-days",
        type=float,
        default=d.cooldown_days,
        help=f"never the same notice twice within this many days (default {d.cooldown_days:g})",
    )
    m = p.add_argument_group("mail")
    m.add_argument(
        "--mail-domain", metavar="DOMAIN", help="a user's address is USER@DOMAIN (names with @ as they are)"
    )
    m.add_argument("--smtp", metavar="URL", help="smtp://[user@]host[:port][?starttls=1] or smtps://…")
    m.add_argument("--starttls", action="store_true", help="upgrade an smtp:// connection with STARTTLS")
    m.add_argument("--smtp-password-env", default=mail.PASSWORD_ENV, metavar="VAR")
    m.add_argument("--smtp-cafile", metavar="PEM")
    m.add_argument("--mail-from", metavar="ADDR", help="sender (default gpuledger@this host)")
    m.add_argument("--template", metavar="FILE", help="Jinja2 template of the mail (see --print-template)")
    m.add_argument("--print-template", action="store_true", help="print the default template and exit")
    add_db_options(p)
    p.set_defaults(func=run)


def _thresholds(args: argparse.Namespace) -> notices.Thresholds:
    for name in ("min_usd", "batch_factor", "cooldown_days"):
        if getattr(args, name) < 0:
            raise LedgerError(f"--{name.replace('_', '-')}: must be at least 0, got {getattr(args, name):g}")
    if args.max_items < 1:
        raise LedgerError(f"--max-items: must be at least 1, got {args.max_items}")
    return notices.Thresholds(
        min_usd=args.min_usd,
        batch_factor=args.batch_factor,
        max_items=args.max_items,
        cooldown_days=args.cooldown_days,
    )


def _figures(con: object, filters: Filters, settings: object, period: str) -> str:
    """The view's three figures (the waste teams control, capacity no job held, unmeasured) with their
    changes vs the period before, in the report's words and numbers (gpuledger.reports.content.waste_figures):
    what the notices are part of."""
    from analytics.summary import summary

    now = summary(con, filters=filters, settings=settings)  # type: ignore[arg-type]
    before_filters = previous_period(filters)
    before = summary(con, filters=before_filters, settings=settings) if before_filters else None  # type: ignore[arg-type]
    lines = [f"{period}, this view:"]
    for words, value, change in waste_figures(now, before):
        lines.append(f"  {words}: {value}" + (f"; {change} vs the period before" if before else ""))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.print_template:
        sys.stdout.write(notices.DEFAULT_TEMPLATE)
        return 0
    if args.week and (args.since or args.until):
        print("error: give either --week or --since/--until, not both", file=sys.stderr)
        return 2
    if not args.dry_run and not (args.smtp and args.mail_domain):
        print(
            "error: sending needs --smtp URL and --mail-domain DOMAIN (or --dry-run to print the notices)",
            file=sys.stderr,
        )
        return 2
    thresholds = _thresholds(args)
    target = (
        mail.parse_smtp_url(args.smtp, starttls=args.starttls) if args.smtp and not args.dry_run else None
    )
    template, source = notices.load_template(args.template)
    settings = load_settings(args.settings)
    sync_reference(args.db, settings)
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    with reader(args.db) as con, sharing(con):
        since, until = args.since, args.until
        week = None
        if args.week or not (since or until):
            week = args.week or last_full_week(horizon(con))
            since, until = week_range(week)
        period = week or f"{since or 'first'} – {until or 'latest'}"
        filters = Filters(
            since=since,
            until=until,
            teams=tuple(args.team),
            clusters=tuple(args.cluster),
            users=tuple(args.user),
        )
        require_known(con, filters)
        figures = _figures(con, filters, settings, period)
        found = notices.build_notices(
            con,
            filters=filters,
            settings=settings,
            thresholds=thresholds,
            period=period,
            domain=args.mail_domain,
            now=now,
        )
    due = [n for n in found if n.findings]
    held = sum(1 for n in found if not n.findings)
    mails = [(n, *notices.render_notice(template, n, thresholds, source)) for n in due]
    if args.dry_run:
        if args.json:
            print_json(
                [
                    {
                        "user": n.user,
                        "team": n.team,
                        "address": n.address,
                        "subject": subject,
                        "body": body,
                        "total_usd": cents(n.total_usd),
                        "findings": [
                            {"kind": f.kind, "target": f.target, "usd": cents(f.usd)} for f in n.findings
                        ],
                    }
                    for n, subject, body in mails
                ]
            )
            return 0
        for n, subject, body in mails:
            to = neutral(n.address) if n.address else "(no address: give --mail-domain)"
            print(f"To: {to}\nSubject: {subject}\n\n{body}")
            print("-" * 72)
        print(figures)
        print(
            f"{len(mails)} notice(s) due, {held} user(s) only with notices in cooldown; dry run: nothing sent"
        )
        return 0
    assert target is not None
    sender = args.mail_from or mail.default_sender()
    sent, skipped = 0, [n.user for n, _, _ in mails if not n.address]
    refused: list[str] = []  # a recipient no mail can be addressed to (a line end in the name): the rest go
    with mail.Mailer(target, password_env=args.smtp_password_env, cafile=args.smtp_cafile) as m:
        for n, subject, body in mails:
            if not n.address:
                continue
            try:
                msg = mail.build_message(sender=sender, to=[n.address], subject=subject, text=body)
            except ValueError as exc:  # the email package refuses a header with CR/LF in it
                refused.append(f"{neutral(n.user)!r} ({exc})")
                print(f"error: not mailed: {neutral(n.user)!r}: {exc}", file=sys.stderr)
                continue
            m.send(msg)
            with writer(args.db) as con:  # remembered at once: a later failure does not resend this one
                con.execute("BEGIN TRANSACTION")
                notices.record_sent(con, n, now)
                con.execute("COMMIT")
            sent += 1
    print(
        f"sent {sent} notice(s) through {target.display}; {held} user(s) only with notices in cooldown"
        + (f"; no address for: {', '.join(neutral(s) for s in skipped)}" if skipped else "")
        + (f"; {len(refused)} not mailed (see above)" if refused else "")
    )
    return 1 if refused else 0
