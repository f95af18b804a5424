"""HTTP: delegation tickets (mint, introspect, revoke, list) and approvals (docs/api.md#tickets, #ticket-claims).

The orchestration lives in registry.delegation, the rules in auth.policy, the JWT in auth.tickets.
Bodies are read after the caller is authenticated (registry.request_guard), so that every refusal of
an authenticated caller, a malformed body included, is audited as `ticket.denied`; a request without
a valid caller token is refused without an audit event (counted in /metrics).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec
from litestar import Request, Response, get, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import HeaderParameter, PathParameter, QueryParameter

from auth.policy import REGISTRY_ADMIN_SCOPE, check_approval_decider
from auth.tickets import InvalidTicket
from db import approvals as approval_queries
from db import grants as grant_queries
from db import tickets as ticket_queries
from db.group_commit import WriteScope
from registry.audit import AuditEvent
from registry.delegation import (
    AlreadyCollected,
    ApprovalView,
    PRINTABLE,
    TicketRequestBody,
    TicketResponse,
    approval_request_view,
    evaluate,
    mint,
    refuse,
    refusal_error,
    request_ticket,
    stored_ticket_request,
    ticket_request,
    verified_ticket,
)
from registry.problems import (
    ProblemError,
    insufficient_scope,
    not_found,
    problem_responses,
    tenant_mismatch,
)
from registry.grants import GrantPage, grant_page, grant_position
from registry.request_guard import body_schema, read_body
from registry.service import registry_of, trace_id_of
from registry.tracing import current_request_id
from registry.wire import Wire

_JTI = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
JtiPath = Annotated[str, PathParameter(pattern=_JTI.pattern, description="ticket id (jti)")]
ApprovalPath = Annotated[str, PathParameter(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="approval id")]
MAX_LIMIT = 200


class IntrospectionRequest(Wire, forbid_unknown_fields=True):
    ticket: Annotated[str, msgspec.Meta(max_length=16384)]


class RevocationResponse(Wire):
    jti: str
    revoked: list[str]




@post(
    "/v1/tickets",
    status_code=201,
    summary="Mint a delegation ticket (or request approval for it)",
    description=(
        "First tickets narrow the caller's scopes to the capability's; with `parentTicket` the caller "
        "(the parent's audience) re-delegates a narrower ticket. `requiresApproval` capabilities answer "
        "202 with an approval id. `Idempotency-Key` replays the first answer for the same body (200)."
    ),
    dependencies=body_schema(TicketRequestBody),
    responses={
        200: ResponseSpec(data_container=TicketResponse, generate_examples=False,
                          description="Idempotent replay of an earlier ticket"),
        202: ResponseSpec(data_container=ApprovalView, generate_examples=False,
                          description="The capability requires approval: pending"),
        **problem_responses(400, 401, 403, 404, 409, 410),
    },
)
async def create_ticket(
    request: Request,
    idempotency_key: Annotated[str | None, HeaderParameter(
        name="Idempotency-Key", required=False, description="replays the first answer for the same body within 24 h",
    )] = None,
) -> Response[TicketResponse]:
    registry = registry_of(request)
    trace_id = trace_id_of(request)
    caller = await registry.require_caller(request)
    try:
        body = await read_body(request, TicketRequestBody)
    except ProblemError as error:
        raise await refuse(registry, error, caller=caller, trace_id=trace_id) from None
    answer = await request_ticket(registry, caller, body, idempotency_key=idempotency_key, trace_id=trace_id)
    return Response(answer.body, status_code=answer.status)


@post(
    "/v1/tickets/introspect",
    status_code=200,
    summary="Introspect a ticket (RFC 7662 style)",
    description=(
        "`{\"active\": true, ...claims}` for a valid, unexpired, unrevoked ticket whose capability version "
        "is not retired; `{\"active\": false}` otherwise, and for callers outside the audience's tenant."
    ),
    dependencies=body_schema(IntrospectionRequest),
    responses=problem_responses(400, 401),
)
async def introspect(request: Request) -> dict[str, Any]:
    registry = registry_of(request)
    caller = await registry.require_caller(request)
    body = await read_body(request, IntrospectionRequest)
    inactive = {"active": False}
    try:
        claims = await verified_ticket(registry, body.ticket)
    except InvalidTicket:
        return inactive
    audience_tenant = claims.aud.partition("/")[0]
    if caller.tenant != audience_tenant and not (caller.holds("audit:read") and caller.tenant == claims.tenant):
        return inactive
    state = await ticket_queries.ticket_state(registry.pool, claims.jti)
    if state is None or state["chain_revoked"] or state["capability_status"] == "retired":
        return inactive
    return {"active": True, **claims.as_dict()}


@post(
    "/v1/tickets/{jti:str}/revoke",
    status_code=200,
    summary="Revoke a ticket and every ticket re-delegated from it",
    responses=problem_responses(401, 403, 404),
)
async def revoke_ticket(request: Request, jti: JtiPath) -> RevocationResponse:
    registry = registry_of(request)
    trace_id = trace_id_of(request)
    caller = await registry.require_caller(request)
    ticket = await ticket_queries.get_ticket(registry.pool, jti)
    if ticket is None:
        raise not_found("no such ticket")
    is_minter = caller.principal == ticket["actor"]
    is_admin = caller.tenant == ticket["tenant"] and caller.holds(REGISTRY_ADMIN_SCOPE)
    if not (is_minter or is_admin):
        # Tickets are seen by their capability's tenant and by the minter's tenant; others learn nothing.
        if caller.tenant not in (ticket["tenant"], ticket["actor_tenant"]):
            raise not_found("no such ticket")
        if caller.tenant == ticket["tenant"]:
            error = insufficient_scope(REGISTRY_ADMIN_SCOPE)
        else:
            error = ProblemError(403, "tenant_mismatch", "only the minter or an admin of the capability's tenant may revoke it")
        raise await refuse(registry, error, caller=caller, tenant=ticket["tenant"], ref=ticket["ref"],
                           scopes=ticket["scopes"], on_behalf_of=ticket["on_behalf_of"], trace_id=trace_id,
                           event_type="ticket.revoked")
    request_id = current_request_id()  # the write runs in the group-commit task

    async def write(scope: WriteScope) -> list:
        await ticket_queries.lock_tree(scope.conn, ticket["root_jti"])
        revoked = await ticket_queries.revoke_tree(scope.conn, jti)
        revoked.sort(key=lambda row: (row["depth"], row["jti"]))
        scope.audit(*(
            AuditEvent(
                type="ticket.revoked", outcome="allowed", tenant=row["tenant"], actor_tenant=caller.tenant,
                actor=caller.sub, actor_issuer=caller.issuer, request_id=request_id,
                on_behalf_of=row["on_behalf_of"], ref=row["ref"], scopes=list(row["scopes"]),
                # Descendants are revoked because their ancestor was.
                reason=None if row["jti"] == jti else "ancestor_revoked", trace_id=trace_id,
            )
            for row in revoked
        ))
        return revoked

    revoked = await registry.writes.run(write)
    return RevocationResponse(jti=jti, revoked=[row["jti"] for row in revoked])


@get(
    "/v1/tickets",
    summary="Tickets of the caller's tenant (as capability tenant or as actor tenant); needs audit:read",
    responses=problem_responses(400, 401, 403),
)
async def list_tickets(
    request: Request,
    active: Annotated[bool | None, QueryParameter(description="true: only active tickets; false: only inactive ones")] = None,
    actor: Annotated[str | None, QueryParameter(max_length=200, pattern=PRINTABLE, description="minting principal 'tenant/sub', or a bare sub")] = None,
    skill: Annotated[str | None, QueryParameter(max_length=128, pattern=PRINTABLE, description="capability id")] = None,
    granted_scope: Annotated[str | None, QueryParameter(name="scope", max_length=128, pattern=PRINTABLE, description="tickets granting this scope")] = None,
    limit: Annotated[int, QueryParameter(ge=1, le=MAX_LIMIT, description=f"page size, at most {MAX_LIMIT}")] = 50,
    cursor: Annotated[str | None, QueryParameter(max_length=512)] = None,
) -> GrantPage:
    registry = registry_of(request)
    caller = await registry.require_caller(request, "audit:read")
    # The grant report's query and shape: one definition of "active" for both listings.
    rows = await grant_queries.tenant_grants(
        registry.pool, viewer_tenant=caller.tenant, active=active, actor=actor, skill=skill, scope=granted_scope,
        after=grant_position(cursor) if cursor else None, limit=limit + 1,
    )
    return grant_page(rows, limit)


# ---------------------------------------------------------------------------
# Approvals


def _approval_view(approval, ticket: TicketResponse | None = None) -> ApprovalView:
    return ApprovalView(
        approval_id=approval["approval_id"], status=approval["status"],
        request=approval_request_view(approval["request"]), ticket=ticket,
    )


async def _decide(request: Request, approval_id: str, decision: str) -> ApprovalView:
    registry = registry_of(request)
    trace_id = trace_id_of(request)
    caller = await registry.require_caller(request)
    approval = await approval_queries.get_approval(registry.pool, approval_id)
    if approval is None or (caller.principal != approval["requester"] and caller.tenant != approval["tenant"]):
        raise not_found("no such approval")
    audit = dict(caller=caller, tenant=approval["tenant"], ref=approval["ref"], scopes=approval["scopes"],
                 on_behalf_of=approval["on_behalf_of"], trace_id=trace_id, event_type="approval.decided")
    refusal = check_approval_decider(caller, approval["requester"], approval["tenant"])
    if refusal is not None:
        error = refusal_error(refusal)
        if refusal.code == "insufficient_scope":
            error = insufficient_scope(REGISTRY_ADMIN_SCOPE)
        elif refusal.code == "tenant_mismatch":
            error = tenant_mismatch()
        raise await refuse(registry, error, **audit)
    request_id = current_request_id()  # the write runs in the group-commit task

    async def write(scope: WriteScope) -> None:
        if await approval_queries.decide(scope.conn, approval_id, decision, caller.principal):
            scope.audit(AuditEvent(
                type="approval.decided", outcome="allowed" if decision == "approved" else "denied",
                tenant=approval["tenant"], actor_tenant=caller.tenant, actor=caller.sub,
                actor_issuer=caller.issuer, request_id=request_id,
                on_behalf_of=approval["on_behalf_of"], ref=approval["ref"], scopes=list(approval["scopes"]),
                # A denial by the approver, as opposed to a refused attempt to decide.
                reason=None if decision == "approved" else "approval_denied", trace_id=trace_id,
            ))

    await registry.writes.run(write)
    # Deciding again, or too late, changes nothing: the answer shows the approval as it stands.
    approval = await approval_queries.get_approval(registry.pool, approval_id)
    return _approval_view(approval)


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
    registry = registry_of(request)
    trace_id = trace_id_of(request)
    caller = await registry.require_caller(request)
    approval = await approval_queries.get_approval(registry.pool, approval_id)
    is_requester = approval is not None and caller.principal == approval["requester"]
    if approval is None or not (
        is_requester or (caller.tenant == approval["tenant"] and caller.holds(REGISTRY_ADMIN_SCOPE))
    ):
        raise not_found("no such approval")
    if not is_requester or approval["status"] != "approved":
        return _approval_view(approval)
    # Collect: the ticket is minted now, for the version that was approved, with every check re-run
    # (the parent may have been revoked, the version retired, the requester's scopes changed).
    body, parent_token = stored_ticket_request(approval)
    req = ticket_request(body, max_ttl=registry.settings.ticket_max_ttl)
    plan = await evaluate(registry, caller, req, parent_token, trace_id=trace_id)
    try:
        ticket = await mint(registry, plan, trace_id=trace_id, approval_id=approval_id)
    except AlreadyCollected:
        return _approval_view(await approval_queries.get_approval(registry.pool, approval_id))
    return _approval_view(await approval_queries.get_approval(registry.pool, approval_id), ticket)


ROUTES = [create_ticket, introspect, revoke_ticket, list_tickets, approve, deny, get_approval]
