"""HTTP: versions (docs/api.md#lifecycle, #compatibility): the lifecycle (deprecate, retire; the
service is registry.versions.lifecycle) and the compatibility check agents run in CI (the service is
registry.versions.service: the verdict publishing would give)."""

from __future__ import annotations

from typing import Annotated

from litestar import Request, delete, post
from litestar.params import PathParameter

from registry.core.problems import ErrorItem, problem_responses
from registry.core.records import (
    AGENT_ID_PATTERN,
    SKILL_ID_PATTERN,
    TENANT_PATTERN,
    PublicCapability,
    SkillRegistration,
)
from registry.core.wire import Wire
from registry.state import registry_of, trace_id_of
from registry.versions import lifecycle
from registry.versions.lifecycle import VersionKey, Withdrawal
from registry.versions.operations import DEPRECATE, RETIRE, WITHDRAW, Deprecation
from registry.versions.service import compare_skills
from registry.web.authentication import authenticate
from registry.web.operation_door import serve
from registry.web.request_guard import body_schema, read_body

TenantPath = Annotated[str, PathParameter(pattern=TENANT_PATTERN)]
AgentPath = Annotated[str, PathParameter(pattern=AGENT_ID_PATTERN)]
SkillPath = Annotated[str, PathParameter(pattern=SKILL_ID_PATTERN, max_length=128)]
VersionPath = Annotated[str, PathParameter(max_length=128, description="an exact published version")]
_VERSION_PATH = "/v1/agents/{tenant:str}/{agent_id:str}/skills/{skill_id:str}/versions/{version:str}"


class CompatibilityRequest(Wire):
    old: SkillRegistration
    new: SkillRegistration


class CompatibilityReport(Wire):
    compatible: bool
    errors: list[ErrorItem]
    breaking_changes: list[ErrorItem]


@post(
    f"{_VERSION_PATH}/deprecate",
    status_code=200,
    summary="Deprecate a version: still discoverable and delegable, shown with status deprecated",
    responses=problem_responses(401, 403, 404, 410),
    dependencies=body_schema(Deprecation),
)
async def deprecate(
    request: Request,
    tenant: TenantPath,
    agent_id: AgentPath,
    skill_id: SkillPath,
    version: VersionPath,
) -> PublicCapability:
    registry, trace_id = registry_of(request), trace_id_of(request)
    key = VersionKey(tenant, agent_id, skill_id, version)
    return await serve(
        request,
        DEPRECATE,
        lambda caller, data: lifecycle.deprecate(
            registry, caller, key, sunset_at=data.sunset_at, message=data.message, trace_id=trace_id
        ),
    )


@post(
    f"{_VERSION_PATH}/retire",
    status_code=200,
    summary="Retire a version: gone from discovery, cards and ranges; exact requests answer 410; its tickets go inactive",
    responses=problem_responses(401, 403, 404),
)
async def retire(
    request: Request, tenant: TenantPath, agent_id: AgentPath, skill_id: SkillPath, version: VersionPath
) -> PublicCapability:
    registry, trace_id = registry_of(request), trace_id_of(request)
    key = VersionKey(tenant, agent_id, skill_id, version)
    return await serve(request, RETIRE, lambda caller, _: lifecycle.retire(registry, caller, key, trace_id=trace_id))


@delete(
    "/v1/agents/{tenant:str}/{agent_id:str}",
    status_code=200,
    summary="Withdraw an agent: every version retired, its leases ended, the agent absent until registered again",
    description=(
        "Gone at once from discovery, ARD, cards, offers, detail release and new tickets; its tickets go inactive; "
        "its versions and audit trail are kept. Withdrawing again changes nothing and answers the first `withdrawnAt`. "
        "Registering the agent again restores it, with only the versions it publishes that are new."
    ),
    responses=problem_responses(401, 403, 404),
)
async def withdraw(request: Request, tenant: TenantPath, agent_id: AgentPath) -> Withdrawal:
    registry, trace_id = registry_of(request), trace_id_of(request)
    return await serve(
        request, WITHDRAW, lambda caller, _: lifecycle.withdraw(registry, caller, tenant, agent_id, trace_id=trace_id)
    )


@post(
    "/v1/compatibility",
    status_code=200,
    summary="Compare two versions of a skill: the verdict publishing `new` after `old` would get",
    description=(
        "`compatible` is true when publishing `new` after `old` would be accepted: no breaking change, or `new` "
        "is a higher major version. `errors` lists the breaking changes that would refuse it (empty when "
        "accepted); `breakingChanges` lists every breaking change found, also across a major bump."
    ),
    responses=problem_responses(401),
    dependencies=body_schema(CompatibilityRequest),
)
async def compatibility(request: Request) -> CompatibilityReport:
    await authenticate(request)
    data = await read_body(request, CompatibilityRequest)
    comparison = await compare_skills(data.old, data.new)
    return CompatibilityReport(
        compatible=not comparison.refusing,
        errors=[ErrorItem(path=c.path, kind=c.kind, message=c.message) for c in comparison.refusing],
        breaking_changes=[ErrorItem(path=c.path, kind=c.kind, message=c.message) for c in comparison.found],
    )


ROUTES = [deprecate, retire, withdraw, compatibility]
