"""Options every command shares, so --db and --settings mean the same everywhere."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Any


def add_db_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", help="ledger file (default: $GPULEDGER_DB or data/gpuledger.duckdb)")
    parser.add_argument(
        "--settings", help="settings TOML (default: $GPULEDGER_SETTINGS or data/settings.toml)"
    )


def add_filter_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", type=_date, help="first UTC day included (YYYY-MM-DD)")
    parser.add_argument("--until", type=_date, help="last UTC day included (YYYY-MM-DD)")
    parser.add_argument("--team", action="append", default=[], help="only this team (repeatable)")
    parser.add_argument("--cluster", action="append", default=[], help="only this cluster (repeatable)")


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text!r}") from None


def print_json(payload: Any) -> None:
    json.dump(payload, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")
