"""The registry's one clock, read through `Registry.clock` by every rule that depends on time: cache
lifetimes, lease ages, ticket issue and expiry times, effective and deprecation times, the
housekeeping tick. Wall time is UTC (`now`, `epoch`); `monotonic` orders deadlines inside one
process. A test replaces it with a `SteppedClock` and moves time forward instead of sleeping.

Which clock each rule reads, written down once:
- the app's clock (this one, passed to queries as a bound `now`): when a version is published
  (`published_at`, so the tick's "published before effective" reads one clock), versions in force and effective,
  the latest version (its marker, decided by each write and the housekeeping tick at their `now`,
  db.capabilities.refresh_latest; readers read the marker, no clock), deprecation and retirement
  times, cache lifetimes (verified tokens included), ticket issue and expiry times and their
  verification, ticket activity wherever it is judged (db.tickets.active: introspection's batched
  check, re-delegation's parent, the grant listing; one clock with the ticket's `exp`), an approval
  request's creation, expiry and decision times and its expiry wherever it is judged (reading,
  deciding, collecting: db.approvals), checkpoint times, the housekeeping tick;
- the system's clock, inside PyJWT (which takes no clock): a caller token's `exp`, `nbf` and `iat`,
  with 5 s of leeway;
- the database's clock (`now()` in SQL): heartbeat leases (written and read there, so a lease's
  length never depends on the skew between app hosts; one rule, db.agents.lease_live), and
  bookkeeping columns (`stored_at`, `created_at`, a revocation's `revoked_at`,
  Idempotency-Key windows).
A registry whose hosts are in sync (NTP) sees no difference; a test that moves time moves only the
first list.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta


class Clock:
    """The system's clocks."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def epoch(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class SteppedClock(Clock):
    """A clock that moves only when told to: wall and monotonic time advance together."""

    def __init__(self, start: datetime | None = None):
        self._wall = start or datetime.now(UTC)
        self._monotonic = 1_000_000.0

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock never goes back")
        self._wall += timedelta(seconds=seconds)
        self._monotonic += seconds

    def now(self) -> datetime:
        return self._wall

    def epoch(self) -> float:
        return self._wall.timestamp()

    def monotonic(self) -> float:
        return self._monotonic
