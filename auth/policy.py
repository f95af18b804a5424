"""Authorization policy: who may see a record, who may read its details, which tickets may be minted.

This module owns the decisions of docs/api.md#visibility, #release-checks, #tickets and #ticket-claims as pure
functions over msgspec Structs: record visibility, the ordered detail-release
checks, the first-ticket and re-delegation narrowing rules, the RFC 8693 actor
chain, ticket request validation and the approval-decider rule. It reads no
clock, database or token: callers pass verified claims and `now` (epoch seconds).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import msgspec

from auth.principal import Caller
from auth.identifiers import AGENT_ID_PATTERN, SKILL_ID_PATTERN, TENANT_PATTERN

# Re-delegation depth is bounded so that actor chains (nested `act` claims) stay small.
MAX_DELEGATION_DEPTH = 10
REGISTRY_ADMIN_SCOPE = "registry:admin"

# Refusal reasons of docs/api.md#refusal-reasons (403 `delegation_denied`).
SCOPE_ESCALATION = "scope_escalation"
RESOURCE_ESCALATION = "resource_escalation"
LIFETIME_ESCALATION = "lifetime_escalation"
DEPTH_EXHAUSTED = "depth_exhausted"
NOT_PARENT_AUDIENCE = "not_parent_audience"
PARENT_INVALID = "parent_invalid"
ON_BEHALF_OF_MISMATCH = "on_behalf_of_mismatch"
ACTOR_REPEATED = "actor_repeated"
SELF_APPROVAL = "self_approval"

# Scope names travel space-separated in the `scope` claim, so they cannot hold spaces or quotes.
_SCOPE_NAME = re.compile(r"^[\x21\x23-\x5B\x5D-\x7E]{1,128}$")
_AUDIENCE = re.compile(f"^{TENANT_PATTERN[1:-1]}/{AGENT_ID_PATTERN[1:-1]}$")
_SKILL_ID = re.compile(SKILL_ID_PATTERN)


# ---------------------------------------------------------------------------
# Visibility (docs/api.md#visibility)


def can_see(caller: Caller | None, *, tenant: str, visibility: str, shared_with: Sequence[str]) -> bool:
    """Whether `caller` may know the record exists; None is an anonymous caller, who sees only public records."""
    if visibility == "public":
        return True
    if caller is None:
        return False
    return caller.tenant == tenant or caller.tenant in shared_with


# ---------------------------------------------------------------------------
# Detail release (docs/api.md#release-checks)


class StoredVersion(Protocol):
    """What a gate reads of a stored capability version (registry.records.CapabilityVersion)."""

    tenant: str
    scopes: Sequence[str]
    data_regions: Sequence[str]
    status: str


class CapabilityGate(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of a capability version (and its agent) that detail release is decided on."""

    tenant: str
    visibility: str
    shared_with: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    data_regions: tuple[str, ...] = ()
    status: str = "active"

    @classmethod
    def of(cls, version: StoredVersion, *, visibility: str, shared_with: Sequence[str]) -> CapabilityGate:
        """The gate of a stored version; visibility and sharing are the agent's, not the version's."""
        return cls(
            tenant=version.tenant,
            visibility=visibility,
            shared_with=tuple(shared_with),
            scopes=tuple(version.scopes),
            data_regions=tuple(version.data_regions),
            status=version.status,
        )


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """Outcome of a detail-release check; `code` and `status` are the HTTP error when not allowed."""

    allowed: bool
    code: str | None
    status: int
    missing_scopes: tuple[str, ...] = ()


ALLOWED = Decision(allowed=True, code=None, status=200)
# The one answer for "does not exist" and "exists but you may not see it", so the two cannot be told apart.
NOT_FOUND = Decision(allowed=False, code="not_found", status=404)
RETIRED = Decision(allowed=False, code="retired", status=410)
DATA_LOCATION_DENIED = Decision(allowed=False, code="data_location_denied", status=403)


def decide_release(caller: Caller | None, cap: CapabilityGate, *, exact_version: bool = True) -> Decision:
    """Whether `caller` may receive the capability's details (schemas, examples, endpoints).

    Checks in the order of docs/api.md#release-checks: visibility (404), retirement (410), scopes (403
    `insufficient_scope`), data regions (403 `data_location_denied`). Detail
    needs a token, so an anonymous caller gets NOT_FOUND here (the HTTP layer
    answers 401 before asking). A retired version reached other than by its exact
    version (`latest`, a range) does not exist for the caller: ranges skip
    retired versions, so it is NOT_FOUND rather than 410.
    """
    if caller is None:
        return NOT_FOUND
    if not can_see(caller, tenant=cap.tenant, visibility=cap.visibility, shared_with=cap.shared_with):
        return NOT_FOUND
    if cap.status == "retired":
        return RETIRED if exact_version else NOT_FOUND
    missing = tuple(sorted(set(cap.scopes) - caller.scopes))
    if missing:
        return Decision(allowed=False, code="insufficient_scope", status=403, missing_scopes=missing)
    if cap.data_regions and (caller.regions is None or not set(cap.data_regions) & set(caller.regions)):
        return DATA_LOCATION_DENIED
    return ALLOWED


# ---------------------------------------------------------------------------
# Tickets (sections 5 and 8)


class TicketRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A ticket request as policy sees it (`parentTicket` is verified separately into a ParentTicket)."""

    audience: str
    skill: str
    version: str
    scopes: tuple[str, ...]
    ttl_seconds: int
    resources: tuple[str, ...] = ()
    on_behalf_of: str | None = None
    max_depth: int = 0


class ParentTicket(msgspec.Struct, frozen=True, kw_only=True):
    """The verified claims of a parent ticket (signature, expiry and revocation already checked)."""

    jti: str
    sub: str
    aud: str
    act: dict[str, Any] | None
    tenant: str
    scopes: tuple[str, ...]
    resources: tuple[str, ...]
    exp: int
    depth: int
    max_depth: int
    on_behalf_of: str | None = None

    @classmethod
    def from_claims(cls, claims: dict[str, Any]) -> ParentTicket:
        """Read verified ticket claims (docs/api.md#ticket-claims).

        The ticket has no `onBehalfOf` claim: `sub` is the subject when one was
        given, else the minting caller, who is also the outermost actor. So a
        `sub` that differs from `act.sub` is the inherited subject.
        """
        act = claims.get("act")
        minter = act.get("sub") if isinstance(act, dict) else None
        sub = claims["sub"]
        return cls(
            jti=claims["jti"],
            sub=sub,
            aud=claims["aud"],
            act=act if isinstance(act, dict) else None,
            tenant=claims["tenant"],
            scopes=tuple(claims.get("scope", "").split()),
            resources=tuple(claims.get("resources", ())),
            exp=int(claims["exp"]),
            depth=int(claims.get("depth", 0)),
            max_depth=int(claims.get("maxDepth", 0)),
            on_behalf_of=None if sub == minter else sub,
        )


class Refusal(msgspec.Struct, frozen=True, kw_only=True):
    """A refused ticket or approval: `reason` is a refusal reason of docs/api.md#refusal-reasons, `code` the HTTP error code (403)."""

    reason: str
    message: str
    code: str = "delegation_denied"


class TicketGrant(msgspec.Struct, frozen=True, kw_only=True):
    """The delegation claims of a ticket that passed policy; the minter adds iss, tenant, cap, iat, nbf, jti."""

    sub: str
    aud: str
    act: dict[str, Any]
    scopes: tuple[str, ...]
    resources: tuple[str, ...]
    exp: int
    depth: int
    max_depth: int
    on_behalf_of: str | None
    parent: str | None


def escalated_scopes(requested: Iterable[str], *allowed_sets: Iterable[str]) -> tuple[str, ...]:
    """The requested scopes not granted by every one of `allowed_sets`, sorted.

    Comparison is exact and case-sensitive: `Invoice:read` is not `invoice:read`,
    so a case variant is an escalation, never a match.
    """
    granted: set[str] | None = None
    for allowed in allowed_sets:
        granted = set(allowed) if granted is None else granted & set(allowed)
    return tuple(sorted(set(requested) - (granted or set())))


def actor_chain(caller_principal: str, parent_act: dict[str, Any] | None) -> dict[str, Any]:
    """The RFC 8693 `act` claim with `caller_principal` as the current actor and the parent's chain nested."""
    if parent_act is None:
        return {"sub": caller_principal}
    return {"sub": caller_principal, "act": parent_act}


def actors_in_chain(act: dict[str, Any] | None) -> list[str]:
    """The actors of an `act` claim, current actor first."""
    actors: list[str] = []
    while isinstance(act, dict):
        if "sub" in act:
            actors.append(str(act["sub"]))
        act = act.get("act")
    return actors


def normalized_ticket_request(req: TicketRequest) -> TicketRequest:
    """The request with duplicate scopes and resources removed and both sorted, as they appear in claims."""
    return msgspec.structs.replace(req, scopes=tuple(sorted(set(req.scopes))), resources=tuple(sorted(set(req.resources))))


def validate_ticket_request(req: TicketRequest, *, max_ttl: int) -> list[dict[str, str]]:
    """Malformed-request errors (400 `invalid_request`) as `{"path", "message"}`, paths in wire (camelCase) names.

    Duplicate scopes or resources are not errors; `normalized_ticket_request` folds them.
    """
    errors: list[dict[str, str]] = []
    if not _AUDIENCE.match(req.audience):
        errors.append({"path": "$.audience", "message": "audience must be an agent ref 'tenant/agentId'"})
    if len(req.skill) > 128 or not _SKILL_ID.match(req.skill):
        errors.append({"path": "$.skill", "message": "skill must be a capability id"})
    if not req.version:
        errors.append({"path": "$.version", "message": "version must be an exact version, 'latest' or a range"})
    if not req.scopes:
        errors.append({"path": "$.scopes", "message": "at least one scope is required"})
    for i, scope in enumerate(req.scopes):
        if not _SCOPE_NAME.match(scope):
            errors.append({"path": f"$.scopes[{i}]", "message": f"invalid scope name {scope!r}"})
    for i, resource in enumerate(req.resources):
        if not resource:
            errors.append({"path": f"$.resources[{i}]", "message": "resource must not be empty"})
    if req.on_behalf_of is not None and not req.on_behalf_of:
        errors.append({"path": "$.onBehalfOf", "message": "onBehalfOf must not be empty"})
    if req.ttl_seconds <= 0 or req.ttl_seconds > max_ttl:
        errors.append({"path": "$.ttlSeconds", "message": f"ttlSeconds must be between 1 and {max_ttl}"})
    if req.max_depth < 0 or req.max_depth > MAX_DELEGATION_DEPTH:
        errors.append({"path": "$.maxDepth", "message": f"maxDepth must be between 0 and {MAX_DELEGATION_DEPTH}"})
    return errors


def check_first_ticket(caller: Caller, req: TicketRequest, capability_scopes: Iterable[str]) -> Refusal | None:
    """A first ticket: requested scopes ⊆ capability scopes ∩ caller token scopes."""
    escalated = escalated_scopes(req.scopes, capability_scopes, caller.scopes)
    if escalated:
        return Refusal(reason=SCOPE_ESCALATION, message=f"scopes not held or not served: {' '.join(escalated)}")
    return None


def check_redelegation(
    caller: Caller, req: TicketRequest, parent: ParentTicket, capability_scopes: Iterable[str], *, now: int
) -> Refusal | None:
    """A child ticket acting on `parent`'s authority; the first failing check refuses.

    Order: parent expired (`parent_invalid`), caller is not the parent's audience
    (`not_parent_audience`, before anything that would tell a stranger about the
    parent), scopes (`scope_escalation`), resources (`resource_escalation`),
    parent depth then child depth (`depth_exhausted`), expiry (`lifetime_escalation`:
    never clamped silently), subject (`on_behalf_of_mismatch`), actor chain
    (`actor_repeated`). The parent's signature and revocation are the verifier's.
    """
    if parent.exp <= now:
        return Refusal(reason=PARENT_INVALID, message="the parent ticket has expired")
    if caller.principal != parent.aud:
        return Refusal(reason=NOT_PARENT_AUDIENCE, message="only the parent ticket's audience may re-delegate it")
    escalated = escalated_scopes(req.scopes, parent.scopes, capability_scopes)
    if escalated:
        return Refusal(reason=SCOPE_ESCALATION, message=f"scopes beyond the parent ticket or capability: {' '.join(escalated)}")
    # An empty parent list is unrestricted; an empty child list under a restricted parent would widen it to everything.
    if parent.resources:
        if not req.resources:
            return Refusal(
                reason=RESOURCE_ESCALATION, message="the parent ticket is restricted to resources; the child must list a subset"
            )
        beyond = sorted(set(req.resources) - set(parent.resources))
        if beyond:
            return Refusal(reason=RESOURCE_ESCALATION, message=f"resources beyond the parent ticket: {' '.join(beyond)}")
    if parent.max_depth < 1:
        return Refusal(reason=DEPTH_EXHAUSTED, message="the parent ticket allows no further delegation")
    if req.max_depth > parent.max_depth - 1:
        return Refusal(reason=DEPTH_EXHAUSTED, message=f"maxDepth must be at most {parent.max_depth - 1}")
    if now + req.ttl_seconds > parent.exp:
        return Refusal(
            reason=LIFETIME_ESCALATION,
            message=f"the child would outlive its parent; ttlSeconds must be at most {parent.exp - now}",
        )
    if req.on_behalf_of is not None and req.on_behalf_of != parent.on_behalf_of:
        return Refusal(reason=ON_BEHALF_OF_MISMATCH, message="onBehalfOf is inherited from the parent ticket and cannot change")
    actors = actors_in_chain(actor_chain(caller.principal, parent.act))
    if len(set(actors)) != len(actors):
        return Refusal(reason=ACTOR_REPEATED, message="an actor may appear only once in the delegation chain")
    return None


def first_ticket_grant(caller: Caller, req: TicketRequest, *, now: int) -> TicketGrant:
    """The claims of a first ticket; call after `check_first_ticket` passed."""
    req = normalized_ticket_request(req)
    return TicketGrant(
        sub=req.on_behalf_of if req.on_behalf_of is not None else caller.principal,
        aud=req.audience,
        act=actor_chain(caller.principal, None),
        scopes=req.scopes,
        resources=req.resources,
        exp=now + req.ttl_seconds,
        depth=0,
        max_depth=req.max_depth,
        on_behalf_of=req.on_behalf_of,
        parent=None,
    )


def child_ticket_grant(caller: Caller, req: TicketRequest, parent: ParentTicket, *, now: int) -> TicketGrant:
    """The claims of a re-delegated ticket; call after `check_redelegation` passed (nothing is clamped here)."""
    req = normalized_ticket_request(req)
    on_behalf_of = parent.on_behalf_of
    return TicketGrant(
        sub=on_behalf_of if on_behalf_of is not None else caller.principal,
        aud=req.audience,
        act=actor_chain(caller.principal, parent.act),
        scopes=req.scopes,
        resources=req.resources,
        exp=now + req.ttl_seconds,
        depth=parent.depth + 1,
        max_depth=req.max_depth,
        on_behalf_of=on_behalf_of,
        parent=parent.jti,
    )


# ---------------------------------------------------------------------------
# Approvals (docs/api.md#approvals)


def check_approval_decider(decider: Caller, requester_principal: str, capability_tenant: str) -> Refusal | None:
    """Whether `decider` may approve or deny a pending request.

    Self-approval is checked first: the requester deciding its own request is
    `self_approval` whatever else it holds. Then the decider must be in the
    capability's tenant (`tenant_mismatch`) and hold `registry:admin`
    (`insufficient_scope`); those two carry their own HTTP codes.
    """
    if decider.principal == requester_principal:
        return Refusal(reason=SELF_APPROVAL, message="the requester cannot decide its own request")
    if decider.tenant != capability_tenant:
        return Refusal(
            reason="tenant_mismatch", message="approvals are decided in the capability's tenant", code="tenant_mismatch"
        )
    if not decider.holds(REGISTRY_ADMIN_SCOPE):
        return Refusal(
            reason="insufficient_scope", message=f"deciding approvals needs {REGISTRY_ADMIN_SCOPE}", code="insufficient_scope"
        )
    return None
