"""A pending approval instead of a ticket (docs/api.md#approvals): a request for a `requiresApproval`
capability that passed every check is recorded with its `approval.requested` event; deciding and
collecting it is registry.tickets.approvals. The SQL is db/approvals.py.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from db import approvals as approval_queries
from db.group_commit import WriteScope
from registry.core.tracing import current_request_id
from registry.core.wire import Wire
from registry.operations.audit_events import caller_event
from registry.state import Registry
from registry.tickets.evaluation import Plan
from registry.tickets.idempotency import Idempotency, under_key
from registry.tickets.minting import TicketResponse
from registry.tickets.request import TicketRequestBody


class ApprovalView(Wire, omit_defaults=True):
    approval_id: str
    status: str
    request: dict[str, Any] | None = None
    ticket: TicketResponse | None = None


async def request_approval(
    registry: Registry,
    plan: Plan,
    body: TicketRequestBody,
    *,
    trace_id: str | None,
    idempotency: Idempotency | None = None,
) -> ApprovalView:
    """Record a pending request for a `requiresApproval` capability and its `approval.requested` event."""
    target, grant, caller = plan.target, plan.grant, plan.caller
    approval_id = str(uuid.uuid4())
    view = ApprovalView(approval_id=approval_id, status="pending")
    stored = msgspec.to_builtins(body)
    if grant.parent is not None:
        stored["parent"] = grant.parent
    event = caller_event(
        caller,
        "approval.requested",
        tenant=target.tenant,
        on_behalf_of=grant.on_behalf_of,
        ref=target.ref,
        scopes=grant.scopes,
        trace_id=trace_id,
        request_id=current_request_id(),
    )

    async def write(scope: WriteScope) -> None:
        await approval_queries.insert_approval(
            scope.conn,
            {
                "approval_id": approval_id,
                "tenant": target.tenant,
                "agent_id": target.agent_id,
                "skill_id": target.skill_id,
                "version": target.version,
                "ref": target.ref,
                "requester": caller.principal,
                "requester_tenant": caller.tenant,
                "requester_issuer": caller.issuer,
                "on_behalf_of": grant.on_behalf_of,
                "scopes": list(grant.scopes),
                "request": stored,
                "created_at": datetime.fromtimestamp(plan.now, UTC),
                "expires_at": datetime.fromtimestamp(plan.now, UTC) + timedelta(seconds=registry.settings.approval_ttl),
            },
        )
        scope.audit(event)

    await registry.writes.run(under_key(idempotency, 202, view, write))
    return view
