"""TicketVerifier: an agent's offline check of the capreg tickets presented to it.

The registry's JWKS is fetched once and cached; it is fetched again only for a `kid` it does not
hold (a rotated key), at most once per `refetch_interval` seconds, so a flood of forged tickets with
made-up kids costs the registry nothing. Only EdDSA and the ticket `typ` are accepted: a caller
token (or any other JWT) never passes as a ticket.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import httpx
import jwt
import msgspec

from registry.client.errors import CapregError, invalid_ticket
from registry.client.results import TicketClaims

TICKET_TYP = "capreg-ticket+jwt"
ALGORITHM = "EdDSA"
REQUIRED_CLAIMS = ["iss", "sub", "aud", "exp", "iat", "nbf", "jti"]
MAX_TICKET_CHARS = 16384


class TicketVerifier:
    """TicketVerifier("http://127.0.0.1:8080", audience="acme/billing-agent").verify(ticket, scope=..., skill=...)

    `issuer` is the registry's CAPREG_ISSUER (default "capreg"). With `check_revocation=True`,
    verify also asks the registry (POST /v1/tickets/introspect, with `token` or `token_provider`:
    a token of the audience agent) whether the ticket is still active.
    """

    def __init__(
        self,
        registry_url: str,
        audience: str,
        *,
        issuer: str = "capreg",
        leeway: float = 30.0,
        check_revocation: bool = False,
        token: str | None = None,
        token_provider: Callable[[], str | None] | None = None,
        refetch_interval: float = 30.0,
        max_key_age: float = 300.0,
        timeout: float = 5.0,
        http: httpx.Client | None = None,
    ):
        self.registry_url = registry_url.rstrip("/")
        self.audience, self.issuer, self.leeway = audience, issuer, leeway
        self.check_revocation = check_revocation
        self.refetch_interval = refetch_interval
        # Keys are read again after this long even when every kid is known, so a key the registry
        # removed (`capreg keys rotate --keep-seconds 0`) stops verifying here too.
        self.max_key_age = max_key_age
        self._http = http or httpx.Client(timeout=timeout)
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._lock = threading.Lock()
        self._registry = None
        if check_revocation:
            if token is None and token_provider is None:
                raise ValueError("check_revocation needs token= or token_provider= (a token of the audience agent)")
            from registry.client.sync import Registry

            self._registry = Registry(
                self.registry_url, token=token, token_provider=token_provider, http=None, timeout=timeout
            )

    # -- keys -----------------------------------------------------------------------------

    def _fetch_keys(self) -> None:
        self._fetched_at = time.monotonic()
        try:
            response = self._http.get(f"{self.registry_url}/.well-known/jwks.json")
            response.raise_for_status()
            document = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise invalid_ticket("jwks_unavailable", f"cannot fetch the registry's keys: {exc}") from None
        keys: dict[str, jwt.PyJWK] = {}
        for entry in document.get("keys", []) if isinstance(document, dict) else []:
            if not isinstance(entry, dict) or entry.get("kty") != "OKP" or not isinstance(entry.get("kid"), str):
                continue
            try:
                keys[entry["kid"]] = jwt.PyJWK(entry, algorithm=ALGORITHM)
            except jwt.PyJWKError:
                continue
        self._keys = keys

    def _key(self, kid: str) -> jwt.PyJWK:
        key = self._keys.get(kid)
        fresh = self._fetched_at is not None and time.monotonic() - self._fetched_at < self.max_key_age
        if key is not None and fresh:
            return key
        if key is not None:  # known but old: read the set again (one caller at a time), then decide
            with self._lock:
                if self._fetched_at is None or time.monotonic() - self._fetched_at >= self.max_key_age:
                    try:
                        self._fetch_keys()
                    except CapregError:  # registry unreachable: keep verifying offline with the keys we have
                        pass
            key = self._keys.get(kid)
            if key is not None:
                return key
        with self._lock:
            key = self._keys.get(kid)
            if key is None and (
                self._fetched_at is None or time.monotonic() - self._fetched_at >= self.refetch_interval
            ):
                self._fetch_keys()
                key = self._keys.get(kid)
        if key is None:
            raise invalid_ticket(
                "unknown_key", f"the ticket is signed with key {kid[:64]!r}, which the registry does not publish"
            )
        return key

    # -- verification ---------------------------------------------------------------------

    def verify(self, ticket: str, scope: str | Iterable[str] | None = None, skill: str | None = None) -> TicketClaims:
        """The ticket's claims, or CapregError(code="invalid_ticket", reason=...) saying why not.

        `scope`: scopes the ticket must grant (a space-separated string or a list); `skill`: the
        capability id the ticket must be for."""
        if not isinstance(ticket, str) or not ticket or len(ticket) > MAX_TICKET_CHARS:
            raise invalid_ticket("malformed", "no ticket, or one too long to be a capreg ticket")
        try:
            header = jwt.get_unverified_header(ticket)
        except jwt.PyJWTError:  # not only DecodeError: a non-string kid or a `crit` header raise others
            raise invalid_ticket("malformed", "the ticket is not a JWT") from None
        if header.get("typ") != TICKET_TYP:
            raise invalid_ticket("wrong_type", f"the JWT is not a capreg ticket (typ {str(header.get('typ'))[:40]!r})")
        if header.get("alg") != ALGORITHM:
            raise invalid_ticket("wrong_algorithm", "tickets are signed with EdDSA only")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise invalid_ticket("unknown_key", "the ticket names no signing key")
        key = self._key(kid)
        try:
            payload = jwt.decode(
                ticket,
                key,
                algorithms=[ALGORITHM],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": REQUIRED_CLAIMS},
            )
        except jwt.ExpiredSignatureError:
            raise invalid_ticket("expired", "the ticket has expired") from None
        except jwt.ImmatureSignatureError:
            raise invalid_ticket("not_yet_valid", "the ticket is not valid yet") from None
        except jwt.InvalidAudienceError:
            raise invalid_ticket("wrong_audience", f"the ticket is not for {self.audience}") from None
        except jwt.InvalidIssuerError:
            raise invalid_ticket("wrong_issuer", f"the ticket was not issued by {self.issuer}") from None
        except jwt.InvalidSignatureError:
            raise invalid_ticket("bad_signature", "the ticket's signature does not verify") from None
        except jwt.MissingRequiredClaimError as exc:
            raise invalid_ticket("malformed", f"the ticket lacks the {exc.claim} claim") from None
        except jwt.InvalidTokenError as exc:
            raise invalid_ticket("malformed", f"the ticket is malformed: {exc}") from None
        claims = _claims(payload)
        if scope is not None:
            wanted = scope.split() if isinstance(scope, str) else list(scope)
            missing = [s for s in wanted if s not in claims.scopes]
            if missing:
                raise invalid_ticket("insufficient_scope", f"the ticket does not grant {' '.join(missing)}")
        if skill is not None and claims.skill != skill:
            raise invalid_ticket("wrong_skill", f"the ticket is for {claims.skill!r}, not {skill!r}")
        if self._registry is not None:
            try:
                active = self._registry.introspect(ticket).active
            except CapregError as error:
                raise invalid_ticket("introspection_failed", f"cannot check revocation: {error}") from None
            if not active:
                raise invalid_ticket(
                    "inactive", "the registry says the ticket is no longer active (revoked or retired)"
                )
        return claims

    def close(self) -> None:
        self._http.close()
        if self._registry is not None:
            self._registry.close()


def _claims(payload: dict[str, Any]) -> TicketClaims:
    try:
        return msgspec.convert(payload, TicketClaims)
    except msgspec.ValidationError as exc:
        raise invalid_ticket("malformed", f"the ticket's claims are malformed: {exc}") from None
