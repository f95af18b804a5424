"""Queries on approvals: ticket requests for `requiresApproval` capabilities, their decision and collection.

`expired` is never stored: a pending or approved request past `expires_at` reads as expired, and the
decide and collect updates refuse it, so the status cannot race with the clock. Expiry is judged at
`now`, bound from the app's clock (registry.core.clock), the clock `expires_at` was set by: one
clock for the rule, never the database's now().
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg
import msgspec

from db.inserts import insert_statement
from db.rows import typed_row

# $2: the app's now.
APPROVAL_COLUMNS = (
    "approval_id, tenant, agent_id, skill_id, version, ref, requester, requester_tenant, requester_issuer, on_behalf_of, scopes, "
    "request, created_at, expires_at, decided_by, decided_at, collected_jti, "
    "CASE WHEN status IN ('pending', 'approved') AND expires_at <= $2 THEN 'expired' ELSE status END AS status"
)


class ApprovalRow(msgspec.Struct, frozen=True, gc=False):
    """A ticket request waiting for, or past, an approver's decision (APPROVAL_COLUMNS, in order);
    `status` reads `expired` once `expires_at` has passed."""

    approval_id: str
    tenant: str
    agent_id: str
    skill_id: str
    version: str
    ref: str
    requester: str
    requester_tenant: str
    requester_issuer: str | None
    on_behalf_of: str | None
    scopes: list[str]
    request: dict[str, Any]
    created_at: datetime
    expires_at: datetime
    decided_by: str | None
    decided_at: datetime | None
    collected_jti: str | None
    status: str


async def insert_approval(conn: asyncpg.Connection, row: dict[str, Any]) -> None:
    await conn.execute(insert_statement("approvals", row), *row.values())


async def get_approval(
    conn: asyncpg.Connection | asyncpg.Pool, approval_id: str, *, now: datetime
) -> ApprovalRow | None:
    """The approval, its status as of the app's `now`."""
    row = await conn.fetchrow(f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE approval_id = $1", approval_id, now)
    return typed_row(ApprovalRow, row)


async def decide(conn: asyncpg.Connection, approval_id: str, status: str, decided_by: str, *, now: datetime) -> bool:
    """Move a request still pending at the app's `now` to `approved` or `denied`, decided then;
    False when it was not pending (or had expired)."""
    decided = await conn.fetchval(
        """UPDATE approvals SET status = $2, decided_by = $3, decided_at = $4
            WHERE approval_id = $1 AND status = 'pending' AND expires_at > $4
        RETURNING true""",
        approval_id,
        status,
        decided_by,
        now,
    )
    return bool(decided)


async def collect(conn: asyncpg.Connection, approval_id: str, jti: str, *, now: datetime) -> bool:
    """Mark a request approved and unexpired at the app's `now` collected with ticket `jti`; True
    for exactly one caller.

    Concurrent collectors block on the row; after the first commits, the others find it no longer
    `approved` and get False (their transaction, and the ticket they were about to mint, roll back).
    """
    collected = await conn.fetchval(
        """UPDATE approvals SET status = 'collected', collected_jti = $2
            WHERE approval_id = $1 AND status = 'approved' AND expires_at > $3
        RETURNING true""",
        approval_id,
        jti,
        now,
    )
    return bool(collected)
