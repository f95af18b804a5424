"""Reads that cannot take what writes need (docs/security.md#round-4, docs/deployment.md#reads).

Anonymous and ranked reads (discovery, ARD, offers' candidates, MCP's search through them) can be
made as expensive as the data is large and as many as a client likes; audited writes, ticket mints
and heartbeats must not wait behind them. So every such read takes a connection here and nowhere
else:

- from its own pool (CAPREG_READ_POOL_MAX connections), so the main pool's connections stay for
  writes whatever reads do;
- each statement bounded by `statement_timeout` (CAPREG_READ_STATEMENT_TIMEOUT, below the command
  timeout every connection has), past which it is cancelled (503, registry.core.problems);
- admitted while a connection is free, or after waiting in a short queue (CAPREG_READ_QUEUE
  waiters, each at most CAPREG_READ_QUEUE_WAIT seconds); past that the read is shed at once with
  `503 retryable_unavailable` and `Retry-After`, instead of queueing without end;
- identical cold questions asked together run once (`SingleFlight`): the others wait for that
  answer instead of taking a connection each.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from typing import Any, TypeVar

import asyncpg

from db.pool import PoolWaits
from registry.core import error_codes as codes
from registry.core.problems import ProblemError

T = TypeVar("T")

# Seconds a shed reader is told to wait: about one slow read's time.
RETRY_AFTER_SECONDS = 1


def shed() -> ProblemError:
    return ProblemError(
        codes.RETRYABLE_UNAVAILABLE,
        "too many reads in flight on this worker; retry shortly",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


class SingleFlight:
    """Concurrent calls with one key share one run of the first call's `build`. Pure asyncio state.

    The run is shielded: a caller that goes away does not cancel the answer the others wait for.
    Callers put into the key whatever must be equal for the answer to be shared (the change
    sequence among it, so no one is given an answer begun before a change it made)."""

    def __init__(self) -> None:
        self._flights: dict[Hashable, asyncio.Future[Any]] = {}
        self.joined = 0  # calls answered by another call's run (/metrics, tests)

    def __len__(self) -> int:
        return len(self._flights)

    async def run(self, key: Hashable, build: Callable[[], Awaitable[T]]) -> T:
        flight = self._flights.get(key)
        if flight is not None:
            self.joined += 1
            return await asyncio.shield(flight)

        async def build_now() -> T:
            return await build()

        task = asyncio.ensure_future(build_now())
        self._flights[key] = task
        task.add_done_callback(lambda _: self._flights.pop(key, None))
        return await asyncio.shield(task)


class ReadAdmission:
    """The one way anonymous and ranked reads get a connection (module docstring)."""

    def __init__(self, pool: asyncpg.Pool, *, slots: int, queue: int, wait: float):
        self.pool = pool
        self.slots = slots
        self.queue = queue
        self.wait = wait
        self._free = asyncio.Semaphore(slots)
        self.waiting = 0
        self.in_flight = 0
        self.shed = 0  # reads refused for want of a connection (/metrics)
        self.flights = SingleFlight()
        # The wait for the read pool's connection once admitted (/metrics).
        self.pool_waits = PoolWaits(pool)

    async def once(self, key: Hashable, seq: int | None, build: Callable[[], Awaitable[T]]) -> T:
        """`build()`, shared with the concurrent calls of the same `key` begun at the same change
        sequence `seq` (None: caching is off, the listener is reconnecting: every call on its own),
        so a question asked after a change this process knows of never gets an answer from before it."""
        if seq is None:
            return await build()
        return await self.flights.run((key, seq), build)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        """A read connection, or ProblemError 503 when none is free in time."""
        if self._free.locked() and self.waiting >= self.queue:
            self.shed += 1
            raise shed()
        self.waiting += 1
        try:
            async with asyncio.timeout(self.wait):  # not wait_for: it may drop a cancellation (db.audit_sequencer)
                await self._free.acquire()
        except TimeoutError:
            self.shed += 1
            raise shed() from None
        finally:
            self.waiting -= 1
        self.in_flight += 1
        try:
            async with self.pool_waits.acquire() as conn:
                yield conn
        finally:
            self.in_flight -= 1
            self._free.release()
