"""Mailing the report to a real SMTP server on 127.0.0.1: aiosmtpd when it is installed (login, STARTTLS and
TLS too), else the standard library's ``smtpd`` (Python ≤ 3.11; plain delivery only). Tests that need what
only aiosmtpd offers skip, saying so, when it is absent. tests/test_notify.py uses the same server."""

from __future__ import annotations

import email
import email.policy
import socket
import subprocess
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path

import pytest

try:
    import aiosmtpd  # noqa: F401

    HAVE_AIOSMTPD = True
except ImportError:
    HAVE_AIOSMTPD = False

NEEDS_AIOSMTPD = pytest.mark.skipif(
    not HAVE_AIOSMTPD,
    reason="aiosmtpd is not installed (pip install aiosmtpd): login, STARTTLS and smtps are tested against it",
)


@dataclass
class Inbox:
    host: str
    port: int
    messages: list[tuple[str, list[str], EmailMessage]] = field(
        default_factory=list
    )  # (from, rcpts, message)
    logins: list[tuple[str, str]] = field(default_factory=list)

    def add(self, sender: str, rcpts: list[str], raw: bytes) -> None:
        msg = email.message_from_bytes(raw, policy=email.policy.default)
        self.messages.append((sender, list(rcpts), msg))  # type: ignore[arg-type]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def self_signed_cert(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 / localhost made with the openssl command (skips when it is absent)."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    try:
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=DNS:localhost,IP:127.0.0.1",
                "-keyout",
                str(key),
                "-out",
                str(cert),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
    except (FileNotFoundError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot make a test certificate with openssl: {exc}")
    return cert, key


@contextmanager
def smtp_server(
    *,
    login: tuple[str, str] | None = None,
    tls: str | None = None,
    cert: tuple[Path, Path] | None = None,
    host: str = "127.0.0.1",
) -> Iterator[Inbox]:
    """Serve SMTP on ``host`` (127.0.0.1) until the block ends. ``login`` = (user, password) the server
    accepts (and requires); ``tls`` = "starttls" or "implicit" with ``cert`` = (cert, key). Both need
    aiosmtpd."""
    if HAVE_AIOSMTPD:
        yield from _aiosmtpd(login, tls, cert, host)
        return
    if login or tls:
        pytest.skip("aiosmtpd is not installed (pip install aiosmtpd): needed for login and TLS tests")
    yield from _stdlib()


def _aiosmtpd(login, tls, cert, host="127.0.0.1"):  # type: ignore[no-untyped-def]
    import ssl

    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult, LoginPassword

    inbox = Inbox(host, free_port())

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            inbox.add(envelope.mail_from, envelope.rcpt_tos, envelope.original_content or envelope.content)
            return "250 OK"

    def authenticator(server, session, envelope, mechanism, auth_data):  # type: ignore[no-untyped-def]
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        user, password = auth_data.login.decode(), auth_data.password.decode()
        inbox.logins.append((user, password))
        ok = login is not None and (user, password) == login
        return AuthResult(success=ok, handled=False)  # handled=False: aiosmtpd answers 535 itself on failure

    kwargs: dict[str, object] = {}
    if login:
        # aiosmtpd counts only STARTTLS as TLS for its auth_require_tls check, not an smtps connection
        kwargs.update(authenticator=authenticator, auth_required=True, auth_require_tls=tls == "starttls")
    if tls:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
        if tls == "starttls":
            kwargs.update(tls_context=ctx, require_starttls=True)
        else:
            kwargs.update(ssl_context=ctx)
    controller = Controller(Handler(), hostname=host, port=inbox.port, **kwargs)
    controller.start()
    try:
        yield inbox
    finally:
        controller.stop()


def _stdlib():  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import asyncore
        import smtpd

    inbox = Inbox("127.0.0.1", free_port())

    class Server(smtpd.SMTPServer):
        def process_message(self, peer, mailfrom, rcpttos, data, **kwargs):  # type: ignore[no-untyped-def]
            inbox.add(mailfrom, rcpttos, data if isinstance(data, bytes) else data.encode())

    server = Server((inbox.host, inbox.port), None, decode_data=False)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            asyncore.loop(timeout=0.1, count=1)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield inbox
    finally:
        stop.set()
        thread.join(5)
        server.close()


# ---------------------------------------------------------------- the tests

import csv  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

from collectors.ingest import ingest_file  # noqa: E402
from gpuledger.ledger.db import writer  # noqa: E402
from tests.conftest import ROOT, filled_once, gpuledger  # noqa: E402

JOBS = ROOT / "tests" / "fixtures" / "dashboard" / "jobs.csv"
WEEK = ("--week", "2026-W47")


@pytest.fixture(scope="module")
def _jobs_ledger(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], str]:
    return filled_once(tmp_path_factory, lambda con: ingest_file(con, JOBS))


@pytest.fixture
def ledger_file(db_path: str, _jobs_ledger: Callable[[str], str]) -> str:
    """A ledger of this test's own holding tests/fixtures/dashboard/jobs.csv."""
    return _jobs_ledger(db_path)


cli = gpuledger  # the command's main() in this process (tests/conftest.py)


def _parts(msg: EmailMessage) -> dict[str, str]:
    out = {}
    for part in msg.walk():
        if part.get_content_maintype() == "multipart":
            continue
        name = part.get_filename()
        out[f"attachment:{name}" if name else part.get_content_type()] = part.get_content()
    return out


def test_mailed_report_reaches_the_server_with_html_text_and_csv(ledger_file):
    with smtp_server() as inbox:
        done = cli(
            "report",
            *WEEK,
            "--db",
            ledger_file,
            "--mail-to",
            "lead@example.org, cfo@example.org",
            "--smtp",
            f"smtp://127.0.0.1:{inbox.port}",
            "--mail-from",
            "gpuledger@example.org",
        )
        assert done.returncode == 0, done.stderr
        assert "mailed the report to lead@example.org, cfo@example.org" in done.stdout
    ((sender, rcpts, msg),) = inbox.messages
    assert sender == "gpuledger@example.org"
    assert rcpts == ["lead@example.org", "cfo@example.org"]
    assert msg["Subject"] == "GPU cost report, week 2026-W47 (2026-11-16 – 2026-11-22)"
    parts = _parts(msg)
    assert set(parts) == {"text/plain", "text/html", "attachment:gpuledger-report-2026-W47.csv"}
    summary = json.loads(
        cli("summary", "--json", "--since", "2026-11-16", "--until", "2026-11-22", "--db", ledger_file).stdout
    )
    spend = f"${summary['spend_usd']:,.2f}"  # 188 × $2.99 + 12 × $0.71 + 12 × $1.006 = $582.71
    assert spend == "$582.71"
    assert spend in parts["text/plain"] and spend in parts["text/html"]
    assert "<" not in parts["text/plain"].split("What the figures mean")[0]  # plain text, no markup
    rows = list(csv.DictReader(io.StringIO(parts["attachment:gpuledger-report-2026-W47.csv"])))
    assert [float(r["value"]) for r in rows if r["figure"] == "spend_usd" and r["section"] == "headline"] == [
        pytest.approx(582.712)
    ]
    # the multipart/alternative puts the HTML last, the part clients prefer
    alt = next(p for p in msg.walk() if p.get_content_type() == "multipart/alternative")
    assert [p.get_content_type() for p in alt.iter_parts()] == ["text/plain", "text/html"]


def test_mail_and_file_together(ledger_file, tmp_path):
    out = tmp_path / "w47.html"
    with smtp_server() as inbox:
        done = cli(
            "report",
            *WEEK,
            "--db",
            ledger_file,
            "--out",
            str(out),
            "--mail-to",
            "lead@example.org",
            "--smtp",
            f"smtp://127.0.0.1:{inbox.port}",
        )
        assert done.returncode == 0, done.stderr
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert len(inbox.messages) == 1


def test_password_in_the_url_is_refused(ledger_file):
    done = cli(
        "report",
        *WEEK,
        "--db",
        ledger_file,
        "--mail-to",
        "a@example.org",
        "--smtp",
        "smtp://lead:hunter2@127.0.0.1:2525",
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "error: --smtp: put the password in $GPULEDGER_SMTP_PASSWORD (or the variable --smtp-password-env "
        "names), not in the URL: a command line is visible to every user of the machine"
    )
    assert "hunter2" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--mail-to", "not-an-address", "--smtp", "smtp://127.0.0.1"),
            "error: --mail-to: 'not-an-address' is not a mail address",
        ),
        (
            ("--mail-to", "a@example.org", "--smtp", "http://127.0.0.1"),
            "error: --smtp: 'http://127.0.0.1' is not an smtp:// or smtps:// URL",
        ),
        (
            ("--mail-to", "a@example.org", "--smtp", "smtp://127.0.0.1?tls=1"),
            "error: --smtp: unknown URL option 'tls' (known: starttls)",
        ),
    ],
)
def test_bad_delivery_options_are_one_error_line(ledger_file, args, message):
    done = cli("report", *WEEK, "--db", ledger_file, *args)
    assert done.returncode == 1
    assert done.stderr.strip().startswith(message)


def test_mail_to_without_smtp_is_a_usage_error(ledger_file):
    done = cli("report", *WEEK, "--db", ledger_file, "--mail-to", "a@example.org")
    assert done.returncode == 2
    assert "--mail-to needs --smtp URL" in done.stderr


def test_no_server_is_one_error_line(ledger_file):
    port = free_port()  # nothing listens there
    done = cli(
        "report",
        *WEEK,
        "--db",
        ledger_file,
        "--mail-to",
        "a@example.org",
        "--smtp",
        f"smtp://127.0.0.1:{port}",
    )
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: smtp://127.0.0.1:{port}: cannot connect: ")
    assert "Traceback" not in done.stderr


def test_login_without_the_password_variable_names_it(ledger_file):
    env = {k: v for k, v in os.environ.items() if k != "GPULEDGER_SMTP_PASSWORD"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuledger",
            "report",
            *WEEK,
            "--db",
            ledger_file,
            "--mail-to",
            "a@example.org",
            "--smtp",
            f"smtp://lead@127.0.0.1:{free_port()}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 1
    assert "logging in as lead needs the password in $GPULEDGER_SMTP_PASSWORD" in done.stderr


@NEEDS_AIOSMTPD
@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS:UserWarning")
def test_login_reads_the_password_from_the_environment(ledger_file):
    with smtp_server(login=("lead", "s3cret")) as inbox:
        ok = cli(
            "report",
            *WEEK,
            "--db",
            ledger_file,
            "--mail-to",
            "a@example.org",
            "--smtp",
            f"smtp://lead@127.0.0.1:{inbox.port}",
            "--smtp-password-env",
            "MY_SMTP_PW",
            env={"MY_SMTP_PW": "s3cret"},
        )
        assert ok.returncode == 0, ok.stderr
        bad = cli(
            "report",
            *WEEK,
            "--db",
            ledger_file,
            "--mail-to",
            "a@example.org",
            "--smtp",
            f"smtp://lead@127.0.0.1:{inbox.port}",
            env={"GPULEDGER_SMTP_PASSWORD": "wrong"},
        )
    assert inbox.logins[0] == ("lead", "s3cret")
    assert set(inbox.logins[1:]) == {("lead", "wrong")}  # smtplib tries each mechanism the server offers
    assert len(inbox.messages) == 1
    assert bad.returncode == 1 and "login as lead refused" in bad.stderr


def _own_address() -> str:
    """A non-loopback IPv4 address of this machine (the one its default route leaves from): a server bound
    there is reached over a network interface, where a plain-text password could be read."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # UDP: picks a route, sends nothing
        except OSError:
            pytest.skip("no network interface besides the loopback")
        address = s.getsockname()[0]
    if address.startswith("127."):
        pytest.skip("no network interface besides the loopback")
    return address


@NEEDS_AIOSMTPD
@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS:UserWarning")
def test_no_plain_text_login_to_a_host_beyond_the_loopback(ledger_file):
    """The server offers AUTH without TLS on a network address: the password is never sent (the server sees
    no login and no mail), one error line says what to do. The same plain login to 127.0.0.1 or localhost
    goes through: it never leaves the machine."""
    address = _own_address()
    args = ("report", *WEEK, "--db", ledger_file, "--mail-to", "a@example.org", "--smtp")
    pw = {"GPULEDGER_SMTP_PASSWORD": "s3cret"}
    with smtp_server(login=("lead", "s3cret"), host=address) as inbox:
        url = f"smtp://lead@{address}:{inbox.port}"
        done = cli(*args, url, env=pw)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"error: {url}: logging in as lead without TLS would send the password in plain text to {address}: "
        "add ?starttls=1 (or --starttls), or use smtps:// (plain login is for this machine only: 127.0.0.1, "
        "::1, localhost)"
    )
    assert inbox.logins == [] and inbox.messages == []
    with smtp_server(login=("lead", "s3cret")) as local:
        for host in ("127.0.0.1", "localhost"):
            ok = cli(*args, f"smtp://lead@{host}:{local.port}", env=pw)
            assert ok.returncode == 0, (host, ok.stderr)
    assert local.logins == [("lead", "s3cret")] * 2 and len(local.messages) == 2


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST.", True),
        ("mail.localhost", True),
        ("192.0.2.2", False),
        ("::ffff:10.0.0.1", False),
        ("localhost.example.org", False),
        ("mail.example.org", False),
    ],
)
def test_loopback_is_decided_from_the_url_alone(host, loopback):
    from gpuledger.reports.mail import is_loopback

    assert is_loopback(host) is loopback


@NEEDS_AIOSMTPD
@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS:UserWarning")  # smtps is TLS
@pytest.mark.parametrize("mode", ["starttls", "implicit"])
def test_tls_verified_against_the_given_ca(ledger_file, tmp_path, mode):
    cert = self_signed_cert(tmp_path)
    with smtp_server(login=("lead", "pw"), tls=mode, cert=cert) as inbox:
        url = (
            f"smtp://lead@localhost:{inbox.port}?starttls=1"
            if mode == "starttls"
            else f"smtps://lead@localhost:{inbox.port}"
        )
        unverified = cli(
            "report",
            *WEEK,
            "--db",
            ledger_file,
            "--mail-to",
            "a@example.org",
            "--smtp",
            url,
            env={"GPULEDGER_SMTP_PASSWORD": "pw"},
        )
        ok = cli(
            "report",
            *WEEK,
            "--db",
            ledger_file,
            "--mail-to",
            "a@example.org",
            "--smtp",
            url,
            "--smtp-cafile",
            str(cert[0]),
            env={"GPULEDGER_SMTP_PASSWORD": "pw"},
        )
    assert unverified.returncode == 1 and "certificate" in unverified.stderr.lower()
    assert ok.returncode == 0, ok.stderr
    assert len(inbox.messages) == 1


# ---------------------------------------------------------------- each team its own report


def _settings(tmp_path: Path, body: str) -> str:
    path = tmp_path / "settings.toml"
    path.write_text(body, encoding="utf-8")
    return str(path)


TEAM_MAIL = """
[reports.team_mail]
nlp = "nlp-lead@example.org"
vision = ["v1@example.org", "v2@example.org"]
robotics = "robo@example.org"
"""


def test_per_team_mail_sends_each_team_its_own_report(ledger_file, tmp_path):
    """W47 of the fixture has three teams: nlp and vision have addresses, speech has none (listed and
    skipped), robotics has an address but no spend (no report, said)."""
    settings = _settings(tmp_path, TEAM_MAIL)
    with smtp_server() as inbox:
        done = cli(
            "report",
            *WEEK,
            "--db",
            ledger_file,
            "--settings",
            settings,
            "--per-team",
            str(tmp_path / "teams"),
            "--mail-to",
            "--smtp",
            f"smtp://127.0.0.1:{inbox.port}",
            "--mail-from",
            "gpuledger@example.org",
        )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "teams").iterdir()) == [
        "nlp.html",
        "speech.html",
        "vision.html",
    ]
    by_rcpt = {tuple(rcpts): msg for _, rcpts, msg in inbox.messages}
    assert set(by_rcpt) == {("nlp-lead@example.org",), ("v1@example.org", "v2@example.org")}
    title = "GPU cost report, week 2026-W47 (2026-11-16 – 2026-11-22), team"
    for team, rcpts in (("nlp", ("nlp-lead@example.org",)), ("vision", ("v1@example.org", "v2@example.org"))):
        msg = by_rcpt[rcpts]
        assert msg["Subject"] == f"{title} {team}"
        parts = _parts(msg)
        assert set(parts) == {"text/plain", "text/html", f"attachment:gpuledger-report-2026-W47-{team}.csv"}
        # each team's own money: its summary, not the fleet's
        own = json.loads(
            cli(
                "summary",
                "--json",
                "--team",
                team,
                "--since",
                "2026-11-16",
                "--until",
                "2026-11-22",
                "--db",
                ledger_file,
            ).stdout
        )
        assert f"${own['spend_usd']:,.2f}" in parts["text/plain"]
        assert "$582.71" not in parts["text/plain"].split("What the figures mean")[0]  # the fleet's spend
    # nlp: dash-1 8 × 10 h × $2.99 + dash-2 1 × 12 h × $2.99 = $239.20 + $35.88 = $275.08
    nlp = _parts(by_rcpt[("nlp-lead@example.org",)])["text/plain"]
    assert "$275.08" in nlp
    assert "team 'speech': no address in [reports.team_mail]: not mailed" in done.stderr
    assert "team 'robotics': no spend in the period, no report: not mailed" in done.stderr
    assert done.stdout.strip().endswith("1 team(s) without an address skipped")
    assert "mailed 2 team report(s)" in done.stdout


def test_bare_mail_to_needs_per_team_and_a_team_map(ledger_file, tmp_path):
    alone = cli("report", *WEEK, "--db", ledger_file, "--mail-to", "--smtp", "smtp://127.0.0.1:1")
    assert alone.returncode == 2
    assert "--mail-to without addresses mails each team its own report: give --per-team DIR" in alone.stderr
    no_map = cli(
        "report",
        *WEEK,
        "--db",
        ledger_file,
        "--settings",
        _settings(tmp_path, "[energy]\nusd_per_kwh = 0.1\n"),
        "--per-team",
        str(tmp_path / "t"),
        "--mail-to",
        "--smtp",
        "smtp://127.0.0.1:1",
    )
    assert no_map.returncode == 2
    assert "needs a [reports.team_mail] table" in no_map.stderr


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            '[reports.team_mail]\nnlp = "not-an-address"\n',
            "setting 'reports.team_mail.nlp': 'not-an-address' is not a mail address",
        ),
        (
            '[reports.team_mail]\nnlp = "a@x.org\\r\\nBcc: spy@evil.example"\n',
            "setting 'reports.team_mail.nlp'",
        ),
        ("[reports.team_mail]\nnlp = 3\n", "setting 'reports.team_mail.nlp': must be an address or a list"),
        ('[reports.team_mail]\nnlp = ""\n', "setting 'reports.team_mail.nlp': names no address"),
        ("[reports]\nteam_mails = {}\n", "setting 'reports.team_mails': is not a known setting"),
    ],
)
def test_a_bad_team_address_is_one_settings_error(ledger_file, tmp_path, body, message):
    done = cli("report", *WEEK, "--db", ledger_file, "--settings", _settings(tmp_path, body))
    assert done.returncode == 1
    assert message in done.stderr and done.stderr.count("\n") == 1


def test_a_team_name_never_breaks_the_subject(tmp_path):
    """A team named with CR/LF, an escape sequence and a Unicode line separator: one Subject line, no header
    of its own (no Bcc), every control character one space."""
    from gpuledger.reports.mail import build_message

    evil = "evil\r\nBcc: spy@evil.example\x1b[31m\u2028x"
    msg = build_message(
        sender="g@example.org", to=["a@example.org"], subject=f"GPU cost report, team {evil}", text="t"
    )
    raw = msg.as_bytes()
    parsed = email.message_from_bytes(raw, policy=email.policy.default)
    assert parsed["Bcc"] is None
    assert parsed["Subject"] == "GPU cost report, team evil Bcc: spy@evil.example [31m x"
    assert b"\x1b" not in raw and b"spy@evil.example\r\n" not in raw


def test_a_team_named_with_a_line_break_gets_one_subject_line(db_path, tmp_path):
    """The whole path: a file's team "evil\\r\\nBcc: spy@evil.example" lands neutral (CR and LF a space each);
    the settings' key, written with the CR/LF, names the same team; its report is mailed with a one-line
    Subject, and the Bcc it names is neither a header nor a recipient."""
    from tests.analytics.build import T0, ingest, job
    from tests.analytics.recommend_ledgers import set_prices

    with writer(db_path) as con:
        set_prices(con)
        ingest(
            con, jobs=[job("j1", 0, 60, team="evil\r\nBcc: spy@evil.example"), job("j2", 0, 60, team="nlp")]
        )
    settings = _settings(
        tmp_path, '[reports.team_mail]\n"evil\\r\\nBcc: spy@evil.example" = "e@example.org"\n'
    )
    monday = T0.date().isoformat()
    with smtp_server() as inbox:
        done = cli(
            "report",
            "--since",
            monday,
            "--until",
            monday,
            "--db",
            db_path,
            "--settings",
            settings,
            "--per-team",
            str(tmp_path / "t"),
            "--mail-to",
            "--smtp",
            f"smtp://127.0.0.1:{inbox.port}",
        )
    assert done.returncode == 0, done.stderr
    ((_, rcpts, msg),) = inbox.messages
    assert rcpts == ["e@example.org"]
    assert msg["Bcc"] is None
    assert msg["Subject"] == f"GPU cost report, {monday} – {monday}, team evil Bcc: spy@evil.example"
    assert "team 'nlp': no address" in done.stderr
    assert "\r" not in done.stdout and "'evil  Bcc: spy@evil.example' to e@example.org" in done.stdout


def test_the_example_team_map_parses(tmp_path):
    """data/settings.example.toml's commented [reports.team_mail] block, uncommented, is valid settings."""
    from gpuledger.ledger.settings import load_settings

    lines = (ROOT / "data" / "settings.example.toml").read_text(encoding="utf-8").splitlines()
    start = lines.index("# [reports.team_mail]")
    end = lines.index("", start)  # the block runs to the next blank line
    block = [line.removeprefix("# ") for line in lines[start:end]]
    settings = load_settings(_settings(tmp_path, "\n".join(block) + "\n"))
    assert settings.team_mail == {
        "vision": ("vision-lead@example.org",),
        "nlp": ("nlp-lead@example.org", "nlp-finance@example.org"),
    }
    assert settings.fingerprint() == type(settings)().fingerprint()  # no figure depends on who gets mail


@NEEDS_AIOSMTPD
def test_a_refused_team_is_one_error_and_the_others_still_go(ledger_file, tmp_path):
    """The server refuses nlp's address (550 at RCPT): one error line names the team, vision's mail still
    goes, exit 1."""
    from aiosmtpd.controller import Controller

    inbox = Inbox("127.0.0.1", free_port())

    class Refusing:
        async def handle_RCPT(self, server, session, envelope, address, rcpt_options):  # type: ignore[no-untyped-def]
            if address.startswith("nlp-lead"):
                return "550 no such mailbox"
            envelope.rcpt_tos.append(address)
            return "250 OK"

        async def handle_DATA(self, server, session, envelope):  # type: ignore[no-untyped-def]
            inbox.add(envelope.mail_from, envelope.rcpt_tos, envelope.original_content or envelope.content)
            return "250 OK"

    controller = Controller(Refusing(), hostname="127.0.0.1", port=inbox.port)
    controller.start()
    try:
        done = cli(
            "report",
            *WEEK,
            "--db",
            ledger_file,
            "--settings",
            _settings(tmp_path, TEAM_MAIL),
            "--per-team",
            str(tmp_path / "teams"),
            "--mail-to",
            "--smtp",
            f"smtp://127.0.0.1:{inbox.port}",
        )
    finally:
        controller.stop()
    assert done.returncode == 1
    assert [rcpts for _, rcpts, _ in inbox.messages] == [["v1@example.org", "v2@example.org"]]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: team 'nlp': ")
    assert "nlp-lead@example.org" in errors[0]
    assert "mailed 1 team report(s)" in done.stdout
