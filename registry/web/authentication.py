"""Request authentication: the caller a request's Authorization header names (capreg's own tokens
and trusted external issuers', auth.tokens), verified once per request and kept in its state, so
the rate limiter and the handler agree. Routes call `authenticate` (a caller is required, optionally
with a scope) or `optional_caller` (anonymous callers allowed). A missing or bad token is 401
`invalid_token`, counted in /metrics and never audited.
"""

from __future__ import annotations

import jwt
from litestar import Request

from auth.policy import check_scope
from auth.principal import Caller
from auth.tokens import InvalidToken
from registry.core.fair_share import serving
from registry.core.problems import ProblemError, invalid_token, refused
from registry.operations.refusals import refuse_request
from registry.state import Registry, registry_of

# The scheme of an Authorization header (any case), then whitespace, then the token.
_BEARER = "bearer"


async def verify(registry: Registry, token: str) -> Caller:
    """The caller a bearer token names; InvalidToken otherwise."""
    try:
        return registry.verifier.verify(token, now=registry.clock.epoch())
    except InvalidToken as exc:
        if exc.reason != "unknown_key":
            raise
    # A key this process has not seen: capreg's own (another replica rotated) or a partner's.
    try:
        iss = jwt.decode(token, options={"verify_signature": False}).get("iss")
    except jwt.PyJWTError:
        iss = None
    if iss == registry.settings.issuer:
        await registry.refresh_keyring()
    elif isinstance(iss, str):
        await registry.issuer_keys.unknown_kid(iss)
    return registry.verifier.verify(token, now=registry.clock.epoch())


async def caller_of_header(registry: Registry, header: str | None, state: dict) -> Caller | None:
    """The verified caller of a request, once per request (the result is kept in `state`, so the
    rate limiter and the handler verify once). None without an Authorization header; a bad
    token is 401 `invalid_token`, never anonymous, and is counted, not audited."""
    if "caller" in state:
        known = state["caller"]
        if isinstance(known, ProblemError):
            raise known
        if known is not None:
            serving(known.tenant)
        return known
    if header is None:
        state["caller"] = None
        return None
    try:
        parts = header.split()
        if len(parts) != 2 or parts[0].lower() != _BEARER:
            raise InvalidToken("Authorization must be 'Bearer <token>'", "malformed")
        caller = await verify(registry, parts[1])
    except InvalidToken as exc:
        registry.auth_failures[exc.reason] += 1
        state["caller"] = error = invalid_token(str(exc))
        raise error from None
    state["caller"] = caller
    serving(caller.tenant)  # its heavy work is shared fairly with other tenants' (registry.core.fair_share)
    return caller


async def optional_caller(request: Request) -> Caller | None:
    """The verified caller, or None when no token is presented. A bad token is 401, never anonymous."""
    return await caller_of_header(
        registry_of(request), request.headers.get("authorization"), request.scope.setdefault("state", {})
    )


async def authenticate(request: Request, scope: str | None = None) -> Caller:
    """The verified caller of an endpoint that needs one: 401 `invalid_token` without a token (counted,
    not audited), 403 `insufficient_scope` (audited as `request.refused`) when `scope` is named and
    not held (auth.policy.check_scope)."""
    caller = await optional_caller(request)
    if caller is None:
        registry_of(request).auth_failures["missing"] += 1
        raise invalid_token("this endpoint needs a bearer token")
    refusal = check_scope(caller, scope)
    if refusal is not None:  # an identified caller refused: audited like every other refusal
        raise await refuse_request(request, caller, refused(refusal))
    return caller
