"""Ticket introspection (docs/api.md#introspect, RFC 7662 style): a verified ticket's claims for a
caller allowed to see them (auth.policy.check_introspect) while it is active (batched active
checks, db.tickets.ActiveTicketChecks); inactive otherwise, never a refusal.
"""

from __future__ import annotations

from typing import Any

from auth.policy import (
    check_introspect,
)
from auth.principal import Caller
from auth.tickets import (
    InvalidTicket,
)
from registry.state import Registry
from registry.tickets.verification import verified_ticket


async def introspect(registry: Registry, caller: Caller, token: str) -> dict[str, Any]:
    """RFC 7662 style: the claims of a valid, unexpired, unrevoked ticket whose capability version is
    not retired, for a caller of the audience's tenant (or an auditor of the capability's); else inactive."""
    inactive = {"active": False}
    try:
        claims = await verified_ticket(registry, token)
    except InvalidTicket:
        return inactive
    if check_introspect(caller, audience=claims.aud, capability_tenant=claims.tenant) is not None:
        return inactive
    if not await registry.ticket_checks.is_active(claims.jti):
        return inactive
    return {"active": True, **claims.as_dict()}
