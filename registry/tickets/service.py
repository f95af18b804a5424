"""Delegation tickets, the service (docs/api.md#tickets): a ticket request end to end, as POST
/v1/tickets, the MCP tool `request_ticket` and an offer's ticket make it (the operation MINT): the
request parsed and checked (registry.tickets.request), an Idempotency-Key replay
(registry.tickets.idempotency), the evaluation (registry.tickets.evaluation, re-delegation in
registry.tickets.redelegation), then the ticket minted (registry.tickets.minting) or a pending
approval recorded (registry.tickets.approval_requests). Introspection and revocation are
registry.tickets.introspection and registry.tickets.revocation.

Refusals are raised about what was asked (ProblemError.about), never recorded here: the operation
boundary records each once as `ticket.denied`; a grant's `ticket.granted` commits with the ticket row.
"""

from __future__ import annotations

from typing import Any

import msgspec

from auth.principal import Caller
from db import tickets as ticket_queries
from registry.core import error_codes as codes
from registry.core.problems import ProblemError
from registry.state import Registry
from registry.tickets.approval_requests import request_approval
from registry.tickets.evaluation import evaluate
from registry.tickets.idempotency import Idempotency, IdempotencyKeyTaken, idempotency_of
from registry.tickets.minting import mint
from registry.tickets.request import TicketRequestBody, check_request, ticket_request

DENIED = "ticket.denied"


class TicketAnswer(msgspec.Struct, frozen=True):
    """What a ticket request answers: 201 a ticket, 202 a pending approval, 200 (or the first
    answer's 202) for an Idempotency-Key replay; `body` as JSON builtins."""

    status: int
    body: dict[str, Any]


async def _replay(registry: Registry, idempotency: Idempotency) -> TicketAnswer | None:
    """The recorded answer for an Idempotency-Key (200 for a ticket), 409 for another body, None if unseen."""
    row = await ticket_queries.stored_response(registry.pool, idempotency.principal, idempotency.key)
    if row is None or row.status_code is None or row.response is None:
        return None
    if row.body_hash != idempotency.body_hash:
        raise ProblemError(codes.IDEMPOTENCY_MISMATCH, "this Idempotency-Key was used with another request body")
    return TicketAnswer(status=200 if row.status_code == 201 else row.status_code, body=row.response)


async def request_ticket(
    registry: Registry, caller: Caller, body: TicketRequestBody, *, idempotency_key: str | None, trace_id: str | None
) -> TicketAnswer:
    """A ticket request of an authenticated caller, as POST /v1/tickets and the MCP tool
    `request_ticket` both make it (the operation MINT): checked, narrowed, minted or sent for approval;
    a grant is audited with its write, a refusal raised for the boundary to record."""
    max_ttl = registry.settings.ticket_max_ttl
    req = ticket_request(body, max_ttl=max_ttl)
    check_request(req, max_ttl=max_ttl)
    idempotency = idempotency_of(caller, idempotency_key, body)

    if idempotency is not None and (replayed := await _replay(registry, idempotency)) is not None:
        return replayed
    plan = await evaluate(registry, caller, req, body.parent_ticket, trace_id=trace_id)
    try:
        if plan.target.requires_approval:
            view = await request_approval(registry, plan, body, trace_id=trace_id, idempotency=idempotency)
            return TicketAnswer(status=202, body=msgspec.to_builtins(view))
        ticket = await mint(registry, plan, trace_id=trace_id, idempotency=idempotency)
        return TicketAnswer(status=201, body=msgspec.to_builtins(ticket))
    except IdempotencyKeyTaken:
        assert idempotency is not None
        replayed = await _replay(registry, idempotency)
        if replayed is None:  # the other request's answer is gone already (over 24 h): cannot happen in practice
            raise ProblemError(codes.IDEMPOTENCY_MISMATCH, "this Idempotency-Key is in use") from None
        return replayed
