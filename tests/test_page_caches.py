"""Every Streamlit cache of the dashboard is bounded (a ``max_entries`` and a ``ttl``) and made in one module.

The keys of the page caches carry the ledger's version, which changes at every collector flush; a cache
without bounds grows for as long as a collector runs (issue 11). All caching sits in pages/_data.py
(STYLE.md 7): its data functions are reads decorated with ``cached`` (or ``bounded``, the Upload page's),
and those two decorators are the only ``st.cache_data`` call, so reading that module covers every cache.
"""

from __future__ import annotations

import ast

from tests.conftest import ROOT

DECORATORS = ("cached", "bounded")


def _name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")


def streamlit_cache_calls() -> dict[str, set[str]]:
    """``file:line`` → keyword arguments of each ``st.cache_data`` / ``st.cache_resource`` call or decorator."""
    found = {}
    for path in [*(ROOT / "pages").glob("*.py"), ROOT / "app.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and _name(node) in ("cache_data", "cache_resource"):
                found[f"{path.name}:{node.lineno}"] = {k.arg for k in node.keywords}
            elif isinstance(node, ast.FunctionDef):
                for dec in node.decorator_list:
                    if not isinstance(dec, ast.Call) and _name(dec) in ("cache_data", "cache_resource"):
                        found[f"{path.name}:{node.lineno}"] = set()  # a bare decorator: no bounds
    return found


def cached_functions() -> list[str]:
    """The data functions of pages/_data.py made by its caching decorators."""
    tree = ast.parse((ROOT / "pages" / "_data.py").read_text())
    return [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and any(_name(d) in DECORATORS for d in node.decorator_list)
    ]


def test_every_page_cache_has_max_entries_and_ttl() -> None:
    calls = streamlit_cache_calls()
    unbounded = {
        where: sorted({"max_entries", "ttl"} - kw)
        for where, kw in calls.items()
        if {"max_entries", "ttl"} - kw
    }
    assert unbounded == {}
    assert {where.split(":")[0] for where in calls} == {"_data.py"}  # caching lives in one module
    assert len(calls) == 2  # the one data-cache decorator and the reference sync's resource cache


def test_the_data_functions_go_through_the_one_decorator() -> None:
    # the 23 hand-written cached functions the issue counted; a refactor that hides them fails here
    assert len(cached_functions()) >= 23, cached_functions()
