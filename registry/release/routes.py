"""HTTP: detail release (docs/api.md#detail-release) — a capability version's schemas and endpoints, the A2A
extended agent card, tool exports and argument validation, each only after the visibility,
retirement, scope and data-region checks, each release and refusal audited before answering.

Anonymous callers are 401 and leave no audit event: the log records what identified callers were
given or refused, and an unauthenticated request would let anyone grow it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from litestar import Request, get, post
from litestar.params import PathParameter, QueryParameter

from registry.agents.card_signing import jwks_url
from registry.core.problems import problem_responses
from registry.core.records import AGENT_ID_PATTERN, SKILL_ID_PATTERN, TENANT_PATTERN
from registry.core.wire import Wire
from registry.release import service as release
from registry.release.arguments import Mode, ValidationReport, validate_arguments_bounded
from registry.release.operations import DETAIL, EXTENDED_CARD
from registry.release.service import CapabilityDetail, Released, detail_of, tool_definition
from registry.state import registry_of, trace_id_of
from registry.web.authentication import authenticate
from registry.web.operation_door import serve
from registry.web.request_guard import body_schema, read_body

TenantPath = Annotated[str, PathParameter(pattern=TENANT_PATTERN, description="tenant id")]
AgentPath = Annotated[str, PathParameter(pattern=AGENT_ID_PATTERN, description="agent id")]
SkillPath = Annotated[str, PathParameter(pattern=SKILL_ID_PATTERN, max_length=128, description="skill (capability) id")]
VersionPath = Annotated[
    str,
    PathParameter(
        min_length=1,
        max_length=256,
        description="an exact version, `latest`, or a range (`^2`, `~2.1`, `>=2,<3`; URL-encoded)",
    ),
]

_VERSION_PATH = "/v1/agents/{tenant:str}/{agent_id:str}/skills/{skill_id:str}/versions/{version:str}"
_GATED = problem_responses(400, 401, 403, 404, 410)


async def authenticated_release(request: Request, tenant: str, agent_id: str, skill_id: str, version: str) -> Released:
    """Authenticate, then release through the service (registry.release.service), at the boundary."""
    registry, trace_id = registry_of(request), trace_id_of(request)
    return await serve(
        request,
        DETAIL,
        lambda caller, _: release.release(
            registry, caller, tenant=tenant, agent_id=agent_id, skill_id=skill_id, version=version, trace_id=trace_id
        ),
    )


@get(
    _VERSION_PATH,
    summary="Capability detail: schemas, examples and endpoints (tenant, scope and region checks)",
    description=(
        "Public fields plus `inputSchema`, `outputSchema`, `examples` and `endpoints` = "
        "`{interfaces: [the agent's own A2A supportedInterfaces], instances: [{instanceId, url, expiresAt, load, lastSeenAt}] "
        "(live heartbeat leases)}`. Checks in order: visible (404), exact retired version (410), every "
        "capability scope held (403 insufficient_scope with missingScopes), token `regions` intersect "
        "`dataRegions` when declared (403 data_location_denied). Every answer is audited."
    ),
    responses=_GATED,
)
async def get_capability_detail(
    request: Request, tenant: TenantPath, agent_id: AgentPath, skill_id: SkillPath, version: VersionPath
) -> CapabilityDetail:
    released = await authenticated_release(request, tenant, agent_id, skill_id, version)
    return detail_of(released)


@get(
    "/v1/agents/{tenant:str}/{agent_id:str}/extendedAgentCard",
    summary="A2A 1.0 extended agent card: only the skills the caller passes, schemas in the capreg extension",
    description=(
        "The path the A2A HTTP+JSON transport requests (`GET {interface url}/extendedAgentCard`). "
        "Lists the latest in-force version of each skill whose checks the caller passes, with the agent's "
        "own interfaces. A caller that passes none gets a card with no skills and only the registry as "
        "interface. An agent the caller may not see is 404."
    ),
    responses=problem_responses(401, 404),
)
async def get_extended_agent_card(request: Request, tenant: TenantPath, agent_id: AgentPath) -> dict:
    return await serve_extended_card(request, tenant, agent_id)


async def serve_extended_card(request: Request, tenant: str, agent_id: str) -> dict:
    """The one path to the extended card, for both A2A bindings (HTTP+JSON here, JSON-RPC in
    registry.a2a.routes): authenticate, then release through the service, audited there."""
    registry, trace_id = registry_of(request), trace_id_of(request)
    registry_url = registry.public_url()
    return await serve(
        request,
        EXTENDED_CARD,
        lambda caller, _: release.extended_card(
            registry,
            caller,
            tenant=tenant,
            agent_id=agent_id,
            base_url=f"{registry_url}/v1/agents/{tenant}/{agent_id}",
            jku=jwks_url(registry_url),
            trace_id=trace_id,
        ),
    )


@get(
    _VERSION_PATH + "/tool",
    summary="The capability as an OpenAI function-calling tool or an MCP tool definition",
    responses=_GATED,
)
async def get_capability_tool(
    request: Request,
    tenant: TenantPath,
    agent_id: AgentPath,
    skill_id: SkillPath,
    version: VersionPath,
    format: Annotated[Literal["openai", "mcp"], QueryParameter(description="openai or mcp")],  # noqa: A002
) -> dict:
    released = await authenticated_release(request, tenant, agent_id, skill_id, version)
    return tool_definition(released, format)


class ValidateRequest(Wire, forbid_unknown_fields=True):
    """Arguments as a JSON object, or model output text to take the first JSON object from."""

    arguments: dict[str, Any] | str
    mode: Mode = "strict"


@post(
    _VERSION_PATH + "/validate",
    status_code=200,
    summary="Validate tool-call arguments against the capability's input schema",
    description=(
        "`arguments` is a JSON object, or text from which the first JSON object is taken (prose and "
        "Markdown fences skipped). Text without a JSON object answers 200 with `valid: false`. "
        "Strict: any violation is invalid. Lenient: defaults filled in, unknown properties dropped "
        "and reported as warnings."
    ),
    responses=problem_responses(400, 401, 403, 404, 410, 413),
    dependencies=body_schema(ValidateRequest),
)
async def validate_capability_arguments(
    request: Request,
    tenant: TenantPath,
    agent_id: AgentPath,
    skill_id: SkillPath,
    version: VersionPath,
) -> ValidationReport:
    await authenticate(request)  # 401 before the body is looked at
    data = await read_body(request, ValidateRequest)
    released = await authenticated_release(request, tenant, agent_id, skill_id, version)
    return await validate_arguments_bounded(released.cap.input_schema, data.arguments, data.mode)


ROUTES = [get_capability_detail, get_extended_agent_card, get_capability_tool, validate_capability_arguments]
