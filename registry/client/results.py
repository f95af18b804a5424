"""Typed answers of the registry as the client returns them (msgspec Structs, snake_case attributes).

They decode leniently: fields a newer registry adds are ignored, and fields an older one lacks take
their defaults, so a client and a registry of neighbouring versions keep talking.
"""

from __future__ import annotations

import unicodedata
from datetime import datetime
from typing import Any, TypeGuard
from urllib.parse import urlsplit

import msgspec


class Result(msgspec.Struct, rename="camel", kw_only=True):
    """Base of every result: camelCase on the wire, snake_case in Python."""

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready builtins with the registry's camelCase keys."""
        return msgspec.to_builtins(self)


class Slo(Result):
    latency_p99_ms: int | None = None
    availability: float | None = None


class Capability(Result):
    """A capability version as discovery shows it: public metadata, no schemas, no endpoints."""

    ref: str
    tenant: str
    agent_id: str
    id: str
    version: str
    name: str = ""
    description: str = ""
    tags: list[str] = []
    scopes: list[str] = []
    side_effect: str = "none"
    requires_approval: bool = False
    data_regions: list[str] = []
    slo: Slo | None = None
    status: str = "active"
    sunset_at: datetime | None = None
    effective_at: datetime | None = None
    health: str = "unknown"
    live_instances: int | None = None
    updated_at: datetime | None = None


class Interface(Result):
    url: str
    protocol_binding: str
    protocol_version: str | None = None
    tenant: str | None = None


class Instance(Result):
    instance_id: str
    url: str | None = None
    expires_at: datetime | None = None
    load: float | None = None
    last_seen_at: datetime | None = None


class Endpoints(Result):
    interfaces: list[Interface] = []
    instances: list[Instance] = []
    # Live instances in all; `instances` lists at most 50 of them, the least loaded first.
    instance_count: int | None = None


def callable_url(url: object) -> TypeGuard[str]:
    """Whether `url` is an absolute http(s) URL with a host and nothing a caller could be tricked by
    (blanks, control or bidi characters, backslashes, user info). Whatever a registry answers, only
    such URLs are offered to call."""
    if not isinstance(url, str) or not url or len(url) > 2048 or "\\" in url:
        return False
    if any(ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf") for ch in url):
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a malformed port)
    except ValueError:
        return False
    return (
        parts.scheme in ("http", "https")
        and url.lower().startswith(parts.scheme + "://")
        and bool(parts.hostname)
        and "@" not in parts.netloc
    )


class CapabilityDetail(Capability, kw_only=True):
    """The public view plus what passes the tenant, scope and region checks."""

    input_schema: dict[str, Any] = {}
    output_schema: dict[str, Any] = {}
    examples: list[str] = []
    # Behaviour fixtures, as the registry stores them ({name, input, expect}).
    fixtures: list[dict[str, Any]] = []
    # For a candidate, the version whose fixtures judge it.
    baseline: str | None = None
    endpoints: Endpoints = msgspec.field(default_factory=Endpoints)

    def urls(self) -> list[str]:
        """Where to call it: live instances' URLs first (least loaded first, as the registry lists
        them), then the agent's declared interfaces; only absolute http(s) URLs (`callable_url`)."""
        seen: list[str] = []
        for url in [i.url for i in self.endpoints.instances] + [i.url for i in self.endpoints.interfaces]:
            if callable_url(url) and url not in seen:
                seen.append(url)
        return seen


class ReplayVerdict(Result):
    """The registry's verdict on a replay report: `passed` (the candidate, now active, is `version`)
    or `failed` (`errors`: one per failing fixture, {fixture, kind, message})."""

    verdict: str
    version: Capability | None = None
    errors: list[dict[str, Any]] = []

    @property
    def passed(self) -> bool:
        return self.verdict == "passed"


class Agent(Result):
    """An agent's public view."""

    tenant: str
    agent_id: str
    name: str = ""
    description: str = ""
    version: str = ""
    provider: dict[str, Any] | None = None
    visibility: str = "tenant"
    health: str = "unknown"
    live_instances: int | None = None
    skills: list[Capability] = []
    updated_at: datetime | None = None
    # {"signed": true, "kid": "..."} when the last registration carried a valid publisher signature.
    publisher: dict[str, Any] | None = None


class VersionRef(Result):
    id: str
    version: str


class Registration(Result):
    """The answer to register: the agent's view and which versions were new or unchanged."""

    agent: Agent
    published: list[VersionRef] = []
    unchanged: list[VersionRef] = []
    # New versions held back until a replay passes: {id, version, baseline, fixtures}.
    candidates: list[dict[str, Any]] = []
    created: bool = False  # 201 (something new) rather than 200


class Heartbeat(Result):
    health: str
    expires_at: datetime


class Ticket(Result):
    """A minted delegation ticket: `ticket` is the JWT to present to the audience agent."""

    ticket: str
    jti: str
    expires_at: datetime
    scopes: list[str] = []
    resources: list[str] = []
    ref: str = ""
    depth: int = 0
    max_depth: int = 0


class Approval(Result):
    """A ticket request waiting for a tenant admin (capabilities with `requiresApproval`)."""

    approval_id: str
    status: str
    request: dict[str, Any] | None = None
    ticket: Ticket | None = None


class Introspection(Result):
    """RFC 7662 style: `active`, and the ticket's claims when it is."""

    active: bool
    iss: str | None = None
    sub: str | None = None
    aud: str | None = None
    act: dict[str, Any] | None = None
    tenant: str | None = None
    scope: str | None = None
    cap: dict[str, Any] | None = None
    resources: list[str] = []
    iat: int | None = None
    nbf: int | None = None
    exp: int | None = None
    jti: str | None = None
    depth: int | None = None
    max_depth: int | None = None
    parent: str | None = None


class Withdrawal(Result):
    """What withdrawing an agent did: `retired` the versions this call retired (empty when the agent
    was withdrawn already), `instances_ended` the live leases it ended."""

    tenant: str
    agent_id: str
    withdrawn_at: datetime
    retired: list[str] = []
    instances_ended: int = 0


class Revocation(Result):
    jti: str
    revoked: list[str] = []


class Grant(Result):
    """A ticket as auditors see it: `actor` minted it (`tenant/sub`)."""

    jti: str
    actor: str
    audience: str
    ref: str
    on_behalf_of: str | None = None
    scopes: list[str] = []
    resources: list[str] = []
    issued_at: datetime | None = None
    expires_at: datetime | None = None
    depth: int = 0
    max_depth: int = 0
    parent: str | None = None
    act: dict[str, Any] | None = None
    active: bool | None = None


class AuditEvent(Result):
    """One appended audit event."""

    seq: int
    at: datetime
    type: str
    outcome: str
    tenant: str | None = None
    actor_tenant: str | None = None
    actor: str | None = None
    actor_issuer: str | None = None
    on_behalf_of: str | None = None
    ref: str | None = None
    scopes: list[str] = []
    reason: str | None = None
    trace_id: str | None = None
    hash: str | None = None
    prev_hash: str | None = None


class Checkpoint(Result):
    seq: int
    hash: str
    at: datetime
    signature: str


class TicketClaims(Result):
    """The verified claims of a capreg ticket (see docs/client.md, TicketVerifier)."""

    iss: str
    sub: str
    aud: str
    jti: str
    exp: int
    iat: int | None = None
    nbf: int | None = None
    tenant: str | None = None
    scope: str = ""
    cap: dict[str, Any] = {}
    act: dict[str, Any] | None = None
    resources: list[str] = []
    depth: int = 0
    max_depth: int = 0
    parent: str | None = None

    @property
    def scopes(self) -> list[str]:
        return self.scope.split()

    @property
    def skill(self) -> str | None:
        return self.cap.get("id")

    @property
    def caller(self) -> str | None:
        """The immediate caller (the innermost actor of `act`): `tenant/sub`."""
        return (self.act or {}).get("sub")


class Page(msgspec.Struct, rename="camel", kw_only=True):
    items: list[Any]
    next_cursor: str | None = None


class OfferInstance(Result):
    """The live instance an offer suggests calling: the agent's least loaded."""

    instance_id: str
    url: str | None = None
    load: float | None = None
    expires_at: datetime | None = None


class OfferWhy(Result):
    """The parts of an offer's score, each in [0, 1], higher is better."""

    relevance: float = 0.0
    risk: float = 0.0
    load: float = 0.0
    slo: float = 0.0


class Offer(Result):
    """One answer of POST /v1/offers: a capability the caller may call now, and where."""

    ref: str
    agent: str
    id: str
    version: str
    name: str = ""
    side_effect: str = "none"
    requires_approval: bool = False
    score: float = 0.0
    why: OfferWhy = msgspec.field(default_factory=OfferWhy)
    instance: OfferInstance | None = None
    ticket: Ticket | None = None
    approval: Approval | None = None
    # The problem body POST /v1/tickets answered when the ticket asked for was refused.
    ticket_error: dict[str, Any] | None = None


class Excluded(Result):
    """Capabilities the caller can see that matched but were not offered, by first reason."""

    scope: int = 0
    region: int = 0
    unhealthy: int = 0


class Offers(Result):
    offers: list[Offer] = []
    excluded: Excluded = msgspec.field(default_factory=Excluded)
