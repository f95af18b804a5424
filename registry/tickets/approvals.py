"""Approvals, the service (docs/api.md#approvals): deciding a pending ticket request (approve, deny),
reading one, and collecting the approved ticket, which re-runs every ticket check and mints through
registry.tickets.minting. A pending approval is recorded by registry.tickets.approval_requests; the SQL is
db/approvals.py.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from auth.policy import ApprovalParties, check_approval_decider, check_approval_reader
from auth.principal import Caller
from db import approvals as approval_queries
from db.approvals import ApprovalRow
from db.group_commit import WriteScope
from registry.core.problems import refuse_on_record, refused
from registry.core.tracing import current_request_id
from registry.operations.audit_events import caller_event
from registry.operations.refusals import REFUSED
from registry.state import Registry
from registry.tickets.approval_requests import ApprovalView
from registry.tickets.evaluation import evaluate
from registry.tickets.minting import AlreadyCollected, TicketResponse, mint
from registry.tickets.request import TicketRequestBody, ticket_request

Verdict = Literal["approved", "denied"]
DECIDED = "approval.decided"


def approval_request_view(stored: dict[str, Any]) -> dict[str, Any]:
    """The stored request as GET /v1/approvals shows it: the parent ticket (a bearer credential) is
    replaced by its jti."""
    return {k: v for k, v in stored.items() if k != "parentTicket"}


def approval_view(approval: ApprovalRow | None, ticket: TicketResponse | None = None) -> ApprovalView:
    assert approval is not None  # approvals are never deleted: one read before exists after
    return ApprovalView(
        approval_id=approval.approval_id,
        status=approval.status,
        request=approval_request_view(approval.request),
        ticket=ticket,
    )


def stored_ticket_request(approval: ApprovalRow) -> tuple[TicketRequestBody, str | None]:
    """The body of an approved request, pinned to the version that was approved, and its parent ticket."""
    stored = {k: v for k, v in approval.request.items() if k != "parent"}
    body = msgspec.convert(stored, TicketRequestBody)
    return msgspec.structs.replace(body, version=approval.version), body.parent_ticket


def parties_of(approval: ApprovalRow | None) -> ApprovalParties | None:
    return (
        None
        if approval is None
        else ApprovalParties(
            requester=approval.requester, tenant=approval.tenant, requester_issuer=approval.requester_issuer
        )
    )


async def _approval(registry: Registry, approval_id: str) -> ApprovalRow | None:
    """The approval as it stands now, on the app's clock (db.approvals)."""
    return await approval_queries.get_approval(registry.pool, approval_id, now=registry.clock.now())


async def decide(
    registry: Registry, caller: Caller, approval_id: str, verdict: Verdict, *, trace_id: str | None
) -> ApprovalView:
    """Approve or deny a pending request (an admin of the capability's tenant, not the requester);
    deciding again, or too late, changes nothing: the answer shows the approval as it stands. The
    operation DECIDE: a refusal is raised for the boundary to record."""
    approval = await _approval(registry, approval_id)
    refuse_on_record(check_approval_decider(caller, parties_of(approval)), approval)
    assert approval is not None  # a missing approval is the policy's not_found, refused above
    request_id = current_request_id()  # the write runs in the group-commit task

    async def write(scope: WriteScope) -> None:
        if await approval_queries.decide(scope.conn, approval_id, verdict, caller.principal, now=registry.clock.now()):
            scope.audit(
                caller_event(
                    caller,
                    DECIDED,
                    outcome="allowed" if verdict == "approved" else "denied",
                    tenant=approval.tenant,
                    request_id=request_id,
                    on_behalf_of=approval.on_behalf_of,
                    ref=approval.ref,
                    scopes=approval.scopes,
                    # A denial by the approver, as opposed to a refused attempt to decide.
                    reason=None if verdict == "approved" else "approval_denied",
                    trace_id=trace_id,
                )
            )

    await registry.writes.run(write)
    return approval_view(await _approval(registry, approval_id))


async def read(registry: Registry, caller: Caller, approval_id: str, *, trace_id: str | None) -> ApprovalView:
    """An approval as its requester or an admin of the capability's tenant sees it; the requester's
    first read after approval collects the ticket."""
    approval = await _approval(registry, approval_id)
    parties = parties_of(approval)
    refusal = check_approval_reader(caller, parties)
    if refusal is not None:  # 404 to anyone else: recorded for the caller's own tenant's auditors
        raise refused(refusal).about(tenant=None, event=REFUSED)
    assert approval is not None and parties is not None  # a missing approval is the policy's not_found
    if not parties.requested_by(caller) or approval.status != "approved":
        return approval_view(approval)
    # Collect: the ticket is minted now, for the version that was approved, with every check re-run
    # (the parent may have been revoked, the version retired, the requester's scopes changed).
    body, parent_token = stored_ticket_request(approval)
    req = ticket_request(body, max_ttl=registry.settings.ticket_max_ttl)
    plan = await evaluate(registry, caller, req, parent_token, trace_id=trace_id)
    try:
        ticket = await mint(registry, plan, trace_id=trace_id, approval_id=approval_id)
    except AlreadyCollected:
        return approval_view(await _approval(registry, approval_id))
    return approval_view(await _approval(registry, approval_id), ticket)
