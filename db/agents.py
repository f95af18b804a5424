"""Queries on agents and agent_instances: the agent rows, their cards, and liveness leases."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, NamedTuple

import asyncpg
import msgspec

from db.changes import HEALTH_CHANGE_KIND
from db.rows import typed_row

AGENT_COLUMNS = (
    "a.tenant, a.agent_id, a.name, a.description, a.version, a.provider, a.visibility, a.shared_with, "
    "a.card, a.card_hash, a.created_at, a.updated_at, a.publisher_kid"
)


def lease_live(alias: str, *, beyond: str | None = None) -> str:
    """The one rule for a live instance lease (issue 36): its expiry is ahead of the database's clock
    (heartbeats write `expires_at` from now() too, so no app host's skew enters a lease). With
    `beyond` (an interval), live for at least that much longer (renewals' lapse margin)."""
    moment = "now()" if beyond is None else f"now() + interval '{beyond}'"
    return f"{alias}.expires_at > {moment}"


# The agent `a`'s leases, `i`.
_OF_AGENT = "FROM agent_instances i WHERE i.tenant = a.tenant AND i.agent_id = a.agent_id"
# Lease figures per agent: live instances now, and the moments cached views of them go out of date
# by time alone (the first live lease lapsing changes the count, the last one flips health).
LIVE_INSTANCES_SQL = f"(SELECT count(*) {_OF_AGENT} AND {lease_live('i')})"
LEASE_BOUNDS_SQL = f"(SELECT ARRAY[min(i.expires_at), max(i.expires_at)] {_OF_AGENT} AND {lease_live('i')})"
# When the agent's lease figures would next change by themselves: its first live lease lapsing
# (liveInstances drops; health flips at the last one). Cached pages end there.
LEASE_UNTIL_SQL = f"(SELECT min(i.expires_at) {_OF_AGENT} AND {lease_live('i')})"
# Section 3's `health=healthy` filter (discovery, ranked search): the agent has a live lease.
HAS_LIVE_INSTANCE = f"EXISTS (SELECT 1 {_OF_AGENT} AND {lease_live('i')})"

# The one definition of an agent's health (issue 36): healthy while any lease is live, stale once
# all have lapsed, unknown if none ever existed. Every reader selects this expression (discovery,
# ranked search, ARD, detail's lease_snapshot); registry.core.records.Health names its values.
HEALTH_VALUES = ("healthy", "stale", "unknown")
# HEALTH_VALUES as a type (registry.core.records.Health names the same values).
Health = Literal["healthy", "stale", "unknown"]
HEALTH_SQL = f"""(SELECT CASE WHEN count(*) = 0 THEN 'unknown'
                             WHEN bool_or({lease_live("i")}) THEN 'healthy'
                             ELSE 'stale' END
                   {_OF_AGENT})"""


class AgentRow(msgspec.Struct, frozen=True, gc=False):
    """An agent not withdrawn: AGENT_COLUMNS, then its health, live instances and lease bounds (get_agent)."""

    tenant: str
    agent_id: str
    name: str
    description: str
    version: str
    provider: dict[str, Any] | None
    visibility: Literal["public", "tenant"]
    shared_with: list[str]
    card: dict[str, Any]
    card_hash: str
    created_at: datetime
    updated_at: datetime
    publisher_kid: str | None
    health: Health
    live_instances: int
    # [first, last] expiry of the live leases ([None, None]: none is live).
    lease_bounds: list[datetime | None] | None


async def get_agent(conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str) -> AgentRow | None:
    """The agent (None: none, or withdrawn)."""
    record = await conn.fetchrow(
        f"""SELECT {AGENT_COLUMNS}, {HEALTH_SQL} AS health, {LIVE_INSTANCES_SQL} AS live_instances,
                   {LEASE_BOUNDS_SQL} AS lease_bounds
              FROM agents a WHERE a.tenant = $1 AND a.agent_id = $2 AND a.withdrawn_at IS NULL""",
        tenant,
        agent_id,
    )
    return typed_row(AgentRow, record)


class WithdrawalTarget(NamedTuple):
    """An agent's row as a withdrawal reads it, locked: who may see it, and whether it is withdrawn."""

    visibility: str
    shared_with: list[str]
    withdrawn_at: datetime | None


async def lock_withdrawal_target(conn: asyncpg.Connection, tenant: str, agent_id: str) -> WithdrawalTarget | None:
    """The agent's row locked for its withdrawal, withdrawn or not (None: never registered)."""
    row = await conn.fetchrow(
        """SELECT visibility, shared_with, withdrawn_at FROM agents
            WHERE tenant = $1 AND agent_id = $2 FOR NO KEY UPDATE""",
        tenant,
        agent_id,
    )
    return None if row is None else WithdrawalTarget(row["visibility"], list(row["shared_with"]), row["withdrawn_at"])


async def withdraw_agent(conn: asyncpg.Connection, tenant: str, agent_id: str, *, now: datetime) -> int:
    """Mark the agent withdrawn and end its instances' leases; how many leases were live. The stored
    registration hash goes, so the same body sent again is registered in full (restore_withdrawn)."""
    await conn.execute(
        """UPDATE agents SET withdrawn_at = $3, registration_hash = NULL, updated_at = now()
            WHERE tenant = $1 AND agent_id = $2""",
        tenant,
        agent_id,
        now,
    )
    return await conn.fetchval(
        f"""WITH ended AS (DELETE FROM agent_instances WHERE tenant = $1 AND agent_id = $2 RETURNING expires_at)
           SELECT count(*) FILTER (WHERE {lease_live("e")}) FROM ended e""",
        tenant,
        agent_id,
    )


async def restore_withdrawn(conn: asyncpg.Connection, tenant: str, agent_id: str) -> bool:
    """A withdrawn agent registered again is an agent again (its retired versions stay retired);
    whether it was withdrawn. Under the agent's registration lock."""
    restored = await conn.fetchval(
        """UPDATE agents SET withdrawn_at = NULL WHERE tenant = $1 AND agent_id = $2 AND withdrawn_at IS NOT NULL
           RETURNING true""",
        tenant,
        agent_id,
    )
    return bool(restored)


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
        "SELECT count(*) FROM (SELECT 1 FROM agents WHERE tenant = $1 AND withdrawn_at IS NULL LIMIT $2) AS a",
        tenant,
        cap,
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
                                                         AND {lease_live("x", beyond=_LAPSE_MARGIN)}))
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
                     JOIN agents a ON a.tenant = t.tenant AND a.agent_id = t.agent_id AND a.withdrawn_at IS NULL
                     LEFT JOIN agent_instances x ON x.tenant = t.tenant AND x.agent_id = t.agent_id
                                                AND x.instance_id = t.instance_id AND {lease_live("x")}
               ), live_counts AS (
                   SELECT x.tenant, x.agent_id, count(*) AS n FROM agent_instances x
                    WHERE (x.tenant, x.agent_id) IN (SELECT tenant, agent_id FROM input) AND {lease_live("x")}
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
                                       WHERE x.tenant = i.tenant AND x.agent_id = i.agent_id AND {lease_live("x")})
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
                WHERE {lease_live("x", beyond=_LAPSE_MARGIN)}
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

# The one least-loaded-instance order (issue 36), over `agent_instances i`: lower `load` first, an
# instance that sent none after every one that did (even one reporting 1.0), ties by the latest
# heartbeat, then `instance_id`. Detail's instance list, its first entry, and an offer's `instance`
# all read it, so detail and offers name the same instance for the same agent and leases.
LEAST_LOADED_ORDER_SQL = "i.load ASC NULLS LAST, i.last_seen_at DESC, i.instance_id"


# lease_snapshot's statement ($1 tenant, $2 agent, $3 limit): the agent's health, then its live
# instances in LEAST_LOADED_ORDER_SQL (one row with NULL instance columns when none is live).
LEASE_SNAPSHOT_SQL = f"""SELECT {HEALTH_SQL} AS health, l.*
      FROM (SELECT $1::text AS tenant, $2::text AS agent_id) a
      LEFT JOIN LATERAL (
           SELECT i.instance_id, i.url, i.expires_at, i.load, i.last_seen_at, count(*) OVER () AS total
             {_OF_AGENT} AND {lease_live("i")}
            ORDER BY {LEAST_LOADED_ORDER_SQL} LIMIT $3) l ON true"""


class LiveInstance(msgspec.Struct, frozen=True):
    """An instance whose lease is live, as detail and offers read it."""

    instance_id: str
    url: str | None
    expires_at: datetime
    load: float | None
    last_seen_at: datetime


def _live_instance(row: asyncpg.Record) -> LiveInstance:
    return LiveInstance(row["instance_id"], row["url"], row["expires_at"], row["load"], row["last_seen_at"])


async def lease_snapshot(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str, *, limit: int = MAX_LISTED_INSTANCES
) -> tuple[list[LiveInstance], int, str]:
    """In one statement: at most `limit` live instances, least loaded first, how many are live in all,
    and the agent's health (HEALTH_SQL itself, as every other reader)."""
    rows = await conn.fetch(
        LEASE_SNAPSHOT_SQL,
        tenant,
        agent_id,
        limit,
    )
    live = [row for row in rows if row["instance_id"] is not None]
    return [_live_instance(row) for row in live], (live[0]["total"] if live else 0), rows[0]["health"]


async def least_loaded_instances(
    conn: asyncpg.Connection | asyncpg.Pool, agents: list[tuple[str, str]]
) -> dict[tuple[str, str], LiveInstance]:
    """Per agent (tenant, agentId), its first live instance in LEAST_LOADED_ORDER_SQL (the one detail
    lists first); agents with none are absent."""
    if not agents:
        return {}
    rows = await conn.fetch(
        f"""SELECT DISTINCT ON (i.tenant, i.agent_id)
                  i.tenant, i.agent_id, i.instance_id, i.url, i.expires_at, i.load, i.last_seen_at
             FROM unnest($1::text[], $2::text[]) AS k(tenant, agent_id)
             JOIN agent_instances i ON i.tenant = k.tenant AND i.agent_id = k.agent_id
            WHERE {lease_live("i")}
            ORDER BY i.tenant, i.agent_id, {LEAST_LOADED_ORDER_SQL}""",
        [t for t, _ in agents],
        [a for _, a in agents],
    )
    return {(r["tenant"], r["agent_id"]): _live_instance(r) for r in rows}


async def prune_lapsed_leases(conn: asyncpg.Connection | asyncpg.Pool) -> int:
    """Delete lapsed leases, keeping each agent's newest row (so an agent whose leases all lapsed
    stays `stale`, not `unknown`). Returns how many were deleted. A lease renewed meanwhile is kept:
    the row is re-checked once its lock is taken."""
    result = await conn.execute(
        f"""DELETE FROM agent_instances x
            WHERE NOT {lease_live("x")}
              AND EXISTS (SELECT 1 FROM agent_instances y
                           WHERE y.tenant = x.tenant AND y.agent_id = x.agent_id
                             AND (y.expires_at, y.instance_id) > (x.expires_at, x.instance_id))"""
    )
    return int(result.split()[-1])
