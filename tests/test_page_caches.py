"""Every Streamlit cache in pages/_data.py is bounded: a ``max_entries`` and a ``ttl``.

The keys of the page caches carry the ledger's version, which changes at every collector flush; a cache
without bounds grows for as long as a collector runs (issue 11). All caching sits in pages/_data.py
(STYLE.md 7), so reading that one module's decorators covers every cache of the dashboard.
"""

from __future__ import annotations

import ast

from tests.conftest import ROOT


def cache_decorators() -> dict[str, set[str]]:
    """function name → keyword arguments of its ``st.cache_data`` / ``st.cache_resource`` decorator."""
    found = {}
    for path in (ROOT / "pages").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            for dec in node.decorator_list:
                call = dec if isinstance(dec, ast.Call) else None
                target = call.func if call else dec
                if isinstance(target, ast.Attribute) and target.attr in ("cache_data", "cache_resource"):
                    found[f"{path.name}:{node.name}"] = {k.arg for k in call.keywords} if call else set()
    return found


def test_every_page_cache_has_max_entries_and_ttl():
    caches = cache_decorators()
    assert len(caches) >= 15  # the wrappers the issue counted; a refactor that hides them fails here
    unbounded = {
        name: sorted({"max_entries", "ttl"} - kw)
        for name, kw in caches.items()
        if {"max_entries", "ttl"} - kw
    }
    assert unbounded == {}
    assert {name.split(":")[0] for name in caches} == {"_data.py"}  # caching lives in one module
