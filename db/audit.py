"""Queries on the audit log: append (hash-chained, inside the caller's transaction) and read."""

from __future__ import annotations

from datetime import datetime, timezone

import asyncpg

from registry.audit import AuditEvent, AuditRecord, event_hash

AUDIT_COLUMNS = (
    "seq, at, tenant, actor_tenant, type, actor, on_behalf_of, ref, scopes, outcome, reason, trace_id, prev_hash, hash"
)


async def append_events(conn: asyncpg.Connection, events: list[AuditEvent]) -> list[int]:
    """Append events to the chain; must run inside the transaction whose change they record.

    The head row lock is held until commit, so links are assigned in commit order and seq stays
    gap-free; callers append as the last statement before commit to keep that window short.
    """
    if not events:
        return []
    head = await conn.fetchrow("SELECT seq, hash FROM audit_head WHERE id = 1 FOR UPDATE")
    seq, prev = head["seq"], head["hash"]
    at = datetime.now(timezone.utc)
    rows = []
    for event in events:
        seq += 1
        digest = event_hash(prev, seq, at, event)
        rows.append(
            (seq, at, event.tenant, event.actor_tenant, event.type, event.actor, event.on_behalf_of,
             event.ref, list(event.scopes), event.outcome, event.reason, event.trace_id, prev, digest)
        )
        prev = digest
    await conn.executemany(
        f"INSERT INTO audit_events ({AUDIT_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14)",
        rows,
    )
    await conn.execute("UPDATE audit_head SET seq = $1, hash = $2 WHERE id = 1", seq, prev)
    return [row[0] for row in rows]


async def record_events(pool: asyncpg.Pool, events: list[AuditEvent]) -> None:
    """Append events in a transaction of their own (denials: the request changes nothing else)."""
    async with pool.acquire() as conn, conn.transaction():
        await append_events(conn, events)


def _record(row: asyncpg.Record) -> AuditRecord:
    return AuditRecord(**dict(row))


async def iter_all(conn: asyncpg.Connection, batch: int = 5000):
    """Every event in seq order, in batches (for chain verification)."""
    after = 0
    while True:
        rows = await conn.fetch(
            f"SELECT {AUDIT_COLUMNS} FROM audit_events WHERE seq > $1 ORDER BY seq LIMIT $2", after, batch
        )
        if not rows:
            return
        for row in rows:
            yield _record(row)
        after = rows[-1]["seq"]


async def head(conn: asyncpg.Connection | asyncpg.Pool) -> tuple[int, str]:
    row = await conn.fetchrow("SELECT seq, hash FROM audit_head WHERE id = 1")
    return row["seq"], row["hash"]
