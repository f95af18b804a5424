"""HTTP: versions (docs/api.md#lifecycle, #compatibility): the lifecycle (deprecate, retire; the
service is registry.versions.lifecycle) and the compatibility check agents run in CI (the service is
registry.versions.service: the verdict publishing would give)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec
from litestar import Request, post
from litestar.params import PathParameter

from registry.core.date_times import check_date_time
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
from registry.versions.lifecycle import VersionKey
from registry.versions.service import compare_skills
from registry.web.authentication import authenticate
from registry.web.request_guard import body_schema, read_body

TenantPath = Annotated[str, PathParameter(pattern=TENANT_PATTERN)]
AgentPath = Annotated[str, PathParameter(pattern=AGENT_ID_PATTERN)]
SkillPath = Annotated[str, PathParameter(pattern=SKILL_ID_PATTERN, max_length=128)]
VersionPath = Annotated[str, PathParameter(max_length=128, description="an exact published version")]
_VERSION_PATH = "/v1/agents/{tenant:str}/{agent_id:str}/skills/{skill_id:str}/versions/{version:str}"


class Deprecation(Wire, forbid_unknown_fields=True):
    sunset_at: datetime | None = None
    message: Annotated[str, msgspec.Meta(max_length=1024)] | None = None

    def __post_init__(self) -> None:
        check_date_time("sunsetAt", self.sunset_at)


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
    registry = registry_of(request)
    caller = await authenticate(request)
    data = await read_body(request, Deprecation)
    return await lifecycle.deprecate(
        registry,
        caller,
        VersionKey(tenant, agent_id, skill_id, version),
        sunset_at=data.sunset_at,
        message=data.message,
        trace_id=trace_id_of(request),
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
    registry = registry_of(request)
    caller = await authenticate(request)
    return await lifecycle.retire(
        registry, caller, VersionKey(tenant, agent_id, skill_id, version), trace_id=trace_id_of(request)
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


ROUTES = [deprecate, retire, compatibility]
