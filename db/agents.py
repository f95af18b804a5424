"""Queries on agents and agent_instances: the agent rows, their cards, and liveness leases."""

from __future__ import annotations

from datetime import datetime

import asyncpg

AGENT_COLUMNS = (
    "a.tenant, a.agent_id, a.name, a.description, a.version, a.provider, a.visibility, a.shared_with, "
    "a.card, a.card_hash, a.created_at, a.updated_at"
)

# healthy while any lease is live, stale once all have lapsed, unknown if none ever existed.
HEALTH_SQL = """(SELECT CASE WHEN count(*) = 0 THEN 'unknown'
                             WHEN bool_or(i.expires_at > now()) THEN 'healthy'
                             ELSE 'stale' END
                   FROM agent_instances i WHERE i.tenant = a.tenant AND i.agent_id = a.agent_id)"""


async def get_agent(conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"SELECT {AGENT_COLUMNS}, {HEALTH_SQL} AS health FROM agents a WHERE a.tenant = $1 AND a.agent_id = $2",
        tenant, agent_id,
    )


async def lock_agent(conn: asyncpg.Connection, tenant: str, agent_id: str) -> None:
    """Serialize concurrent registrations of one agent (startup storms of many replicas)."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"{tenant}/{agent_id}")


async def insert_agent(conn: asyncpg.Connection, tenant: str, agent_id: str, fields: dict) -> None:
    await conn.execute(
        """INSERT INTO agents (tenant, agent_id, name, description, version, provider, visibility,
                               shared_with, card, card_hash)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)""",
        tenant, agent_id, fields["name"], fields["description"], fields["version"], fields["provider"],
        fields["visibility"], fields["shared_with"], fields["card"], fields["card_hash"],
    )


async def update_agent(conn: asyncpg.Connection, tenant: str, agent_id: str, fields: dict) -> None:
    await conn.execute(
        """UPDATE agents SET name = $3, description = $4, version = $5, provider = $6, visibility = $7,
                             shared_with = $8, card = $9, card_hash = $10, updated_at = now()
            WHERE tenant = $1 AND agent_id = $2""",
        tenant, agent_id, fields["name"], fields["description"], fields["version"], fields["provider"],
        fields["visibility"], fields["shared_with"], fields["card"], fields["card_hash"],
    )


async def renew_lease(
    conn: asyncpg.Connection, tenant: str, agent_id: str, instance_id: str, url: str | None, expires_at: datetime
) -> bool:
    """Upsert an instance lease; True when the agent had no live lease before (health changes)."""
    was_healthy = await conn.fetchval(
        "SELECT bool_or(expires_at > now()) FROM agent_instances WHERE tenant = $1 AND agent_id = $2",
        tenant, agent_id,
    )
    await conn.execute(
        """INSERT INTO agent_instances (tenant, agent_id, instance_id, url, expires_at)
           VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (tenant, agent_id, instance_id)
           DO UPDATE SET url = EXCLUDED.url, expires_at = EXCLUDED.expires_at, updated_at = now()""",
        tenant, agent_id, instance_id, url, expires_at,
    )
    return not was_healthy


async def live_instances(conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str) -> list[asyncpg.Record]:
    return await conn.fetch(
        """SELECT instance_id, url, expires_at FROM agent_instances
            WHERE tenant = $1 AND agent_id = $2 AND expires_at > now() ORDER BY instance_id""",
        tenant, agent_id,
    )
