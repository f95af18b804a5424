"""The audit sequencer: moves events from the durable queue into their tenants' hash chains
(db.audit.chain_queued), so that audited writes never wait for each other on a chain's head row.

Like a transparency log's (Trillian, Certificate Transparency): an entry is stored durably first, by
the request that makes it, in its own transaction, and its answer leaves then (the event is in the
log: it can no longer be lost); one sequencer integrates it into its chain shortly after. Every
process runs steps in the background, one at a time cluster-wide (the steps take turns under an
advisory lock), and each step chains everything queued when it began, of every tenant and every
process, in one transaction and one commit.

The window, and what a reader sees in it: a process runs a step as soon as one of its batches has
stored events, and again RETRY_SECONDS later while another process holds the turn; every process
also runs one every POLL_SECONDS (events a killed process stored, a step that failed). So an event
is normally chained within a step or two of its answer (`docs/audit.md#stored-then-chained`). Every
reader of the log (events, exports, counts, proofs, checkpoints, chain verification, `capreg audit
verify`) first chains what is stored (db.audit.chain_stored), so no reader ever sees a stored event
missing from its chain, whenever it reads; only the table `audit_queue` itself shows the window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncpg

from db import audit as audit_queries

log = logging.getLogger("capreg.db")

# Events one step takes at most (a step's transaction stays short; the next takes the rest).
STEP_MOST = 2000
# A step is tried again this soon when another process held the turn (its snapshot may predate
# this process's last commit).
RETRY_SECONDS = 0.005
# A step also runs this often when nothing asks (events a killed process stored, a failed step).
POLL_SECONDS = 1.0
# After a step, the next waits this long, so that the batches committed meanwhile share it: every
# step is a durable commit of its own, and this caps them at 100/s per process whatever the load
# (on 2 cores it neither helped nor hurt throughput measurably: docs/performance.md#audited-paths-issue-39).
STEP_GAP_SECONDS = 0.01


class AuditSequencer:
    """This process's background steps: `stored()` says a batch has just committed events.
    `rounds` counts its wake-ups (a poll, a `stored()`, a retry), so tests bound the window in
    rounds rather than seconds; `poll_seconds` is injectable for the same reason."""

    def __init__(self, pool: asyncpg.Pool, *, poll_seconds: float = POLL_SECONDS) -> None:
        self.pool = pool
        self.poll_seconds = poll_seconds
        self.rounds = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def stored(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        timeout = self.poll_seconds
        while True:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for drops a cancellation that comes in
            # the round its wait ends, and stop() would then wait forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            self._wake.clear()
            self.rounds += 1
            timeout = self.poll_seconds
            try:
                if not await self._steps():
                    timeout = RETRY_SECONDS
                    continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("audit sequencer step failed (%r); the stored events wait for the next", exc)
            await asyncio.sleep(STEP_GAP_SECONDS)

    async def _steps(self) -> bool:
        """Steps until the queue is drained; False when another process held the turn."""
        async with self.pool.acquire() as conn:
            while True:
                taken = await audit_queries.chain_queued(conn, most=STEP_MOST, wait=False)
                if taken is None:
                    return False
                if taken < STEP_MOST:
                    return True
