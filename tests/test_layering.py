"""The layer boundary: only the dashboard (app.py and pages/) may import streamlit; imports run one way
between the layers; and no two modules import each other, even through a function-level import.

ruff's TID251 ban (pyproject.toml) flags it at lint time; this test makes the suite fail too, by walking the
AST of every project module, so a ``from streamlit import x`` inside a function or an ``importlib`` string is
caught as well.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gpuledger", "analytics", "collectors", "bench")
ALLOWED = ("app.py", "pages/")


def _streamlit_imports(path: Path) -> list[int]:
    """Line numbers where ``path`` imports streamlit (import, from-import, or importlib.import_module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            if any(a.name.split(".")[0] == "streamlit" for a in node.names):
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.module and node.module.split(".")[0] == "streamlit" and node.level == 0:
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and node.args:
            first = node.args[0]
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if (
                name in ("import_module", "__import__")
                and isinstance(first, ast.Constant)
                and str(first.value).split(".")[0] == "streamlit"
            ):
                lines.append(node.lineno)
    return lines


def _project_modules() -> list[Path]:
    files = [p for pkg in PACKAGES if (ROOT / pkg).is_dir() for p in (ROOT / pkg).rglob("*.py")]
    return sorted(p for p in files if ".venv" not in p.parts)


def test_streamlit_is_imported_only_by_the_dashboard() -> None:
    offenders = [
        f"{p.relative_to(ROOT)}:{line}" for p in _project_modules() for line in _streamlit_imports(p)
    ]
    assert offenders == [], "streamlit belongs to app.py and pages/ only: " + ", ".join(offenders)


def test_the_dashboard_itself_is_seen_importing_streamlit() -> None:
    # Guards the walker: if it stopped recognising imports, the test above could never fail.
    assert _streamlit_imports(ROOT / "app.py")
    assert all(_streamlit_imports(p) for p in (ROOT / "pages").glob("[!_]*.py"))


@pytest.mark.parametrize(
    "source",
    [
        "import streamlit as st\n",
        "import streamlit.components.v1\n",
        "from streamlit import cache_data\n",
        "def f():\n    from streamlit.testing.v1 import AppTest\n",
        "import importlib\nimportlib.import_module('streamlit')\n",
    ],
)
def test_walker_catches_each_import_form(tmp_path: Path, source: str) -> None:
    path = tmp_path / "m.py"
    path.write_text(source, encoding="utf-8")
    assert _streamlit_imports(path) != []


def test_walker_ignores_lookalikes(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("import streamlit_like\nfrom .streamlit import x\ntext = 'import streamlit'\n")
    assert _streamlit_imports(path) == []


# ---- import direction -------------------------------------------------------------------------------------
# Each layer may import itself and the layers listed for it, nothing else: cli → reports / demo / analytics /
# collectors → ledger. The dashboard (app.py, pages/) sits beside the CLI and may not import it.
MAY_IMPORT: dict[str, set[str]] = {
    "gpuledger.ledger": set(),
    "collectors": {"gpuledger.ledger"},
    "analytics": {"gpuledger.ledger"},
    "gpuledger.reports": {"analytics", "gpuledger.budgets", "gpuledger.items", "gpuledger.ledger"},
    "gpuledger.items": {"analytics", "gpuledger.ledger"},
    "gpuledger.budgets": {"analytics", "gpuledger.ledger"},
    "gpuledger.chargeback": {"analytics", "gpuledger.budgets", "gpuledger.ledger"},
    "gpuledger.alerts": {"analytics", "gpuledger.budgets", "gpuledger.reports", "gpuledger.ledger"},
    "gpuledger.upload": {"analytics", "collectors", "gpuledger.ledger"},
    "gpuledger.demo": {"collectors", "gpuledger.ledger"},
    "gpuledger.guard": {"analytics", "gpuledger.reports", "gpuledger.ledger"},
    "gpuledger.web": set(),
    "gpuledger.cli": {
        "gpuledger",
        "gpuledger.guard",
        "gpuledger.web",
        "gpuledger.reports",
        "gpuledger.budgets",
        "gpuledger.alerts",
        "gpuledger.chargeback",
        "gpuledger.demo",
        "gpuledger.items",
        "analytics",
        "collectors",
        "gpuledger.ledger",
    },
    "pages": {
        "gpuledger",
        "gpuledger.web",
        "gpuledger.guard",
        "gpuledger.reports",
        "gpuledger.budgets",
        "gpuledger.upload",
        "gpuledger.items",
        "analytics",
        "collectors",
        "gpuledger.ledger",
    },
    "app": {"gpuledger", "pages", "gpuledger.ledger"},
}
PROJECT_ROOTS = ("gpuledger", "analytics", "collectors", "pages", "app")


def layer_of(module: str) -> str | None:
    """``gpuledger.ledger.db`` → ``gpuledger.ledger``; ``analytics.cost`` → ``analytics``; others → None."""
    parts = module.split(".")
    if parts[0] not in PROJECT_ROOTS:
        return None
    if (
        parts[0] == "gpuledger"
        and len(parts) > 1
        and parts[1]
        in (
            "ledger",
            "reports",
            "demo",
            "cli",
            "upload",
            "items",
            "budgets",
            "alerts",
            "chargeback",
            "guard",
            "web",
        )
    ):
        return ".".join(parts[:2])
    return parts[0]


def backward_imports(path: Path, own: str) -> list[str]:
    """``module:line`` for each import in ``path`` that its layer ``own`` may not make."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        for name in names:
            target = layer_of(name)
            if target is not None and target != own and target not in MAY_IMPORT[own]:
                bad.append(f"{name}:{node.lineno}")
    return bad


def _layered_modules() -> list[tuple[Path, str]]:
    files = [ROOT / "app.py"]
    for pkg in ("gpuledger", "analytics", "collectors", "pages"):
        files += (ROOT / pkg).rglob("*.py")
    out = []
    for p in sorted(files):
        rel = p.relative_to(ROOT).with_suffix("")
        own = layer_of(".".join(rel.parts))
        if own in MAY_IMPORT:
            out.append((p, own))
    return out


def test_imports_run_one_way() -> None:
    offenders = [
        f"{p.relative_to(ROOT)} imports {bad}"
        for p, own in _layered_modules()
        for bad in backward_imports(p, own)
    ]
    assert offenders == [], "imports against the layer direction (README, Architecture): " + "; ".join(
        offenders
    )


@pytest.mark.parametrize(
    ("own", "source"),
    [
        ("gpuledger.ledger", "from analytics.cost import x\n"),
        ("collectors", "def f():\n    from gpuledger.cli.commands._common import print_json\n"),
        ("analytics", "import collectors.base\n"),
        ("gpuledger.reports", "from gpuledger.cli.main import main\n"),
        ("pages", "from gpuledger.cli.commands.summary import filters_from\n"),
        ("gpuledger.upload", "from gpuledger.reports.weekly import render\n"),
    ],
)
def test_a_backward_import_is_caught(tmp_path: Path, own: str, source: str) -> None:
    path = tmp_path / "m.py"
    path.write_text(source, encoding="utf-8")
    assert backward_imports(path, own) != []


def test_forward_imports_pass(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("from gpuledger.ledger.db import reader\nimport analytics.cost\nimport os\n")
    assert backward_imports(path, "gpuledger.reports") == []


# ---- no import circles ------------------------------------------------------------------------------------
# Two modules that import each other (directly or around a longer loop) can only load because one of the imports
# hides inside a function, which is where circles grow unnoticed: every import counts here, at module level, in
# a function, under TYPE_CHECKING or through importlib with a constant name.


def module_names(root: Path) -> dict[str, Path]:
    """Dotted name → file for every project module under ``root`` (a package's ``__init__`` is the package)."""
    out = {}
    for pkg in ("gpuledger", "analytics", "collectors", "pages"):
        for p in (root / pkg).rglob("*.py"):
            parts = list(p.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    if (root / "app.py").exists():
        out["app"] = root / "app.py"
    return out


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module → the project modules it imports anywhere in its text (``from pkg import mod`` counts mod)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        seen: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                seen.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                seen.add(node.module)
                seen.update(f"{node.module}.{a.name}" for a in node.names)
            elif (
                isinstance(node, ast.Call)
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and getattr(node.func, "attr", getattr(node.func, "id", ""))
                in ("import_module", "__import__")
            ):
                seen.add(str(node.args[0].value))
        graph[name] = {m for m in seen if m in modules and m != name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted: every one is a circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_import_circle() -> None:
    circles = import_circles(import_graph(module_names(ROOT)))
    assert circles == [], "modules that import each other (lazy imports included): " + "; ".join(
        " ↔ ".join(c) for c in circles
    )


@pytest.mark.parametrize(
    "lazy",
    [
        "def f():\n    from analytics.a import x\n",
        "def f():\n    import analytics.a\n",
        "def f():\n    from analytics import a\n",
        "import importlib\ndef f():\n    importlib.import_module('analytics.a')\n",
    ],
)
def test_a_circle_through_a_lazy_import_is_caught(tmp_path: Path, lazy: str) -> None:
    (tmp_path / "analytics").mkdir()
    (tmp_path / "analytics" / "__init__.py").write_text("")
    (tmp_path / "analytics" / "a.py").write_text("from analytics.c import y\n")
    (tmp_path / "analytics" / "c.py").write_text("from analytics.b import z\n")
    (tmp_path / "analytics" / "b.py").write_text(lazy)
    assert import_circles(import_graph(module_names(tmp_path))) == [
        ["analytics.a", "analytics.b", "analytics.c"]
    ]


def test_one_way_imports_are_no_circle(tmp_path: Path) -> None:
    (tmp_path / "analytics").mkdir()
    (tmp_path / "analytics" / "a.py").write_text("from analytics.b import z\nimport analytics.c\n")
    (tmp_path / "analytics" / "b.py").write_text("def f():\n    from analytics.c import y\n")
    (tmp_path / "analytics" / "c.py").write_text("import os\n")
    assert import_circles(import_graph(module_names(tmp_path))) == []
