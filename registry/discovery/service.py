"""Discovery: public capability views, query parameters, cursors and ETags, the one function
that answers a discovery question (`discovery_page`) for the HTTP route and the MCP tool alike, and
the change feed (`change_page`, long-polling).

Public views are built from rows that never contain schemas, examples or endpoints, so nothing
gated can leak through discovery by construction.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from auth.principal import Caller
from db import capabilities as capability_queries
from db import changes as change_queries
from db.agents import AgentRow
from db.capabilities import DiscoverRow, VersionDetailRow, VersionRow
from registry.core.cursors import decode_cursor, encode_cursor
from registry.core.problems import ErrorItem, ProblemError, invalid_request
from registry.core.records import (
    AGENT_ID_PATTERN,
    SIDE_EFFECT_ORDER,
    SKILL_ID_MAX_LENGTH,
    SKILL_ID_PATTERN,
    TENANT_PATTERN,
    CapabilityVersion,
    Health,
    PublicCapability,
    Slo,
    capability_ref,
)
from registry.core.response_cache import EVERYONE, CachedResponse, cache_key, etag_of, expiry, seen_by_tenant
from registry.core.wire import Wire
from registry.discovery import ranking

if TYPE_CHECKING:
    from registry.state import Registry

MAX_LIMIT = 200
DEFAULT_LIMIT = 50
# Section 15: `q` is at most 512 characters (registry.discovery.ranking.QUERY_MAX_LENGTH).
QUERY_MAX_LENGTH = ranking.QUERY_MAX_LENGTH
REGION_MAX_LENGTH = 32


class DiscoveryPage(Wire):
    items: list[PublicCapability]
    next_cursor: str | None


class Publisher(Wire, omit_defaults=True):
    """Whether the agent's last registration carried a valid publisher signature, and by which key
    (docs/api.md#signed-cards)."""

    signed: bool
    kid: str | None = None


def publisher_of(agent: AgentRow) -> Publisher:
    kid = agent.publisher_kid
    return Publisher(signed=kid is not None, kid=kid)


class AgentView(Wire):
    """The agent public view (docs/api.md#agent-views-and-cards)."""

    tenant: str
    agent_id: str
    name: str
    description: str
    version: str
    provider: dict | None
    visibility: Literal["public", "tenant"]
    health: Health
    # Unexpired instance leases (heartbeats).
    live_instances: int
    skills: list[PublicCapability]
    updated_at: object
    publisher: Publisher


class RefParts(msgspec.Struct, frozen=True):
    tenant: str
    agent_id: str
    skill_id: str
    version: str


_REF_PARTS = (
    ("tenant", re.compile(TENANT_PATTERN), 64),
    ("agentId", re.compile(AGENT_ID_PATTERN), 64),
    ("skill", re.compile(SKILL_ID_PATTERN), SKILL_ID_MAX_LENGTH),
)
VERSION_REQUEST_MAX_LENGTH = 256


def parse_capability_ref(ref: str, *, path: str = "/ref") -> RefParts:
    """`tenant/agentId/skill@version` (the version exact, `latest` or a range; `@...` absent means
    `latest`) in its parts; invalid_request naming `path` when it is not one."""

    def bad(message: str) -> ProblemError:
        return invalid_request(
            "not a capability ref 'tenant/agentId/skill@version'", [ErrorItem(path=path, message=message)]
        )

    head, at, version = ref.partition("@")
    if not at:
        version = "latest"
    if not version or len(version) > VERSION_REQUEST_MAX_LENGTH:
        raise bad(f"the version after '@' must be 1 to {VERSION_REQUEST_MAX_LENGTH} characters")
    parts = head.split("/")
    if len(parts) != 3:
        raise bad("expected three '/'-separated parts before '@': tenant, agent id and skill id")
    for value, (name, pattern, max_length) in zip(parts, _REF_PARTS, strict=False):
        if len(value) > max_length or not pattern.fullmatch(value):
            raise bad(f"{name} {value[:80]!r} is not valid")
    return RefParts(tenant=parts[0], agent_id=parts[1], skill_id=parts[2], version=version)


# The rows a public view of a capability version is built from (db.capabilities: an agent's reads, discovery).
ShownVersion = VersionRow | DiscoverRow


def _version_fields(row: ShownVersion) -> dict:
    """The fields every view of a capability version shares, from its row."""
    slo = row.slo
    return {
        "tenant": row.tenant,
        "agent_id": row.agent_id,
        "id": row.skill_id,
        "version": row.version,
        "name": row.name,
        "description": row.description,
        "tags": list(row.tags),
        "scopes": list(row.scopes),
        "side_effect": row.side_effect,
        "requires_approval": row.requires_approval,
        "data_regions": list(row.data_regions),
        "slo": msgspec.convert(slo, Slo) if slo is not None else None,
        "status": row.status,
        "sunset_at": row.sunset_at,
        "effective_at": row.effective_at,
    }


def public_capability(row: ShownVersion) -> PublicCapability:
    return PublicCapability(
        ref=capability_ref(row.tenant, row.agent_id, row.skill_id, row.version),
        health=row.health,
        live_instances=row.live_instances,
        updated_at=row.updated_at,
        **_version_fields(row),
    )


def agent_view(agent: AgentRow, skills: Sequence[VersionRow]) -> AgentView:
    return AgentView(
        tenant=agent.tenant,
        agent_id=agent.agent_id,
        name=agent.name,
        description=agent.description,
        version=agent.version,
        provider=agent.provider,
        visibility=agent.visibility,
        health=agent.health,
        live_instances=agent.live_instances,
        skills=[public_capability(row) for row in skills],
        updated_at=agent.updated_at,
        publisher=publisher_of(agent),
    )


def page_cursor(row: DiscoverRow) -> str:
    return encode_cursor([row.tenant, row.agent_id, row.skill_id, row.version_key])


def side_effect_rank(value: str | None) -> int | None:
    if value is None:
        return None
    if value not in SIDE_EFFECT_ORDER:
        raise invalid_request(
            "unknown sideEffectMax",
            [ErrorItem(path="sideEffectMax", message=f"must be one of {', '.join(SIDE_EFFECT_ORDER)}")],
        )
    return SIDE_EFFECT_ORDER[value]


def capability_version(row: VersionDetailRow) -> CapabilityVersion:
    """A full capability version (schemas included) from a detail row."""
    return CapabilityVersion(
        examples=list(row.examples),
        input_schema=row.input_schema,
        output_schema=row.output_schema,
        input_modes=list(row.input_modes),
        output_modes=list(row.output_modes),
        deprecation_message=row.deprecation_message,
        published_at=row.published_at,
        fixture_count=row.fixture_count,
        baseline=row.baseline if row.status == "candidate" else None,
        **_version_fields(row),
    )


# ---------------------------------------------------------------------------
# Answering a discovery question


def viewer_tenant(caller: Caller | None) -> str | None:
    """The tenant whose records discovery adds for this caller (None: public records only)."""
    return caller.tenant if caller is not None and caller.holds("registry:read") else None


class DiscoveryQuery(msgspec.Struct, frozen=True, kw_only=True):
    """The parameters of one discovery question, already checked for length and range."""

    q: str | None = None
    skill: str | None = None
    tags: tuple[str, ...] | None = None
    side_effect_max: str | None = None
    region: str | None = None
    agent: str | None = None
    tenant: str | None = None
    status: str | None = None
    versions: str = "latest"
    # "healthy": only agents with at least one live instance lease.
    health: str | None = None
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None


_encoder = msgspec.json.Encoder()


async def discovery_page(registry: Registry, viewer: str | None, query: DiscoveryQuery) -> CachedResponse:
    """One encoded page of public capabilities for `viewer`, from the per-process cache when the
    same question was answered since the last committed change (registry.core.response_cache: exact).

    Raises invalid_request for an unknown sideEffectMax or a cursor this registry did not issue.
    """
    query = await normalized(registry, query)
    key = cache_key("discover", seen_by_tenant(viewer), *msgspec.structs.astuple(query))
    seq = registry.watcher.cache_seq()
    entry = registry.responses.get(key, seq, registry.clock.monotonic())
    if entry is None:
        # Identical cold questions asked together are answered by one query (read_admission.once).
        entry = await registry.reads.once(key, seq, lambda: _query_page(registry, viewer, query))
        registry.responses.put(key, entry, registry.watcher.cache_seq())
    return entry


# The region a discovery question names when it names one no capability lists: such a question has
# the same answer whatever the region (only capabilities without dataRegions match), so one key.
UNLISTED_REGION = "~unlisted"


async def normalized(registry: Registry, query: DiscoveryQuery) -> DiscoveryQuery:
    """`query` with what does not change its answer removed, so equal questions share one cache
    entry: tags in one order without repeats, and a region no capability lists as UNLISTED_REGION."""
    changes: dict = {}
    if query.tags:
        tags = tuple(sorted(set(query.tags)))
        if tags != query.tags:
            changes["tags"] = tags
    if query.region is not None and query.region not in await _known_regions(registry):
        changes["region"] = UNLISTED_REGION
    return msgspec.structs.replace(query, **changes) if changes else query


_KNOWN_REGIONS = cache_key("known-regions", EVERYONE)


async def _known_regions(registry: Registry) -> frozenset[str]:
    """The regions capabilities list, cached on the terms of every other entry (one change sequence)."""
    entry = registry.responses.get(_KNOWN_REGIONS, registry.watcher.cache_seq(), registry.clock.monotonic())
    if entry is not None:
        return entry.extra
    now = registry.clock.now()
    async with registry.reads.connection() as conn:
        seq, _ = await capability_queries.snapshot_bounds(conn, now=now)
        regions = await capability_queries.known_regions(conn)
    expires = expiry(registry.clock.monotonic(), now, [])
    registry.responses.put(
        _KNOWN_REGIONS,
        CachedResponse(body=b"", etag="", seq=seq, expires=expires, extra=regions),
        registry.watcher.cache_seq(),
    )
    return regions


async def _query_page(registry: Registry, viewer: str | None, query: DiscoveryQuery) -> CachedResponse:
    """Query one page and encode it, labelled with the sequence number read before the query."""
    rank = side_effect_rank(query.side_effect_max)
    if query.q:
        return await _ranked_page(registry, viewer, query, rank)
    after = decode_cursor(query.cursor, tuple[str, str, str, str]) if query.cursor else None
    now = registry.clock.now()
    async with registry.reads.connection() as conn:
        seq, next_effective = await capability_queries.snapshot_bounds(conn, now=now)
        rows = await capability_queries.discover(
            conn,
            viewer_tenant=viewer,
            tags=list(query.tags) if query.tags else None,
            side_effect_max=rank,
            latest_only=query.versions == "latest",
            after=after,
            limit=query.limit + 1,
            skill=query.skill,
            region=query.region,
            agent=query.agent,
            tenant=query.tenant,
            status=query.status,
            healthy_only=query.health == "healthy",
            now=now,
        )
    page = rows[: query.limit]
    next_cursor = page_cursor(page[-1]) if len(rows) > query.limit else None
    return _encoded_page(registry, page, next_cursor, seq, next_effective, now)


def search_filters(query: DiscoveryQuery, side_effect_max: int | None) -> ranking.SearchFilters:
    """The filters of a discovery question, for registry.discovery.ranking.rank."""
    return ranking.SearchFilters(
        skill=query.skill,
        tags=query.tags,
        side_effect_max=side_effect_max,
        region=query.region,
        agent=query.agent,
        tenant=query.tenant,
        status=query.status,
        healthy_only=query.health == "healthy",
        latest_only=query.versions == "latest",
    )


async def _ranked_page(
    registry: Registry, viewer: str | None, query: DiscoveryQuery, rank: int | None
) -> CachedResponse:
    """A page of a discovery question with `q`: best first (registry.discovery.ranking), cursors in that order."""
    assert query.q
    after = ranking.decode_position(query.cursor) if query.cursor else None
    now = registry.clock.now()
    async with registry.reads.connection() as conn:
        seq, next_effective = await capability_queries.snapshot_bounds(conn, now=now)
        ranked = await ranking.rank(
            conn,
            registry.search,
            viewer,
            query.q,
            search_filters(query, rank),
            after=after,
            limit=query.limit + 1,
            now=now,
        )
    page = [r.row for r in ranked[: query.limit]]
    next_cursor = ranking.encode_position(ranked[query.limit - 1].position) if len(ranked) > query.limit else None
    return _encoded_page(registry, page, next_cursor, seq, next_effective, now)


def _encoded_page(
    registry: Registry,
    page: Sequence[DiscoverRow],
    next_cursor: str | None,
    seq: int,
    next_effective: Any,
    now: datetime,
) -> CachedResponse:
    body = _encoder.encode(DiscoveryPage(items=[public_capability(r) for r in page], next_cursor=next_cursor))
    # liveInstances drops when a lease lapses, and health flips at the last: the page is good until the first such moment.
    boundaries = [r.lease_until for r in page]
    boundaries.append(next_effective)
    expires = expiry(registry.clock.monotonic(), now, boundaries)
    return CachedResponse(body=body, etag=etag_of(body), seq=seq, expires=expires)


# ---------------------------------------------------------------------------
# The change feed


class Change(Wire):
    seq: int
    kind: str
    ref: str
    at: object


class ChangePage(Wire):
    items: list[Change]
    next: int


async def change_page(registry: Registry, viewer: str | None, *, after: int, wait: float, limit: int) -> ChangePage:
    """Committed changes after `after` on records `viewer` may see, waiting up to `wait` seconds for
    one when there is none yet."""
    deadline = registry.clock.monotonic() + wait
    while True:
        head = await change_queries.current_seq(registry.pool)
        rows = await change_queries.changes_after(
            registry.pool, after, tenant=viewer, limit=limit, upto=head, now=registry.clock.now()
        )
        if rows:
            # A full page continues after its last item; otherwise everything up to head was seen,
            # including changes the caller may not see, which it need never rescan.
            next_seq = rows[-1].seq if len(rows) == limit else head
            return ChangePage(items=[Change(seq=r.seq, kind=r.kind, ref=r.ref, at=r.at) for r in rows], next=next_seq)
        after = max(after, head)
        remaining = deadline - registry.clock.monotonic()
        if remaining <= 0:
            return ChangePage(items=[], next=after)
        await registry.watcher.wait(min(remaining, 1.0))
