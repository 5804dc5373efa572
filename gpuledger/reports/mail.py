"""Mail delivery for reports and notices: a MIME message (HTML + plain-text alternative, attachments) sent
through an SMTP server named by a URL.

``smtp://[user@]host[:port]`` (default port 25; ``?starttls=1`` or ``starttls=True`` upgrades with
STARTTLS before logging in) or ``smtps://[user@]host[:port]`` (TLS from the start, default port 465). With
a user the client logs in with the password read from an environment variable (default
``GPULEDGER_SMTP_PASSWORD``): a password never travels on the command line, where ``ps`` and the shell
history would show it, so a URL that carries one is refused; and never in plain text over a network, so a
login without TLS is refused unless the host is this machine's loopback (:func:`is_loopback`). The server's certificate is verified against
the system's CAs, or ``cafile`` (a site's own CA; the tests' self-signed one).
"""

from __future__ import annotations

import ipaddress
import os
import smtplib
import socket
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from urllib.parse import parse_qs, unquote, urlsplit

from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.settings import address_problem
from gpuledger.ledger.text import neutral

PASSWORD_ENV = "GPULEDGER_SMTP_PASSWORD"
TIMEOUT_S = 30.0
_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class SmtpTarget:
    """Where and how to send: parsed from ``--smtp URL``."""

    scheme: str  # smtp | smtps
    host: str
    port: int
    user: str | None
    starttls: bool

    @property
    def display(self) -> str:
        return f"{self.scheme}://{self.user + '@' if self.user else ''}{self.host}:{self.port}"


def parse_smtp_url(url: str, *, starttls: bool = False) -> SmtpTarget:
    """``--smtp URL`` → :class:`SmtpTarget`; a LedgerError naming the problem for anything else."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("smtp", "smtps"):
        raise LedgerError(
            f"--smtp: {url!r} is not an smtp:// or smtps:// URL (e.g. smtp://mail.example.org:587?starttls=1)"
        )
    if parts.password is not None:
        raise LedgerError(
            f"--smtp: put the password in ${PASSWORD_ENV} (or the variable --smtp-password-env names), "
            "not in the URL: a command line is visible to every user of the machine"
        )
    if not parts.hostname:
        raise LedgerError(f"--smtp: {url!r} names no host")
    try:
        port = parts.port or (465 if scheme == "smtps" else 25)
    except ValueError:
        raise LedgerError(f"--smtp: {url!r}: the port is not a number") from None
    query = parse_qs(parts.query)
    unknown = set(query) - {"starttls"}
    if unknown:
        raise LedgerError(f"--smtp: unknown URL option {sorted(unknown)[0]!r} (known: starttls)")
    if query.get("starttls"):
        starttls = starttls or query["starttls"][-1].lower() in _TRUE
    if starttls and scheme == "smtps":
        raise LedgerError("--smtp: smtps:// is TLS from the start; STARTTLS is for smtp://")
    return SmtpTarget(
        scheme=scheme,
        host=parts.hostname,
        port=port,
        user=unquote(parts.username) if parts.username else None,
        starttls=starttls,
    )


def build_message(
    *,
    sender: str,
    to: list[str],
    subject: str,
    text: str,
    html: str | None = None,
    attachments: list[tuple[str, bytes, str]] = (),  # type: ignore[assignment]
) -> EmailMessage:
    """A mail with a text/plain part, an optional text/html alternative and attachments
    (file name, content, MIME type such as ``text/csv``)."""
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = ", ".join(to)
    msg["Subject"] = header_text(subject)
    msg["Date"] = formatdate(localtime=False)
    msg["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2] or None)
    msg.set_content(text, subtype="plain", charset="utf-8")
    if html is not None:
        msg.add_alternative(html, subtype="html", charset="utf-8")
    for name, content, mime in attachments:
        maintype, _, subtype = mime.partition("/")
        msg.add_attachment(content, maintype=maintype, subtype=subtype or "octet-stream", filename=name)
    return msg


# besides gpuledger.ledger.text.neutral's controls: the Unicode line and paragraph separators, which some
# mail software splits a header at
_SEPARATORS = str.maketrans({"\u2028": " ", "\u2029": " ", "\u0085": " "})


def header_text(text: str) -> str:
    """``text`` fit for a header such as Subject: :func:`~gpuledger.ledger.text.neutral` (every control
    character, CR and LF included, a space; bidi controls dropped), the Unicode line separators a space too,
    and the spaces run together, so a name from the ledger can never add a header or break the line."""
    return " ".join(neutral(text).translate(_SEPARATORS).split())


def parse_addresses(text: str) -> list[str]:
    """``--mail-to a@x,b@y`` → ["a@x", "b@y"]; each must look like an address."""
    out = [a.strip() for a in text.split(",") if a.strip()]
    if not out:
        raise LedgerError("--mail-to: no address given")
    for a in out:
        if address_problem(a):
            raise LedgerError(f"--mail-to: {a!r} is not a mail address")
    return out


def default_sender() -> str:
    return f"gpuledger@{socket.getfqdn() or 'localhost'}"


class Mailer:
    """One SMTP session for several messages (the notices of a run go through one connection)."""

    def __init__(
        self,
        target: SmtpTarget,
        *,
        password_env: str = PASSWORD_ENV,
        cafile: str | None = None,
        timeout: float = TIMEOUT_S,
    ) -> None:
        self.target = target
        self.password_env = password_env
        self.cafile = cafile
        self.timeout = timeout
        self._smtp: smtplib.SMTP | None = None

    def _context(self) -> ssl.SSLContext:
        try:
            return ssl.create_default_context(cafile=self.cafile)
        except (OSError, ssl.SSLError) as exc:
            raise LedgerError(f"--smtp-cafile: {self.cafile}: {exc}") from None

    def __enter__(self) -> Mailer:
        t = self.target
        password = None
        if t.user and t.scheme == "smtp" and not t.starttls and not is_loopback(t.host):
            raise LedgerError(
                f"{t.display}: logging in as {t.user} without TLS would send the password in plain text to "
                f"{t.host}: add ?starttls=1 (or --starttls), or use smtps:// (plain login is for this machine "
                "only: 127.0.0.1, ::1, localhost)"
            )
        if t.user:
            password = os.environ.get(self.password_env)
            if password is None:
                raise LedgerError(
                    f"{t.display}: logging in as {t.user} needs the password in ${self.password_env}"
                )
        try:
            if t.scheme == "smtps":
                smtp: smtplib.SMTP = smtplib.SMTP_SSL(
                    t.host, t.port, timeout=self.timeout, context=self._context()
                )
            else:
                smtp = smtplib.SMTP(t.host, t.port, timeout=self.timeout)
            self._smtp = smtp
            smtp.ehlo()
            if t.starttls:
                if not smtp.has_extn("starttls"):
                    raise LedgerError(f"{t.display}: the server does not offer STARTTLS")
                smtp.starttls(context=self._context())
                smtp.ehlo()
            if t.user:
                if not smtp.has_extn("auth"):
                    raise LedgerError(
                        f"{t.display}: the server offers no login (AUTH); "
                        + (
                            "add ?starttls=1 if it offers it after STARTTLS"
                            if not t.starttls
                            else "check the URL"
                        )
                    )
                smtp.login(t.user, password or "")
        except LedgerError:
            self.close()
            raise
        except smtplib.SMTPAuthenticationError as exc:
            self.close()
            raise LedgerError(f"{t.display}: login as {t.user} refused: {_reason(exc)}") from None
        except (OSError, smtplib.SMTPException, ssl.SSLError) as exc:
            self.close()
            raise LedgerError(f"{t.display}: cannot connect: {_reason(exc)}") from None
        return self

    def send(self, msg: EmailMessage) -> None:
        if self._smtp is None:
            raise RuntimeError("Mailer.send outside its with-block")
        try:
            refused = self._smtp.send_message(msg)
        except smtplib.SMTPRecipientsRefused as exc:
            raise LedgerError(
                f"{self.target.display}: every recipient refused: {', '.join(exc.recipients)}"
            ) from None
        except (OSError, smtplib.SMTPException) as exc:
            raise LedgerError(f"{self.target.display}: sending failed: {_reason(exc)}") from None
        if refused:
            raise LedgerError(f"{self.target.display}: recipients refused: {', '.join(sorted(refused))}")

    def close(self) -> None:
        if self._smtp is not None:
            try:
                self._smtp.quit()
            except (OSError, smtplib.SMTPException):
                self._smtp.close()
            self._smtp = None

    def __exit__(self, *exc: object) -> None:
        self.close()


def is_loopback(host: str) -> bool:
    """True for an address of this machine's loopback (127.0.0.0/8, ::1) or the name ``localhost`` (and
    ``*.localhost``, which RFC 6761 keeps on the loopback): where a password sent in plain text never crosses
    a network. Decided from the URL's text, without a DNS lookup a network could answer falsely."""
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _reason(exc: BaseException) -> str:
    if isinstance(exc, smtplib.SMTPResponseException):
        msg = (
            exc.smtp_error.decode("utf-8", "replace")
            if isinstance(exc.smtp_error, bytes)
            else str(exc.smtp_error)
        )
        return f"{exc.smtp_code} {msg}".strip()
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
