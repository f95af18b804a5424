"""Group commit for audited writes: concurrent requests' writes share one transaction and one commit.

Every audited write stores its audit events (db.audit.enqueue_events) and, when it changes what is
registered, advances the change sequence (a single-row head, locked until commit). Here a process
queues its writes; one task runs each queued write in its own savepoint of a shared transaction,
then advances the change feed's head once for the batch, stores the batch's events and commits.
Nobody's answer leaves before the commit that makes it durable, and a write that fails rolls back to
its savepoint alone. The events reach their tenants' hash chains in a sequencer step shortly after
(db.audit_sequencer, woken by each such commit); no batch locks a chain's head row, so batches of
different workers and replicas never wait for each other's commits on it.

A few batches are in flight at once, so one runs its writes while another waits for its commit to
become durable. Writes take only their own row or advisory locks while they run; the change feed's
head is locked last, once per batch, and its rows go in with one multi-row statement per batch. A
batch holds the writes of one set of chains only (its lane), as it did when batches appended to
the chains themselves.

One request can never fail another. A write fails inside its own savepoint. Audit events cannot
carry text PostgreSQL would refuse (db.audit_events escapes it when an event is built, so a refusal
caused by such a value is still recorded). Should the batch fail all the same after its writes (a
deadlock on the writes' own locks, a head append, the commit, the shared insert of single-row
writes), nothing of it was acknowledged: each request is then run again alone, in its own
transaction, so whatever failed fails only its own request; a write alone that PostgreSQL picks as
a deadlock's victim is run again (up to _ATTEMPTS_ALONE times), since the victim is rolled back whole.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncpg

from db.audit import enqueue_events
from db.audit_events import AuditEvent, event_chains
from db.audit_sequencer import AuditSequencer
from db.batching import BatchQueue
from db.changes import record_changes
from db.inserts import insert_statement
from db.pool import PoolWaits

log = logging.getLogger("capreg.db")

T = TypeVar("T")
_RETRY_ALONE = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError)
_ATTEMPTS_ALONE = 3  # a write alone that is a deadlock's victim again and again fails after this many


def _outcome_unknown(exc: Exception) -> bool:
    """The connection broke: the commit may or may not have happened, so nothing is run again."""
    if isinstance(exc, ValueError):  # asyncpg refusing an argument before sending it: nothing was sent
        return False
    return isinstance(exc, (asyncpg.PostgresConnectionError, asyncpg.InterfaceError, OSError, asyncio.TimeoutError))


class WriteScope:
    """What one write sees: the batch's connection (inside its savepoint), and the audit events
    and changes it records, which are appended only if the write succeeds."""

    def __init__(self, conn: asyncpg.Connection):
        self.conn = conn
        self.events: list[AuditEvent] = []
        self.changes: list[tuple[str, str, str, str]] = []

    def audit(self, *events: AuditEvent) -> None:
        self.events.extend(events)

    def change(self, kind: str, tenant: str, agent_id: str, ref: str) -> None:
        self.changes.append((kind, tenant, agent_id, ref))


Write = Callable[[WriteScope], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class RowInsert:
    """A write that is one row in one table plus its audit events: no savepoint, no round trip of
    its own. The batch inserts every request's rows of a table with one pipelined statement."""

    table: str
    row: dict[str, Any]
    events: list[AuditEvent]


@dataclass(frozen=True, slots=True)
class LaneWrite:
    """A write whose audit events go to known chains (GroupCommit.run's `expected`)."""

    write: Write
    lane: tuple[str, ...]


def _events_lane(events: list[AuditEvent]) -> tuple[str, ...]:
    return tuple(sorted({chain for event in events for chain in event_chains(event)}))


# What the queue holds: a write run in its own savepoint (in a lane when its chains are known), a
# row inserted with the batch's others, or audit events alone.
Queued = Write | LaneWrite | RowInsert | list[AuditEvent]


class GroupCommit(BatchQueue[Queued]):
    """Audited writes of concurrent requests in one transaction and one commit (the module docstring)."""

    def __init__(
        self, pool: asyncpg.Pool, *, max_batch: int = 128, concurrency: int = 3, waits: PoolWaits | None = None
    ):
        super().__init__(max_batch=max_batch, concurrency=concurrency)
        self.pool = pool
        # The batch's wait for a connection, counted with the other request paths' (/metrics).
        self.waits = waits or PoolWaits(pool)
        self.sequencer = AuditSequencer(pool)

    def start(self) -> None:
        super().start()
        self.sequencer.start()

    async def stop(self) -> None:
        await super().stop()
        await self.sequencer.stop()

    async def run(self, write: Callable[[WriteScope], Awaitable[T]], *, expected: Sequence[AuditEvent] = ()) -> T:
        """Run `write` in the next batch; returns its result once the batch has committed. `expected`:
        the events it will record when known beforehand, so it shares a batch with the writes to the
        same chains only (else it may join any batch)."""
        return await self._enqueue(LaneWrite(write, _events_lane(list(expected))) if expected else write)

    async def insert(self, table: str, row: dict[str, Any], events: list[AuditEvent]) -> None:
        """Insert `row` into `table` and append `events` in the next batch; durable when this returns.

        For writes that are a single row whose values were validated before (a minted ticket):
        they skip the savepoint and its two round trips. Should the batch's insert fail anyway,
        the batch is run again write by write, so the failure stays this request's own.
        """
        await self._enqueue(RowInsert(table, row, list(events)))

    async def record(self, events: list[AuditEvent]) -> None:
        """Append audit events on their own (refusals, releases): durable when this returns."""
        await self._enqueue(list(events))  # events alone: nothing to roll back, no savepoint

    def _lane(self, item: Queued) -> tuple[str, ...] | None:
        if isinstance(item, list):
            return _events_lane(item)
        if isinstance(item, RowInsert):
            return _events_lane(item.events)
        if isinstance(item, LaneWrite):
            return item.lane
        return None

    def _failed(self, exc: Exception, batch: list[tuple[Queued, asyncio.Future[Any]]]) -> None:
        log.error("group commit failed", exc_info=exc)

    async def _commit(self, batch: list[tuple[Queued, asyncio.Future[Any]]], attempt: int = 1) -> None:
        try:
            async with self.waits.acquire() as conn:
                outcomes, stored = await self._execute(conn, batch)
        except Exception as exc:
            if len(batch) == 1 and isinstance(exc, _RETRY_ALONE) and attempt < _ATTEMPTS_ALONE:
                # PostgreSQL chose this transaction as a deadlock's victim and rolled it back whole;
                # the other one goes on, so the same write run again succeeds (nothing was answered).
                await asyncio.sleep(0.005 * attempt)
                return await self._commit(batch, attempt + 1)
            if len(batch) == 1 or _outcome_unknown(exc):
                raise
            # Nothing of the batch was acknowledged, and nothing of it is durable: run each alone.
            if not isinstance(exc, _RETRY_ALONE):
                log.warning("group commit batch of %d failed (%r); running each write alone", len(batch), exc)
            await self._commit_each_alone(batch)
            return
        if stored:  # durable now: answered; chained by the next sequencer step (db.audit_sequencer)
            self.sequencer.stored()
        for future, ok, value in outcomes:
            if future.done():
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    async def _execute(
        self, conn: asyncpg.Connection, batch: list[tuple[Queued, asyncio.Future[Any]]]
    ) -> tuple[list[tuple[asyncio.Future[Any], bool, Any]], bool]:
        """Run the batch in one transaction; its outcomes, and whether it stored audit events."""
        outcomes: list[tuple[asyncio.Future[Any], bool, Any]] = []
        events: list[AuditEvent] = []
        changes: list[tuple[str, str, str, str]] = []
        inserts: dict[tuple[str, tuple[str, ...]], list[tuple]] = {}
        async with conn.transaction():
            for write, future in batch:
                if future.done():  # the caller went away before its write began
                    continue
                if isinstance(write, list):
                    events += write
                    outcomes.append((future, True, None))
                    continue
                if isinstance(write, RowInsert):
                    inserts.setdefault((write.table, tuple(write.row)), []).append(tuple(write.row.values()))
                    events += write.events
                    outcomes.append((future, True, None))
                    continue
                if isinstance(write, LaneWrite):
                    write = write.write
                scope = WriteScope(conn)
                try:
                    async with conn.transaction():  # a savepoint: a failed write undoes only itself
                        value = await write(scope)
                except _RETRY_ALONE:
                    raise
                except Exception as exc:
                    outcomes.append((future, False, exc))
                    continue
                outcomes.append((future, True, value))
                events += scope.events
                changes += scope.changes
            for (table, columns), rows in inserts.items():
                await conn.executemany(insert_statement(table, columns), rows)
            # The change feed's head, last; the events go to the queue, which no other writer waits on.
            await record_changes(conn, changes)
            await enqueue_events(conn, events)
        return outcomes, bool(events)
