"""Delegation tickets as JWTs (docs/api.md#ticket-claims): building the claims, signing, and verifying.

A ticket is a JWS with `alg: EdDSA`, `typ: capreg-ticket+jwt` and the `kid` of one of capreg's own
keys. Verification pins all three before any signature check: the `typ` decides that this is a
ticket (a caller token never passes, nor a ticket as a caller token: see auth.tokens), the `kid` is
looked up only in capreg's keyring (a dict, never a path or URL), and the algorithm list is EdDSA
alone. Every claim of docs/api.md#ticket-claims is required and typed; `aud` must be one agent ref (a string, not
an array) and, when the verifier names an expected audience, exactly that one.

No `onBehalfOf` claim: `sub` is the subject acted for when one was given, else the minting caller,
who is also the outermost `act.sub` (RFC 8693). An offline verifier reads "on behalf of" as
`sub` when `sub != act.sub`. The registry itself takes it from the ticket's stored row.

Pure: no I/O; callers pass the keyring and `now`.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import jwt
import msgspec

from auth.keys import Keyring, jws_header
from auth.policy import MAX_DELEGATION_DEPTH, TicketGrant
from auth.tokens import TICKET_TYPE

TICKET_ALGORITHM = "EdDSA"
REQUIRED_TICKET_CLAIMS = [
    "iss",
    "sub",
    "aud",
    "act",
    "tenant",
    "scope",
    "cap",
    "resources",
    "iat",
    "nbf",
    "exp",
    "jti",
    "depth",
    "maxDepth",
]
# The longest ticket anything accepts (the verifiers here and in registry.client, introspection and
# re-delegation): a ticket longer than this is never minted (docs/api.md#request-a-ticket).
MAX_TICKET_LENGTH = 16 * 1024
_MAX_TICKET_LENGTH = MAX_TICKET_LENGTH
# An EdDSA (Ed25519) signature is 64 bytes: 86 base64url characters.
_SIGNATURE_CHARS = 86
_CLOCK_SKEW = 5


class InvalidTicket(Exception):
    """The ticket is malformed, expired, not signed by capreg, or not a ticket at all."""

    def __init__(self, message: str, *, unknown_kid: bool = False):
        super().__init__(message)
        # An unknown kid may be a key another replica created: the caller reloads keys and retries once.
        self.unknown_kid = unknown_kid


class CapClaim(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The `cap` claim: which capability version the ticket is for."""

    ref: str
    id: str
    version: str


class TicketClaims(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename={"max_depth": "maxDepth"}):
    """Every claim of a ticket (docs/api.md#ticket-claims), typed. `parent` is present exactly when `depth > 0`."""

    iss: str
    sub: str
    aud: str
    act: dict[str, Any]
    tenant: str
    scope: str
    cap: CapClaim
    resources: list[str]
    iat: int
    nbf: int
    exp: int
    jti: str
    depth: int
    max_depth: int
    parent: str | None = None

    @property
    def scopes(self) -> tuple[str, ...]:
        return tuple(self.scope.split())

    def as_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)


def new_jti() -> str:
    return str(uuid.uuid4())


# What a ticket id (jti) or an approval id given back to capreg may look like: ours are UUIDs, and the
# pattern bounds what a path or a stored grant can hold (one definition: paths, grants, approvals).
ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


def ticket_claims(grant: TicketGrant, *, issuer: str, tenant: str, cap: CapClaim, jti: str, now: int) -> TicketClaims:
    """The claims of a ticket that passed policy (`grant` from auth.policy) for capability `cap`."""
    return TicketClaims(
        iss=issuer,
        sub=grant.sub,
        aud=grant.aud,
        act=grant.act,
        tenant=tenant,
        scope=" ".join(grant.scopes),
        cap=cap,
        resources=list(grant.resources),
        iat=now,
        nbf=now,
        exp=grant.exp,
        jti=jti,
        depth=grant.depth,
        max_depth=grant.max_depth,
        parent=grant.parent,
    )


def _b64_length(n: int) -> int:
    return (4 * n + 2) // 3  # unpadded base64url


def encoded_claims(claims: TicketClaims) -> bytes:
    """A ticket's payload as `sign_ticket` signs it (compact JSON, claims in their fixed order)."""
    return _CLAIMS_JSON.encode(claims.as_dict())


def encoded_ticket_length(claims: TicketClaims, *, kid: str) -> int:
    """The length `sign_ticket` will give these claims, computed without signing: the same header
    and payload bytes, and a fixed-size EdDSA signature."""
    header = jws_header(kid, TICKET_TYPE)
    return _b64_length(len(header)) + 1 + _b64_length(len(encoded_claims(claims))) + 1 + _SIGNATURE_CHARS


def sign_ticket(keyring: Keyring, claims: TicketClaims) -> str:
    return keyring.sign_payload(encoded_claims(claims), typ=TICKET_TYPE)


_CLAIMS_JSON = msgspec.json.Encoder()


def _header(token: str) -> dict[str, Any]:
    if not isinstance(token, str) or not token or len(token) > _MAX_TICKET_LENGTH:
        raise InvalidTicket("ticket missing or too long")
    try:
        return jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise InvalidTicket(f"malformed ticket: {exc}") from None


def verify_ticket(
    token: str, keyring: Keyring, *, issuer: str, audience: str | None = None, now: float | None = None
) -> TicketClaims:
    """The verified claims of `token`, or InvalidTicket.

    Checks, in order: header `typ` is exactly `capreg-ticket+jwt`, `alg` is EdDSA, `kid` is a key
    of capreg's keyring; then the signature, `iss`, `exp`/`nbf`/`iat` (no leeway: a ticket never
    outlives its `exp`), the presence and types of every claim, a single-string `aud` (equal to
    `audience` when given), and the depth bookkeeping.
    """
    header = _header(token)
    typ = header.get("typ")
    if not isinstance(typ, str) or typ.lower().removeprefix("application/") != TICKET_TYPE:
        raise InvalidTicket(f"not a capreg ticket: typ must be {TICKET_TYPE}")
    if header.get("alg") != TICKET_ALGORITHM:
        raise InvalidTicket("ticket algorithm must be EdDSA")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise InvalidTicket("ticket has no kid")
    key = keyring.public.get(kid)
    if key is None:
        raise InvalidTicket("unknown kid", unknown_kid=True)
    now = time.time() if now is None else now
    try:
        raw = jwt.decode(
            token,
            key,
            algorithms=[TICKET_ALGORITHM],
            issuer=issuer,
            options={"require": REQUIRED_TICKET_CLAIMS, "verify_aud": False, "verify_exp": False, "verify_nbf": False},
        )
    except jwt.PyJWTError as exc:
        raise InvalidTicket(str(exc)) from None
    try:
        claims = msgspec.convert(raw, TicketClaims, strict=True)
    except msgspec.ValidationError as exc:
        raise InvalidTicket(f"ticket claims invalid: {exc}") from None
    # PyJWT's own checks take `now` from the wall clock; these take the caller's, so tests and
    # policy agree on one instant.
    if claims.exp <= now:
        raise InvalidTicket("ticket has expired")
    # Replica clocks may differ by a little: a ticket minted a moment "in the future" is fine.
    if claims.nbf > now + _CLOCK_SKEW or claims.iat > now + _CLOCK_SKEW:
        raise InvalidTicket("ticket is not valid yet")
    if audience is not None and claims.aud != audience:
        raise InvalidTicket("ticket is for another audience")
    if not 0 <= claims.depth <= MAX_DELEGATION_DEPTH or not 0 <= claims.max_depth <= MAX_DELEGATION_DEPTH:
        raise InvalidTicket("ticket depth out of range")
    if (claims.parent is None) != (claims.depth == 0):
        raise InvalidTicket("a re-delegated ticket names its parent, a first ticket none")
    if not claims.scopes:
        raise InvalidTicket("ticket grants no scope")
    return claims
