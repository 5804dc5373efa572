"""``gpuledger dashboard``: fill an empty ledger with the demo fleet, then serve the Streamlit app.

The ledger path is resolved here (``--db``, ``$GPULEDGER_DB``, ``data/gpuledger.duckdb``) and handed to the
app through ``GPULEDGER_DB``, so the pages read exactly the file this command prepared. The process is
replaced by ``streamlit run`` (``os.execvpe``): Ctrl-C stops the server directly, and no parent holds the
database open while the pages read it.
"""

from __future__ import annotations

import argparse
import os
import sys

from gpuledger.cli.commands._common import add_db_options
from gpuledger.ledger.db import resolve_db
from gpuledger.ledger.paths import shipped
from gpuledger.ledger.reference import sync_reference
from gpuledger.ledger.settings import load_settings

APP = shipped("app.py")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dashboard",
        help="open the browser dashboard (fills an empty ledger with the demo fleet first)",
        description="Serve the dashboard on http://localhost:PORT. An empty ledger is first filled with the "
        "demo fleet (gpuledger demo) unless --no-demo is given.",
    )
    p.add_argument("--port", type=int, default=8501, help="port to serve on (default 8501)")
    p.add_argument("--no-demo", action="store_true", help="do not fill an empty ledger with the demo fleet")
    add_db_options(p)
    p.set_defaults(func=run)


def streamlit_argv(port: int) -> list[str]:
    """The exact command line the dashboard runs (also used by the browser tests)."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
    ]


def run(args: argparse.Namespace) -> int:
    db = resolve_db(args.db)
    if args.settings:  # the demo filler and the app read the same settings file
        os.environ["GPULEDGER_SETTINGS"] = os.path.abspath(args.settings)
    settings = load_settings(args.settings)
    sync_reference(db, settings)
    if not args.no_demo:
        from gpuledger.demo.build import ensure_demo

        if ensure_demo(db):
            print(f"{db}: the ledger was empty; filled it with the demo fleet (gpuledger demo)")
    env = dict(os.environ, GPULEDGER_DB=db)
    argv = streamlit_argv(args.port)
    print(f"serving {db} on http://localhost:{args.port}", flush=True)
    os.execvpe(argv[0], argv, env)
    return 0  # not reached
