"""``gpuledger dashboard``: fill an empty ledger with the demo fleet, then serve the Streamlit app.

The ledger path is resolved here (``--db``, ``$GPULEDGER_DB``, ``data/gpuledger.duckdb``) and handed to the
app through ``GPULEDGER_DB``, so the pages read exactly the file this command prepared. The process is
replaced by ``streamlit run`` (``os.execvpe``): Ctrl-C stops the server directly, and no parent holds the
database open while the pages read it.

Safe by default: the server listens on 127.0.0.1 only (``--host 0.0.0.0`` exposes it, with a warning when
no sign-in is configured), shows no error details in the browser (tracebacks go to this process's log),
hides Streamlit's built-in table export (the pages' own CSV downloads neutralize formulas), accepts
uploads up to ``dashboard.max_upload_mb`` and answers only to the host names it is reached by (localhost,
127.0.0.1, ::1, the ``--host`` address and ``dashboard.allowed_hosts``: gpuledger/web/hosts.py, against DNS
rebinding). With ``[auth]`` in the settings, the Streamlit secrets that
``st.login`` needs are written to a private file (mode 0600) and handed to ``streamlit run``.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
import tempfile
from pathlib import Path

from gpuledger.cli.commands._common import add_db_options
from gpuledger.ledger.db import reader, resolve_db, sync_reference
from gpuledger.ledger.paths import shipped
from gpuledger.ledger.settings import Settings, load_settings
from gpuledger.web.hosts import ENV as HOSTS_ENV
from gpuledger.web.hosts import allowed_hosts

APP = shipped("app.py")
# what `streamlit run` is given: app.py behind the host check (an st.App with gpuledger/web/hosts.py)
SERVER = shipped("pages/_serve.py")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dashboard",
        help="open the browser dashboard (fills an empty ledger with the demo fleet first)",
        description="Serve the dashboard on http://localhost:PORT. An empty ledger is first filled with the "
        "demo fleet (gpuledger demo) unless --no-demo is given. It listens on 127.0.0.1 only unless --host "
        "says otherwise; configure sign-in ([auth] and [access] in the settings, docs/settings.md) before "
        "exposing it.",
    )
    p.add_argument("--port", type=int, default=8501, help="port to serve on (default 8501)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1, this machine only; 0.0.0.0 for every interface)",
    )
    p.add_argument("--no-demo", action="store_true", help="do not fill an empty ledger with the demo fleet")
    add_db_options(p)
    p.set_defaults(func=run)


def streamlit_argv(
    port: int, *, host: str = "127.0.0.1", max_upload_mb: float = 100.0, secrets_file: str | None = None
) -> list[str]:
    """The exact command line the dashboard runs (also used by the browser tests)."""
    argv = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(SERVER),
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
        "--server.address",
        host,
        "--server.maxUploadSize",
        str(max(1, int(max_upload_mb))),
        "--client.showErrorDetails",
        "none",
        "--client.disableDataExport",
        "true",
        # this command prints the one address to open: Streamlit's banner printed a second (127.0.0.1), and
        # its server's info line a third ("Uvicorn server started on 127.0.0.1:8501"); warnings still show
        "--logger.hideWelcomeMessage",
        "true",
        "--logger.level",
        "warning",
    ]
    if secrets_file:
        argv += ["--secrets.files", secrets_file]
    return argv


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: assume it is reachable from elsewhere


def exposure_warnings(settings: Settings, host: str, port: int) -> list[str]:
    """What a person starting the dashboard on ``host`` should know before anyone else opens it."""
    out = []
    if settings.auth is None:
        if not is_loopback(host):
            out.append(
                f"listening on {host} without sign-in: anyone who can reach port {port} sees every team's "
                "spend. Configure [auth] and [access] in the settings (docs/settings.md)."
            )
        if settings.access.admins or settings.access.teams:
            out.append("[access] is set but [auth] is not, so nobody signs in and everyone sees every team.")
    elif not is_loopback(host) and settings.auth.redirect_uri is None:
        out.append(
            f"auth.redirect_uri is not set, so the provider sends people back to http://localhost:{port}, "
            "which works on this machine only: set it to this server's public address + /oauth2callback."
        )
    return out


def write_streamlit_secrets(settings: Settings, port: int) -> str | None:
    """With ``[auth]`` configured: the private secrets file ``st.login`` reads (None without [auth]).

    Raises SettingsError when the client secret is nowhere to be found."""
    if settings.auth is None:
        return None
    import importlib.util

    from gpuledger.ledger.access import streamlit_auth_section, toml_table
    from gpuledger.ledger.errors import SettingsError

    if importlib.util.find_spec("authlib") is None:
        raise SettingsError(
            settings.source,
            "auth",
            "sign-in needs Authlib, which is not installed: pip install 'streamlit[auth]'",
        )

    section = streamlit_auth_section(
        settings.auth, port=port, root=Path(APP).parent, settings_path=settings.source
    )
    folder = tempfile.mkdtemp(prefix="gpuledger-dashboard-")  # mode 0700
    path = os.path.join(folder, "secrets.toml")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(toml_table("auth", section))
    return path


def run(args: argparse.Namespace) -> int:
    db = resolve_db(args.db)
    if args.settings:  # the demo filler and the app read the same settings file
        os.environ["GPULEDGER_SETTINGS"] = os.path.abspath(args.settings)
    settings = load_settings(args.settings)
    sync_reference(db, settings)
    if not args.no_demo:
        from gpuledger.demo.build import ensure_demo

        def announce() -> None:
            print(f"{db} is empty: building the demo fleet (about 30 s)…", flush=True)

        if ensure_demo(db, before_build=announce):
            print(f"{db}: filled with the demo fleet (gpuledger demo)", flush=True)
    # the items' weeks, once per ledger state, before the first page asks (gpuledger/items/sidecar.py)
    from gpuledger.items.scan import scan

    with reader(db) as con:
        scan(con, settings=settings)
    secrets_file = write_streamlit_secrets(settings, args.port)
    for line in exposure_warnings(settings, args.host, args.port):
        print(f"warning: {line}", file=sys.stderr, flush=True)
    env = dict(
        os.environ,
        GPULEDGER_DB=db,
        **{HOSTS_ENV: ",".join(allowed_hosts(args.host, settings.allowed_hosts))},
    )
    argv = streamlit_argv(
        args.port, host=args.host, max_upload_mb=settings.max_upload_mb, secrets_file=secrets_file
    )
    where = "localhost" if is_loopback(args.host) else args.host
    signin = "with sign-in" if settings.auth else "without sign-in"
    print(f"serving {db} ({signin}): open http://{where}:{args.port}", flush=True)
    if secrets_file is None:
        os.execvpe(argv[0], argv, env)  # nothing of ours to clean up: Streamlit takes this process
    return serve_then_clean(argv, env, Path(secrets_file).parent)


def serve_then_clean(argv: list[str], env: dict[str, str], folder: Path) -> int:
    """Run Streamlit as a child and remove ``folder`` (the private secrets) when it ends, however it ends:
    its own exit, Ctrl-C, or a SIGTERM/SIGHUP to this process (forwarded to the child, which then stops).
    An exec'd Streamlit left the secrets in /tmp after a SIGTERM. Only SIGKILL, which no process can
    catch, leaves them (in a 0700 folder, mode 0600)."""
    import shutil
    import signal
    import subprocess

    child = subprocess.Popen(argv, env=env)

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        code = child.wait()  # PEP 475: resumed after each forwarded signal until the child has ended
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code if code >= 0 else 128 - code  # a child ended by signal N: the shell's 128 + N
