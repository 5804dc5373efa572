"""``gpuledger report``: write the weekly cost report (HTML, Markdown, CSV, JSON or plain text), one file per
team with ``--per-team``, or mail it (HTML + plain text, CSV attached) with ``--mail-to``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from email.message import EmailMessage
from pathlib import Path

from analytics.filters import Filters, horizon
from analytics.shared import sharing
from gpuledger.cli.commands._common import add_db_options, add_filter_options, require_known
from gpuledger.ledger.db import reader, sync_reference
from gpuledger.ledger.errors import LedgerError, out_of_space
from gpuledger.ledger.settings import load_settings
from gpuledger.ledger.text import neutral
from gpuledger.reports import mail
from gpuledger.reports.content import ReportData, collect, default_title
from gpuledger.reports.fmt import slug
from gpuledger.reports.weekly import FORMATS, render

TEAMS = "\0teams"  # --mail-to given without addresses: each team to its own ([reports.team_mail])
SUFFIXES = {
    ".md": "md",
    ".markdown": "md",
    ".csv": "csv",
    ".json": "json",
    ".txt": "txt",
    ".html": "html",
    ".htm": "html",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write or mail the weekly cost report (html, md, csv, json or txt; one file per team)",
        description="The weekly cost report: headline with the change vs the previous week, top actions "
        "with $/week, spend and waste by team, user and GPU model, the costliest jobs, unit-cost trends, "
        "energy, data-quality notes and the definitions of every figure. Without --week/--since/--until it "
        "covers the last full ISO week of the data. The numbers equal `gpuledger summary --json` for the "
        "same filters (docs/reports.md).",
    )
    p.add_argument("--week", help="ISO week, e.g. 2026-W47 (Monday to Sunday, UTC)")
    add_filter_options(p)
    p.add_argument("--out", help="write here (default: stdout)")
    p.add_argument("--format", choices=FORMATS, help="default: from --out's suffix, else html")
    p.add_argument(
        "--per-team",
        metavar="DIR",
        help="write one report per team into DIR (DIR/TEAM.FORMAT), each with only its jobs and users",
    )
    g = p.add_argument_group("mail (docs/reports.md)")
    g.add_argument(
        "--mail-to",
        metavar="ADDR[,ADDR]",
        nargs="?",
        const=TEAMS,
        help="mail the report: HTML + plain text, CSV attached. Bare, with --per-team DIR: mail each team its "
        "own report, to the addresses of [reports.team_mail] in the settings (a team with none is listed "
        "and skipped)",
    )
    g.add_argument(
        "--smtp", metavar="URL", help="smtp://[user@]host[:port][?starttls=1] or smtps://[user@]host[:port]"
    )
    g.add_argument("--starttls", action="store_true", help="upgrade an smtp:// connection with STARTTLS")
    g.add_argument(
        "--smtp-password-env",
        default=mail.PASSWORD_ENV,
        metavar="VAR",
        help=f"environment variable holding the SMTP password (default {mail.PASSWORD_ENV})",
    )
    g.add_argument("--smtp-cafile", metavar="PEM", help="CA certificate(s) to verify the server with")
    g.add_argument("--mail-from", metavar="ADDR", help="sender (default gpuledger@this host)")
    add_db_options(p)
    p.set_defaults(func=run)


def report_format(args: argparse.Namespace) -> str:
    if args.format:
        return str(args.format)
    if args.out:
        return SUFFIXES.get(Path(args.out).suffix.lower(), "html")
    return "html"


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise LedgerError(f"{path}: cannot write the report: {out_of_space(exc) or exc.strerror}") from None


def team_files(teams: list[str], fmt: str) -> dict[str, str]:
    """team → file name inside --per-team DIR: the team's name made file-safe, unique even when two names
    differ only in characters a file name cannot hold."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for team in teams:
        base = slug(team)
        name, n = base, 2
        while name.lower() in used:
            name, n = f"{base}-{n}", n + 1
        used.add(name.lower())
        out[team] = f"{name}.{fmt}"
    return out


def _teams(data: ReportData) -> list[str]:
    from gpuledger.ledger.palette import is_team

    return [t for t in data.by_team["team"].to_list() if is_team(t) and t != "(none)"]


def run(args: argparse.Namespace) -> int:
    if args.week and (args.since or args.until):
        print("error: give either --week or --since/--until, not both", file=sys.stderr)
        return 2
    if args.mail_to and not args.smtp:
        print(
            "error: --mail-to needs --smtp URL (e.g. --smtp smtp://mail.example.org:587?starttls=1)",
            file=sys.stderr,
        )
        return 2
    if args.per_team and args.out:
        print("error: give either --out or --per-team DIR, not both", file=sys.stderr)
        return 2
    to_teams = args.mail_to == TEAMS
    if to_teams and not args.per_team:
        print(
            "error: --mail-to without addresses mails each team its own report: give --per-team DIR too "
            "(or --mail-to ADDR[,ADDR])",
            file=sys.stderr,
        )
        return 2
    from gpuledger.reports.content import last_full_week, week_range

    fmt = report_format(args)
    target = recipients = None
    if args.mail_to:  # check the delivery options before any work
        recipients = None if to_teams else mail.parse_addresses(args.mail_to)
        target = mail.parse_smtp_url(args.smtp, starttls=args.starttls)
    settings = load_settings(args.settings)
    if to_teams and not settings.team_mail:
        print(
            f'error: --mail-to without addresses needs a [reports.team_mail] table (team = "address") in the '
            f"settings ({settings.source}); see docs/reports.md",
            file=sys.stderr,
        )
        return 2
    sync_reference(args.db, settings)
    with reader(args.db) as con, sharing(con):
        since, until = args.since, args.until
        if args.week or not (since or until):
            since, until = week_range(args.week or last_full_week(horizon(con)))
        filters = Filters(since=since, until=until, teams=tuple(args.team), clusters=tuple(args.cluster))
        require_known(con, filters)
        data = collect(con, filters=filters, settings=settings)
        per_team: list[tuple[str, ReportData]] = []
        if args.per_team:
            for team in _teams(data):
                tf = Filters(since=since, until=until, teams=(team,), clusters=tuple(args.cluster))
                per_team.append(
                    (
                        team,
                        collect(
                            con, filters=tf, settings=settings, title=f"{default_title(tf)}, team {team}"
                        ),
                    )
                )
    if args.per_team:
        folder = Path(args.per_team)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LedgerError(f"{folder}: cannot create the folder: {exc.strerror}") from None
        names = team_files([t for t, _ in per_team], fmt)
        for team, team_data in per_team:
            _write(folder / names[team], render(team_data, fmt))
        print(
            f"wrote {len(per_team)} team report(s) to {folder} ({since} – {until}): {', '.join(names.values())}"
        )
    elif args.out:
        _write(Path(args.out), render(data, fmt))
        print(f"wrote {args.out} ({since} – {until})")
    elif not args.mail_to:
        sys.stdout.write(render(data, fmt))
    if target is not None and recipients:
        send_report(data, target, recipients, args)
        print(f"mailed the report to {', '.join(recipients)} through {target.display}")
    if target is not None and to_teams:
        return mail_teams(per_team, settings.team_mail, target, args)
    return 0


def report_message(
    data: ReportData, to: list[str], args: argparse.Namespace, team: str | None = None
) -> EmailMessage:
    """The report as a mail: subject = its title (made header-safe), text + HTML, the CSV attached as
    gpuledger-report-WEEK[-TEAM].csv (the team's name made file-safe)."""
    week = data.filters.since.isoformat() if data.filters.since else "all"
    if "week " in data.title:
        week = data.title.split("week ", 1)[1].split(" ", 1)[0]
    name = f"gpuledger-report-{week}" + (f"-{slug(team)}" if team is not None else "")
    return mail.build_message(
        sender=args.mail_from or mail.default_sender(),
        to=to,
        subject=data.title,
        text=render(data, "txt"),
        html=render(data, "html"),
        attachments=[(f"{name}.csv", render(data, "csv").encode("utf-8"), "text/csv")],
    )


def send_report(data: ReportData, target: mail.SmtpTarget, to: list[str], args: argparse.Namespace) -> None:
    with mail.Mailer(target, password_env=args.smtp_password_env, cafile=args.smtp_cafile) as m:
        m.send(report_message(data, to, args))


def mail_teams(
    per_team: list[tuple[str, ReportData]],
    addresses: Mapping[str, tuple[str, ...]],
    target: mail.SmtpTarget,
    args: argparse.Namespace,
) -> int:
    """Mail each team its own report, through one SMTP session, to ``addresses[team]``. A team with no
    address is listed and skipped; a team whose mail the server refuses is listed and the others still go.
    Exit 0 when every team with an address got its mail, else 1. Team names are printed as Python writes
    them (neutral, then repr), so a name carrying a line break or an escape sequence cannot forge a line of this
    output."""
    sent: list[str] = []
    skipped = [team for team, _ in per_team if team not in addresses]
    failed = 0
    todo = [(team, data) for team, data in per_team if team in addresses]
    if todo:
        with mail.Mailer(target, password_env=args.smtp_password_env, cafile=args.smtp_cafile) as m:
            for team, data in todo:
                to = list(addresses[team])
                try:
                    m.send(report_message(data, to, args, team))
                except LedgerError as exc:
                    failed += 1
                    print(f"error: team {neutral(team)!r}: {exc}", file=sys.stderr)
                    continue
                sent.append(f"{neutral(team)!r} to {', '.join(to)}")
    for team in skipped:
        print(f"team {neutral(team)!r}: no address in [reports.team_mail]: not mailed", file=sys.stderr)
    reported = {team for team, _ in per_team}
    for team in sorted(set(addresses) - reported):
        print(f"team {neutral(team)!r}: no spend in the period, no report: not mailed", file=sys.stderr)
    print(
        f"mailed {len(sent)} team report(s) through {target.display}"
        + (f": {'; '.join(sent)}" if sent else "")
        + (f"; {len(skipped)} team(s) without an address skipped" if skipped else "")
    )
    return 1 if failed else 0
