"""Docs a newcomer can trust: every format, command, schema column and summary field is documented."""

from __future__ import annotations

import re

import pytest

from collectors.registry import PARSERS
from gpuledger.cli.main import build_parser
from gpuledger.ledger.db import memory_ledger
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
SCHEMA_DOC = (ROOT / "docs" / "schema.md").read_text(encoding="utf-8")
METRICS_DOC = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("fmt", sorted(PARSERS))
def test_every_format_is_in_the_readme(fmt):
    assert f"`{fmt}`" in README, f"README's format table lacks {fmt}"


def _commands() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sorted(sub.choices)


@pytest.mark.parametrize("command", _commands())
def test_every_command_is_in_the_readme(command):
    assert re.search(rf"gpuledger {command}\b", README), f"README does not show `gpuledger {command}`"


def test_ci_runs_exactly_the_readme_test_command():
    ci = [
        ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    assert ci[-1].strip() == "make test"
    assert "make test" in README and "make dashboard" in README


def test_schema_doc_is_generated_from_the_current_schema():
    from gpuledger.ledger.schema_doc import markdown

    assert markdown() == SCHEMA_DOC, (
        "docs/schema.md is stale: python -m gpuledger.ledger.schema_doc > docs/schema.md"
    )


def test_every_schema_column_has_a_meaning():
    con = memory_ledger()
    columns = con.execute(
        "SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = 'memory'"
    ).fetchall()
    con.close()
    undocumented = [
        f"{table}.{column}"
        for table, column in columns
        if not re.search(rf"^\| `{column}` \| [^|]+ \| \S", _section(table), flags=re.M)
    ]
    assert not undocumented, (
        f"columns without a meaning in gpuledger/ledger/schema.py comments: {undocumented}"
    )


def _section(table: str) -> str:
    match = re.search(rf"^## `{table}`\n(.*?)(?=^## |\Z)", SCHEMA_DOC, flags=re.S | re.M)
    assert match, f"docs/schema.md has no section for table {table}"
    return match.group(1)


def test_every_summary_field_is_defined_in_metrics_doc():
    from analytics.summary import SUMMARY_KEYS  # the contract's field names

    for key in SUMMARY_KEYS:
        assert key in METRICS_DOC or key in ("filters", "as_of"), f"docs/metrics.md does not define {key}"
