"""How one worker's memory for caches is split (docs/security.md#cache-budget): CAPREG_CACHE_BUDGET
bytes in all, shared out among the per-process caches in fixed parts, so a flood of distinct keys
on one cache can neither grow the worker past the budget nor evict another cache's entries.

Sizes are estimates of what an entry keeps alive (its encoded bytes, its key, and the Python
objects behind it), not exact accounting; docs/security.md gives the measured RSS under floods.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

# Part of the budget each cache may use; together they make the whole.
SHARES = {
    "responses": 0.50,  # discovery pages, public cards, agent views (registry.core.response_cache)
    "release": 0.25,  # rows behind detail releases and tickets (registry.release.skill_records)
    "schemas": 0.15,  # compiled schemas and patterns (registry.core.schema_guard)
    "tokens": 0.10,  # verified caller tokens and tickets (auth.tokens.VerifiedTokens)
}
# What a Python object costs beyond its characters, roughly (header, refcount, hash, pointers).
_OBJECT_OVERHEAD = 64


def share(total: int, cache: str) -> int:
    """The bytes `cache` may hold of a `total` budget."""
    return int(total * SHARES[cache])


def estimated_size(value: Any, *, depth: int = 0) -> int:
    """Bytes `value` keeps alive, roughly: strings and bytes by length, containers and records by
    their items (asyncpg records and dicts alike), anything else by sys.getsizeof. Bounded work:
    deeper than 32 levels counts as its shallow size."""
    if value is None or isinstance(value, (bool, int, float)):
        return 32
    if isinstance(value, (str, bytes, bytearray)):
        return _OBJECT_OVERHEAD + len(value)
    if depth > 32:
        return sys.getsizeof(value)
    if isinstance(value, dict) or hasattr(value, "items") and hasattr(value, "keys"):
        return _OBJECT_OVERHEAD * 2 + sum(
            estimated_size(k, depth=depth + 1) + estimated_size(v, depth=depth + 1) for k, v in value.items()
        )
    if isinstance(value, (list, tuple, set, frozenset)):
        return _OBJECT_OVERHEAD + 8 * len(value) + sum(estimated_size(v, depth=depth + 1) for v in value)
    fields = getattr(value, "__struct_fields__", None)
    if fields is not None:  # msgspec Structs
        return _OBJECT_OVERHEAD + sum(estimated_size(getattr(value, f), depth=depth + 1) for f in fields)
    return sys.getsizeof(value)


class _Info(NamedTuple):
    currsize: int
    bytes: int
    max_bytes: int


class ByteBoundedMemo:
    """`function(text)` remembered per distinct text, least recently used dropped first, within
    `max_bytes` charged `weight * len(text) + overhead` per entry (a compiled form costs several
    times its source). Thread-safe enough for the GIL: one dict, no awaits."""

    def __init__(self, function: Callable[[str], Any], *, max_bytes: int, weight: int = 8, overhead: int = 4096):
        self.__wrapped__ = function
        self.max_bytes, self.weight, self.overhead = max_bytes, weight, overhead
        self.bytes = 0
        self._entries: OrderedDict[str, Any] = OrderedDict()

    def _cost(self, text: str) -> int:
        return self.weight * len(text) + self.overhead

    def __call__(self, text: str) -> Any:
        if text in self._entries:
            self._entries.move_to_end(text)
            return self._entries[text]
        value = self.__wrapped__(text)
        cost = self._cost(text)
        if cost <= self.max_bytes // 4:
            self._entries[text] = value
            self.bytes += cost
            while self.bytes > self.max_bytes:
                oldest, _ = self._entries.popitem(last=False)
                self.bytes -= self._cost(oldest)
        return value

    def cache_info(self) -> _Info:
        return _Info(len(self._entries), self.bytes, self.max_bytes)

    def cache_clear(self) -> None:
        self._entries.clear()
        self.bytes = 0
