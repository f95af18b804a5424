"""A ticket verified with capreg's keyring (auth.tickets.verify_ticket), the keys reloaded once for a
kid new to this process, verified claims cached until they expire (auth.tokens.VerifiedTokens):
the parent of a re-delegation and every introspected ticket.
"""

from __future__ import annotations

import jwt

from auth.tickets import (
    InvalidTicket,
    TicketClaims,
    verify_ticket,
)
from registry.state import Registry


async def verified_ticket(registry: Registry, token: str) -> TicketClaims:
    """Verify a ticket with capreg's keyring, reloading keys once when its kid is new to this process.

    Verified claims are kept in the registry's one verified-token cache (auth.tokens.VerifiedTokens)
    until they expire, and served only while their key is still in the keyring: agents introspect
    the same ticket on every call, and an EdDSA verification costs more than the rest of the check.
    Revocation and retirement are not cached: callers check them in the database every time.
    """
    now = registry.clock.epoch()
    cached = registry.verified.get(token, "ticket", now, registry.verifier.key_present)
    if cached is not None:
        return cached
    try:
        claims = verify_ticket(token, registry.keyring, issuer=registry.settings.issuer, now=now)
    except InvalidTicket as exc:
        if not exc.unknown_kid:
            raise
        await registry.refresh_keyring()
        claims = verify_ticket(token, registry.keyring, issuer=registry.settings.issuer, now=now)
    registry.verified.put(
        token,
        "ticket",
        claims,
        iss=registry.settings.issuer,
        kid=jwt.get_unverified_header(token)["kid"],
        exp=claims.exp,
    )
    return claims
