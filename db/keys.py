"""Queries on signing_keys: capreg's own Ed25519 keys, shared by every replica on the database."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from auth.keys import SigningKey

_KEYS_LOCK = 0x6B65_7973  # "keys": serializes first-key creation and rotation across processes
# Notified (on commit) when the set of keys changes: every replica reloads its keyring at once.
KEYS_CHANNEL = "capreg_keys"


async def lock_keys(conn: asyncpg.Connection) -> None:
    await conn.execute("SELECT pg_advisory_xact_lock($1)", _KEYS_LOCK)


async def has_current_key(conn: asyncpg.Connection) -> bool:
    """Whether a key signs now (none on a fresh database)."""
    return await conn.fetchval("SELECT EXISTS (SELECT 1 FROM signing_keys WHERE retired_at IS NULL)")


async def insert_key(conn: asyncpg.Connection, kid: str, private_pem: str, public_jwk: dict) -> None:
    await conn.execute(
        "INSERT INTO signing_keys (kid, private_pem, public_jwk) VALUES ($1, $2, $3)",
        kid,
        private_pem,
        public_jwk,
    )


async def retire_current(conn: asyncpg.Connection, publish_until: datetime, *, remove: bool = False) -> None:
    """Retire the current key; it stays published until `publish_until` and past the last ticket it
    signed. With `remove`, it stops verifying at once: every token and ticket it signed is dead."""
    await conn.execute(
        """UPDATE signing_keys k SET retired_at = now(),
                  removed_at = CASE WHEN $2 THEN now() END,
                  publish_until = CASE WHEN $2 THEN now()
                      ELSE greatest($1, (SELECT max(t.expires_at) FROM tickets t WHERE t.kid = k.kid)) END
            WHERE retired_at IS NULL""",
        publish_until,
        remove,
    )
    await conn.execute("SELECT pg_notify($1, 'rotated')", KEYS_CHANNEL)


async def verifying_keys(conn: asyncpg.Connection) -> list[SigningKey]:
    """The current key and retired keys whose signatures may still be live.

    A retired key also stays while a ticket it signed is live, even one signed by a replica that had
    not yet seen the rotation (publish_until was computed before that ticket existed).
    """
    rows = await conn.fetch(
        """SELECT kid, private_pem, public_jwk, retired_at IS NULL AS current FROM signing_keys k
           WHERE removed_at IS NULL AND (retired_at IS NULL OR publish_until > now()
              OR EXISTS (SELECT 1 FROM tickets t WHERE t.kid = k.kid AND t.expires_at > now()))
           ORDER BY created_at DESC"""
    )
    return [SigningKey(**row) for row in rows]
