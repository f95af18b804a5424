"""The rows a detail release or a ticket request decides from: an agent, every version of one of
its skills and its live instances, cached per process on the terms of registry.core.response_cache."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import msgspec

from db import agents as agent_queries
from db import capabilities as capability_queries
from registry.core.records import CapabilityVersion
from registry.core.response_cache import CachedResponse, expiry
from registry.discovery.service import capability_version
from registry.state import Registry


class SkillRecord(msgspec.Struct, frozen=True):
    """What a release decides from: the agent row (None if absent), every version of the skill, and
    the agent's live instances."""

    agent: Any
    versions: list[tuple[CapabilityVersion, Any]]
    # At most db.agents.MAX_LISTED_INSTANCES live instances, least loaded first, and the total.
    instances: Any
    instance_count: int = 0


# Leases renew without a change-feed entry, so health and instances may lag this much behind.
_SKILL_RECORD_MAX_AGE = 1.0


async def skill_record(registry: Registry, tenant: str, agent_id: str, skill_id: str) -> SkillRecord:
    """The skill's rows, from the per-process cache while no change has been committed since
    (registry.core.response_cache: visibility, scopes, regions and status changes all advance the change
    sequence, so a cached entry never outlives them), else from the database."""
    key = (tenant, agent_id, skill_id)
    entry = registry.release_cache.get(key, registry.watcher.cache_seq(), time.monotonic())
    if entry is not None:
        return entry.extra
    async with registry.pool.acquire() as conn:
        seq, next_effective = await capability_queries.snapshot_bounds(conn)
        agent = await agent_queries.get_agent(conn, tenant, agent_id)
        rows = await capability_queries.skill_versions(conn, tenant, agent_id, skill_id, detail=True) if agent else []
        instances, count = await agent_queries.live_instances(conn, tenant, agent_id) if agent else ([], 0)
    record = SkillRecord(
        agent=agent,
        versions=[(capability_version(row), row) for row in rows],
        instances=instances,
        instance_count=count,
    )
    expires = expiry(time.monotonic(), datetime.now(UTC), [next_effective], max_age=_SKILL_RECORD_MAX_AGE)
    registry.release_cache.put(
        key, CachedResponse(body=b"", etag="", seq=seq, expires=expires, extra=record), registry.watcher.cache_seq()
    )
    return record
