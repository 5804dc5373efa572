"""Options every command shares, so --db and --settings mean the same everywhere."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from analytics.money import clean_float
from gpuledger.cli import times

if TYPE_CHECKING:
    import duckdb

    from analytics.filters import Filters

DB_HELP = "ledger file (default: $GPULEDGER_DB, else data/ in a checkout or ~/.local/share/gpuledger/; see `gpuledger info`)"
SETTINGS_HELP = "settings TOML (default: $GPULEDGER_SETTINGS, ~/.config/gpuledger/, /etc/gpuledger/, data/; see `gpuledger info`)"


def add_db_options(parser: argparse.ArgumentParser) -> None:
    """``--db`` and ``--settings`` after the subcommand; main.py also accepts them before it."""
    parser.add_argument("--db", default=argparse.SUPPRESS, help=DB_HELP)
    parser.add_argument("--settings", default=argparse.SUPPRESS, help=SETTINGS_HELP)


def add_filter_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", type=_date, help="first UTC day included (YYYY-MM-DD, or an age like 7d)")
    parser.add_argument("--until", type=_date, help="last UTC day included (YYYY-MM-DD, or an age like 1d)")
    parser.add_argument("--team", action="append", default=[], help="only this team (repeatable)")
    parser.add_argument("--cluster", action="append", default=[], help="only this cluster (repeatable)")


class UsageError(Exception):
    """A command line that cannot mean anything: main.py prints ``error: <message>`` and exits 2."""


def require_known(con: duckdb.DuckDBPyConnection, filters: Filters) -> None:
    """Stop (exit 2) when ``--team``, ``--cluster`` or ``--user`` names nothing in the ledger: a view of
    nothing would print $0.00 as if it were a measured figure (analytics.filters.unknown_names)."""
    from analytics.filters import unknown_names

    if unknown := unknown_names(con, filters):
        raise UsageError("; ".join(u.message for u in unknown))


_date = times.day  # every --since/--until/--end of a day reads the one grammar of gpuledger/cli/times.py


def print_json(payload: Any) -> None:
    """Print ``payload`` as JSON. NaN and ±infinity are not JSON: they print as ``null`` (a value that is not
    a number is unknown), so a consumer's parser never fails on our output."""
    json.dump(json_safe(payload), sys.stdout, indent=2, sort_keys=False, default=str, allow_nan=False)
    sys.stdout.write("\n")


def json_safe(value: Any) -> Any:
    """``value`` with every float (also inside lists, tuples and dicts) as analytics.money.clean_float
    prints it: non-finite → None, float residue and -0.0 → 0.0."""
    if isinstance(value, float):
        return clean_float(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def data_span(con: duckdb.DuckDBPyConnection) -> tuple[Any, Any]:
    """The first and last UTC day the ledger holds a job or a sample (None, None when empty)."""
    row = con.execute(
        """SELECT least((SELECT min(start_ts) FROM jobs), (SELECT min(ts) FROM samples))::DATE,
                  greatest((SELECT max(coalesce(end_ts, start_ts)) FROM jobs), (SELECT max(ts) FROM samples))::DATE"""
    ).fetchall()[0]
    return row[0], row[1]


def say_range(con: duckdb.DuckDBPyConnection, filters: Filters, *, empty: bool) -> None:
    """On stderr, before the figures: the range a command covers; when it holds no data, that it holds none
    and the range the data cover (``summary --since 7d`` on a ledger that ended weeks ago printed zeros
    without a word)."""
    import sys

    first, last = data_span(con)
    end = filters.until or (
        last if last is not None and (filters.since is None or filters.since <= last) else None
    )
    asked = f"{filters.since or first or 'start'} – {end or 'latest'} (UTC days)"
    if empty and first is not None and (filters.since or filters.until):
        print(f"note: no data in {asked}; the ledger's data cover {first} – {last}", file=sys.stderr)
    else:
        print(f"period: {asked}", file=sys.stderr)
