"""Revoking a ticket (docs/api.md#revoke): the ticket and every ticket re-delegated from it, under
its tree's lock, one `ticket.revoked` event each; the policy is auth.policy.check_revoke, refusals
raised for the boundary to record. The SQL is db/tickets.py.
"""

from __future__ import annotations

from auth.policy import TicketParties, check_revoke
from auth.principal import Caller
from db import tickets as ticket_queries
from db.group_commit import WriteScope
from registry.core.problems import refuse_on_record
from registry.core.tracing import current_request_id
from registry.operations.audit_events import caller_event
from registry.state import Registry

REVOKED = "ticket.revoked"


async def revoke(registry: Registry, caller: Caller, jti: str, *, trace_id: str | None) -> list[str]:
    """Revoke a ticket and every ticket re-delegated from it, one `ticket.revoked` event each;
    the jtis revoked now, parents first."""
    ticket = await ticket_queries.get_ticket(registry.pool, jti)
    parties = (
        None
        if ticket is None
        else TicketParties(tenant=ticket.tenant, actor=ticket.actor, actor_tenant=ticket.actor_tenant)
    )
    refuse_on_record(check_revoke(caller, parties), ticket)
    assert ticket is not None  # a missing ticket is the policy's not_found, refused above
    request_id = current_request_id()  # the write runs in the group-commit task

    async def write(scope: WriteScope) -> list[ticket_queries.RevokedTicket]:
        await ticket_queries.lock_tree(scope.conn, ticket.root_jti)
        revoked = await ticket_queries.revoke_tree(scope.conn, jti)
        scope.audit(
            *(
                caller_event(
                    caller,
                    REVOKED,
                    tenant=row.tenant,
                    request_id=request_id,
                    on_behalf_of=row.on_behalf_of,
                    ref=row.ref,
                    scopes=row.scopes,
                    # Descendants are revoked because their ancestor was.
                    reason=None if row.jti == jti else "ancestor_revoked",
                    trace_id=trace_id,
                )
                for row in revoked
            )
        )
        return revoked

    revoked = await registry.writes.run(write)
    return [row.jti for row in revoked]
