"""Queries on approvals: ticket requests for `requiresApproval` capabilities, their decision and collection.

`expired` is never stored: a pending or approved request past `expires_at` reads as expired, and the
decide and collect updates refuse it, so the status cannot race with the clock.
"""

from __future__ import annotations

from typing import Any

import asyncpg

APPROVAL_COLUMNS = (
    "approval_id, tenant, agent_id, skill_id, version, ref, requester, requester_tenant, requester_issuer, on_behalf_of, scopes, "
    "request, created_at, expires_at, decided_by, decided_at, collected_jti, "
    "CASE WHEN status IN ('pending', 'approved') AND expires_at <= now() THEN 'expired' ELSE status END AS status"
)


async def insert_approval(conn: asyncpg.Connection, row: dict[str, Any]) -> None:
    columns = list(row)
    placeholders = ", ".join(f"${i}" for i in range(1, len(columns) + 1))
    await conn.execute(f"INSERT INTO approvals ({', '.join(columns)}) VALUES ({placeholders})", *row.values())


async def get_approval(conn: asyncpg.Connection | asyncpg.Pool, approval_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE approval_id = $1", approval_id)


async def decide(conn: asyncpg.Connection, approval_id: str, status: str, decided_by: str) -> bool:
    """Move a live pending request to `approved` or `denied`; False when it was not pending (or expired)."""
    decided = await conn.fetchval(
        """UPDATE approvals SET status = $2, decided_by = $3, decided_at = now()
            WHERE approval_id = $1 AND status = 'pending' AND expires_at > now()
        RETURNING true""",
        approval_id,
        status,
        decided_by,
    )
    return bool(decided)


async def collect(conn: asyncpg.Connection, approval_id: str, jti: str) -> bool:
    """Mark a live approved request collected with ticket `jti`; True for exactly one caller.

    Concurrent collectors block on the row; after the first commits, the others find it no longer
    `approved` and get False (their transaction, and the ticket they were about to mint, roll back).
    """
    collected = await conn.fetchval(
        """UPDATE approvals SET status = 'collected', collected_jti = $2
            WHERE approval_id = $1 AND status = 'approved' AND expires_at > now()
        RETURNING true""",
        approval_id,
        jti,
    )
    return bool(collected)
