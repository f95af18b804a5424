"""Queries on the audit log: append (hash-chained, inside the caller's transaction) and read."""

from __future__ import annotations

from datetime import datetime, timezone

import asyncpg
import msgspec

from db.audit_events import GENESIS_HASH, AuditEvent, AuditRecord, event_hash

AUDIT_COLUMNS = (
    "seq, at, tenant, actor_tenant, type, actor, on_behalf_of, ref, scopes, outcome, reason, trace_id, prev_hash, hash, "
    "actor_issuer, request_id"
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
             event.ref, list(event.scopes), event.outcome, event.reason, event.trace_id, prev, digest,
             event.actor_issuer, event.request_id)
        )
        prev = digest
    await conn.executemany(
        f"INSERT INTO audit_events ({AUDIT_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16)",
        rows,
    )
    await conn.execute("UPDATE audit_head SET seq = $1, hash = $2 WHERE id = 1", seq, prev)
    return [row[0] for row in rows]


def _record(row: asyncpg.Record) -> AuditRecord:
    return AuditRecord(**dict(row))


async def iter_all(conn: asyncpg.Connection, batch: int = 5000, *, after: int = 0, upto: int | None = None):
    """Every event with `after` < seq <= `upto` (default: to the end) in seq order, fetched in keyset
    batches so that memory stays constant however long the log is (chain verification)."""
    upto = upto if upto is not None else 2**63 - 1
    while True:
        rows = await conn.fetch(
            f"SELECT {AUDIT_COLUMNS} FROM audit_events WHERE seq > $1 AND seq <= $2 ORDER BY seq LIMIT $3",
            after, upto, batch,
        )
        if not rows:
            return
        for row in rows:
            yield _record(row)
        after = rows[-1]["seq"]


class EventFilter(msgspec.Struct, kw_only=True):
    """What an auditor asked for; None means "any". `actor_tenant` narrows `actor` to one tenant."""

    type: str | None = None
    actor: str | None = None
    actor_tenant: str | None = None
    skill: str | None = None
    scope: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    outcome: str | None = None  # "allowed" or "denied"


def _filter_conditions(where: EventFilter, bind) -> list[str]:
    """SQL conditions for `where`, its values bound through `bind` (value -> placeholder)."""
    filters = []
    if where.type is not None:
        filters.append(f"type = {bind(where.type)}")
    if where.actor is not None:
        filters.append(f"actor = {bind(where.actor)}")
    if where.actor_tenant is not None:
        filters.append(f"actor_tenant = {bind(where.actor_tenant)}")
    if where.skill is not None:
        # The same expression as the audit_events_*_skill indexes (migration 0003), so they apply.
        filters.append(f"audit_ref_skill(ref) = {bind(where.skill)}")
    if where.scope is not None:
        filters.append(f"{bind(where.scope)} = ANY (scopes)")
    if where.outcome is not None:
        filters.append(f"outcome = {bind(where.outcome)}")
    if where.since is not None:
        filters.append(f"at >= {bind(where.since)}")
    if where.until is not None:
        filters.append(f"at < {bind(where.until)}")
    return filters


async def tenant_events(
    conn: asyncpg.Connection | asyncpg.Pool,
    tenant: str,
    where: EventFilter,
    *,
    after: int = 0,
    upto: int | None = None,
    limit: int = 100,
) -> list[AuditRecord]:
    """One keyset page (seq > `after`, oldest first) of the events a tenant's auditors see: those
    whose record tenant or whose actor's tenant is `tenant`.

    Two branches, one per tenant column, so each walks its own (column, [filter,] seq) index in seq
    order and stops after `limit` rows; the second skips rows the first already has.
    """
    params: list[object] = [tenant]

    def bind(value: object) -> str:
        params.append(value)
        return f"${len(params)}"

    filters = [f"seq > {bind(after)}"]
    if upto is not None:
        filters.append(f"seq <= {bind(upto)}")
    filters += _filter_conditions(where, bind)
    condition = " AND ".join(filters)
    n = bind(limit)
    rows = await conn.fetch(
        f"""SELECT {AUDIT_COLUMNS} FROM (
                (SELECT {AUDIT_COLUMNS} FROM audit_events
                  WHERE tenant = $1 AND {condition} ORDER BY seq LIMIT {n})
                UNION ALL
                (SELECT {AUDIT_COLUMNS} FROM audit_events
                  WHERE actor_tenant = $1 AND tenant IS DISTINCT FROM $1 AND {condition} ORDER BY seq LIMIT {n})
            ) visible ORDER BY seq LIMIT {n}""",
        *params,
    )
    return [_record(row) for row in rows]


async def tenant_hourly_outcomes(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, where: EventFilter
) -> list[asyncpg.Record]:
    """Counts of the events a tenant's auditors see, per UTC hour and outcome (rows: hour, outcome,
    n), in hour order. The caller bounds the time range (`where.since` and `where.until`)."""
    params: list[object] = [tenant]

    def bind(value: object) -> str:
        params.append(value)
        return f"${len(params)}"

    condition = " AND ".join(_filter_conditions(where, bind)) or "TRUE"
    return await conn.fetch(
        f"""SELECT date_trunc('hour', at, 'UTC') AS hour, outcome, count(*) AS n FROM (
                (SELECT at, outcome FROM audit_events WHERE tenant = $1 AND {condition})
                UNION ALL
                (SELECT at, outcome FROM audit_events
                  WHERE actor_tenant = $1 AND tenant IS DISTINCT FROM $1 AND {condition})
            ) visible GROUP BY 1, 2 ORDER BY 1, 2""",
        *params,
    )


async def hash_at(conn: asyncpg.Connection | asyncpg.Pool, seq: int) -> str | None:
    """The stored hash of the event at `seq` (the genesis hash for 0), or None if there is none."""
    if seq == 0:
        return GENESIS_HASH
    return await conn.fetchval("SELECT hash FROM audit_events WHERE seq = $1", seq)


async def head(conn: asyncpg.Connection | asyncpg.Pool) -> tuple[int, str]:
    row = await conn.fetchrow("SELECT seq, hash FROM audit_head WHERE id = 1")
    return row["seq"], row["hash"]
