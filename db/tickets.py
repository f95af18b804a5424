"""Queries on tickets and ticket_idempotency: minted tickets, their chains (a ticket's ancestors for
activity, its descendants for revocation), listings, Idempotency-Key replays, and introspection's
active checks batched across concurrent requests (ActiveTicketChecks)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import Any

import asyncpg
import msgspec

from db.batching import BatchQueue
from db.inserts import insert_statement
from db.rows import typed_row, typed_rows

TICKET_COLUMNS = (
    "t.jti, t.parent_jti, t.root_jti, t.tenant, t.agent_id, t.skill_id, t.version, t.ref, t.audience, t.actor, "
    "t.actor_tenant, t.on_behalf_of, t.scopes, t.resources, t.depth, t.max_depth, t.issued_at, t.expires_at, "
    "t.revoked_at, t.act, t.kid"
)


class TicketRow(msgspec.Struct, frozen=True, gc=False):
    """A minted ticket as stored (TICKET_COLUMNS, in order)."""

    jti: str
    parent_jti: str | None
    root_jti: str
    tenant: str
    agent_id: str
    skill_id: str
    version: str
    ref: str
    audience: str
    actor: str
    actor_tenant: str
    on_behalf_of: str | None
    scopes: list[str]
    resources: list[str]
    depth: int
    max_depth: int
    issued_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    act: dict[str, Any]
    kid: str


class TicketState(TicketRow, frozen=True, gc=False):
    """A ticket with whether it is active at the app's now, and why it may not be (`ticket_state`)."""

    capability_status: str
    active: bool
    chain_revoked: bool


class RevokedTicket(msgspec.Struct, frozen=True, gc=False):
    """A ticket `revoke_tree` has just revoked: what its `ticket.revoked` event names."""

    jti: str
    tenant: str
    actor: str
    actor_tenant: str
    on_behalf_of: str | None
    ref: str
    scopes: list[str]
    depth: int


class StoredAnswer(msgspec.Struct, frozen=True, gc=False):
    """The answer recorded for an Idempotency-Key (`status_code` None while its request runs)."""

    body_hash: str
    status_code: int | None
    response: dict[str, Any] | None


def active(now: str) -> str:
    """The one definition of an active ticket (docs/api.md#ticket-claims), over `tickets t` joined
    with its `capability_versions cv`: unexpired, unrevoked, its capability version not retired, and
    no ancestor revoked or expired. Expiry is judged at `now`, a placeholder bound to the app's clock
    (registry.core.clock), the clock the ticket's `exp` was set and is verified by: one clock for
    ticket activity (issue 36), never the database's now(). The grant report filters on it
    (db/grants.py); `ticket_state` answers it as `active`, which re-delegation reads, and
    `active_tickets` for introspection. (Revoking also revokes descendants under a tree lock; the
    ancestor walk is a guard, at most maxDepth primary-key lookups.)"""
    return f"""(t.revoked_at IS NULL AND t.expires_at > {now} AND cv.status <> 'retired'
           AND NOT EXISTS (
               WITH RECURSIVE ancestors AS (
                   SELECT p.jti, p.parent_jti, p.revoked_at, p.expires_at FROM tickets p WHERE p.jti = t.parent_jti
                   UNION ALL
                   SELECT p.jti, p.parent_jti, p.revoked_at, p.expires_at
                     FROM tickets p JOIN ancestors a ON p.jti = a.parent_jti
               )
               SELECT 1 FROM ancestors WHERE revoked_at IS NOT NULL OR expires_at <= {now}))"""


# A ticket `t` with its capability version `cv`, which `active` reads.
_WITH_VERSION = """JOIN capability_versions cv ON cv.tenant = t.tenant AND cv.agent_id = t.agent_id
                                         AND cv.skill_id = t.skill_id AND cv.version = t.version"""


async def insert_ticket(conn: asyncpg.Connection, row: dict[str, Any]) -> None:
    await conn.execute(insert_statement("tickets", row), *row.values())


async def get_ticket(conn: asyncpg.Connection | asyncpg.Pool, jti: str) -> TicketRow | None:
    return typed_row(TicketRow, await conn.fetchrow(f"SELECT {TICKET_COLUMNS} FROM tickets t WHERE t.jti = $1", jti))


# ticket_state's statement ($1 the jti, $2 the app's now).
TICKET_STATE_SQL = f"""WITH RECURSIVE chain AS (
        SELECT jti, parent_jti, revoked_at FROM tickets WHERE jti = $1
        UNION ALL
        SELECT p.jti, p.parent_jti, p.revoked_at FROM tickets p JOIN chain c ON p.jti = c.parent_jti
    )
    SELECT {TICKET_COLUMNS}, cv.status AS capability_status, {active("$2::timestamptz")} AS active,
           (SELECT bool_or(revoked_at IS NOT NULL) FROM chain) AS chain_revoked
      FROM tickets t
      {_WITH_VERSION}
     WHERE t.jti = $1"""


async def ticket_state(conn: asyncpg.Connection | asyncpg.Pool, jti: str, *, now: datetime) -> TicketState | None:
    """A ticket's row with `active` (`active`, at the app's `now`), and why it may not be:
    `chain_revoked` (it or any ancestor revoked) and `capability_status`."""
    return typed_row(TicketState, await conn.fetchrow(TICKET_STATE_SQL, jti, now))


async def active_tickets(conn: asyncpg.Connection | asyncpg.Pool, jtis: list[str], *, now: datetime) -> set[str]:
    """Of `jtis`, those whose ticket is active at the app's `now` (`active`): what introspection
    answers, for many tickets in one statement."""
    rows = await conn.fetch(
        f"""SELECT t.jti FROM tickets t
              {_WITH_VERSION}
             WHERE t.jti = ANY($1::text[]) AND {active("$2::timestamptz")}""",
        jtis,
        now,
    )
    return {row["jti"] for row in rows}


class ActiveTicketChecks(BatchQueue[str]):
    """Introspection's question, "is this ticket active now?", for concurrent requests in one
    statement (active_tickets) instead of one round trip each: agents introspect on every call, so
    at a router's rates many checks are in flight at once. Each check is answered from a statement
    that began after the check was asked, so a revocation committed before it is always seen. A
    batch that fails (the database gone) fails the checks in it, as each alone would have."""

    def __init__(self, pool: asyncpg.Pool, *, now: Callable[[], datetime], max_batch: int = 256, concurrency: int = 2):
        super().__init__(max_batch=max_batch, concurrency=concurrency)
        self.pool = pool
        self.now = now  # the app's clock (registry.core.clock), read once per batch

    async def is_active(self, jti: str) -> bool:
        if self._task is None:  # started on first use, on the loop that asks
            self.start()
        elif self._task.done():  # stopped (the app is shutting down): nothing would answer
            raise ConnectionError("the registry is shutting down")
        return await self._enqueue(jti)

    async def _commit(self, batch: list[tuple[str, asyncio.Future]]) -> None:
        live = await active_tickets(self.pool, sorted({jti for jti, _ in batch}), now=self.now())
        for jti, future in batch:
            if not future.done():
                future.set_result(jti in live)


async def lock_tree(conn: asyncpg.Connection, root_jti: str) -> None:
    """Serialize re-delegation and revocation within one ticket tree until the transaction ends.

    A child minted while its ancestor is being revoked would otherwise commit after the revocation
    looked for descendants, and stay unrevoked.
    """
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"ticket-tree:{root_jti}")


async def revoke_tree(conn: asyncpg.Connection, jti: str) -> list[RevokedTicket]:
    """Revoke a ticket and all its descendants; the rows newly revoked (already revoked ones are
    skipped), parents first."""
    rows = await conn.fetch(
        """WITH RECURSIVE tree AS (
               SELECT jti FROM tickets WHERE jti = $1
               UNION ALL
               SELECT t.jti FROM tickets t JOIN tree ON t.parent_jti = tree.jti
           )
           UPDATE tickets SET revoked_at = now()
            WHERE jti IN (SELECT jti FROM tree) AND revoked_at IS NULL
        RETURNING jti, tenant, actor, actor_tenant, on_behalf_of, ref, scopes, depth""",
        jti,
    )
    return sorted(typed_rows(RevokedTicket, rows), key=lambda row: (row.depth, row.jti))


# ---------------------------------------------------------------------------
# Idempotency keys


async def claim_idempotency_key(conn: asyncpg.Connection, principal: str, key: str, body_hash: str) -> bool:
    """Claim (principal, key) inside the minting transaction; False when a live claim exists.

    A concurrent claim of the same key blocks here until the other transaction ends: on commit this
    returns False (replay its answer), on rollback the claim is ours. Claims older than 24 hours are
    taken over.
    """
    claimed = await conn.fetchval(
        """INSERT INTO ticket_idempotency (principal, idem_key, body_hash) VALUES ($1, $2, $3)
           ON CONFLICT (principal, idem_key) DO UPDATE
                 SET body_hash = EXCLUDED.body_hash, status_code = NULL, response = NULL, created_at = now()
               WHERE ticket_idempotency.created_at <= now() - interval '24 hours'
        RETURNING true""",
        principal,
        key,
        body_hash,
    )
    return bool(claimed)


async def stored_response(conn: asyncpg.Connection | asyncpg.Pool, principal: str, key: str) -> StoredAnswer | None:
    """The live (under 24 hours old) answer recorded for (principal, key)."""
    row = await conn.fetchrow(
        """SELECT body_hash, status_code, response FROM ticket_idempotency
            WHERE principal = $1 AND idem_key = $2 AND created_at > now() - interval '24 hours'""",
        principal,
        key,
    )
    return typed_row(StoredAnswer, row)


async def store_response(
    conn: asyncpg.Connection, principal: str, key: str, status_code: int, response: dict[str, Any]
) -> None:
    await conn.execute(
        "UPDATE ticket_idempotency SET status_code = $3, response = $4 WHERE principal = $1 AND idem_key = $2",
        principal,
        key,
        status_code,
        response,
    )
