"""Queries on agents and agent_instances: the agent rows, their cards, and liveness leases."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

import asyncpg

from db.changes import HEALTH_CHANGE_KIND

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
        tenant,
        agent_id,
    )


async def registration_hash(conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str) -> str | None:
    """The hash of the last registration body applied to the agent (None: no agent, or never recorded)."""
    return await conn.fetchval(
        "SELECT registration_hash FROM agents WHERE tenant = $1 AND agent_id = $2", tenant, agent_id
    )


async def lock_agent(conn: asyncpg.Connection, tenant: str, agent_id: str) -> None:
    """Serialize concurrent registrations of one agent (startup storms of many replicas)."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"{tenant}/{agent_id}")


async def tenant_agents_reach(conn: asyncpg.Connection, tenant: str, cap: int) -> bool:
    """Whether `tenant` has `cap` agents or more: reads at most `cap` index entries, whatever the tenant holds."""
    count = await conn.fetchval(
        "SELECT count(*) FROM (SELECT 1 FROM agents WHERE tenant = $1 LIMIT $2) AS a", tenant, cap
    )
    return count >= cap


async def insert_agent(conn: asyncpg.Connection, tenant: str, agent_id: str, fields: dict) -> None:
    """A new agent's row, with the registration applied (`registration_body`, `publisher_kid` and
    `registration_hash` in `fields`, each optional: db.signatures.record_registration's columns)."""
    await conn.execute(
        """INSERT INTO agents (tenant, agent_id, name, description, version, provider, visibility,
                               shared_with, card, card_hash, registration_body, publisher_kid, registration_hash)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)""",
        tenant,
        agent_id,
        fields["name"],
        fields["description"],
        fields["version"],
        fields["provider"],
        fields["visibility"],
        fields["shared_with"],
        fields["card"],
        fields["card_hash"],
        fields.get("registration_body"),
        fields.get("publisher_kid"),
        fields.get("registration_hash"),
    )


async def update_agent(conn: asyncpg.Connection, tenant: str, agent_id: str, fields: dict) -> None:
    await conn.execute(
        """UPDATE agents SET name = $3, description = $4, version = $5, provider = $6, visibility = $7,
                             shared_with = $8, card = $9, card_hash = $10, updated_at = now()
            WHERE tenant = $1 AND agent_id = $2""",
        tenant,
        agent_id,
        fields["name"],
        fields["description"],
        fields["version"],
        fields["provider"],
        fields["visibility"],
        fields["shared_with"],
        fields["card"],
        fields["card_hash"],
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
    # None when the lease was refused: the agent already has its maximum of live instances.
    expires_at: datetime | None
    # The change-feed seq recorded because the agent had no live lease before (its health flipped
    # to healthy), else None.
    change_seq: int | None


# An instance whose lease ends within this margin may have lapsed by the time the renewal
# statement runs: its agent is locked as for a new instance (see renew_leases).
_LAPSE_MARGIN = "5 seconds"


async def renew_leases(
    conn: asyncpg.Connection, renewals: list[LeaseRenewal], channel: str, *, max_instances: int
) -> list[RenewedLease]:
    """Upsert many instance leases, and log a change for every agent whose health flips to healthy:
    one commit whatever the batch size. Agents that are not registered get no row and are absent
    from the answer; a new instance (no live lease) of an agent that has `max_instances` live ones
    is refused (`expires_at` None) and nothing is written for it. A live lease is always renewed.

    The bound holds across concurrent batches: a batch with a new instance first locks those
    agents' rows (in key order, `FOR NO KEY UPDATE`, which registrations' and instances' foreign-key
    checks do not wait for), then counts and writes in a statement whose snapshot is taken after
    the lock, so it sees every lease a batch that held the lock before committed. Batches that
    only renew live leases take no lock: one statement, as before.

    `renewals` must not repeat an instance (ON CONFLICT updates a row once per statement); rows are
    written in key order, then the change head, so concurrent batches lock in one order. Every
    part of the statement sees the leases as they were before it, so a flip is judged on those;
    two concurrent batches may both log one (a spare change, harmless), never neither. The head is
    locked only when something flipped.
    """
    if not renewals:
        return []
    columns = [list(column) for column in zip(*renewals, strict=False)]
    async with conn.transaction():
        # The commit does not wait for its WAL to be flushed (docs/deployment.md#heartbeats-and-durability):
        # a crash of PostgreSQL loses at most the last few hundred ms of renewals, which only makes
        # instances look stale sooner. Set in the lock statement's round trip; a batch that logs a
        # health flip (a change-feed row, whose seq must never be handed out twice) commits durably.
        await conn.execute(
            f"""SELECT set_config('synchronous_commit', 'off', true),
                       (SELECT count(*) FROM (
                            SELECT 1 FROM agents a
                             WHERE (a.tenant, a.agent_id) IN (
                                   SELECT u.tenant, u.agent_id FROM unnest($1::text[], $2::text[], $3::text[]) AS u(tenant, agent_id, instance_id)
                                    WHERE NOT EXISTS (SELECT 1 FROM agent_instances x
                                                       WHERE x.tenant = u.tenant AND x.agent_id = u.agent_id AND x.instance_id = u.instance_id
                                                         AND x.expires_at > now() + interval '{_LAPSE_MARGIN}'))
                             ORDER BY a.tenant, a.agent_id
                               FOR NO KEY UPDATE OF a) AS locked)""",
            columns[0],
            columns[1],
            columns[2],
        )
        rows = await conn.fetch(
            f"""WITH input AS (
                   SELECT t.*, (x.instance_id IS NOT NULL) AS live
                     FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::float8[])
                              AS t(tenant, agent_id, instance_id, url, ttl, load)
                     JOIN agents a ON a.tenant = t.tenant AND a.agent_id = t.agent_id
                     LEFT JOIN agent_instances x ON x.tenant = t.tenant AND x.agent_id = t.agent_id
                                                AND x.instance_id = t.instance_id AND x.expires_at > now()
               ), live_counts AS (
                   SELECT x.tenant, x.agent_id, count(*) AS n FROM agent_instances x
                    WHERE (x.tenant, x.agent_id) IN (SELECT tenant, agent_id FROM input) AND x.expires_at > now()
                    GROUP BY x.tenant, x.agent_id
               ), ranked AS (
                   SELECT i.*, coalesce(c.n, 0) + row_number() OVER (
                              PARTITION BY i.tenant, i.agent_id, i.live ORDER BY i.instance_id) AS would_be
                     FROM input i LEFT JOIN live_counts c ON c.tenant = i.tenant AND c.agent_id = i.agent_id
               ), admitted AS (
                   SELECT * FROM ranked WHERE live OR would_be <= $8
               ), refused AS (
                   SELECT * FROM ranked WHERE NOT (live OR would_be <= $8)
               ), revived AS (
                   SELECT DISTINCT i.tenant, i.agent_id FROM admitted i
                    WHERE NOT EXISTS (SELECT 1 FROM agent_instances x
                                       WHERE x.tenant = i.tenant AND x.agent_id = i.agent_id AND x.expires_at > now())
               ), renewed AS (
                   INSERT INTO agent_instances AS x (tenant, agent_id, instance_id, url, load, expires_at, last_seen_at, updated_at)
                   SELECT i.tenant, i.agent_id, i.instance_id, i.url, i.load, now() + make_interval(secs => i.ttl), now(), now()
                     FROM admitted i
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
                   SELECT n.seq, '{HEALTH_CHANGE_KIND}', n.tenant, n.agent_id, n.tenant || '/' || n.agent_id, now()
                     FROM numbered n WHERE n.seq IS NOT NULL
                   RETURNING seq, tenant, agent_id
               ), notified AS (
                   -- Delivered on commit: other processes drop cached views and wake long-polls.
                   SELECT pg_notify($7, max(seq)::text) FROM logged HAVING count(*) > 0
               )
               SELECT r.tenant, r.agent_id, r.instance_id, r.expires_at, l.seq AS change_seq
                 FROM renewed r LEFT JOIN logged l ON l.tenant = r.tenant AND l.agent_id = r.agent_id
                WHERE (SELECT count(*) FROM notified) >= 0
               UNION ALL
               SELECT f.tenant, f.agent_id, f.instance_id, NULL::timestamptz, NULL::bigint FROM refused f""",
            *columns,
            channel,
            max_instances,
        )
        if any(row["change_seq"] is not None for row in rows):
            await conn.execute("SET LOCAL synchronous_commit TO DEFAULT")
    return [RenewedLease(*row) for row in rows]


async def renew_live_leases(conn: asyncpg.Connection, renewals: list[LeaseRenewal]) -> list[RenewedLease]:
    """Renew those of `renewals` whose lease is live beyond the lapse margin, in one statement that
    commits on its own (issue 23: a steady heartbeat's batch is one round trip, not BEGIN, the lock
    statement, the upsert and COMMIT); the others are left to renew_leases, which stays the one
    place that admits a new instance, applies the instance bound and logs health flips.

    Nothing here needs renew_leases' lock or its change-feed row: a live lease is always renewed
    (the bound is on new instances), and an agent with a live lease is already healthy, so renewing
    it flips nothing. An UPDATE never creates a lease. Rows are locked in key order first, as the
    upsert writes them, so this and concurrent batches of either kind take row locks in one order.
    The commit does not wait for its WAL flush, like renew_leases' (set in the statement: its
    implicit transaction is the statement's own)."""
    if not renewals:
        return []
    columns = [list(column) for column in zip(*renewals, strict=False)]
    rows = await conn.fetch(
        f"""WITH settings AS (
               SELECT set_config('synchronous_commit', 'off', true) AS off
           ), input AS (
               SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::float8[])
                        AS t(tenant, agent_id, instance_id, url, ttl, load)
           ), live AS (
               SELECT x.tenant, x.agent_id, x.instance_id FROM agent_instances x
                 JOIN input i ON x.tenant = i.tenant AND x.agent_id = i.agent_id AND x.instance_id = i.instance_id
                WHERE x.expires_at > now() + interval '{_LAPSE_MARGIN}'
                ORDER BY x.tenant, x.agent_id, x.instance_id
                  FOR NO KEY UPDATE OF x
           ), renewed AS (
               UPDATE agent_instances AS x
                  SET url = coalesce(i.url, x.url), load = i.load, expires_at = now() + make_interval(secs => i.ttl),
                      last_seen_at = now(), updated_at = now()
                 FROM live l JOIN input i USING (tenant, agent_id, instance_id)
                WHERE x.tenant = l.tenant AND x.agent_id = l.agent_id AND x.instance_id = l.instance_id
                RETURNING x.tenant, x.agent_id, x.instance_id, x.expires_at
           )
           SELECT r.tenant, r.agent_id, r.instance_id, r.expires_at FROM renewed r, settings""",
        *columns,
    )
    return [RenewedLease(row["tenant"], row["agent_id"], row["instance_id"], row["expires_at"], None) for row in rows]


# What one answer lists of an agent's live instances (contract section 19): the least loaded
# first (an instance that sent no load after those that did), the total given alongside.
MAX_LISTED_INSTANCES = 50


async def live_instances(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str, *, limit: int = MAX_LISTED_INSTANCES
) -> tuple[list[asyncpg.Record], int]:
    """At most `limit` live instances, least loaded first, and how many are live in all."""
    rows = await conn.fetch(
        """SELECT instance_id, url, expires_at, load, last_seen_at, count(*) OVER () AS total FROM agent_instances
            WHERE tenant = $1 AND agent_id = $2 AND expires_at > now()
            ORDER BY load ASC NULLS LAST, instance_id LIMIT $3""",
        tenant,
        agent_id,
        limit,
    )
    return list(rows), (rows[0]["total"] if rows else 0)


async def lease_snapshot(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str, *, limit: int = MAX_LISTED_INSTANCES
) -> tuple[list[asyncpg.Record], int, str]:
    """In one statement: at most `limit` live instances, least loaded first, how many are live in all,
    and the agent's health as HEALTH_SQL answers it (healthy while any lease is live, stale once all
    have lapsed, unknown if none ever existed)."""
    rows = await conn.fetch(
        """SELECT instance_id, url, expires_at, load, last_seen_at, expires_at > now() AS live,
                  count(*) FILTER (WHERE expires_at > now()) OVER () AS total
             FROM agent_instances WHERE tenant = $1 AND agent_id = $2
            ORDER BY expires_at > now() DESC, load ASC NULLS LAST, instance_id LIMIT $3""",
        tenant,
        agent_id,
        limit,
    )
    if not rows:
        return [], 0, "unknown"
    total = rows[0]["total"]
    return [row for row in rows if row["live"]], total, "healthy" if total else "stale"


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
        [t for t, _ in agents],
        [a for _, a in agents],
    )
    return {(r["tenant"], r["agent_id"]): r for r in rows}


async def prune_lapsed_leases(conn: asyncpg.Connection | asyncpg.Pool) -> int:
    """Delete lapsed leases, keeping each agent's newest row (so an agent whose leases all lapsed
    stays `stale`, not `unknown`). Returns how many were deleted. A lease renewed meanwhile is kept:
    the row is re-checked once its lock is taken."""
    result = await conn.execute(
        """DELETE FROM agent_instances x
            WHERE x.expires_at <= now()
              AND EXISTS (SELECT 1 FROM agent_instances y
                           WHERE y.tenant = x.tenant AND y.agent_id = x.agent_id
                             AND (y.expires_at, y.instance_id) > (x.expires_at, x.instance_id))"""
    )
    return int(result.split()[-1])
