"""HTTP: a tenant's publisher keys and an agent's registration as signed (docs/api.md#signed-cards).
The service is registry.agents.publisher_keys."""

from __future__ import annotations

from typing import Annotated

from litestar import Request, Response, get, put
from litestar.params import PathParameter

from registry.agents import publisher_keys
from registry.agents.operations import PUBLISHER_KEYS_GET, PUBLISHER_KEYS_PUT, REGISTRATION_BODY
from registry.agents.publisher_keys import PublisherJwks
from registry.core.problems import problem_responses
from registry.core.records import AGENT_ID_PATTERN, TENANT_PATTERN
from registry.state import registry_of, trace_id_of
from registry.web.operation_door import serve
from registry.web.request_guard import body_schema

TenantPath = Annotated[str, PathParameter(pattern=TENANT_PATTERN, description="tenant id")]
AgentPath = Annotated[str, PathParameter(pattern=AGENT_ID_PATTERN, description="agent id")]


@put(
    "/v1/tenants/{tenant:str}/publisher-keys",
    status_code=200,
    summary="Set the tenant's publisher keys (a JWKS of at most 20 Ed25519 or P-256 public keys)",
    description=(
        "Once a tenant has publisher keys, every registration in it must carry a valid publisher "
        "signature (400 signature_required / signature_invalid). An empty `keys` removes them; agents "
        "registered signed still need a signature. Scope registry:admin, own tenant; audited "
        "tenant.keys.updated."
    ),
    responses=problem_responses(400, 401, 403, 413),
    dependencies=body_schema(PublisherJwks),
)
async def put_publisher_keys(request: Request, tenant: TenantPath) -> PublisherJwks:
    registry, trace_id = registry_of(request), trace_id_of(request)
    return await serve(
        request,
        PUBLISHER_KEYS_PUT,
        lambda caller, data: publisher_keys.put_keys(registry, caller, tenant, data, trace_id=trace_id),
    )


@get(
    "/v1/tenants/{tenant:str}/publisher-keys",
    summary="The tenant's publisher keys (scope registry:read, own tenant)",
    responses=problem_responses(401, 403),
)
async def get_publisher_keys(request: Request, tenant: TenantPath) -> PublisherJwks:
    registry, trace_id = registry_of(request), trace_id_of(request)
    return await serve(
        request,
        PUBLISHER_KEYS_GET,
        lambda caller, _: publisher_keys.get_keys(registry, caller, tenant, trace_id=trace_id),
    )


@get(
    "/v1/agents/{tenant:str}/{agent_id:str}/registration",
    summary="The agent's last applied registration body, byte for byte as signed",
    description=(
        "For re-verifying the publisher's signature: each signature covers the RFC 8785 form of "
        '`{"agentId", "registration": the body without signatures, "tenant"}` with this path\'s tenant '
        "and agent id. Own tenant, scope audit:read or registry:publish."
    ),
    responses=problem_responses(401, 403, 404),
)
async def get_registration(request: Request, tenant: TenantPath, agent_id: AgentPath) -> Response[dict]:
    registry, trace_id = registry_of(request), trace_id_of(request)
    body = await serve(
        request,
        REGISTRATION_BODY,
        lambda caller, _: publisher_keys.registration_body(registry, caller, tenant, agent_id, trace_id=trace_id),
    )
    return Response(body, media_type="application/json")  # type: ignore[arg-type]  # the stored JSON bytes


ROUTES = [put_publisher_keys, get_publisher_keys, get_registration]
