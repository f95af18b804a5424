"""a2a-sdk integration: TicketAuthBackend lets only callers with a valid capreg ticket reach an
a2a-sdk server app's executor, and TicketCredentials gives an a2a-sdk client a capreg ticket for
the agent it calls. Needs the a2a extra: pip install 'capreg[a2a]'. See docs/client.md.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Iterable
from typing import Any

from a2a.client.auth.credentials import CredentialService
from starlette.authentication import AuthCredentials, AuthenticationBackend, AuthenticationError, BaseUser
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection
from starlette.responses import Response

from registry.client.errors import CapregError, invalid_ticket
from registry.client.results import Ticket, TicketClaims
from registry.client.verifier import TicketVerifier

AGENT_CARD_PATH = "/.well-known/agent-card.json"


class TicketUser(BaseUser):
    """The caller a verified ticket speaks for; `claims` are the ticket's verified claims."""

    def __init__(self, claims: TicketClaims):
        self.claims = claims

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def display_name(self) -> str:
        return self.claims.sub

    @property
    def identity(self) -> str:
        return self.claims.jti


class TicketAuth(AuthCredentials):
    """Starlette's request.auth for a ticket: its scopes, and the claims themselves."""

    def __init__(self, claims: TicketClaims):
        super().__init__(claims.scopes)
        self.claims = claims


class TicketRejected(AuthenticationError):
    def __init__(self, error: CapregError):
        super().__init__(str(error))
        self.error = error


class TicketAuthBackend(AuthenticationBackend):
    """Starlette authentication for an a2a-sdk app: `Authorization: Bearer <capreg ticket>`.

    app = Starlette(routes=..., middleware=[TicketAuthBackend(verifier).middleware()])

    Every request except the public agent card (`public_paths`) must carry a ticket that `verifier`
    accepts (audience, signature, expiry, and `scope`/`skill` when given), else it is answered 401
    with a problem body naming the reason, before any a2a-sdk code runs. The executor reads the
    claims with `ticket_claims(context)`.
    """

    def __init__(
        self,
        verifier: TicketVerifier,
        *,
        scope: str | Iterable[str] | None = None,
        skill: str | None = None,
        public_paths: Iterable[str] = (AGENT_CARD_PATH,),
    ):
        self.verifier, self.scope, self.skill = verifier, scope, skill
        self.public_paths = frozenset(public_paths)

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        if conn.url.path in self.public_paths:
            return None
        scheme, _, ticket = conn.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not ticket.strip():
            raise TicketRejected(
                invalid_ticket("missing", "a capreg ticket is required (Authorization: Bearer <ticket>)")
            )
        try:
            # Off the event loop: a JWKS refetch or a revocation check is blocking I/O.
            claims = await asyncio.to_thread(self.verifier.verify, ticket.strip(), self.scope, self.skill)
        except CapregError as error:
            raise TicketRejected(error) from None
        return TicketAuth(claims), TicketUser(claims)

    @staticmethod
    def on_error(conn: HTTPConnection, exc: AuthenticationError) -> Response:
        error = exc.error if isinstance(exc, TicketRejected) else invalid_ticket("malformed", str(exc))
        body = {
            "type": "about:blank",
            "title": "Unauthorized",
            "status": 401,
            "detail": error.message,
            "code": "invalid_ticket",
            "reason": error.reason,
        }
        return Response(
            json.dumps(body),
            status_code=401,
            media_type="application/problem+json",
            headers={"WWW-Authenticate": f'Bearer error="invalid_token", error_description="{error.reason}"'},
        )

    def middleware(self) -> Middleware:
        return Middleware(AuthenticationMiddleware, backend=self, on_error=self.on_error)


def ticket_claims(context: Any) -> TicketClaims | None:
    """The verified ticket claims of the request an a2a-sdk executor is handling (its
    RequestContext or ServerCallContext), or None when the request carried none."""
    call_context = getattr(context, "call_context", context)
    auth = (getattr(call_context, "state", None) or {}).get("auth")
    return getattr(auth, "claims", None)


class TicketCredentials(CredentialService):
    """An a2a-sdk CredentialService minting capreg tickets for the agent being called.

    credentials = TicketCredentials(registry, "acme/billing-agent/invoice.lookup@^2", scopes=["invoice:read"])
    client = ClientFactory(ClientConfig(...)).create(card, interceptors=[AuthInterceptor(credentials)])

    `registry` is a Registry or an AsyncRegistry with the caller's token. A ticket is reused until
    `renew_before` seconds before it expires, then a new one is minted. The called agent's card
    must declare a bearer security scheme (and require it) for a2a-sdk to send it.
    """

    def __init__(
        self,
        registry: Any,
        ref: str,
        scopes: Iterable[str],
        *,
        ttl: int = 300,
        on_behalf_of: str | None = None,
        resources: Iterable[str] | None = None,
        parent_ticket: str | None = None,
        renew_before: float = 30.0,
    ):
        self._registry, self.ref, self.scopes = registry, ref, list(scopes)
        self._options = {
            "ttl": ttl,
            "on_behalf_of": on_behalf_of,
            "resources": resources,
            "parent_ticket": parent_ticket,
        }
        self._renew_before = renew_before
        self._ticket: Ticket | None = None
        self._lock = asyncio.Lock()

    @property
    def ticket(self) -> Ticket | None:
        """The ticket last minted (None before the first call)."""
        return self._ticket

    async def get_credentials(self, security_scheme_name: str, context: Any) -> str | None:
        async with self._lock:
            if self._ticket is None or self._ticket.expires_at.timestamp() - time.time() <= self._renew_before:
                self._ticket = await self._mint()
        return self._ticket.ticket

    async def _mint(self) -> Ticket:
        mint = self._registry.mint_ticket
        if inspect.iscoroutinefunction(mint):
            result = await mint(self.ref, self.scopes, **self._options)
        else:
            result = await asyncio.to_thread(mint, self.ref, self.scopes, **self._options)
        if not isinstance(result, Ticket):
            raise CapregError(
                f"{self.ref} requires approval ({result.approval_id}): no ticket to present yet",
                code="approval_required",
            )
        return result
