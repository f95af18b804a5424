"""HTTP: registering agents, reading their public views and A2A cards, and liveness heartbeats."""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from typing import Annotated, Literal

import msgspec
from litestar import Request, Response, get, post, put
from litestar.params import PathParameter

from auth.policy import PUBLISH_SCOPE, can_see, check_heartbeat, check_publish
from db import agents as agent_queries
from db import capabilities as capability_queries
from db.agents import LeaseRenewal
from registry.audit import AuditEvent
from registry.cards import public_agent_card
from registry.discovery import AgentView, agent_view, capability_version, public_capability
from registry.problems import ProblemError, not_found, problem_responses
from registry.problems import refused as problem_of_refusal
from registry.records import AGENT_ID_PATTERN, SKILL_ID_PATTERN, TENANT_PATTERN, AgentRegistration, PublicCapability
from registry.registration import (
    VersionRef,
    apply_registration,
    check_compatibility_ahead,
    prepare_registration,
    registration_digest,
)
from registry.response_cache import CachedResponse, etag_of, expiry
from registry.request_guard import body_schema, read_body
from registry.service import registry_of, trace_id_of
from registry.tracing import current_request_id
from registry.wire import Wire

TenantPath = Annotated[str, PathParameter(pattern=TENANT_PATTERN, description="tenant id")]
AgentPath = Annotated[str, PathParameter(pattern=AGENT_ID_PATTERN, description="agent id")]
SkillPath = Annotated[str, PathParameter(pattern=SKILL_ID_PATTERN, max_length=128, description="skill (capability) id")]


_encoder = msgspec.json.Encoder()
_TENANT_RE = re.compile(TENANT_PATTERN)
_AGENT_RE = re.compile(AGENT_ID_PATTERN)


class RegistrationResponse(Wire):
    agent: AgentView
    published: list[VersionRef]
    unchanged: list[VersionRef]


class Heartbeat(Wire, forbid_unknown_fields=True):
    instance_id: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]
    ttl_seconds: Annotated[int, msgspec.Meta(ge=5, le=3600)] = 30
    # No control characters: the value joins a statement shared with other requests' heartbeats.
    url: Annotated[str, msgspec.Meta(max_length=2048, pattern=r"^[^\x00-\x1f\x7f]*$")] | None = None
    # The instance's own estimate of how busy it is (routers prefer the least loaded).
    load: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None


class HeartbeatResponse(Wire):
    health: Literal["healthy", "stale", "unknown"]
    expires_at: datetime


class VersionList(Wire):
    items: list[PublicCapability]


async def visible_agent(request: Request, tenant: str, agent_id: str):
    """The agent row if the caller may see it; 404 otherwise (never revealing that it exists)."""
    registry = registry_of(request)
    caller = await registry.caller(request)
    agent = await agent_queries.get_agent(registry.pool, tenant, agent_id)
    if agent is None or not can_see(
        caller, tenant=agent["tenant"], visibility=agent["visibility"], shared_with=agent["shared_with"]
    ):
        raise not_found("no such agent")
    return caller, agent


class _SkillRefs(msgspec.Struct):
    """Only the skill ids and versions of a registration body (everything else is skipped unread)."""

    skills: list[VersionRef] = []


async def _unchanged_registration(request: Request) -> Response | None:
    """Before the body is decoded: the exact bytes of the last registration applied to this agent,
    sent again by a caller allowed to register it, are answered from one indexed read (no batch
    slot, no transaction, no schema compiled). Agents re-register at every start, so a fleet
    restart is mostly this. Anything else (another body, a caller that would be refused, an
    unknown agent) returns None: the handler decides, refuses and audits as always. An unchanged
    re-registration is not audited, like every re-registration that changes nothing (docs/audit.md).
    """
    tenant, agent_id = request.path_params.get("tenant", ""), request.path_params.get("agent_id", "")
    if not (_TENANT_RE.match(tenant) and _AGENT_RE.match(agent_id)):
        return None
    registry = registry_of(request)
    try:
        caller = await registry.caller(request)
    except ProblemError:
        return None
    if caller is None or check_publish(caller, tenant) is not None:
        return None
    body = await request.body()
    if await agent_queries.registration_hash(registry.pool, tenant, agent_id) != registration_digest(body):
        return None
    entry = await agent_view_entry(registry, tenant, agent_id)
    if entry is None:
        return None
    try:
        refs = msgspec.json.decode(body, type=_SkillRefs)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return Response(
        b'{"agent":' + entry.body + b',"published":[],"unchanged":' + _encoder.encode(refs.skills) + b"}",
        media_type="application/json",
    )


@put(
    "/v1/agents/{tenant:str}/{agent_id:str}",
    status_code=200,
    summary="Register or update an agent and publish its capability versions",
    before_request=_unchanged_registration,
    responses=problem_responses(400, 401, 403, 409, 413),
    dependencies=body_schema(AgentRegistration),
)
async def register_agent(
    request: Request, tenant: TenantPath, agent_id: AgentPath
) -> Response[RegistrationResponse]:
    registry = registry_of(request)
    caller = await registry.require_caller(request)
    data = await read_body(request, AgentRegistration)

    async def refused(error: ProblemError, event_type: str) -> ProblemError:
        # Refusals are audited (a publish into another tenant, a change to a published version);
        # malformed bodies (400) and no-op re-registrations are not: nothing was decided or changed.
        await registry.writes.record([AuditEvent(
            type=event_type, outcome="denied", tenant=tenant, actor_tenant=caller.tenant, actor=caller.sub,
            actor_issuer=caller.issuer, ref=f"{tenant}/{agent_id}", reason=error.code, trace_id=trace_id_of(request),
            request_id=current_request_id(),
        )])
        return error

    refusal = check_publish(caller, tenant)
    if refusal is not None:
        raise await refused(problem_of_refusal(refusal), "agent.registered")
    prepared = await prepare_registration(data)
    await check_compatibility_ahead(registry.pool, tenant, agent_id, prepared)
    # Stored with the agent: these exact bytes, sent again, take the fast path (_unchanged_registration).
    prepared = msgspec.structs.replace(prepared, body_hash=registration_digest(await request.body()))
    trace_id, request_id = trace_id_of(request), current_request_id()  # the write runs in another task
    try:
        result = await registry.writes.run(
            lambda scope: apply_registration(scope, caller, tenant, agent_id, prepared, trace_id=trace_id,
                                             request_id=request_id)
        )
    except ProblemError as error:  # 409 version_conflict or incompatible_change: nothing applied
        raise await refused(error, "version.published") from None
    entry = await agent_view_entry(registry, tenant, agent_id)
    refs = _encoder.encode({"published": result.published, "unchanged": result.unchanged})
    return Response(
        b'{"agent":' + entry.body + b"," + refs[1:], status_code=201 if result.created else 200,
        media_type="application/json",
    )


async def agent_view_entry(registry, tenant: str, agent_id: str) -> CachedResponse | None:
    """The encoded agent public view (None: no such agent), from the per-process cache on the
    public card's terms (registry.response_cache): dropped on any committed change, and ending
    when the agent's first live lease lapses or a version becomes effective. A new instance of an
    already healthy agent is not a change, so `liveInstances` may lag by the cache's max age."""
    key = ("agent-view", tenant, agent_id)
    entry = registry.responses.get(key, registry.watcher.cache_seq(), time.monotonic())
    if entry is not None:
        return entry
    async with registry.pool.acquire() as conn:
        seq, next_effective = await capability_queries.snapshot_bounds(conn)
        agent = await agent_queries.get_agent(conn, tenant, agent_id)
        skills = await capability_queries.latest_per_skill(conn, tenant, agent_id) if agent else []
    if agent is None:
        return None
    body = msgspec.json.encode(agent_view(agent, skills))
    first_lapse = agent["lease_bounds"][0] if agent["lease_bounds"] else None
    entry = CachedResponse(
        body=body, etag=etag_of(body), seq=seq,
        expires=expiry(time.monotonic(), datetime.now(timezone.utc), [next_effective, first_lapse]),
        extra=(agent["visibility"], tuple(agent["shared_with"])),
    )
    registry.responses.put(key, entry, registry.watcher.cache_seq())
    return entry


@get(
    "/v1/agents/{tenant:str}/{agent_id:str}",
    summary="Agent public view",
    responses=problem_responses(401, 404),
)
async def get_agent(request: Request, tenant: TenantPath, agent_id: AgentPath) -> Response[AgentView]:
    registry = registry_of(request)
    caller = await registry.caller(request)
    entry = await agent_view_entry(registry, tenant, agent_id)
    if entry is None or not can_see(caller, tenant=tenant, visibility=entry.extra[0], shared_with=entry.extra[1]):
        raise not_found("no such agent")
    return Response(entry.body, media_type="application/json")


@get(
    "/v1/agents/{tenant:str}/{agent_id:str}/.well-known/agent-card.json",
    summary="A2A 1.0 public agent card (no schemas, no agent endpoints)",
    responses=problem_responses(401, 404),
)
async def get_agent_card(request: Request, tenant: TenantPath, agent_id: AgentPath) -> Response[dict]:
    registry = registry_of(request)
    caller = await registry.caller(request)
    base_url = f"{registry.public_url(request)}/v1/agents/{tenant}/{agent_id}"
    # The card is the same for everyone who may see it: cached per process (registry.response_cache),
    # the visibility check runs on every request.
    key = ("agent-card", base_url)
    entry = registry.responses.get(key, registry.watcher.cache_seq(), time.monotonic())
    if entry is None:
        async with registry.pool.acquire() as conn:
            seq, next_effective = await capability_queries.snapshot_bounds(conn)
            agent = await agent_queries.get_agent(conn, tenant, agent_id)
            rows = await capability_queries.latest_per_skill(conn, tenant, agent_id, detail=True) if agent else []
        if agent is None:
            raise not_found("no such agent")
        card = public_agent_card(agent["card"], [capability_version(row) for row in rows], base_url=base_url)
        body = msgspec.json.encode(card)
        entry = CachedResponse(
            body=body, etag=etag_of(body), seq=seq,
            expires=expiry(time.monotonic(), datetime.now(timezone.utc), [next_effective]),
            extra=(agent["visibility"], tuple(agent["shared_with"])),
        )
        registry.responses.put(key, entry, registry.watcher.cache_seq())
    visibility, shared_with = entry.extra
    if not can_see(caller, tenant=tenant, visibility=visibility, shared_with=shared_with):
        raise not_found("no such agent")
    return Response(entry.body, media_type="application/json")


@get(
    "/v1/agents/{tenant:str}/{agent_id:str}/skills/{skill_id:str}/versions",
    summary="Every version of a skill, newest first (retired ones marked)",
    responses=problem_responses(401, 404),
)
async def list_skill_versions(
    request: Request, tenant: TenantPath, agent_id: AgentPath, skill_id: SkillPath
) -> VersionList:
    await visible_agent(request, tenant, agent_id)
    rows = await capability_queries.skill_versions(registry_of(request).pool, tenant, agent_id, skill_id)
    now = datetime.now(timezone.utc)
    # Versions not yet effective are not discoverable; they stay hidden here too.
    items = [public_capability(r) for r in rows if r["effective_at"] is None or r["effective_at"] <= now]
    if not items:
        raise not_found("no such skill")
    return VersionList(items=items)


@post(
    "/v1/agents/{tenant:str}/{agent_id:str}/heartbeat",
    status_code=200,
    summary="Renew an instance's liveness lease",
    responses=problem_responses(400, 401, 403, 404),
    dependencies=body_schema(Heartbeat),
)
async def heartbeat(request: Request, tenant: TenantPath, agent_id: AgentPath) -> HeartbeatResponse:
    registry = registry_of(request)
    caller = await registry.require_caller(request, PUBLISH_SCOPE)
    data = await read_body(request, Heartbeat)
    visible = caller.tenant == tenant
    if not visible:  # another tenant's agent: whether it may know the agent exists decides 404 or 403
        agent = await agent_queries.get_agent(registry.pool, tenant, agent_id)
        visible = agent is not None and can_see(
            caller, tenant=tenant, visibility=agent["visibility"], shared_with=agent["shared_with"]
        )
    refusal = check_heartbeat(caller, tenant, agent_visible=visible)
    if refusal is not None:
        raise problem_of_refusal(refusal)
    expires_at = await registry.leases.renew(
        LeaseRenewal(tenant, agent_id, data.instance_id, data.url, data.ttl_seconds, data.load)
    )
    if expires_at is None:  # not registered: the instance registers, then heartbeats again
        raise not_found("no such agent; register it first")
    return HeartbeatResponse(health="healthy", expires_at=expires_at)


ROUTES = [register_agent, get_agent, get_agent_card, list_skill_versions, heartbeat]
