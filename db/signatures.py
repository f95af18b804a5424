"""Queries on publisher_keys and the signature columns of agents (migration 0010): a tenant's
publisher keys, the kid an agent was last registered under, and its last applied registration body."""

from __future__ import annotations

import asyncpg


async def publisher_keys(conn: asyncpg.Connection | asyncpg.Pool, tenant: str) -> list[dict]:
    """The tenant's publisher keys (public JWKs); empty when it has none."""
    jwks = await conn.fetchval("SELECT jwks FROM publisher_keys WHERE tenant = $1", tenant)
    return list(jwks["keys"]) if jwks else []


async def set_publisher_keys(conn: asyncpg.Connection, tenant: str, keys: list[dict]) -> None:
    """Replace the tenant's keys. An agent last registered under a kid now bound to another key
    loses its unchanged fast path (registration_state compares kids only): the same bytes are
    verified again, against the new key."""
    await conn.execute(
        """UPDATE agents a SET registration_hash = NULL
             FROM publisher_keys p, jsonb_array_elements(p.jwks -> 'keys') old_key,
                  jsonb_array_elements($2::jsonb -> 'keys') new_key
            WHERE p.tenant = $1 AND a.tenant = $1 AND a.registration_hash IS NOT NULL
              AND a.publisher_kid = old_key ->> 'kid' AND new_key ->> 'kid' = old_key ->> 'kid'
              AND (new_key ->> 'kty', new_key ->> 'crv', new_key ->> 'x', new_key ->> 'y')
                  IS DISTINCT FROM (old_key ->> 'kty', old_key ->> 'crv', old_key ->> 'x', old_key ->> 'y')""",
        tenant,
        {"keys": keys},
    )
    await conn.execute(
        """INSERT INTO publisher_keys (tenant, jwks) VALUES ($1, $2)
           ON CONFLICT (tenant) DO UPDATE SET jwks = EXCLUDED.jwks, updated_at = now()""",
        tenant,
        {"keys": keys},
    )


async def signature_requirements(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str
) -> tuple[list[dict], str | None]:
    """What a registration of the agent must be signed against, in one read: the tenant's publisher
    keys, and the kid the agent was last registered under (None: never registered signed)."""
    row = await conn.fetchrow(
        """SELECT (SELECT jwks FROM publisher_keys WHERE tenant = $1) AS jwks,
                  (SELECT publisher_kid FROM agents WHERE tenant = $1 AND agent_id = $2) AS kid""",
        tenant,
        agent_id,
    )
    return (list(row["jwks"]["keys"]) if row["jwks"] else []), row["kid"]


async def record_registration(
    conn: asyncpg.Connection,
    tenant: str,
    agent_id: str,
    body: bytes | None,
    publisher_kid: str | None,
    body_hash: str | None,
) -> None:
    """Keep the applied registration's body, the kid of its verified publisher signature (an
    unsigned registration never clears a kid: no downgrade, checked before) and the body's digest
    (registry.agents.registration.registration_digest: the unchanged fast path), in one write of
    the agent's row, none when nothing differs. None keeps what is stored."""
    await conn.execute(
        """UPDATE agents SET registration_body = coalesce($3, registration_body),
                             publisher_kid = coalesce($4, publisher_kid),
                             registration_hash = coalesce($5, registration_hash)
            WHERE tenant = $1 AND agent_id = $2
              AND (registration_body IS DISTINCT FROM coalesce($3, registration_body)
                   OR publisher_kid IS DISTINCT FROM coalesce($4, publisher_kid)
                   OR registration_hash IS DISTINCT FROM coalesce($5, registration_hash))""",
        tenant,
        agent_id,
        body,
        publisher_kid,
        body_hash,
    )


async def registration_body(conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str) -> bytes | None:
    return await conn.fetchval(
        "SELECT registration_body FROM agents WHERE tenant = $1 AND agent_id = $2", tenant, agent_id
    )


async def registration_state(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str
) -> tuple[str | None, str | None, list[str] | None]:
    """For the unchanged re-registration fast path, in one read: the hash of the agent's last applied
    body, the kid it was signed under, and the kids of the tenant's publisher keys (None: no agent)."""
    row = await conn.fetchrow(
        """SELECT a.registration_hash, a.publisher_kid,
                  coalesce((SELECT array_agg(k ->> 'kid') FROM publisher_keys p, jsonb_array_elements(p.jwks -> 'keys') k
                             WHERE p.tenant = a.tenant), '{}') AS kids
             FROM agents a WHERE a.tenant = $1 AND a.agent_id = $2""",
        tenant,
        agent_id,
    )
    if row is None:
        return None, None, None
    return row["registration_hash"], row["publisher_kid"], list(row["kids"])
