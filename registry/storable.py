"""Text PostgreSQL cannot store: NUL (no `text` or `jsonb` value may hold it) and lone UTF-16
surrogates (not encodable as UTF-8). Finding them in a request, and escaping them where a value must
still be kept (an audit event describing the refused request). Pure functions, no I/O.
"""

from __future__ import annotations

import re
from typing import Any

from registry.json_pointer import escape_token

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def unstorable(text: str) -> bool:
    return _UNSTORABLE.search(text) is not None


def escaped(text: str) -> str:
    """`text` with each unstorable character written as its JSON escape (`\\u0000`), so that it can
    be stored and still says what was sent."""
    if _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _pointer_part(key: object) -> str:
    return "/" + escape_token(escaped(str(key)))


def unstorable_pointer(value: Any, at: str = "") -> str | None:
    """The JSON pointer of the first string (key or value) PostgreSQL could not store, else None.

    Iterative, so a deeply nested document cannot exhaust the stack."""
    stack: list[tuple[Any, str]] = [(value, at)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if unstorable(item):
                return where
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and unstorable(key):
                    return where + _pointer_part(key)
                stack.append((child, where + _pointer_part(key)))
        elif isinstance(item, (list, tuple)):
            stack.extend((child, f"{where}/{i}") for i, child in enumerate(item))
    return None
