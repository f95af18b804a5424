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

Pure data structure and time arithmetic: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

DEFAULT_MAX_ENTRIES = 4096
DEFAULT_MAX_AGE = 10.0
# Clocks of the database and this process may differ slightly: expire a little early.
CLOCK_MARGIN = 0.05


@dataclass(slots=True)
class CachedResponse:
    body: bytes
    etag: str
    seq: int
    expires: float  # time.monotonic() deadline
    # What the handler needs to authorize a cached answer (e.g. the agent's visibility).
    extra: Any = None


def etag_of(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


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
    """Entries valid for one change sequence number; dropped wholesale when it moves."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES):
        self.max_entries = max_entries
        self._entries: dict[Hashable, CachedResponse] = {}
        self._seq: int | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every entry (after writes that bypass the change sequence, e.g. in tests)."""
        self._entries.clear()

    def get(self, key: Hashable, seq: int | None, now: float) -> CachedResponse | None:
        """The entry for `key` if it is current at sequence `seq` (None: caching is off) and time `now`."""
        if seq is None:
            return None
        if seq != self._seq:
            self._entries.clear()
            self._seq = seq
        entry = self._entries.get(key)
        if entry is None or entry.seq != seq or entry.expires <= now:
            return None
        return entry

    def put(self, key: Hashable, entry: CachedResponse, seq: int | None) -> None:
        """Keep `entry` if it was built at the sequence the process knows now; else it may be stale."""
        if seq is None or entry.seq != seq:
            return
        if seq != self._seq:
            self._entries.clear()
            self._seq = seq
        if key not in self._entries and len(self._entries) >= self.max_entries:
            del self._entries[next(iter(self._entries))]  # oldest first
        self._entries[key] = entry
