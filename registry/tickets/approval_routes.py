"""HTTP: approvals of ticket requests for `requiresApproval` capabilities (docs/api.md#approvals):
approve, deny, and read (the requester's first read after approval collects the ticket).
The service is registry.tickets.approvals."""

from __future__ import annotations

from typing import Annotated

from litestar import Request, get, post
from litestar.params import PathParameter

from auth.tickets import ID_PATTERN
from registry.core.problems import problem_responses
from registry.state import registry_of, trace_id_of
from registry.tickets import approvals
from registry.tickets.approval_requests import ApprovalView
from registry.tickets.operations import COLLECT, DECIDE
from registry.web.operation_door import serve

ApprovalPath = Annotated[str, PathParameter(pattern=ID_PATTERN, description="approval id")]


async def _decide(request: Request, approval_id: str, verdict: approvals.Verdict) -> ApprovalView:
    registry, trace_id = registry_of(request), trace_id_of(request)
    return await serve(
        request, DECIDE, lambda caller, _: approvals.decide(registry, caller, approval_id, verdict, trace_id=trace_id)
    )


@post(
    "/v1/approvals/{approval_id:str}/approve",
    status_code=200,
    summary="Approve a pending ticket request (registry:admin of the capability's tenant, not the requester)",
    responses=problem_responses(401, 403, 404),
)
async def approve(request: Request, approval_id: ApprovalPath) -> ApprovalView:
    return await _decide(request, approval_id, "approved")


@post(
    "/v1/approvals/{approval_id:str}/deny",
    status_code=200,
    summary="Deny a pending ticket request (registry:admin of the capability's tenant, not the requester)",
    responses=problem_responses(401, 403, 404),
)
async def deny(request: Request, approval_id: ApprovalPath) -> ApprovalView:
    return await _decide(request, approval_id, "denied")


@get(
    "/v1/approvals/{approval_id:str}",
    summary="An approval; the requester's first fetch after approval carries the ticket",
    responses=problem_responses(401, 403, 404, 410),
)
async def get_approval(request: Request, approval_id: ApprovalPath) -> ApprovalView:
    registry, trace_id = registry_of(request), trace_id_of(request)
    return await serve(
        request, COLLECT, lambda caller, _: approvals.read(registry, caller, approval_id, trace_id=trace_id)
    )


ROUTES = [approve, deny, get_approval]
