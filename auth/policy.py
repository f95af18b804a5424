"""Authorization policy: every decision on what an authenticated caller may do, as pure functions.

This module owns the decisions of docs/api.md#visibility, #release-checks, #tickets and #ticket-claims
over msgspec Structs: record visibility, endpoint scopes, publishing, lifecycle changes, heartbeats,
the ordered detail-release checks, the first-ticket and re-delegation narrowing rules, the RFC 8693
actor chain, ticket request validation, revocation, introspection and approvals. It reads no clock,
database or token: callers pass verified claims, stored rows' fields and `now` (epoch seconds, or
the moment a rule over rows is decided at). The rules over one row and the order of a skill's versions
(`VISIBLE`, `IN_FORCE`, `LATEST_ORDER`, below) are also what db/ renders into its queries.

Each decision answers None (allowed) or a `Refusal`: an error code of docs/api.md#error-codes with
its message, refusal reason and missing scopes, never an HTTP status (registry.core.problems maps a code
to its status, once). Where a record may be invisible to the caller, invisibility is decided first
and answers `not_found`, so a refusal never reveals that a record exists.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import msgspec

from auth.identifiers import AGENT_ID_PATTERN, SKILL_ID_PATTERN, TENANT_PATTERN
from auth.predicates import (
    Field,
    Order,
    Param,
    Rule,
    all_of,
    any_of,
    ascending,
    descending,
    eq,
    is_null,
    le,
    member,
    ne,
)
from auth.principal import Caller

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
# Visibility, what is in force and which version is latest (docs/api.md#visibility,
# #version-selection): rules over one row and an order of rows, each defined once here and read two
# ways (auth.predicates): evaluated in Python on rows already read and rendered by db/ as the SQL of
# every query that lists rows.

# The viewer's tenant (None: anonymous) and the moment decided at: the app's clock, which every
# query is given as a bound parameter, so that SQL and Python decide by one clock.
VIEWER = Param("viewer", "text")
NOW = Param("now", "timestamptz")

# Who may know a record exists, on the agent's row (visibility is per agent): public records to
# anyone, the others to their own tenant and the tenants they are shared with.
VISIBLE = Rule(
    any_of(
        eq(Field("visibility"), "public"),
        eq(Field("tenant"), VIEWER),
        member(VIEWER, Field("shared_with")),
    )
)

# A capability version in force now (discovery, cards, `latest` and ranges show only these): not
# withdrawn (retired, or a candidate waiting for its replay, docs/api.md#the-replay-gate) and
# effective (no `effectiveAt`, or one not in the future). A sunset date passing changes nothing: a
# deprecated version is in force until it is retired.
_NOT_WITHDRAWN = all_of(ne(Field("status"), "retired"), ne(Field("status"), "candidate"))
_EFFECTIVE = any_of(is_null(Field("effective_at")), le(Field("effective_at"), NOW))
NOT_WITHDRAWN = Rule(_NOT_WITHDRAWN)
EFFECTIVE = Rule(_EFFECTIVE)
IN_FORCE = Rule(all_of(_NOT_WITHDRAWN, _EFFECTIVE))

# The latest version of a skill is its first version in force in this order (`latest`, discovery's
# `versions=latest`, cards): releases before pre-releases, then the highest precedence
# (`version_key`, registry.versions.semver.Version.sort_key, a C-collated column), then, among builds
# of one precedence (`1.0.0+a`, `1.0.0+b`), the version text bytewise, so exactly one is latest. A
# pre-release is latest only while its skill has no release in force.
LATEST_ORDER = Order(
    ascending(Field("prerelease")),
    descending(Field("version_key")),
    descending(Field("version"), bytewise=True),
)


def can_see(caller: Caller | None, *, tenant: str, visibility: str, shared_with: Sequence[str]) -> bool:
    """Whether `caller` may know the record exists (VISIBLE); None is an anonymous caller, who sees only public records."""
    return VISIBLE.holds(
        {"tenant": tenant, "visibility": visibility, "shared_with": shared_with},
        viewer=None if caller is None else caller.tenant,
    )


def sees_candidates(caller: Caller | None, tenant: str) -> bool:
    """Whether `caller` may know of `tenant`'s candidate versions (docs/api.md#the-replay-gate): only
    its own tenant, so that its owner can run one before it is released; for anyone else a
    candidate does not exist."""
    return caller is not None and caller.tenant == tenant


# ---------------------------------------------------------------------------
# Detail release (docs/api.md#release-checks)


class StoredVersion(Protocol):
    """What a gate reads of a stored capability version (registry.core.records.CapabilityVersion).
    Read-only members, so that a version keeping lists (or tuples) for the sequences conforms."""

    @property
    def tenant(self) -> str: ...
    @property
    def scopes(self) -> Sequence[str]: ...
    @property
    def data_regions(self) -> Sequence[str]: ...
    @property
    def status(self) -> str: ...
    @property
    def ref(self) -> str: ...


class CapabilityGate(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of a capability version (and its agent) that detail release is decided on."""

    tenant: str
    visibility: str
    shared_with: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    data_regions: tuple[str, ...] = ()
    status: str = "active"
    ref: str = ""  # `tenant/agent/skill@version`, named in the `retired` message

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
            ref=version.ref,
        )


# The codes a decision may refuse with; registry.core.error_codes gives each its status (checked at
# its import), and a Refusal with any other code fails where it is made.
REFUSAL_CODES = frozenset(
    {"not_found", "retired", "insufficient_scope", "tenant_mismatch", "data_location_denied", "delegation_denied"}
)


class Refusal(msgspec.Struct, frozen=True, kw_only=True):
    """A refused decision: `code` is an error code of docs/api.md#error-codes, `reason` a refusal reason
    of docs/api.md#refusal-reasons (for `delegation_denied`), `missing_scopes` what an
    `insufficient_scope` refusal lacks. No HTTP status: registry.core.problems maps codes to statuses."""

    code: str
    message: str
    reason: str | None = None
    missing_scopes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.code not in REFUSAL_CODES:
            raise ValueError(f"{self.code!r} is not a refusal code (auth.policy.REFUSAL_CODES)")


NOT_FOUND_CODE = "not_found"
# The one answer for "does not exist" and "exists but you may not see it", so the two cannot be told apart.
NOT_FOUND = Refusal(code=NOT_FOUND_CODE, message="no such capability version")
DATA_LOCATION_DENIED = Refusal(
    code="data_location_denied",
    message="this capability's data stays in regions your token's `regions` claim does not include",
)
TENANT_MISMATCH_MESSAGE = "the path names a tenant other than the caller's"


def not_found(what: str) -> Refusal:
    """`not_found` for a record the caller may not see or that does not exist ("no such <what>")."""
    return Refusal(code=NOT_FOUND_CODE, message=f"no such {what}")


def tenant_mismatch(message: str = TENANT_MISMATCH_MESSAGE) -> Refusal:
    return Refusal(code="tenant_mismatch", message=message)


def missing_scope(scope: str) -> Refusal:
    """`insufficient_scope` for an operation that needs `scope`."""
    return Refusal(
        code="insufficient_scope", message=f"this operation needs the scope {scope}", missing_scopes=(scope,)
    )


def delegation_denied(*, reason: str, message: str) -> Refusal:
    """A refused ticket request: `reason` is one of the refusal reasons above."""
    return Refusal(code="delegation_denied", message=message, reason=reason)


def check_scope(caller: Caller, scope: str | None) -> Refusal | None:
    """An endpoint that needs `scope` (None: any authenticated caller)."""
    if scope is not None and not caller.holds(scope):
        return missing_scope(scope)
    return None


def decide_release(caller: Caller | None, cap: CapabilityGate, *, exact_version: bool = True) -> Refusal | None:
    """Whether `caller` may receive the capability's details (schemas, examples, endpoints).

    Checks in the order of docs/api.md#release-checks: visibility (404), retirement (410), scopes (403
    `insufficient_scope`), data regions (403 `data_location_denied`). Detail
    needs a token, so an anonymous caller gets NOT_FOUND here (the HTTP layer
    answers 401 before asking). A retired version reached other than by its exact
    version (`latest`, a range) does not exist for the caller: ranges skip
    retired versions, so it is NOT_FOUND rather than 410.
    """
    if caller is None or not VISIBLE.holds(cap, viewer=caller.tenant):
        return NOT_FOUND
    return decide_release_of_visible(caller, cap, exact_version=exact_version)


def decide_release_of_visible(caller: Caller, cap: CapabilityGate, *, exact_version: bool) -> Refusal | None:
    """`decide_release` after its first check, for a version of an agent the request already found
    visible to `caller` (the extended card: the agent is decided once, then each of its skills), so
    that one request decides visibility once."""
    if cap.status == "candidate" and not sees_candidates(caller, cap.tenant):
        return NOT_FOUND
    if cap.status == "retired":
        return Refusal(code="retired", message=f"{cap.ref} is retired") if exact_version else NOT_FOUND
    missing = tuple(sorted(set(cap.scopes) - caller.scopes))
    if missing:
        return Refusal(
            code="insufficient_scope",
            message=f"releasing this capability needs the scopes: {' '.join(missing)}",
            missing_scopes=missing,
        )
    if not serves_regions(cap.data_regions, caller.regions):
        return DATA_LOCATION_DENIED
    return None


def serves_regions(data_regions: Sequence[str], regions: Iterable[str] | None) -> bool:
    """The one data-region rule (issue 36): a capability that declares no `data_regions` serves every
    region; one that declares some serves `regions` when one of them is among its own. Release reads
    it with the token's `regions` claim (no claim: only capabilities that declare none), offers and
    discovery's `region` filter with the one region asked for, ARD with its filter's; db/ renders it
    as SQL (`db.capabilities.serves_regions_sql`), tests/auth/test_sql_rules_agree.py holds the two
    readings together."""
    return not data_regions or not set(data_regions).isdisjoint(regions or ())


def release_profile(caller: Caller) -> tuple[str, frozenset[str], tuple[str, ...] | None]:
    """What `decide_release` reads of a caller: its tenant, scopes and regions. Two callers with the
    same profile get the same decision on every capability, so a decision made for one may be kept
    for the other (offers keep their eligible candidates per profile, registry.offers.service).
    A rule that reads more of the caller must add it here (tests/auth/test_release_profile.py)."""
    return (caller.tenant, caller.scopes, caller.regions)


def decide_ticket_target(caller: Caller, cap: CapabilityGate, *, exact_version: bool) -> Refusal | None:
    """Whether `caller` may ask for a ticket to the capability version: it must be able to see it in
    detail (visible; asked for exactly, not retired). Detail release's scope rule is replaced by the
    ticket's subset rule (`check_first_ticket`, `check_redelegation`), and data regions are not a
    ticket check: they gate who receives schemas and endpoints, not who may delegate a call."""
    return decide_release(caller, msgspec.structs.replace(cap, scopes=(), data_regions=()), exact_version=exact_version)


# ---------------------------------------------------------------------------
# Registration, lifecycle and heartbeats (docs/api.md#register-an-agent, #lifecycle, #heartbeats)

PUBLISH_SCOPE = "registry:publish"


def check_publish(caller: Caller, tenant: str) -> Refusal | None:
    """Registering an agent in `tenant` (and publishing its versions): `registry:publish`, own tenant."""
    if (refusal := check_scope(caller, PUBLISH_SCOPE)) is not None:
        return refusal
    if caller.tenant != tenant:
        return tenant_mismatch()
    return None


ATTEST_SCOPE = "registry:attest"


def check_attest(caller: Caller, tenant: str) -> Refusal | None:
    """Submitting a replay report for a version of `tenant` (docs/api.md#the-replay-gate): only its
    own tenant may know of a candidate, so another tenant is `not_found` (first); then
    `registry:attest`."""
    if not sees_candidates(caller, tenant):
        return NOT_FOUND
    return check_scope(caller, ATTEST_SCOPE)


def check_replay_listing(caller: Caller, tenant: str) -> Refusal | None:
    """Reading a version's replay verdicts: own tenant (`not_found` otherwise, first), `registry:read`."""
    if not sees_candidates(caller, tenant):
        return NOT_FOUND
    return check_scope(caller, "registry:read")


def check_lifecycle(caller: Caller, tenant: str, *, agent_visible: bool) -> Refusal | None:
    """Deprecating or retiring a version of `tenant`'s agent: visible (`not_found` otherwise, first),
    the caller's own tenant, `registry:admin`."""
    if not agent_visible:
        return NOT_FOUND
    if caller.tenant != tenant:
        return tenant_mismatch()
    return check_scope(caller, REGISTRY_ADMIN_SCOPE)


def check_heartbeat(caller: Caller, tenant: str, *, agent_visible: bool) -> Refusal | None:
    """Renewing an instance lease of `tenant`'s agent: `registry:publish`, then (another tenant) an
    invisible agent is `not_found`, a visible one `tenant_mismatch`."""
    if (refusal := check_scope(caller, PUBLISH_SCOPE)) is not None:
        return refusal
    if caller.tenant != tenant:
        return tenant_mismatch() if agent_visible else not_found("agent")
    return None


# ---------------------------------------------------------------------------
# Tickets (docs/api.md#tickets)


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
    return msgspec.structs.replace(
        req, scopes=tuple(sorted(set(req.scopes))), resources=tuple(sorted(set(req.resources)))
    )


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
        return delegation_denied(
            reason=SCOPE_ESCALATION, message=f"scopes not held or not served: {' '.join(escalated)}"
        )
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
        return parent_invalid("the parent ticket has expired")
    if caller.principal != parent.aud:
        return delegation_denied(
            reason=NOT_PARENT_AUDIENCE, message="only the parent ticket's audience may re-delegate it"
        )
    escalated = escalated_scopes(req.scopes, parent.scopes, capability_scopes)
    if escalated:
        return delegation_denied(
            reason=SCOPE_ESCALATION, message=f"scopes beyond the parent ticket or capability: {' '.join(escalated)}"
        )
    # An empty parent list is unrestricted; an empty child list under a restricted parent would widen it to everything.
    if parent.resources:
        if not req.resources:
            return delegation_denied(
                reason=RESOURCE_ESCALATION,
                message="the parent ticket is restricted to resources; the child must list a subset",
            )
        beyond = sorted(set(req.resources) - set(parent.resources))
        if beyond:
            return delegation_denied(
                reason=RESOURCE_ESCALATION, message=f"resources beyond the parent ticket: {' '.join(beyond)}"
            )
    if parent.max_depth < 1:
        return delegation_denied(reason=DEPTH_EXHAUSTED, message="the parent ticket allows no further delegation")
    if req.max_depth > parent.max_depth - 1:
        return delegation_denied(reason=DEPTH_EXHAUSTED, message=f"maxDepth must be at most {parent.max_depth - 1}")
    if now + req.ttl_seconds > parent.exp:
        return delegation_denied(
            reason=LIFETIME_ESCALATION,
            message=f"the child would outlive its parent; ttlSeconds must be at most {parent.exp - now}",
        )
    if req.on_behalf_of is not None and req.on_behalf_of != parent.on_behalf_of:
        return delegation_denied(
            reason=ON_BEHALF_OF_MISMATCH, message="onBehalfOf is inherited from the parent ticket and cannot change"
        )
    actors = actors_in_chain(actor_chain(caller.principal, parent.act))
    if len(set(actors)) != len(actors):
        return delegation_denied(reason=ACTOR_REPEATED, message="an actor may appear only once in the delegation chain")
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


class ApprovalParties(msgspec.Struct, frozen=True, kw_only=True):
    """Who a pending approval concerns: its requester (`tenant/sub`, and the issuer of the token it
    asked with) and the capability's tenant."""

    requester: str
    tenant: str
    requester_issuer: str | None = None

    def requested_by(self, caller: Caller) -> bool:
        """`caller` is the requester: the same principal, from the same issuer (None: an approval
        recorded before issuers were kept, which then only matches the principal)."""
        return caller.principal == self.requester and self.requester_issuer in (None, caller.issuer)


def check_approval_reader(caller: Caller, approval: ApprovalParties | None) -> Refusal | None:
    """Reading an approval: its requester, or `registry:admin` of the capability's tenant; anyone
    else (and a missing approval) is `not_found`."""
    if approval is None or not (
        approval.requested_by(caller) or (caller.tenant == approval.tenant and caller.holds(REGISTRY_ADMIN_SCOPE))
    ):
        return not_found("approval")
    return None


def check_approval_decider(caller: Caller, approval: ApprovalParties | None) -> Refusal | None:
    """Whether `caller` may approve or deny a pending request.

    An approval is invisible (`not_found`) to all but its requester and the capability's tenant.
    Then self-approval: the requester's principal deciding its own request is `self_approval`
    whatever else it holds, and whichever issuer its token comes from (the stricter reading). Anyone else left is in the capability's tenant and must hold `registry:admin`
    (`insufficient_scope`).
    """
    if approval is None or (caller.principal != approval.requester and caller.tenant != approval.tenant):
        return not_found("approval")
    if caller.principal == approval.requester:
        return delegation_denied(reason=SELF_APPROVAL, message="the requester cannot decide its own request")
    return check_scope(caller, REGISTRY_ADMIN_SCOPE)


# ---------------------------------------------------------------------------
# Revocation and introspection (docs/api.md#tickets)


class TicketParties(msgspec.Struct, frozen=True, kw_only=True):
    """Who a stored ticket concerns: its capability's tenant and the minter (`tenant/sub`, and its tenant)."""

    tenant: str
    actor: str
    actor_tenant: str


def check_revoke(caller: Caller, ticket: TicketParties | None) -> Refusal | None:
    """Revoking a ticket (and its descendants): its minter, or `registry:admin` of the capability's tenant.

    Tickets are seen by their capability's tenant and by the minter's tenant; others learn nothing
    (`not_found`). In the capability's tenant, a caller without the scope is `insufficient_scope`;
    in the minter's tenant, another principal is `tenant_mismatch`.
    """
    if ticket is None:
        return not_found("ticket")
    if caller.principal == ticket.actor or (caller.tenant == ticket.tenant and caller.holds(REGISTRY_ADMIN_SCOPE)):
        return None
    if caller.tenant not in (ticket.tenant, ticket.actor_tenant):
        return not_found("ticket")
    if caller.tenant == ticket.tenant:
        return missing_scope(REGISTRY_ADMIN_SCOPE)
    return tenant_mismatch("only the minter or an admin of the capability's tenant may revoke it")


def check_introspect(caller: Caller, *, audience: str, capability_tenant: str) -> Refusal | None:
    """Introspecting a verified ticket: callers of the audience's tenant, or auditors (`audit:read`) of
    the capability's tenant. A refusal answers `{"active": false}`, as for an invalid ticket."""
    if caller.tenant == audience.partition("/")[0]:
        return None
    if caller.tenant == capability_tenant and caller.holds("audit:read"):
        return None
    return not_found("ticket")


def parent_invalid(message: str) -> Refusal:
    """A parent ticket that cannot be delegated from (`parent_invalid`)."""
    return delegation_denied(reason=PARENT_INVALID, message=message)


PARENT_UNKNOWN = parent_invalid("the parent ticket is unknown to this registry")


def check_parent_standing(*, active: bool, chain_revoked: bool, capability_status: str) -> Refusal | None:
    """A verified, stored parent ticket must be active (db.tickets.active, the one definition);
    the refusal says why it is not."""
    if active:
        return None
    if chain_revoked:
        return parent_invalid("the parent ticket or one of its ancestors was revoked")
    if capability_status == "retired":
        return parent_invalid("the parent ticket's capability version is retired")
    return parent_invalid("the parent ticket or one of its ancestors has expired")


# ---------------------------------------------------------------------------
# Signed cards (docs/api.md#signed-cards): publisher keys and the registration as signed

READ_SCOPE = "registry:read"
AUDIT_READ_SCOPE = "audit:read"


def check_publisher_keys_write(caller: Caller, tenant: str) -> Refusal | None:
    """Setting `tenant`'s publisher keys: `registry:admin`, own tenant."""
    if (refusal := check_scope(caller, REGISTRY_ADMIN_SCOPE)) is not None:
        return refusal
    if caller.tenant != tenant:
        return tenant_mismatch()
    return None


def check_publisher_keys_read(caller: Caller, tenant: str) -> Refusal | None:
    """Reading `tenant`'s publisher keys: `registry:read`, own tenant."""
    if (refusal := check_scope(caller, READ_SCOPE)) is not None:
        return refusal
    if caller.tenant != tenant:
        return tenant_mismatch()
    return None


def check_registration_read(caller: Caller, tenant: str, *, agent_visible: bool) -> Refusal | None:
    """Reading the last registration body of `tenant`'s agent: an agent the caller may not see, or
    another tenant's even when visible, is `not_found` (first: the body is its own tenant's record,
    and across tenants the answer is 404 everywhere, so a 403 would tell the agent exists), then
    `audit:read` or `registry:publish`."""
    if not agent_visible or caller.tenant != tenant:
        return not_found("agent")
    if caller.holds(AUDIT_READ_SCOPE) or caller.holds(PUBLISH_SCOPE):
        return None
    return Refusal(
        code="insufficient_scope",
        message=f"reading a registration needs {AUDIT_READ_SCOPE} or {PUBLISH_SCOPE}",
        missing_scopes=(AUDIT_READ_SCOPE, PUBLISH_SCOPE),
    )


# Every registry scope (docs/api.md#scopes), as the protected-resource metadata of /mcp lists them.
REGISTRY_SCOPES = (READ_SCOPE, PUBLISH_SCOPE, REGISTRY_ADMIN_SCOPE, AUDIT_READ_SCOPE, ATTEST_SCOPE)
