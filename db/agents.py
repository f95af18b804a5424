"""Queries on agents and agent_instances: the agent rows, their cards, and liveness leases."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

import asyncpg

AGENT_COLUMNS = (
    "a.tenant, a.agent_id, a.name, a.description, a.version, a.provider, a.visibility, a.shared_with, "
    "a.card, a.card_hash, a.created_at, a.updated_at, a.publisher_kid"
)
# Lease figures per agent: live instances now, and the moments cached views of them go out of date
# by time alone (the first live lease lapsing changes the count, the last one flips health).
LIVE_INSTANCES_SQL = """(SELECT count(*) FROM agent_instances i
                          WHERE i.tenant = a.tenant AND i.agent_id = a.agent_id AND i.expires_at > now())"""
LEASE_BOUNDS_SQL = """(SELECT ARRAY[min(i.expires_at), max(i.expires_at)] FROM agent_instances i
                        WHERE i.tenant = a.tenant AND i.agent_id = a.agent_id AND i.expires_at > now())"""

# healthy while any lease is live, stale once all have lapsed, unknown if none ever existed.
HEALTH_SQL = """(SELECT CASE WHEN count(*) = 0 THEN 'unknown'
                             WHEN bool_or(i.expires_at > now()) THEN 'healthy'
                             ELSE 'stale' END
                   FROM agent_instances i WHERE i.tenant = a.tenant AND i.agent_id = a.agent_id)"""


async def get_agent(conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"""SELECT {AGENT_COLUMNS}, {HEALTH_SQL} AS health, {LIVE_INSTANCES_SQL} AS live_instances,
                   {LEASE_BOUNDS_SQL} AS lease_bounds
              FROM agents a WHERE a.tenant = $1 AND a.agent_id = $2""",
        tenant, agent_id,
    )


async def registration_hash(conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str) -> str | None:
    """The hash of the last registration body applied to the agent (None: no agent, or never recorded)."""
    return await conn.fetchval(
        "SELECT registration_hash FROM agents WHERE tenant = $1 AND agent_id = $2", tenant, agent_id
    )


async def set_registration_hash(conn: asyncpg.Connection, tenant: str, agent_id: str, digest: str) -> None:
    await conn.execute(
        "UPDATE agents SET registration_hash = $3 WHERE tenant = $1 AND agent_id = $2 AND registration_hash IS DISTINCT FROM $3",
        tenant, agent_id, digest,
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


class LeaseRenewal(NamedTuple):
    tenant: str
    agent_id: str
    instance_id: str
    url: str | None
    ttl_seconds: int
    load: float | None


class RenewedLease(NamedTuple):
    tenant: str
    agent_id: str
    instance_id: str
    expires_at: datetime
    # The change-feed seq recorded because the agent had no live lease before (its health flipped
    # to healthy), else None.
    change_seq: int | None


async def renew_leases(conn: asyncpg.Connection, renewals: list[LeaseRenewal], channel: str) -> list[RenewedLease]:
    """Upsert many instance leases, and log a change for every agent whose health flips to healthy,
    in one statement: atomic and durable on its own, one round trip and one commit whatever the
    batch size. Agents that are not registered get no row and are absent from the answer.

    `renewals` must not repeat an instance (ON CONFLICT updates a row once per statement); rows are
    written in key order, then the change head, so concurrent batches lock in one order. Every
    part of the statement sees the leases as they were before it, so a flip is judged on those;
    two concurrent batches may both log one (a spare change, harmless), never neither. The head is
    locked only when something flipped.
    """
    if not renewals:
        return []
    rows = await conn.fetch(
        """WITH input AS (
               SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::float8[])
                          AS t(tenant, agent_id, instance_id, url, ttl, load)
           ), revived AS (
               SELECT DISTINCT i.tenant, i.agent_id FROM input i
                WHERE NOT EXISTS (SELECT 1 FROM agent_instances x
                                   WHERE x.tenant = i.tenant AND x.agent_id = i.agent_id AND x.expires_at > now())
           ), renewed AS (
               INSERT INTO agent_instances AS x (tenant, agent_id, instance_id, url, load, expires_at, last_seen_at, updated_at)
               SELECT i.tenant, i.agent_id, i.instance_id, i.url, i.load, now() + make_interval(secs => i.ttl), now(), now()
                 FROM input i JOIN agents a ON a.tenant = i.tenant AND a.agent_id = i.agent_id
                ORDER BY i.tenant, i.agent_id, i.instance_id
               ON CONFLICT (tenant, agent_id, instance_id) DO UPDATE
                  SET url = coalesce(EXCLUDED.url, x.url), load = EXCLUDED.load, expires_at = EXCLUDED.expires_at,
                      last_seen_at = EXCLUDED.last_seen_at, updated_at = EXCLUDED.updated_at
               RETURNING x.tenant, x.agent_id, x.instance_id, x.expires_at
           ), flipped AS (
               SELECT DISTINCT r.tenant, r.agent_id FROM renewed r JOIN revived v USING (tenant, agent_id)
           ), head AS (
               UPDATE change_head SET seq = seq + (SELECT count(*) FROM flipped)
                WHERE id = 1 AND EXISTS (SELECT 1 FROM flipped)
               RETURNING seq
           ), numbered AS (
               SELECT f.tenant, f.agent_id,
                      (SELECT seq FROM head) - count(*) OVER () + row_number() OVER (ORDER BY f.tenant, f.agent_id) AS seq
                 FROM flipped f
           ), logged AS (
               INSERT INTO changes (seq, kind, tenant, agent_id, ref, at)
               SELECT n.seq, 'agent.health', n.tenant, n.agent_id, n.tenant || '/' || n.agent_id, now()
                 FROM numbered n WHERE n.seq IS NOT NULL
               RETURNING seq, tenant, agent_id
           ), notified AS (
               -- Delivered on commit: other processes drop cached views and wake long-polls.
               SELECT pg_notify($7, max(seq)::text) FROM logged HAVING count(*) > 0
           )
           SELECT r.tenant, r.agent_id, r.instance_id, r.expires_at, l.seq AS change_seq
             FROM renewed r LEFT JOIN logged l ON l.tenant = r.tenant AND l.agent_id = r.agent_id
            WHERE (SELECT count(*) FROM notified) >= 0""",
        *(list(column) for column in zip(*renewals)), channel,
    )
    return [RenewedLease(*row) for row in rows]


async def live_instances(conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str) -> list[asyncpg.Record]:
    return await conn.fetch(
        """SELECT instance_id, url, expires_at, load, last_seen_at FROM agent_instances
            WHERE tenant = $1 AND agent_id = $2 AND expires_at > now() ORDER BY instance_id""",
        tenant, agent_id,
    )


async def least_loaded_instances(
    conn: asyncpg.Connection | asyncpg.Pool, agents: list[tuple[str, str]]
) -> dict[tuple[str, str], asyncpg.Record]:
    """Per agent (tenant, agentId), its live instance with the lowest load (an instance that sent
    none counts as fully loaded), ties broken by the latest heartbeat; agents with none are absent."""
    if not agents:
        return {}
    rows = await conn.fetch(
        """SELECT DISTINCT ON (i.tenant, i.agent_id)
                  i.tenant, i.agent_id, i.instance_id, i.url, i.expires_at, i.load, i.last_seen_at
             FROM unnest($1::text[], $2::text[]) AS k(tenant, agent_id)
             JOIN agent_instances i ON i.tenant = k.tenant AND i.agent_id = k.agent_id
            WHERE i.expires_at > now()
            ORDER BY i.tenant, i.agent_id, coalesce(i.load, 1), i.last_seen_at DESC, i.instance_id""",
        [t for t, _ in agents], [a for _, a in agents],
    )
    return {(r["tenant"], r["agent_id"]): r for r in rows}
