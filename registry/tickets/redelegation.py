"""Re-delegation (docs/api.md#re-delegate): a ticket minted from a parent ticket its audience
presents. The parent verified (registry.tickets.verification), stored and standing (active, its
chain unrevoked, its capability version not retired), the request no wider than the parent
(auth.policy.check_redelegation); the child's grant narrowed from it (auth.policy.child_ticket_grant).
Refusals are raised without a subject: the evaluation says what they are about.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg
import msgspec

from auth.policy import (
    PARENT_UNKNOWN,
    ParentTicket,
    TicketGrant,
    TicketRequest,
    check_parent_standing,
    check_redelegation,
    child_ticket_grant,
    parent_invalid,
)
from auth.principal import Caller
from auth.tickets import (
    InvalidTicket,
)
from db import tickets as ticket_queries
from registry.core.problems import refused
from registry.state import Registry
from registry.tickets.verification import verified_ticket


async def redelegated_grant(
    registry: Registry,
    caller: Caller,
    req: TicketRequest,
    target_scopes: tuple[str, ...],
    parent_token: str,
    *,
    now: int,
) -> tuple[TicketGrant, str]:
    """The grant `req` re-delegates from `parent_token` for `caller`, and the root jti of its tree."""
    try:
        claims = await verified_ticket(registry, parent_token)
    except InvalidTicket as exc:
        raise refused(parent_invalid(f"the parent ticket is not valid: {exc}")) from None
    state = await ticket_queries.ticket_state(registry.pool, claims.jti, now=registry.clock.now())
    if state is None:
        raise refused(PARENT_UNKNOWN)
    # onBehalfOf is taken from the stored parent, not inferred from `sub` (see auth.tickets).
    parent = msgspec.structs.replace(ParentTicket.from_claims(claims.as_dict()), on_behalf_of=state.on_behalf_of)
    refusal = check_redelegation(caller, req, parent, target_scopes, now=now) or check_parent_standing(
        active=state.active, chain_revoked=state.chain_revoked, capability_status=state.capability_status
    )
    if refusal is not None:
        raise refused(refusal)
    return child_ticket_grant(caller, req, parent, now=now), state.root_jti


async def lock_standing_parent(conn: asyncpg.Connection, parent_jti: str, root_jti: str, *, now: datetime) -> None:
    """Lock the parent's tree (the lock revocation takes), then refuse the child if the parent stopped
    standing since it was evaluated (its activity at the app's `now`): a revocation in between is
    ordered before the child's insert."""
    await ticket_queries.lock_tree(conn, root_jti)
    state = await ticket_queries.ticket_state(conn, parent_jti, now=now)
    refusal = (
        PARENT_UNKNOWN
        if state is None
        else check_parent_standing(
            active=state.active,
            chain_revoked=state.chain_revoked,
            capability_status=state.capability_status,
        )
    )
    if refusal is not None:
        raise refused(refusal)
