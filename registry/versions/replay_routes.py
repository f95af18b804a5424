"""HTTP: the replay gate (docs/api.md#the-replay-gate): submitting a candidate's replay report and
listing a version's verdicts. The service is registry.versions.replays."""

from __future__ import annotations

from typing import Annotated

from litestar import Request, get, post
from litestar.params import PathParameter

from registry.core.problems import problem_responses
from registry.core.records import AGENT_ID_PATTERN, SKILL_ID_PATTERN, TENANT_PATTERN
from registry.state import registry_of, trace_id_of
from registry.versions import replays
from registry.versions.lifecycle import VersionKey
from registry.versions.operations import REPLAY_LIST, REPLAY_SUBMIT
from registry.versions.replay_judge import ReplayReport
from registry.versions.replays import ReplayList, ReplayVerdict
from registry.web.operation_door import serve
from registry.web.request_guard import body_schema

TenantPath = Annotated[str, PathParameter(pattern=TENANT_PATTERN)]
AgentPath = Annotated[str, PathParameter(pattern=AGENT_ID_PATTERN)]
SkillPath = Annotated[str, PathParameter(pattern=SKILL_ID_PATTERN, max_length=128)]
VersionPath = Annotated[str, PathParameter(max_length=128, description="the candidate's exact version")]
_REPLAYS_PATH = "/v1/agents/{tenant:str}/{agent_id:str}/skills/{skill_id:str}/versions/{version:str}/replays"


@post(
    _REPLAYS_PATH,
    status_code=200,
    summary="Submit a candidate's replay report: a pass releases it, a failure is 422 replay_failed",
    description=(
        "Scope `registry:attest`, own tenant. The report holds the results of running the baseline's "
        "fixtures against the candidate. Each fixture is judged: `missing`, `side_effect` (observed above "
        "`expect.sideEffect`: a hard gate), `outcome`, `output` (contains `expect.output` and validates "
        "against the candidate's outputSchema). All pass: 200 and the version is active at once. Any "
        "failure: 422 `replay_failed`, one error per failing fixture. Not a candidate: 409 `not_candidate`."
    ),
    responses=problem_responses(400, 401, 403, 404, 409, 413, 422),
    dependencies=body_schema(ReplayReport),
)
async def submit_replay(
    request: Request,
    tenant: TenantPath,
    agent_id: AgentPath,
    skill_id: SkillPath,
    version: VersionPath,
) -> ReplayVerdict:
    registry, trace_id = registry_of(request), trace_id_of(request)
    key = VersionKey(tenant, agent_id, skill_id, version)
    return await serve(
        request, REPLAY_SUBMIT, lambda caller, data: replays.submit(registry, caller, key, data, trace_id=trace_id)
    )


@get(
    _REPLAYS_PATH,
    summary="A version's judged replay reports, newest first (own tenant, registry:read)",
    responses=problem_responses(400, 401, 403, 404),
)
async def list_replays(
    request: Request,
    tenant: TenantPath,
    agent_id: AgentPath,
    skill_id: SkillPath,
    version: VersionPath,
) -> ReplayList:
    registry, trace_id = registry_of(request), trace_id_of(request)
    key = VersionKey(tenant, agent_id, skill_id, version)
    return await serve(
        request, REPLAY_LIST, lambda caller, _: replays.verdicts(registry, caller, key, trace_id=trace_id)
    )


ROUTES = [submit_replay, list_replays]
