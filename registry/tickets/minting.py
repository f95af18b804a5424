"""Minting a ticket (docs/api.md#request-a-ticket): a Plan that passed every check signed
(auth.tickets.sign_ticket), then stored with its `ticket.granted` event in one transaction (a first
ticket with the batch's other tickets, db.group_commit; a re-delegated one under its tree's lock,
registry.tickets.redelegation; an approved one collected once).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from auth.tickets import (
    MAX_TICKET_LENGTH,
    CapClaim,
    encoded_ticket_length,
    new_jti,
    sign_ticket,
    ticket_claims,
)
from db import approvals as approval_queries
from db import tickets as ticket_queries
from db.group_commit import WriteScope
from registry.core.problems import ProblemError
from registry.core.tracing import current_request_id
from registry.core.wire import Wire
from registry.operations.audit_events import caller_event
from registry.state import Registry
from registry.tickets.evaluation import Plan, ticket_too_large
from registry.tickets.idempotency import Idempotency, under_key
from registry.tickets.redelegation import lock_standing_parent

GRANTED = "ticket.granted"


class TicketResponse(Wire):
    ticket: str
    jti: str
    expires_at: datetime
    scopes: list[str]
    resources: list[str]
    ref: str
    depth: int
    max_depth: int


class AlreadyCollected(Exception):
    """The approval's ticket was collected by a concurrent fetch."""


def _at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def ticket_row(plan: Plan, *, jti: str, kid: str | None, issued_at: datetime) -> dict[str, Any]:
    """The `tickets` row of the ticket `plan` mints as `jti`, signed with `kid` (db.tickets.insert_ticket
    and the group commit's single-row insert both take it)."""
    target, grant, caller = plan.target, plan.grant, plan.caller
    return {
        "jti": jti,
        "parent_jti": grant.parent,
        "root_jti": plan.root_jti or jti,
        "tenant": target.tenant,
        "agent_id": target.agent_id,
        "skill_id": target.skill_id,
        "version": target.version,
        "ref": target.ref,
        "audience": grant.aud,
        "actor": caller.principal,
        "actor_tenant": caller.tenant,
        "on_behalf_of": grant.on_behalf_of,
        "scopes": list(grant.scopes),
        "resources": list(grant.resources),
        "depth": grant.depth,
        "max_depth": grant.max_depth,
        "issued_at": issued_at,
        "expires_at": _at(grant.exp),
        "act": grant.act,
        "kid": kid,
    }


async def mint(
    registry: Registry,
    plan: Plan,
    *,
    trace_id: str | None,
    idempotency: Idempotency | None = None,
    approval_id: str | None = None,
) -> TicketResponse:
    """Sign the ticket, then store it and its `ticket.granted` event in one transaction.

    Raises IdempotencyKeyTaken when a concurrent request with the same key got there first, and
    AlreadyCollected when a concurrent fetch collected the approval; both roll back. A parent
    revoked between evaluation and now is refused here (the tree lock orders the two).
    """
    # Pick up a rotation made by another process, so a retired key stops signing within seconds.
    await registry.refresh_keyring()
    keyring = registry.keyring
    target, grant, caller = plan.target, plan.grant, plan.caller
    jti = new_jti()
    claims = ticket_claims(
        grant,
        issuer=registry.settings.issuer,
        tenant=target.tenant,
        cap=CapClaim(ref=target.ref, id=target.skill_id, version=target.version),
        jti=jti,
        now=plan.now,
    )
    length = encoded_ticket_length(claims, kid=keyring.signing_kid or "")
    if length > MAX_TICKET_LENGTH:  # evaluate refused this already; a key with a longer kid may differ
        raise ticket_too_large(length).about(
            tenant=target.tenant, ref=target.ref, scopes=sorted(set(grant.scopes)), on_behalf_of=grant.on_behalf_of
        )
    token = sign_ticket(keyring, claims)
    response = TicketResponse(
        ticket=token,
        jti=jti,
        expires_at=_at(grant.exp),
        scopes=list(grant.scopes),
        resources=list(grant.resources),
        ref=target.ref,
        depth=grant.depth,
        max_depth=grant.max_depth,
    )
    event = caller_event(
        caller,
        GRANTED,
        tenant=target.tenant,
        on_behalf_of=grant.on_behalf_of,
        ref=target.ref,
        scopes=grant.scopes,
        trace_id=trace_id,
        request_id=current_request_id(),
    )

    row = ticket_row(plan, jti=jti, kid=keyring.signing_kid, issued_at=registry.clock.now())
    if idempotency is None and grant.parent is None and approval_id is None:
        # A first ticket is one row and one event: inserted with the batch's other tickets (db.group_commit).
        await registry.writes.insert("tickets", row, [event])
        return response

    async def write(scope: WriteScope) -> None:
        conn = scope.conn
        if grant.parent is not None:
            assert plan.root_jti is not None
            await lock_standing_parent(conn, grant.parent, plan.root_jti, now=registry.clock.now())
        await ticket_queries.insert_ticket(conn, row)
        if approval_id is not None and not await approval_queries.collect(
            conn, approval_id, jti, now=registry.clock.now()
        ):
            raise AlreadyCollected
        scope.audit(event)

    try:
        await registry.writes.run(under_key(idempotency, 201, response, write), expected=[event])
    except ProblemError as error:
        raise error.about(
            tenant=target.tenant, ref=target.ref, scopes=sorted(set(grant.scopes)), on_behalf_of=grant.on_behalf_of
        ) from None
    return response
