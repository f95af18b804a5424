"""Queries on audit_checkpoints: signed heads of the audit chain (append-only, like the log)."""

from __future__ import annotations

from datetime import datetime

import asyncpg

CHECKPOINT_COLUMNS = "seq, hash, at, kid, signature"


async def insert_checkpoint(
    conn: asyncpg.Connection | asyncpg.Pool, *, seq: int, hash: str, at: datetime, kid: str, signature: str
) -> None:
    """Store a checkpoint; another replica may have stored one for the same head and key: keep that one."""
    await conn.execute(
        f"INSERT INTO audit_checkpoints ({CHECKPOINT_COLUMNS}) VALUES ($1, $2, $3, $4, $5) "
        "ON CONFLICT (seq, kid) DO NOTHING",
        seq, hash, at, kid, signature,
    )


async def latest_checkpoint(conn: asyncpg.Connection | asyncpg.Pool) -> asyncpg.Record | None:
    """The checkpoint covering the highest seq (the newest one when several cover it)."""
    return await conn.fetchrow(
        f"SELECT {CHECKPOINT_COLUMNS} FROM audit_checkpoints ORDER BY seq DESC, id DESC LIMIT 1"
    )


async def every_public_key(conn: asyncpg.Connection | asyncpg.Pool) -> list[dict]:
    """The public JWK of every signing key ever used, retired ones included: an old checkpoint stays
    verifiable after its key left the JWKS."""
    rows = await conn.fetch("SELECT public_jwk FROM signing_keys ORDER BY created_at")
    return [dict(row["public_jwk"]) for row in rows]
