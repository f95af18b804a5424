"""The rows a detail release or a ticket request decides from: an agent, every version of one of
its skills and its live instances, cached per process on the terms of registry.core.response_cache.

Two entries, because they age differently. The agent and the skill's versions change only through
committed changes (each advances the change sequence, which empties the cache), so they are kept to
the cache's usual backstop age. Leases renew without a change-feed entry, so the agent's live
instances, their count and its health are kept at most LEASES_MAX_AGE and re-read with one
statement; a ticket, which releases no instance, never reads them."""

from __future__ import annotations

import msgspec

from db import agents as agent_queries
from db import capabilities as capability_queries
from db.agents import AgentRow, LiveInstance
from db.capabilities import VersionDetailRow
from registry.core.records import CapabilityVersion
from registry.core.response_cache import DEFAULT_MAX_AGE, EVERYONE, LEASES_MAX_AGE, CachedResponse, cache_key, expiry
from registry.discovery.service import capability_version
from registry.state import Registry


class SkillRecord(msgspec.Struct, frozen=True):
    """What a release decides from: the agent row (None if absent) and every version of the skill."""

    agent: AgentRow | None
    versions: list[tuple[CapabilityVersion, VersionDetailRow]]


class Leases(msgspec.Struct, frozen=True):
    """An agent's lease-derived state: at most db.agents.MAX_LISTED_INSTANCES live instances, least
    loaded first, how many are live in all, and its health (db.agents.lease_snapshot)."""

    instances: list[LiveInstance]
    instance_count: int
    health: str


async def skill_record(registry: Registry, tenant: str, agent_id: str, skill_id: str) -> SkillRecord:
    """The skill's rows, from the per-process cache while no change has been committed since
    (registry.core.response_cache: visibility, scopes, regions and status changes all advance the change
    sequence, so a cached entry never outlives them), else from the database. Their lease-derived
    fields (health, live instances) are as of the read: `leases` has the current ones."""
    key = cache_key("skill-record", EVERYONE, tenant, agent_id, skill_id)
    entry = registry.release_cache.get(key, registry.watcher.cache_seq(), registry.clock.monotonic())
    if entry is not None:
        return entry.extra
    now = registry.clock.now()
    async with registry.pool_waits.acquire() as conn:
        seq, next_effective = await capability_queries.snapshot_bounds(conn, now=now)
        agent = await agent_queries.get_agent(conn, tenant, agent_id)
        rows = await capability_queries.skill_versions(conn, tenant, agent_id, skill_id, detail=True) if agent else []
    record = SkillRecord(agent=agent, versions=[(capability_version(row), row) for row in rows])
    expires = expiry(registry.clock.monotonic(), now, [next_effective], max_age=DEFAULT_MAX_AGE)
    registry.release_cache.put(
        key, CachedResponse(body=b"", etag="", seq=seq, expires=expires, extra=record), registry.watcher.cache_seq()
    )
    return record


async def leases(registry: Registry, tenant: str, agent_id: str) -> Leases:
    """The agent's live instances and health, at most LEASES_MAX_AGE old (and never older than the
    last committed change: a health flip advances the change sequence)."""
    key = cache_key("leases", EVERYONE, tenant, agent_id)
    seq = registry.watcher.cache_seq()
    entry = registry.release_cache.get(key, seq, registry.clock.monotonic())
    if entry is not None:
        return entry.extra
    instances, count, health = await agent_queries.lease_snapshot(registry.pool, tenant, agent_id)
    found = Leases(instances=instances, instance_count=count, health=health)
    if seq is not None:  # read after `seq` was known: at least that new
        expires = registry.clock.monotonic() + LEASES_MAX_AGE
        registry.release_cache.put(
            key, CachedResponse(body=b"", etag="", seq=seq, expires=expires, extra=found), registry.watcher.cache_seq()
        )
    return found
