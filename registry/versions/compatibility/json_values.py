"""JSON values as the schema comparison (registry.versions.compatibility.schemas) reads them: JSON
equality (1 == 1.0, true != 1), sets of values under it, value kinds (integer inside number), exact
multiples, and local `$ref` pointers. Pure: no I/O; iterative, so deep documents cannot overflow the
stack."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any
from urllib.parse import unquote

from registry.core.json_pointer import unescape_token


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but true != 1. Iterative, so deep documents cannot overflow the stack."""
    pending = [(a, b)]
    while pending:
        x, y = pending.pop()
        if x is y and not isinstance(x, (Mapping, list)):
            continue
        if isinstance(x, bool) or isinstance(y, bool):
            if not (isinstance(x, bool) and isinstance(y, bool) and x == y):
                return False
        elif isinstance(x, (int, float)) and isinstance(y, (int, float)):
            if x != y:
                return False
        elif isinstance(x, str) and isinstance(y, str):
            if x != y:
                return False
        elif isinstance(x, Mapping) and isinstance(y, Mapping):
            if x is y:
                continue
            if len(x) != len(y) or any(key not in y for key in x):
                return False
            pending.extend((x[key], y[key]) for key in x)
        elif isinstance(x, list) and isinstance(y, list):
            if x is y:
                continue
            if len(x) != len(y):
                return False
            pending.extend(zip(x, y, strict=True))
        elif not (x is None and y is None):
            return False
    return True


def _bucket(value: Any) -> tuple:
    # Equal JSON values share a bucket (1 and 1.0 hash alike); containers bucket by size only.
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, (int, float)):
        return ("number", value)
    return (type(value).__name__, len(value)) if isinstance(value, (list, Mapping)) else ("other", id(value))


class ValueSet:
    """A set of JSON values under JSON equality (so `true` is not `1`)."""

    def __init__(self, values: Sequence[Any]) -> None:
        self._buckets: dict[tuple, list[Any]] = {}
        for value in values:
            self._buckets.setdefault(_bucket(value), []).append(value)

    def __contains__(self, value: Any) -> bool:
        return any(json_equal(value, member) for member in self._buckets.get(_bucket(value), ()))


# Value kinds: JSON types, with numbers split so that "integer" is a subset of "number".
NUMBERS = frozenset({"integer", "fraction"})
ALL_KINDS = frozenset({"null", "boolean", "object", "array", "string", "integer", "fraction"})
_TYPE_KINDS = {
    "null": {"null"},
    "boolean": {"boolean"},
    "object": {"object"},
    "array": {"array"},
    "string": {"string"},
    "integer": {"integer"},
    "number": {"integer", "fraction"},
}


def value_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "fraction"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def type_kinds(type_value: Any) -> frozenset[str] | None:
    names = [type_value] if isinstance(type_value, str) else type_value
    if not isinstance(names, list) or not all(isinstance(n, str) and n in _TYPE_KINDS for n in names):
        return None
    return frozenset(kind for name in names for kind in _TYPE_KINDS[name])


def type_names(kinds: frozenset[str] | set[str]) -> str:
    names = [k for k in ("null", "boolean", "object", "array", "string") if k in kinds]
    if kinds >= NUMBERS:
        names.append("number")
    elif "integer" in kinds:
        names.append("integer")
    elif "fraction" in kinds:
        names.append("non-integer number")
    return "/".join(names) or "nothing"


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_count(value: Any) -> bool:
    return is_number(value) and value >= 0 and float(value).is_integer()


def _fraction(value: int | float) -> Fraction:
    # repr keeps the decimal the author wrote (0.1 stays 1/10, not the nearest binary float).
    return Fraction(value) if isinstance(value, int) else Fraction(repr(value))


def is_multiple(value: int | float, divisor: int | float) -> bool:
    return (_fraction(value) / _fraction(divisor)).denominator == 1


def resolve_pointer(root: Any, ref: Any) -> tuple[Any, str | None]:
    """The target of a local reference, or an error saying why it cannot be followed."""
    if not isinstance(ref, str):
        return None, "a $ref that is not a string"
    if not ref.startswith("#"):
        return None, f"remote reference {ref!r} cannot be compared"
    fragment = unquote(ref[1:])
    if fragment == "":
        return root, None
    if not fragment.startswith("/"):
        return None, f"anchor reference {ref!r} cannot be compared"
    node = root
    for token in fragment[1:].split("/"):
        token = unescape_token(token)
        if isinstance(node, Mapping) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None, f"reference {ref!r} points nowhere"
    return node, None


def references_in(value: Any) -> list[str]:
    found: list[str] = []
    pending = [value]
    while pending:
        node = pending.pop()
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str):
                found.append(ref)
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return found
