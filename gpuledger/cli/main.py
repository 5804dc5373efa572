"""The ``gpuledger`` command line. Each subcommand lives in gpuledger/cli/commands/<name>.py and exposes
``register(subparsers)`` (adding its parser with ``set_defaults(func=run)``) and ``run(args) -> int``.

Exit codes: 0 ok, 1 bad data or a failed source (one ``error: ...`` line on stderr), 2 usage.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from gpuledger import __version__
from gpuledger.cli.commands._common import DB_HELP, SETTINGS_HELP
from gpuledger.ledger.errors import LedgerError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuledger",
        description="GPU cost-efficiency analytics: where the GPU money goes, what is wasted, and what to change.",
    )
    parser.add_argument("--version", action="version", version=f"gpuledger {__version__}")
    # Global options: accepted before the subcommand too (`gpuledger --db x.duckdb summary`). The subcommands'
    # own --db/--settings default to SUPPRESS, so a value given before the subcommand is not overwritten.
    parser.add_argument("--db", default=None, help=DB_HELP)
    parser.add_argument("--settings", default=None, help=SETTINGS_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    import gpuledger.cli.commands as commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"gpuledger.cli.commands.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except LedgerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
