"""capreg's signing keys in the database: the first key on first start, rotation, and loading the
keyring (auth.keys holds the pure part)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

from auth.keys import Keyring, new_key
from db import keys as key_queries


async def ensure_signing_key(conn: asyncpg.Connection) -> None:
    """Create the first signing key unless one exists (safe under concurrent starts)."""
    async with conn.transaction():
        await key_queries.lock_keys(conn)
        if not await key_queries.has_current_key(conn):
            await key_queries.insert_key(conn, *new_key())


async def rotate_key(conn: asyncpg.Connection, keep_verifying_for: timedelta) -> str:
    """Make a new key current; the old one stays published for `keep_verifying_for` and, beyond
    that, until the last ticket it signed has expired (db/keys.py). A zero `keep_verifying_for`
    removes the old key at once, tickets and all."""
    async with conn.transaction():
        await key_queries.lock_keys(conn)
        # Keeping it for no time at all is an emergency removal: its live tickets die with it.
        await key_queries.retire_current(
            conn, datetime.now(UTC) + keep_verifying_for, remove=keep_verifying_for <= timedelta(0)
        )
        kid, pem, jwk = new_key()
        await key_queries.insert_key(conn, kid, pem, jwk)
        return kid


async def load_keyring(conn: asyncpg.Connection | asyncpg.Pool) -> Keyring:
    return Keyring(await key_queries.verifying_keys(conn))
