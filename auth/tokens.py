"""Caller token verification and minting.

Every presented token must verify completely: algorithm pinned per issuer, `typ` checked before any
key is chosen, `kid` looked up only in the issuer's own key set, and the claims capreg relies on
required. Anything else is `InvalidToken`, which the HTTP layer answers with 401 `invalid_token`.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from datetime import UTC, datetime
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
    """The token is missing, malformed, expired, or not signed by a trusted key.

    `reason` is one of a few fixed words (the label of capreg_auth_failures_total)."""

    def __init__(self, message: str, reason: str = "invalid"):
        super().__init__(message)
        self.reason = reason


class IssuerKeys(msgspec.Struct):
    """Keys of one trusted external issuer, by kid, with the algorithms it may use and the tenants
    it may speak for (`*`: any)."""

    issuer: str
    keys: dict[str, Any]
    algorithms: list[str]
    tenants: frozenset[str] = frozenset()

    def speaks_for(self, tenant: str) -> bool:
        return "*" in self.tenants or tenant in self.tenants


class VerifiedTokens:
    """The one cache of verified tokens (caller tokens and tickets), by the whole token string.

    EdDSA verification costs ~150 us, more than the rest of most requests. An entry remembers the
    issuer and kid that verified it and is served only while that key is still trusted, so removing a
    key takes every token it signed with it, seen before or not. Least recently used entries go first.
    """

    # What one entry keeps alive besides its token string: the Caller or claims and the tuple.
    ENTRY_OVERHEAD = 1024

    def __init__(self, max_entries: int = 10_000, max_bytes: int = 8 * 1024 * 1024):
        self.max_entries = max_entries
        # Tokens may be up to 16 KiB each: bounded in bytes too (a part of CAPREG_CACHE_BUDGET).
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, tuple[str, Any, str, str, float]] = OrderedDict()

    def get(self, token: str, kind: str, now: float, key_present) -> Any | None:
        entry = self._entries.get(token)
        if entry is None:
            return None
        entry_kind, value, iss, kid, exp = entry
        if entry_kind != kind:
            return None
        if exp <= now or not key_present(iss, kid):
            del self._entries[token]
            self.bytes -= len(token) + self.ENTRY_OVERHEAD
            return None
        self._entries.move_to_end(token)
        return value

    def put(self, token: str, kind: str, value: Any, *, iss: str, kid: str, exp: float) -> None:
        if token not in self._entries:
            self.bytes += len(token) + self.ENTRY_OVERHEAD
        self._entries[token] = (kind, value, iss, kid, exp)
        self._entries.move_to_end(token)
        while self._entries and (len(self._entries) > self.max_entries or self.bytes > self.max_bytes):
            oldest, _ = self._entries.popitem(last=False)
            self.bytes -= len(oldest) + self.ENTRY_OVERHEAD

    def __len__(self) -> int:
        return len(self._entries)


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
        # Issuer -> its keys; replaced in place when an issuer's key set is re-read (auth.issuers).
        self.external = external
        self.cache = VerifiedTokens()

    def key_present(self, iss: str, kid: str) -> bool:
        """Whether `kid` still verifies tokens of `iss` (capreg's keyring, or the issuer's key set)."""
        if iss == self.issuer:
            return kid in self.keyring.public
        trusted = self.external.get(iss)
        return trusted is not None and kid in trusted.keys

    def verify(self, token: str, *, now: float | None = None) -> Caller:
        now = time.time() if now is None else now
        cached = self.cache.get(token, "caller", now, self.key_present)
        if cached is not None:
            return cached
        caller, exp, kid = self._verify_uncached(token)
        self.cache.put(token, "caller", caller, iss=caller.issuer, kid=kid, exp=exp)
        return caller

    def _verify_uncached(self, token: str) -> tuple[Caller, int, str]:
        if not token or len(token) > _MAX_TOKEN_LENGTH:
            raise InvalidToken("token missing or too long", "malformed")
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            # The decoder's own words ("'utf-8' codec can't decode ...") tell a caller nothing to do.
            raise InvalidToken(
                "the bearer token is not a JWT (three base64url parts separated by dots): "
                "get one with capreg token mint or from a trusted issuer",
                "malformed",
            ) from None
        typ = _normalized_typ(header)
        if typ == TICKET_TYPE:
            raise InvalidToken("a delegation ticket is not a caller token")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise InvalidToken("token has no kid", "malformed")
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
            raise InvalidToken(
                f"the token's issuer {iss!r} is not one capreg trusts: use a token from a trusted issuer",
                "untrusted_issuer",
            )
        if key is None:
            raise InvalidToken(
                f"the token's signing key (kid {kid!r}) is not among its issuer's published keys: request a new token",
                "unknown_key",
            )
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
            raise InvalidToken(*_verification_failure(exc, unverified)) from None
        caller = caller_from_claims(claims, iss)
        if iss != self.issuer and not self.external[iss].speaks_for(caller.tenant):
            # A partner's identity provider speaks for the tenants it was configured for, no others.
            raise InvalidToken(f"issuer {iss} may not speak for tenant {caller.tenant}", "tenant_not_allowed")
        return caller, int(claims["exp"]), kid


def _verification_failure(exc: jwt.PyJWTError, unverified: dict) -> tuple[str, str]:
    """What a failed verification says to the caller (and its metrics reason): what happened and what
    to do next, never PyJWT's own wording."""
    if isinstance(exc, jwt.ExpiredSignatureError):
        exp = unverified.get("exp")
        when = (
            datetime.fromtimestamp(exp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            if isinstance(exp, int | float) and not isinstance(exp, bool)
            else "its exp"
        )
        return f"the token expired at {when}: request a new one", "expired"
    if isinstance(exc, jwt.InvalidSignatureError):
        return "the token's signature does not verify against its issuer's keys: request a new token", "invalid"
    if isinstance(exc, jwt.InvalidAudienceError):
        return "the token is not meant for capreg (its aud is not this registry's audience)", "invalid"
    if isinstance(exc, jwt.ImmatureSignatureError):
        return "the token is not valid yet (its nbf or iat is in the future): check the issuer's clock", "invalid"
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"the token lacks the required claim {exc.claim!r}: request a token from a capreg issuer", "invalid"
    if isinstance(exc, jwt.InvalidIssuerError):
        return "the token's iss does not match its issuer", "invalid"
    return "the token does not verify: request a new one", "invalid"


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
    return Caller(tenant=tenant, sub=sub, scopes=scopes, regions=regions, issuer=issuer)


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
