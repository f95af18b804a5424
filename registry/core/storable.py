"""Finding text PostgreSQL cannot store (db.unstorable says which) anywhere in a decoded request
body, as a JSON pointer to the first such value. Pure functions, no I/O.
"""

from __future__ import annotations

from typing import Any

from db.unstorable import escaped, unstorable
from registry.core.json_pointer import escape_token


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
