"""A lexical scan of a JSON document for the lines its keys and list entries sit on (DuckDB's JSON functions
say which entry broke a rule, never on which line it is)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# group 1: the string is a key. The closing quote is optional and the loop possessive, so an unterminated string
# is one token to the end of the data: scanning each of its quotes again would be quadratic (`"\"\"\"…`).
_JSON_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*+(?:"(\s*:)?)?|[\[\]{},]', re.S)
_NON_SPACE = re.compile(rb"\S")
JSON_LINES_MAX_BYTES = 256 * 2**20  # past this, entries keep their index label (a scan would be slow)


@dataclass(frozen=True)
class JsonLines:
    """Where things sit in a JSON document, by 1-based line: ``keys`` (top-level key → the line of the key),
    ``items`` (each element of the array under one top-level key: the line it starts on, and the line of
    each of its own keys)."""

    keys: dict[str, int]
    items: list[tuple[int, dict[str, int]]]


def json_lines(path: str | Path, array_key: str) -> JsonLines | None:
    """Lines of a whole-file JSON document's top-level keys and of the entries of its ``array_key`` list
    (``log_history`` of a trainer_state.json), for messages: DuckDB's JSON functions say which entry broke a
    rule, never on which line it is. A lexical scan (strings, keys, brackets, commas), so a value DuckDB
    read but Python's json would refuse (``NaN``) does not stop it. None when the file cannot be read or is
    larger than :data:`JSON_LINES_MAX_BYTES`; the caller checks ``len(items)`` against the entries it has."""
    import bisect

    try:
        p = Path(path)
        if p.stat().st_size > JSON_LINES_MAX_BYTES:
            return None
        data = p.read_bytes()
    except OSError:
        return None
    newlines = [m.start() for m in re.finditer(rb"\n", data)]

    def line(offset: int) -> int:
        return bisect.bisect_left(newlines, offset) + 1

    keys: dict[str, int] = {}
    items: list[tuple[int, dict[str, int]]] = []
    stack: list[int] = []  # b"{" or b"[" of each open container
    target = 0  # the stack depth inside the array, while in it
    done = False
    pending_key = False  # the top-level key array_key was just read: its value comes next
    wanted = array_key.encode()

    def element_after(pos: int) -> None:
        m = _NON_SPACE.search(data, pos)
        if m and data[m.start()] != 93:  # "]": an empty list or a trailing comma
            items.append((line(m.start()), {}))

    for m in _JSON_TOKEN.finditer(data):
        start = m.start()
        tok = data[start]
        key, pending_key = pending_key, False
        if tok == 34:  # a string
            if m.group(1) is None:
                continue
            depth = len(stack)
            if depth == 1 and stack[0] == 123:
                name = data[start + 1 : m.start(1) - 1]
                keys.setdefault(name.decode("utf-8", "replace"), line(start))
                pending_key = name == wanted
            elif target and depth == target + 1 and stack[-1] == 123 and items:
                name = data[start + 1 : m.start(1) - 1]
                items[-1][1].setdefault(name.decode("utf-8", "replace"), line(start))
        elif tok == 91 or tok == 123:  # [ {
            stack.append(tok)
            if key and tok == 91 and not done and len(stack) == 2:
                target = 2
                element_after(m.end())
        elif tok == 44:  # ,
            if target and len(stack) == target:
                element_after(m.end())
        else:  # ] }
            if stack:
                stack.pop()
            if target and len(stack) < target:
                target, done = 0, True
    return JsonLines(keys, items)
