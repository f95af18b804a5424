"""Queries on signing_keys: capreg's own Ed25519 keys, shared by every replica on the database."""

from __future__ import annotations

from datetime import datetime

import asyncpg

_KEYS_LOCK = 0x6B65_7973  # "keys": serializes first-key creation and rotation across processes


async def lock_keys(conn: asyncpg.Connection) -> None:
    await conn.execute("SELECT pg_advisory_xact_lock($1)", _KEYS_LOCK)


async def current_key(conn: asyncpg.Connection) -> asyncpg.Record | None:
    return await conn.fetchrow(
        """SELECT kid, private_pem, public_jwk FROM signing_keys
           WHERE retired_at IS NULL ORDER BY created_at DESC LIMIT 1"""
    )


async def insert_key(conn: asyncpg.Connection, kid: str, private_pem: str, public_jwk: dict) -> None:
    await conn.execute(
        "INSERT INTO signing_keys (kid, private_pem, public_jwk) VALUES ($1, $2, $3)",
        kid, private_pem, public_jwk,
    )


async def retire_current(conn: asyncpg.Connection, publish_until: datetime) -> None:
    await conn.execute(
        "UPDATE signing_keys SET retired_at = now(), publish_until = $1 WHERE retired_at IS NULL",
        publish_until,
    )


async def verifying_keys(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    """The current key and retired keys whose signatures may still be live."""
    return await conn.fetch(
        """SELECT kid, private_pem, public_jwk, retired_at IS NULL AS current FROM signing_keys
           WHERE retired_at IS NULL OR publish_until > now() ORDER BY created_at DESC"""
    )
