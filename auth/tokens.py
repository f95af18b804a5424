"""Caller token verification and minting.

Every presented token must verify completely: algorithm pinned per issuer, `typ` checked before any
key is chosen, `kid` looked up only in the issuer's own key set, and the claims capreg relies on
required. Anything else is `InvalidToken`, which the HTTP layer answers with 401 `invalid_token`.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from typing import Any

import jwt
import msgspec

from auth.keys import Keyring
from auth.principal import Caller

CALLER_TOKEN_TYPES_OWN = frozenset({"at+jwt"})
CALLER_TOKEN_TYPES_EXTERNAL = frozenset({"jwt", "at+jwt", None})
TICKET_TYPE = "capreg-ticket+jwt"
REQUIRED_CLAIMS = ["exp", "iat", "aud", "iss", "sub", "jti", "tenant"]
_MAX_TOKEN_LENGTH = 16 * 1024


class InvalidToken(Exception):
    """The token is missing, malformed, expired, or not signed by a trusted key."""


class IssuerKeys(msgspec.Struct):
    """Keys of one trusted external issuer, by kid, with the algorithms it may use."""

    issuer: str
    keys: dict[str, Any]
    algorithms: list[str]


def _normalized_typ(header: dict) -> str | None:
    typ = header.get("typ")
    if typ is None:
        return None
    if not isinstance(typ, str):
        raise InvalidToken("typ must be a string")
    typ = typ.lower()
    # RFC 8725 3.11: "application/at+jwt" and "at+jwt" name the same type.
    return typ.removeprefix("application/")


class TokenVerifier:
    """Verifies caller tokens against capreg's keyring and the configured external issuers."""

    def __init__(self, *, keyring: Keyring, issuer: str, audience: str, external: dict[str, IssuerKeys]):
        self.keyring = keyring
        self.issuer = issuer
        self.audience = audience
        self.external = external
        # Verified tokens by the whole token string: EdDSA verification costs ~150 us (stack notes).
        self._verified: OrderedDict[str, tuple[Caller, int]] = OrderedDict()

    def verify(self, token: str, *, now: float | None = None) -> Caller:
        now = time.time() if now is None else now
        cached = self._verified.get(token)
        if cached is not None:
            caller, exp = cached
            if exp > now:
                return caller
            del self._verified[token]
        caller, exp = self._verify_uncached(token)
        self._verified[token] = (caller, exp)
        if len(self._verified) > 10_000:
            self._verified.popitem(last=False)
        return caller

    def _verify_uncached(self, token: str) -> tuple[Caller, int]:
        if not token or len(token) > _MAX_TOKEN_LENGTH:
            raise InvalidToken("token missing or too long")
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"malformed token: {exc}") from None
        typ = _normalized_typ(header)
        if typ == TICKET_TYPE:
            raise InvalidToken("a delegation ticket is not a caller token")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise InvalidToken("token has no kid")
        iss = unverified.get("iss")
        if iss == self.issuer:
            if typ not in CALLER_TOKEN_TYPES_OWN:
                raise InvalidToken("capreg caller tokens must have typ at+jwt")
            key = self.keyring.public.get(kid)
            algorithms = ["EdDSA"]
        elif isinstance(iss, str) and iss in self.external:
            if typ not in CALLER_TOKEN_TYPES_EXTERNAL:
                raise InvalidToken(f"unexpected token typ {typ!r}")
            trusted = self.external[iss]
            key = trusted.keys.get(kid)
            algorithms = trusted.algorithms
        else:
            raise InvalidToken("untrusted issuer")
        if key is None:
            raise InvalidToken("unknown kid")
        if header.get("alg") not in algorithms:
            raise InvalidToken("algorithm not allowed")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=algorithms,
                audience=self.audience,
                issuer=iss,
                options={"require": REQUIRED_CLAIMS},
                leeway=5,
            )
        except jwt.PyJWTError as exc:
            raise InvalidToken(str(exc)) from None
        return caller_from_claims(claims, iss), int(claims["exp"])


def caller_from_claims(claims: dict, issuer: str) -> Caller:
    tenant, sub = claims.get("tenant"), claims.get("sub")
    if not isinstance(tenant, str) or not tenant or not isinstance(sub, str) or not sub:
        raise InvalidToken("tenant and sub must be non-empty strings")
    scope = claims.get("scope", "")
    if isinstance(scope, list):  # some IdPs emit scp/scope as an array
        scopes = frozenset(s for s in scope if isinstance(s, str))
    elif isinstance(scope, str):
        scopes = frozenset(scope.split())
    else:
        raise InvalidToken("scope must be a string")
    regions = claims.get("regions")
    if regions is not None:
        if not isinstance(regions, list) or not all(isinstance(r, str) for r in regions):
            raise InvalidToken("regions must be an array of strings")
        regions = tuple(regions)
    return Caller(
        tenant=tenant, sub=sub, scopes=scopes, regions=regions, issuer=issuer, token_id=str(claims["jti"])
    )


def mint_caller_token(
    keyring: Keyring,
    *,
    issuer: str,
    audience: str,
    tenant: str,
    sub: str,
    scopes: list[str],
    regions: list[str] | None = None,
    ttl: int = 3600,
    now: int | None = None,
) -> str:
    """A caller token signed by capreg (typ at+jwt). A negative ttl gives an expired token."""
    now = int(time.time()) if now is None else now
    claims: dict[str, Any] = {
        "iss": issuer,
        "sub": sub,
        "aud": audience,
        "iat": now,
        "exp": now + ttl,
        "jti": str(uuid.uuid4()),
        "tenant": tenant,
        "scope": " ".join(scopes),
    }
    if regions is not None:
        claims["regions"] = regions
    return keyring.sign(claims, typ="at+jwt")
