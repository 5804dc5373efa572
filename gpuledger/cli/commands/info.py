"""``gpuledger info``: the version, and which ledger and settings are in use and why.

The precedence it reports is gpuledger/ledger/paths.py's: flag > environment > user > system > checkout.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import duckdb

from gpuledger import __version__
from gpuledger.cli.commands._common import add_db_options, print_json
from gpuledger.ledger.db import OFFLINE, check_ledger_file
from gpuledger.ledger.errors import LedgerError
from gpuledger.ledger.paths import choose_db, choose_settings, in_checkout, settings_candidates, shipped
from gpuledger.ledger.schema import current_version
from gpuledger.ledger.sql import job_count_sql


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "info",
        help="print the version, the ledger and settings in use, and where each came from",
        description="Print gpuledger's version, whether it runs from a checkout or an install, the ledger "
        "file and the settings file in use with the rule that chose each (flag > environment > user > "
        "system > checkout), and the files it looked for.",
    )
    p.add_argument("--json", action="store_true", help="print it as JSON")
    add_db_options(p)
    p.set_defaults(func=run)


def _ledger_state(path: str) -> dict[str, object]:
    if not Path(path).exists():
        return {"exists": False}
    try:
        check_ledger_file(path)
        con = duckdb.connect(path, read_only=True, config=OFFLINE)
    except (duckdb.Error, LedgerError) as exc:  # held by a writer, or not a DuckDB file
        return {"exists": True, "readable": False, "reason": str(exc).splitlines()[0]}
    try:
        version = current_version(con)
        jobs = con.execute(f"SELECT {job_count_sql('j')} FROM jobs j").fetchall()[0][0] if version else 0
    finally:
        con.close()
    return {"exists": True, "readable": True, "schema_version": version, "jobs": jobs}


def collect(db: str | None, settings: str | None) -> dict[str, object]:
    ledger = choose_db(db)
    chosen = choose_settings(settings)
    ledger_path = str(Path(str(ledger.path)).expanduser().resolve())
    return {
        "version": __version__,
        "python": sys.version.split()[0],
        "mode": "checkout" if in_checkout() else "installed",
        "ledger": {"path": ledger_path, "origin": ledger.origin, **_ledger_state(ledger_path)},
        "settings": {"path": chosen.path, "origin": chosen.origin},
        "settings_looked_for": [
            {"path": str(p), "origin": origin, "exists": p.is_file()} for p, origin in settings_candidates()
        ],
        "environment": {k: os.environ[k] for k in ("GPULEDGER_DB", "GPULEDGER_SETTINGS") if k in os.environ},
        "shipped_data": str(shipped("data")),
        "dashboard_app": str(shipped("app.py")),
    }


def run(args: argparse.Namespace) -> int:
    info = collect(args.db, args.settings)
    if args.json:
        print_json(info)
        return 0
    ledger, settings = info["ledger"], info["settings"]
    assert isinstance(ledger, dict) and isinstance(settings, dict)
    state = (
        "not created yet"
        if not ledger.get("exists")
        else f"schema v{ledger['schema_version']}, {ledger['jobs']:,} jobs"
        if ledger.get("readable")
        else f"unreadable: {ledger['reason']}"
    )
    print(f"gpuledger {info['version']} (Python {info['python']}, {info['mode']})")
    print(f"ledger    {ledger['path']}  [{ledger['origin']}; {state}]")
    print(f"settings  {settings['path'] or '(none: built-in defaults)'}  [{settings['origin']}]")
    print("looked for settings in (highest first, after --settings and $GPULEDGER_SETTINGS):")
    for c in info["settings_looked_for"]:  # type: ignore[union-attr]
        print(f"  {'found  ' if c['exists'] else 'missing'} {c['path']}  [{c['origin']}]")
    print(f"shipped   {info['shipped_data']}")
    return 0
