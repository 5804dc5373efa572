"""The ``gpuledger`` command line. Each subcommand lives in gpuledger/cli/commands/<name>.py and exposes
``register(subparsers)`` (adding its parser with ``set_defaults(func=run)``) and ``run(args) -> int``.

Exit codes: 0 ok, 1 bad data or a failed source (one ``error: ...`` line on stderr), 2 usage.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

import duckdb

from gpuledger import __version__
from gpuledger.cli.commands._common import DB_HELP, SETTINGS_HELP, UsageError
from gpuledger.ledger.errors import LedgerError, out_of_space


def command_names() -> list[str]:
    """The subcommands: one module each under gpuledger/cli/commands/ (listed without importing them)."""
    import gpuledger.cli.commands as commands

    return sorted(m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_"))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with ``only`` the parser of that one subcommand: a command's module imports what
    it runs (polars, the analytics, the collectors' clients), so importing all of them to run one cost every
    call about half a second (`gpuledger --help` took 1.4 s)."""
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
    for name in command_names():
        if only is None or name == only:
            importlib.import_module(f"gpuledger.cli.commands.{name}").register(sub)
    return parser


_GLOBAL_WITH_VALUE = ("--db", "--settings")


def command_in(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names, when it names a known one before any other option; else None (then the
    whole parser is built: `--help`, `--version`, a typo's "invalid choice" list)."""
    names = command_names()
    tokens = iter(argv)
    for token in tokens:
        if token in _GLOBAL_WITH_VALUE:
            next(tokens, None)
        elif token.startswith(tuple(f"{o}=" for o in _GLOBAL_WITH_VALUE)):
            continue
        else:
            return token if token in names else None
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(command_in(argv))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except LedgerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`gpuledger summary --json | head`): nothing to say, and nothing more to
        # write; stdout goes to /dev/null so that the interpreter's last flush does not fail again
        # (https://docs.python.org/3/library/signal.html#note-on-sigpipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:  # never a traceback to a user: one line, and the way to see more
        if os.environ.get("GPULEDGER_DEBUG"):
            raise
        print(f"error: {unexpected(exc)}", file=sys.stderr)
        return 1


def unexpected(exc: Exception) -> str:
    """One line for an error no command turned into a LedgerError (a bug, or DuckDB out of memory)."""
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    if (full := out_of_space(exc)) is not None:
        return f"{full} ({first})"
    if isinstance(exc, duckdb.OutOfMemoryException):
        from gpuledger.ledger.db import RAISE_MEMORY_LIMIT

        limit = os.environ.get("GPULEDGER_MEMORY_LIMIT")
        return (
            f"the ledger's writer ran out of memory ({limit or 'its default limit'}): {first}; "
            f"{RAISE_MEMORY_LIMIT} or give it less at once"
        )
    return f"unexpected failure ({type(exc).__name__}: {first}); GPULEDGER_DEBUG=1 shows where"


if __name__ == "__main__":
    sys.exit(main())
