"""``gpuledger guard``: act on idle GPUs while they burn, after pricing the policy over history first.

- ``guard replay --since D --until D [--policy NAME | --example] [--json]``: the ``[[guard.policy]]`` tables run over the
  ledger's history (gpuledger/guard/replay.py): per job each warning, the cancel, the GPU-hours and $ the cancel
  would have saved, and the false alarms. Reads only.
- ``guard run [--every 5m] [--enforce]``: the policies on the jobs running now (gpuledger/guard/live.py). Without
  ``--enforce`` it says what it would do and changes nothing; with it, it mails owners, digests the admins,
  records each step in ``guard_actions`` and cancels only where ``[guard] allow_cancel = true``.
- ``guard actions [--json]``: the steps taken, from ``guard_actions``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from analytics.guard_actions import guard_actions, guard_saved
from analytics.money import cents, usd
from gpuledger.cli import times
from gpuledger.cli.commands._common import UsageError, add_db_options, print_json
from gpuledger.cli.live.repeat import poll_until_stopped
from gpuledger.guard import live
from gpuledger.guard.edge import KubeTarget
from gpuledger.guard.example import example_policy
from gpuledger.guard.replay import replay
from gpuledger.ledger.db import reader, sync_reference, writer
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.guard_policy import Policy
from gpuledger.ledger.settings import Settings, load_settings
from gpuledger.ledger.text import neutral
from gpuledger.reports import mail


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "guard",
        help="idle-GPU policies: replay them over history in $, run them live (warn, then cancel with --enforce)",
        description="Policies from [[guard.policy]] in the settings (docs/settings.md#guard-idle-job-policies).",
    )
    gs = p.add_subparsers(dest="guard_command", metavar="ACTION", required=True)

    r = gs.add_parser(
        "replay", help="what the policies would have done over history, and the $ they would have saved"
    )
    r.add_argument(
        "--since", type=times.day, required=True, help="first UTC day (YYYY-MM-DD or an age like 7d)"
    )
    r.add_argument("--until", type=times.day, required=True, help="last UTC day included")
    r.add_argument(
        "--policy", action="append", default=[], metavar="NAME", help="only this policy (repeatable)"
    )
    r.add_argument(
        "--example",
        action="store_true",
        help="replay the example policy (docs/settings.md) instead of the settings' policies",
    )
    r.add_argument("--json", action="store_true", help="the replay as JSON")
    add_db_options(r)
    r.set_defaults(func=run_replay)

    g = gs.add_parser("run", help="apply the policies to running jobs (a dry run unless --enforce)")
    g.add_argument(
        "--every", type=times.duration, metavar="PERIOD", help="run each period until SIGTERM (e.g. 5m)"
    )
    g.add_argument(
        "--enforce",
        action="store_true",
        help="act: mail, record, and cancel where [guard] allow_cancel = true",
    )
    g.add_argument(
        "--policy", action="append", default=[], metavar="NAME", help="only this policy (repeatable)"
    )
    g.add_argument("--fresh-minutes", type=float, default=live.FRESH_MINUTES,
                   help=f"leave a job alone whose telemetry is older than this (default {live.FRESH_MINUTES:g})")  # fmt: skip
    g.add_argument("--json", action="store_true", help="each tick's plans as JSON")
    m = g.add_argument_group("mail")
    m.add_argument("--smtp", metavar="URL", help="smtp://[user@]host[:port][?starttls=1] or smtps://…")
    m.add_argument("--starttls", action="store_true")
    m.add_argument("--smtp-password-env", default=mail.PASSWORD_ENV, metavar="VAR")
    m.add_argument("--smtp-cafile", metavar="PEM")
    m.add_argument("--mail-from", metavar="ADDR", help="sender (default gpuledger@this host)")
    m.add_argument(
        "--mail-domain",
        metavar="DOMAIN",
        help="an owner's address is USER@DOMAIN (default [guard] mail_domain)",
    )
    k = g.add_argument_group("kubernetes")
    k.add_argument("--kube-server", metavar="URL", help="API URL without credentials (else the kubeconfig)")
    k.add_argument("--kubeconfig", metavar="FILE")
    k.add_argument("--context", metavar="NAME")
    add_db_options(g)
    g.set_defaults(func=run_live)

    a = gs.add_parser("actions", help="the steps the guard took (guard_actions)")
    a.add_argument("--since", type=times.day, help="first UTC day")
    a.add_argument("--until", type=times.day, help="last UTC day included")
    a.add_argument("--json", action="store_true")
    add_db_options(a)
    a.set_defaults(func=run_actions)


def _policies(settings: Settings, names: list[str]) -> tuple[Policy, ...]:
    known = settings.guard.policies
    if not known:
        raise UsageError(
            f"no [[guard.policy]] in the settings ({settings.source}): docs/settings.md#guard-idle-job-policies"
        )
    if unknown := [n for n in names if settings.guard.policy(n) is None]:
        raise UsageError(
            f"--policy {unknown[0]!r}: no such policy (known: {', '.join(p.name for p in known)})"
        )
    return tuple(p for p in known if not names or p.name in names)


def _money(v: float | None) -> str:
    return usd(v, na="n/a (no price)")


def run_replay(args: argparse.Namespace) -> int:
    if args.until < args.since:
        raise UsageError("--until is before --since")
    settings = load_settings(args.settings)
    if args.example and args.policy:
        raise UsageError("--example replays the example policy alone: leave out --policy")
    policies = (example_policy(),) if args.example else _policies(settings, args.policy)
    sync_reference(args.db, settings)
    with reader(args.db) as con:
        out = replay(con, since=args.since, until=args.until, settings=settings, policies=policies)
    if args.json:
        for p in out["policies"]:
            p["totals"]["saved_usd"] = cents(p["totals"]["saved_usd"])
            for j in p["jobs"]:
                j["saved_usd"] = cents(j["saved_usd"])
                for s in j["steps"]:
                    s["idle_usd"] = cents(s["idle_usd"])
        print_json(out)
        return 0
    for p in out["policies"]:
        t = p["totals"]
        print(
            f"policy {p['policy']} ({'cancels' if p['cancels'] else 'notifies only'}), {out['since']} – {out['until']}: "
            f"{t['jobs_warned']} job(s) warned, {t['jobs_cancelled']} cancelled, {t['saved_gpu_hours']:.2f} GPU-hours "
            f"and {_money(t['saved_usd'])} saved, {t['false_alarms']} false alarm(s), {t['jobs_exempt']} exempt"
            + (
                f", {t['jobs_without_telemetry']} without telemetry (not judged)"
                if t["jobs_without_telemetry"]
                else ""
            )
        )
        for j in p["jobs"]:
            steps = ", ".join(f"{s['step']} {s['at'][:16]}" for s in j["steps"])
            tail = (
                f" → saved {j['saved_gpu_hours']:.2f} GPU-h, {_money(j['saved_usd'])}"
                if j["cancelled_at"]
                else ""
            )
            busy = (
                f"; busy again {', '.join(b[:16] for b in j['busy_again'])} (false alarm)"
                if j["busy_again"]
                else ""
            )
            exempt = f" [exempt: {j['exempt']}]" if j["exempt"] else ""
            print(f"  {neutral(j['job_id'])} ({neutral(j['user'] or '?')}){exempt}: {steps}{tail}{busy}")
    return 0


def run_actions(args: argparse.Namespace) -> int:
    with reader(args.db) as con:
        rows = guard_actions(con, since=args.since, until=args.until)
        totals = guard_saved(con, since=args.since, until=args.until)
    if args.json:
        print_json({"totals": totals, "actions": rows.to_dicts()})
        return 0
    for r in rows.iter_rows(named=True):
        print(
            f"{r['acted_ts']:%Y-%m-%d %H:%M} {r['step']:<10} {neutral(r['job_id'])} ({r['policy']}) "
            f"{r['idle_gpu_hours']:.2f} idle GPU-h" + (f"  {neutral(r['answer'])}" if r["answer"] else "")
        )
    from analytics.guard_actions import saved_line

    print(saved_line(totals))
    return 0


def run_live(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    policies = _policies(settings, args.policy)
    domain = args.mail_domain or settings.guard.mail_domain
    target = mail.parse_smtp_url(args.smtp, starttls=args.starttls) if args.smtp else None
    if args.enforce and target is None:
        raise UsageError("--enforce mails the owners and the admins: give --smtp URL")
    kube = KubeTarget(server=args.kube_server, kubeconfig=args.kubeconfig, context=args.context)
    sync_reference(args.db, settings)

    def tick() -> list[dict[str, object]]:
        now = times.utcnow().replace(microsecond=0)
        with reader(args.db) as con:
            plans = live.due(con, settings, now, fresh_minutes=args.fresh_minutes, policies=policies)
        spared: dict[tuple[str, str], str | None] = {}
        for p in plans:  # QOS and pod labels: only the scheduler knows them (asking changes nothing)
            key = (p.job.job_id, p.policy.name)
            if key not in spared:
                spared[key] = live.scheduler_exemption(p.job, p.policy, kube)
        exempt = [dict(_plan_dict(p), done=f"exempt: {spared[(p.job.job_id, p.policy.name)]}") for p in plans
                  if spared[(p.job.job_id, p.policy.name)]]  # fmt: skip
        plans = [p for p in plans if not spared[(p.job.job_id, p.policy.name)]]
        if not args.enforce:
            return exempt + [
                dict(_plan_dict(p), done="dry run: nothing sent, cancelled or recorded") for p in plans
            ]
        return exempt + _enforce(args, settings, target, domain, kube, plans, now)

    def show(report: list[dict[str, object]]) -> None:
        if args.json:
            print_json(report)
        else:
            for r in report:
                print(f"{r['describe']} — {r['done']}")
            print(
                f"{len(report)} step(s) due" + ("" if args.enforce else "; dry run (--enforce acts)"),
                flush=True,
            )

    poll_until_stopped(tick, show, every=args.every)
    return 0


def _plan_dict(p: live.Plan) -> dict[str, object]:
    return {
        "job_id": p.job.job_id,
        "policy": p.policy.name,
        "step": p.step.step,
        "due": p.step.at.isoformat(sep=" "),
        "run_start": p.step.run_start.isoformat(sep=" "),
        "idle_gpu_hours": p.idle_gpu_hours,
        "idle_usd": cents(p.idle_usd),
        "blocked": p.blocked,
        "describe": p.describe(),
    }


def _enforce(
    args: argparse.Namespace,
    settings: Settings,
    target: mail.SmtpTarget | None,
    domain: str | None,
    kube: KubeTarget,
    plans: list[live.Plan],
    now: dt.datetime,
) -> list[dict[str, object]]:
    assert target is not None
    if not plans:
        return []  # nothing due: no SMTP session this tick
    sender = args.mail_from or mail.default_sender()
    report: list[dict[str, object]] = []
    digest: list[str] = []
    with mail.Mailer(target, password_env=args.smtp_password_env, cafile=args.smtp_cafile) as mailer:
        for p in plans:
            row = _plan_dict(p)
            if p.blocked:
                report.append(dict(row, done="waits"))
                continue
            mail_id = answer = None
            if p.step.step.startswith("warn"):
                address = (
                    f"{p.job.user}@{domain}"
                    if p.job.user and domain and "@" not in p.job.user
                    else p.job.user
                )
                if p.step.mailed and address and "@" in address:
                    subject, body = live.warning_text(p)
                    try:
                        msg = mail.build_message(sender=sender, to=[address], subject=subject, text=body)
                        mailer.send(msg)
                        mail_id = str(msg["Message-ID"])
                        done = f"mailed {address}"
                    except (ValueError, LedgerError) as exc:
                        done = f"not mailed: {exc}"
                else:
                    done = (
                        "recorded, not mailed ("
                        + ("cooldown" if not p.step.mailed else "no address: --mail-domain")
                        + ")"
                    )
            else:
                if not settings.guard.allow_cancel:
                    report.append(dict(row, done="not taken: [guard] allow_cancel is false"))
                    continue
                answer = live.take(p, allow_cancel=True, kube=kube)
                done = "" if answer is None else answer.text
            with writer(args.db) as con:  # one row per step, at once: a later failure does not repeat it
                con.execute("BEGIN TRANSACTION")
                live.record(con, p, now, mail_id, answer)
                con.execute("COMMIT")
            report.append(
                dict(row, done=done, mail_id=mail_id, accepted=None if answer is None else answer.ok)
            )
            digest.append(f"{p.describe()}: {done}")
        if digest and settings.guard.admins:
            subject, body = live.digest_text(digest, now)
            mailer.send(
                mail.build_message(sender=sender, to=list(settings.guard.admins), subject=subject, text=body)
            )
    if digest and not settings.guard.admins:
        print("warning: no [guard] admins: no digest sent", file=sys.stderr)
    return report
