"""Every third-party module the shipped code imports comes from a distribution pyproject.toml declares itself
(issue 48: ``httpx2`` arrived only because lightkube needs it, ``tzdata`` only through pandas). A dependency of
a dependency may change or vanish in its next release; what we import, we declare.

The walk reads every ``import`` in gpuledger/, analytics/, collectors/, pages/ and app.py (those inside
functions too: the CLI imports lazily), maps a module to its distribution with importlib.metadata, and
holds the set against ``[project] dependencies`` and the optional extras (not ``test``)."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib

from tests.conftest import ROOT

SHIPPED = ("gpuledger", "analytics", "collectors", "pages")
OURS = {"gpuledger", "analytics", "collectors", "pages", "app", "tests", "bench"}


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for name, reqs in project["optional-dependencies"].items() if name != "test" for r in reqs]
    return {_name(r) for r in [*project["dependencies"], *extras]}


def _imported() -> dict[str, str]:
    """Top-level module → the first file importing it (absolute imports only)."""
    files = [p for pkg in SHIPPED for p in sorted((ROOT / pkg).rglob("*.py"))] + [ROOT / "app.py"]
    found: dict[str, str] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in OURS:
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_every_imported_distribution_is_declared() -> None:
    owners = md.packages_distributions()
    declared = _declared()
    imported = _imported()
    assert {"duckdb", "streamlit", "lightkube", "httpx2", "tomlkit"} <= set(imported)  # the walk sees imports
    missing = {}
    for module, where in imported.items():
        dists = {d.lower().replace("_", "-") for d in owners.get(module, [module])}
        if not dists & declared:
            missing[module] = (sorted(dists), where)
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_the_zone_database_is_declared_for_systems_without_one() -> None:
    """zoneinfo reads /usr/share/zoneinfo, else the tzdata package: Windows and slim images have no system
    database, and collectors/time_zones.py reads every --tz with zoneinfo."""
    assert "tzdata" in _declared()
