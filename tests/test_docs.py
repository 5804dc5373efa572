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


ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def test_the_architecture_tables_keep_their_cells_short():
    """A table cell of a few words; what runs longer is a list under the table (issue 48: one ran to 1,150)."""
    long = [
        (n, len(cell.strip()))
        for n, line in enumerate(ARCHITECTURE.splitlines(), 1)
        if line.startswith("|")
        for cell in line.strip("|").split("|")
        if len(cell.strip()) > 300
    ]
    assert not long, f"docs/architecture.md cells over 300 characters (line, length): {long}"


def test_the_format_guide_names_every_file_the_tests_walk_per_format():
    """The guide's list holds what fails for a new parser left out of it (test_long_cells.py walks PARSERS)."""
    guide = ARCHITECTURE[ARCHITECTURE.index("## Adding an input format") :]
    guide = guide[: guide.index("\n## ", 5)]
    for name in (
        "collectors/registry.py",
        "collectors/source_file.py",
        "tests/collectors/test_long_cells.py",
        "bench/fuzz.py",
        "README.md",
        "tests/test_docs.py",
        "collectors/nvidia_smi_xml.py",
        "collectors/rocm_smi.py",
        "Registry order decides",
    ):
        assert name in guide, name


def test_registry_order_decides_a_tie_as_the_guide_says(tmp_path):
    from collectors.contract import Sniff, choose_parser

    class Sure:
        def __init__(self, name: str) -> None:
            self.name = name

        def sniff(self, path, head):  # type: ignore[no-untyped-def]
            return Sniff(0.5)

    path = tmp_path / "x.txt"
    path.write_text("x\n")
    assert choose_parser(path, "auto", {"first": Sure("first"), "second": Sure("second")}).name == "first"
    assert choose_parser(path, "auto", {"second": Sure("second"), "first": Sure("first")}).name == "second"
