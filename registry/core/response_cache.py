"""Per-process cache of encoded public responses (discovery pages, A2A public cards).

Correctness comes first, so an entry is served only while it is provably what a fresh query would
answer:

- Each entry is labelled with the change sequence number read from the database *before* the query
  that built it (so the data is at least that new), and is served only while the process's view of
  the sequence (`ChangeWatcher.seq`, fed by LISTEN/NOTIFY from every replica and bumped by this
  process's own writes before they commit) still equals that label. Any committed change anywhere
  empties the cache; an entry built during a local write's transaction is never stored.
- Responses also change with time alone: `health` flips to `stale` when an agent's last lease
  lapses, and a version with a future `effectiveAt` becomes discoverable when it arrives. An entry
  expires at the earliest such moment that could affect it, and after `max_age` seconds in any case
  (a backstop should a notification be lost while the listener reconnects; the cache is off while
  it is disconnected).

- Memory is bounded in bytes, not only entries (`ResponseCache.max_bytes`, a part of
  CAPREG_CACHE_BUDGET), and keys carry only what changes the answer (callers normalise them).

Pure data structure and time arithmetic: no I/O.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from registry.core.cache_budget import estimated_size

DEFAULT_MAX_ENTRIES = 4096
DEFAULT_MAX_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_AGE = 10.0
# Leases renew without a change-feed entry, so what is cached of them (an agent's live instances,
# their loads) may lag this much behind: detail release and offers alike.
LEASES_MAX_AGE = 1.0
# Clocks of the database and this process may differ slightly: expire a little early.
CLOCK_MARGIN = 0.05


class ViewerDimension(NamedTuple):
    """What of the viewer a cached answer depends on (`name`), and its value for this answer."""

    name: str
    value: Hashable


# The same answer for every caller: who may see it is checked on every read (agent views, cards,
# release rows, leases, the regions capabilities name).
EVERYONE = ViewerDimension("everyone", None)


def seen_by_tenant(tenant: str | None) -> ViewerDimension:
    """An answer filtered by what the viewer's tenant may see (None: anonymous): discovery, ARD."""
    return ViewerDimension("tenant", tenant)


def decided_for(profile: Hashable) -> ViewerDimension:
    """An answer decided by detail release's rules, which read the caller's release profile
    (auth.policy.release_profile: tenant, scopes, regions): offers' candidates."""
    return ViewerDimension("release-profile", profile)


def cache_key(kind: str, viewer: ViewerDimension, *question: Hashable) -> tuple[Hashable, ...]:
    """The one way a key of the per-process caches is built (issue 36): the kind of answer, the
    viewer dimension it depends on (EVERYONE, seen_by_tenant, decided_for), then the question. Two
    viewers who differ in that dimension never share an entry; tests/web/test_cache_keys.py holds
    every cache to it."""
    if not isinstance(viewer, ViewerDimension):
        raise TypeError("a cache key names its viewer dimension (EVERYONE, seen_by_tenant, decided_for)")
    return (kind, viewer, *question)


@dataclass(slots=True)
class CachedResponse:
    body: bytes
    etag: str
    seq: int
    expires: float  # time.monotonic() deadline
    # What the handler needs to authorize a cached answer (e.g. the agent's visibility).
    extra: Any = None


def etag_of(body: bytes) -> str:
    """The strong ETag of every cached answer (discovery, cards, agent views, ARD): one definition."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """RFC 9110 weak comparison of an If-None-Match list against our strong ETag."""
    if not if_none_match:
        return False
    for candidate in if_none_match.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == etag:
            return True
    return False


def expiry(
    now_monotonic: float, now_wall: datetime, boundaries: Iterable[datetime | None], max_age: float = DEFAULT_MAX_AGE
) -> float:
    """Monotonic deadline: `max_age` from now, or earlier at the first future boundary."""
    deadline = now_monotonic + max_age
    for boundary in boundaries:
        if boundary is None:
            continue
        seconds = (boundary - now_wall).total_seconds() - CLOCK_MARGIN
        if seconds <= 0:
            continue  # already past: the query that built the entry already saw it
        deadline = min(deadline, now_monotonic + seconds)
    return deadline


class ResponseCache:
    """Entries valid for one change sequence number; dropped wholesale when it moves.

    Bounded in entries and in bytes (`max_bytes`, a part of CAPREG_CACHE_BUDGET, registry.core.cache_budget):
    each entry is charged what it keeps alive (its body, key and decided-from rows), expired entries
    are dropped when met and before anything live is evicted, then the least recently used go first.
    An entry larger than a quarter of the budget is never kept.
    """

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES):
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[Hashable, tuple[CachedResponse, int]] = OrderedDict()
        self._seq: int | None = None
        self._swept = float("-inf")
        # Lookups answered from the cache and not (/metrics); a lookup with caching off is neither.
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every entry (after writes that bypass the change sequence, e.g. in tests)."""
        self._entries.clear()
        self.bytes = 0

    def _move_to(self, seq: int) -> None:
        if seq != self._seq:
            self.clear()
            self._seq = seq

    def get(self, key: Hashable, seq: int | None, now: float) -> CachedResponse | None:
        """The entry for `key` if it is current at sequence `seq` (None: caching is off) and time `now`."""
        if seq is None:
            return None
        self._move_to(seq)
        found = self._entries.get(key)
        if found is None:
            self.misses += 1
            return None
        entry = found[0]
        if entry.seq != seq or entry.expires <= now:
            self._drop(key)
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry

    def put(
        self,
        key: Hashable,
        entry: CachedResponse,
        seq: int | None,
        *,
        size: int | None = None,
        now: float | None = None,
    ) -> None:
        """Keep `entry` if it was built at the sequence the process knows now; else it may be stale.
        `size`: the bytes to charge, when the entry shares its body with another (an alias key);
        by default its estimated size (registry.core.cache_budget.estimated_size)."""
        if seq is None or entry.seq != seq:
            return
        self._move_to(seq)
        if size is None:
            size = len(entry.body) + estimated_size(entry.extra) + 256
        size += estimated_size(key)
        if size > self.max_bytes // 4:
            return
        if key in self._entries:
            self._drop(key)
        now = time.monotonic() if now is None else now
        if self.bytes + size > self.max_bytes and now - self._swept > 1.0:
            self._swept = now  # a sweep costs one pass: at most once a second under pressure
            self._drop_expired(now)
        while self._entries and (self.bytes + size > self.max_bytes or len(self._entries) >= self.max_entries):
            self._drop(next(iter(self._entries)))  # least recently used first
        self._entries[key] = (entry, size)
        self.bytes += size

    def _drop(self, key: Hashable) -> None:
        _, size = self._entries.pop(key)
        self.bytes -= size

    def _drop_expired(self, now: float) -> None:
        for key in [k for k, (entry, _) in self._entries.items() if entry.expires <= now]:
            self._drop(key)
