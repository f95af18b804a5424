"""The housekeeping tick, run by a test at the moment it chooses (the app's clock, a SteppedClock in
tests): the announcement of versions whose effectiveAt has come and the latest marker they change
(db.housekeeping.announce_effective). The server runs the same tick every second in the background;
the watermark row's lock is waited for here, so the tick this runs is never skipped for one a moment
older, and `held` keeps the background tick from running while a test looks at the state before."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from db import housekeeping


@contextlib.asynccontextmanager
async def held(db) -> AsyncIterator[object]:
    """The tick's lock, held: the server's own ticks skip (as another replica's would) until
    `tick(held)` runs the tick here, inside it, and the block ends (commits)."""
    async with db.acquire() as conn, conn.transaction():
        await conn.execute("SELECT 1 FROM effective_watermark WHERE id = 1 FOR UPDATE")
        yield conn


async def tick(conn, clock) -> int:
    """One housekeeping tick at `clock.now()` on `conn` (one holding the lock: `held`)."""
    return await housekeeping.announce_effective(conn, now=clock.now())


async def tick_now(db, clock) -> int:
    """One housekeeping tick at `clock.now()`, committed: waits for a background tick in progress."""
    async with held(db) as conn:
        return await tick(conn, clock)
