"""Edits to a settings file (Settings → Save) that keep the user's file as they wrote it.

The file is edited with tomlkit (the Poetry project's style-preserving TOML library), not with regular
expressions: comments, blank lines, key order, dotted keys (``clusters.a.tier = ...``), inline tables,
spaced headers (``[ clusters . a ]``) and quoted keys (``[clusters."gpu farm"]``) all stay as they were, and a
name holding ``"`` or ``\\`` is quoted as TOML requires. Each edit is checked before it is returned: the new
text, read by the standard library's ``tomllib``, must be the old file's data with exactly that one change;
otherwise :class:`~gpuledger.ledger.errors.LedgerError` says so and nothing is to be written.
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Sequence
from typing import Any

import tomlkit
from tomlkit.exceptions import ParseError
from tomlkit.items import AoT, InlineTable

from gpuledger.ledger.errors import LedgerError


def set_key(text: str, sections: Sequence[str], key: str, value: object) -> str:
    """``text`` (a TOML file) with ``key = value`` in the table ``sections`` (``("clusters", "gpu farm")``:
    names as they are, never quoted by the caller). An existing key is replaced in place; a new key joins its
    table where tomlkit puts it (after the table's last key, inline tables included); a table the file does
    not have is written at the end as ``[clusters."gpu farm"]`` (inside an inline table, as an inline table),
    so it can never capture the lines of the table after it."""
    doc = _parse(text)
    node: Any = doc
    path = list(sections)
    depth = 0
    while depth < len(path) and isinstance(node, dict) and path[depth] in node:
        node = node[path[depth]]
        depth += 1
    rest = path[depth:]
    if not isinstance(node, dict):
        raise LedgerError(f"{'.'.join(path[:depth])} is a value, not a table: cannot set {key} in it")
    if not rest:
        node[key] = value
        out = tomlkit.dumps(doc)
    elif isinstance(node, InlineTable):
        child: Any = tomlkit.inline_table()
        inner = child
        for name in rest[1:]:
            inner[name] = tomlkit.inline_table()
            inner = inner[name]
        inner[key] = value
        node[rest[0]] = child
        out = tomlkit.dumps(doc)
    else:
        block = tomlkit.document()
        block[key] = value
        header = ".".join(tomlkit.key(name).as_string() for name in path)
        body = tomlkit.dumps(doc).rstrip("\n")
        out = (body + "\n\n" if body else "") + f"[{header}]\n" + tomlkit.dumps(block)
    _check_one_change(text, out, lambda data: _put(data, path, key, value))
    return out


def add_price(text: str, row: dict[str, object]) -> str:
    """``text`` with one more ``[[price]]`` row (its keys in ``row``'s order; None values left out), after the
    rows already there whether they are ``[[price]]`` tables or a ``price = [ ... ]`` array."""
    doc = _parse(text)
    entry = {k: v for k, v in row.items() if v is not None}
    if "price" in doc:
        prices: Any = doc["price"]
        if not isinstance(prices, list):
            raise LedgerError("price is not a list of price rows: cannot add one")
        if isinstance(prices, AoT):
            table = tomlkit.table()
            for k, v in entry.items():
                table[k] = v
            prices.append(table)
        else:
            inline = tomlkit.inline_table()
            inline.update(entry)
            prices.append(inline)
        out = tomlkit.dumps(doc)
    else:
        block = tomlkit.document()
        aot = tomlkit.aot()
        table = tomlkit.table()
        for k, v in entry.items():
            table[k] = v
        aot.append(table)
        block["price"] = aot
        body = tomlkit.dumps(doc).rstrip("\n")
        out = (body + "\n\n" if body else "") + tomlkit.dumps(block)
    _check_one_change(text, out, lambda data: data.setdefault("price", []).append(entry))
    return out


def _parse(text: str) -> tomlkit.TOMLDocument:
    try:
        return tomlkit.parse(text)
    except ParseError as exc:
        raise LedgerError(f"not valid TOML: {exc}") from None


def _put(data: dict[str, Any], path: list[str], key: str, value: object) -> None:
    for name in path:
        data = data.setdefault(name, {})
    data[key] = value


def _check_one_change(before: str, after: str, change: Any) -> None:
    """``after`` must read as ``before``'s data with ``change`` applied, and nothing else changed."""
    expected = copy.deepcopy(tomllib.loads(before))
    change(expected)
    try:
        got = tomllib.loads(after)
    except tomllib.TOMLDecodeError as exc:  # a tomlkit bug, never the user's file: say so, write nothing
        raise LedgerError(f"the edited file would not parse ({exc}); nothing was written") from None
    if got != expected:
        raise LedgerError("the edit would change other settings of this file; nothing was written")
