"""The ticket operations, declared once for every door (registry.operations.boundary): HTTP
(registry.tickets.routes, approval_routes), MCP's `request_ticket` and the ticket an offer carries."""

from __future__ import annotations

from auth.policy import AUDIT_READ_SCOPE
from registry.operations.boundary import Operation
from registry.operations.refusals import REFUSED
from registry.tickets.approvals import DECIDED
from registry.tickets.request import TicketRequestBody
from registry.tickets.revocation import REVOKED
from registry.tickets.service import DENIED

MINT = Operation(name="ticket.mint", denial_event=DENIED, body=TicketRequestBody, audit_malformed=True)
REVOKE = Operation(name="ticket.revoke", denial_event=REVOKED)
# Reading an approval collects its ticket once approved: every check of a mint runs again then.
COLLECT = Operation(name="approval.collect", denial_event=DENIED)
DECIDE = Operation(name="approval.decide", denial_event=DECIDED)
# The tenant's tickets (the grant report's listing): a refusal is the caller's `request.refused`.
LIST = Operation(name="ticket.list", denial_event=REFUSED, scope=AUDIT_READ_SCOPE)
