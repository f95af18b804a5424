"""HTTP: delegation tickets (mint, introspect, revoke, list) (docs/api.md#tickets, #ticket-claims).

The service is registry.tickets.service (introspection and revocation: registry.tickets.introspection,
registry.tickets.revocation), the rules auth.policy, the JWT auth.tickets; approvals are
registry.tickets.approval_routes. Bodies are read after the caller is authenticated
(registry.web.request_guard), so that every refusal of an authenticated caller, a malformed body
included, is audited as `ticket.denied`; a request without a valid caller token is refused without
an audit event (counted in /metrics).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, get, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import HeaderParameter, PathParameter, QueryParameter

from auth.tickets import ID_PATTERN
from registry.core.problems import problem_responses
from registry.core.wire import Wire
from registry.operations.boundary import run
from registry.state import registry_of, trace_id_of
from registry.tickets import service as tickets
from registry.tickets.approval_requests import ApprovalView
from registry.tickets.grants import GrantPage, grant_listing
from registry.tickets.introspection import introspect as introspect_ticket
from registry.tickets.minting import TicketResponse
from registry.tickets.operations import LIST, MINT, REVOKE
from registry.tickets.request import PRINTABLE, TicketRequestBody
from registry.tickets.revocation import revoke
from registry.web.authentication import authenticate
from registry.web.operation_door import serve
from registry.web.request_guard import body_schema, read_body

JtiPath = Annotated[str, PathParameter(pattern=ID_PATTERN, description="ticket id (jti)")]
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
        200: ResponseSpec(
            data_container=TicketResponse, generate_examples=False, description="Idempotent replay of an earlier ticket"
        ),
        202: ResponseSpec(
            data_container=ApprovalView,
            generate_examples=False,
            description="The capability requires approval: pending",
        ),
        **problem_responses(400, 401, 403, 404, 409, 410),
    },
)
async def create_ticket(
    request: Request,
    idempotency_key: Annotated[
        str | None,
        HeaderParameter(
            name="Idempotency-Key",
            required=False,
            description="replays the first answer for the same body within 24 h",
        ),
    ] = None,
) -> Response[TicketResponse]:
    registry = registry_of(request)
    trace_id = trace_id_of(request)
    caller = await authenticate(request)

    async def step() -> tickets.TicketAnswer:
        body = await read_body(request, TicketRequestBody)
        return await tickets.request_ticket(registry, caller, body, idempotency_key=idempotency_key, trace_id=trace_id)

    answer = await run(registry, MINT, caller, step, trace_id=trace_id)
    # The body is a TicketResponse (or a pending approval) already as JSON builtins; the annotation
    # names the ticket, which litestar documents in OpenAPI.
    return Response(answer.body, status_code=answer.status)  # type: ignore[arg-type]


@post(
    "/v1/tickets/introspect",
    status_code=200,
    summary="Introspect a ticket (RFC 7662 style)",
    description=(
        '`{"active": true, ...claims}` for a valid, unexpired, unrevoked ticket whose capability version '
        'is not retired; `{"active": false}` otherwise, and for callers outside the audience\'s tenant.'
    ),
    dependencies=body_schema(IntrospectionRequest),
    responses=problem_responses(400, 401),
)
async def introspect(request: Request) -> dict[str, Any]:
    registry = registry_of(request)
    caller = await authenticate(request)
    body = await read_body(request, IntrospectionRequest)
    return await introspect_ticket(registry, caller, body.ticket)


@post(
    "/v1/tickets/{jti:str}/revoke",
    status_code=200,
    summary="Revoke a ticket and every ticket re-delegated from it",
    responses=problem_responses(401, 403, 404),
)
async def revoke_ticket(request: Request, jti: JtiPath) -> RevocationResponse:
    registry, trace_id = registry_of(request), trace_id_of(request)
    revoked = await serve(request, REVOKE, lambda caller, _: revoke(registry, caller, jti, trace_id=trace_id))
    return RevocationResponse(jti=jti, revoked=revoked)


@get(
    "/v1/tickets",
    summary="Tickets of the caller's tenant (as capability tenant or as actor tenant); needs audit:read",
    responses=problem_responses(400, 401, 403),
)
async def list_tickets(
    request: Request,
    active: Annotated[
        bool | None, QueryParameter(description="true: only active tickets; false: only inactive ones")
    ] = None,
    actor: Annotated[
        str | None,
        QueryParameter(max_length=200, pattern=PRINTABLE, description="minting principal 'tenant/sub', or a bare sub"),
    ] = None,
    skill: Annotated[str | None, QueryParameter(max_length=128, pattern=PRINTABLE, description="capability id")] = None,
    granted_scope: Annotated[
        str | None,
        QueryParameter(name="scope", max_length=128, pattern=PRINTABLE, description="tickets granting this scope"),
    ] = None,
    limit: Annotated[int, QueryParameter(ge=1, le=MAX_LIMIT, description=f"page size, at most {MAX_LIMIT}")] = 50,
    cursor: Annotated[str | None, QueryParameter(max_length=512)] = None,
) -> GrantPage:
    registry = registry_of(request)
    # The grant report's listing: one definition of "active" for both.
    return await serve(
        request,
        LIST,
        lambda caller, _: grant_listing(
            registry,
            caller.tenant,
            active=active,
            actor=actor,
            skill=skill,
            scope=granted_scope,
            limit=limit,
            cursor=cursor,
        ),
    )


ROUTES = [create_ticket, introspect, revoke_ticket, list_tickets]
