"""HTTP: registering agents, reading their public views and A2A cards, and liveness heartbeats.
The service is registry.agents.service."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

import msgspec
from litestar import Request, Response, get, post, put
from litestar.background_tasks import BackgroundTask
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import PathParameter

from registry.agents import service as agents
from registry.agents.card_signing import jwks_url
from registry.agents.operations import HEARTBEAT, REGISTER, Heartbeat
from registry.agents.registration import CandidateRef, VersionRef
from registry.core.problems import ProblemError, problem_responses
from registry.core.records import (
    AGENT_ID_PATTERN,
    SKILL_ID_PATTERN,
    TENANT_PATTERN,
    AgentRegistration,
    Health,
    PublicCapability,
)
from registry.core.wire import Wire
from registry.discovery.service import AgentView
from registry.state import registry_of, trace_id_of
from registry.web.authentication import optional_caller
from registry.web.operation_door import serve
from registry.web.request_guard import body_schema

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
    # New versions held back until a replay passes (docs/api.md#the-replay-gate).
    candidates: list[CandidateRef]


class HeartbeatResponse(Wire):
    health: Health
    expires_at: datetime


class VersionList(Wire):
    items: list[PublicCapability]


class _SkillRefs(msgspec.Struct):
    """Only the skill ids and versions of a registration body (everything else is skipped unread)."""

    skills: list[VersionRef] = []


async def _unchanged_registration(request: Request) -> Response | None:
    """Before the body is decoded: an unchanged re-registration is answered from one indexed read
    (registry.agents.service.unchanged_registration); anything else goes on to the handler."""
    tenant, agent_id = request.path_params.get("tenant", ""), request.path_params.get("agent_id", "")
    if not (_TENANT_RE.match(tenant) and _AGENT_RE.match(agent_id)):
        return None
    registry = registry_of(request)
    try:
        caller = await optional_caller(request)
    except ProblemError:
        return None
    unchanged = await agents.unchanged_registration(registry, caller, tenant, agent_id, await request.body())
    if unchanged is None:
        return None
    entry, skills = unchanged
    return Response(
        b'{"agent":' + entry.body + b',"published":[],"unchanged":' + _encoder.encode(skills) + b',"candidates":[]}',
        media_type="application/json",
    )


@put(
    "/v1/agents/{tenant:str}/{agent_id:str}",
    status_code=200,
    summary="Register or update an agent and publish its capability versions",
    before_request=_unchanged_registration,
    responses={
        201: ResponseSpec(
            data_container=RegistrationResponse,
            description="The agent is new, or the body published something new (200: nothing changed)",
        ),
        **problem_responses(400, 401, 403, 409, 413),
    },
    dependencies=body_schema(AgentRegistration),
)
async def register_agent(request: Request, tenant: TenantPath, agent_id: AgentPath) -> Response[RegistrationResponse]:
    registry, trace_id = registry_of(request), trace_id_of(request)
    raw = await request.body()
    result = await serve(
        request,
        REGISTER,
        lambda caller, data: agents.register(registry, caller, tenant, agent_id, data, raw, trace_id=trace_id),
    )
    registry_url = registry.public_url()
    entry, sign_card = await agents.registered_view(
        registry,
        tenant,
        agent_id,
        base_url=f"{registry_url}/v1/agents/{tenant}/{agent_id}",
        jku=jwks_url(registry_url),
    )
    refs = _encoder.encode(
        {"published": result.published, "unchanged": result.unchanged, "candidates": result.candidates}
    )
    # JSON bytes of the annotated RegistrationResponse, which litestar documents in OpenAPI.
    return Response(
        b'{"agent":' + entry.body + b"," + refs[1:],  # type: ignore[arg-type]
        status_code=201 if result.created else 200,
        media_type="application/json",
        background=BackgroundTask(sign_card),
    )


@get(
    "/v1/agents/{tenant:str}/{agent_id:str}",
    summary="Agent public view",
    responses=problem_responses(401, 404),
)
async def get_agent(request: Request, tenant: TenantPath, agent_id: AgentPath) -> Response[AgentView]:
    registry = registry_of(request)
    entry = await agents.visible_view(registry, await optional_caller(request), tenant, agent_id)
    return Response(entry.body, media_type="application/json")  # type: ignore[arg-type]  # JSON bytes of AgentView


@get(
    "/v1/agents/{tenant:str}/{agent_id:str}/.well-known/agent-card.json",
    summary="A2A 1.0 public agent card (no schemas, no agent endpoints)",
    responses=problem_responses(401, 404),
)
async def get_agent_card(request: Request, tenant: TenantPath, agent_id: AgentPath) -> Response[dict]:
    registry = registry_of(request)
    caller = await optional_caller(request)
    registry_url = registry.public_url()
    entry = await agents.visible_card(
        registry,
        caller,
        tenant,
        agent_id,
        base_url=f"{registry_url}/v1/agents/{tenant}/{agent_id}",
        jku=jwks_url(registry_url),
    )
    return Response(entry.body, media_type="application/json")  # type: ignore[arg-type]  # JSON bytes of the card


@get(
    "/v1/agents/{tenant:str}/{agent_id:str}/skills/{skill_id:str}/versions",
    summary="Every version of a skill, newest first (retired ones marked)",
    responses=problem_responses(401, 404),
)
async def list_skill_versions(
    request: Request, tenant: TenantPath, agent_id: AgentPath, skill_id: SkillPath
) -> VersionList:
    registry = registry_of(request)
    items = await agents.skill_versions(registry, await optional_caller(request), tenant, agent_id, skill_id)
    return VersionList(items=items)


@post(
    "/v1/agents/{tenant:str}/{agent_id:str}/heartbeat",
    status_code=200,
    summary="Renew an instance's liveness lease",
    responses=problem_responses(400, 401, 403, 404, 409),
    dependencies=body_schema(Heartbeat),
)
async def heartbeat(request: Request, tenant: TenantPath, agent_id: AgentPath) -> HeartbeatResponse:
    registry, trace_id = registry_of(request), trace_id_of(request)
    expires_at = await serve(
        request,
        HEARTBEAT,
        lambda caller, data: agents.heartbeat(
            registry,
            caller,
            tenant,
            agent_id,
            instance_id=data.instance_id,
            url=data.url,
            ttl_seconds=data.ttl_seconds,
            load=data.load,
            trace_id=trace_id,
        ),
    )
    return HeartbeatResponse(health="healthy", expires_at=expires_at)


ROUTES = [register_agent, get_agent, get_agent_card, list_skill_versions, heartbeat]
