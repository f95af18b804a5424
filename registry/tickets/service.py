"""Delegation tickets, the service (docs/api.md#tickets): resolving the capability a ticket is asked for,
verifying a parent ticket, applying the narrowing rules of auth.policy, then signing (auth.tickets),
storing and auditing in one transaction; a `requiresApproval` capability records a pending approval
instead (deciding and collecting it is registry.tickets.approvals). Also introspection and revocation.
Idempotency-Key replays reuse the same steps. The SQL is db/tickets.py.

Every refusal is written to the audit log as `ticket.denied` (in a transaction of its own, nothing
else is written) before its error is raised; a grant's `ticket.granted` commits with the ticket row.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, TypedDict

import jwt
import msgspec

from auth.policy import (
    NOT_FOUND,
    NOT_FOUND_CODE,
    PARENT_UNKNOWN,
    ParentTicket,
    TicketGrant,
    TicketParties,
    TicketRequest,
    check_first_ticket,
    check_introspect,
    check_parent_standing,
    check_redelegation,
    check_revoke,
    child_ticket_grant,
    decide_ticket_target,
    first_ticket_grant,
    parent_invalid,
    validate_ticket_request,
)
from auth.principal import Caller
from auth.tickets import (
    MAX_TICKET_LENGTH,
    CapClaim,
    InvalidTicket,
    TicketClaims,
    encoded_ticket_length,
    new_jti,
    sign_ticket,
    ticket_claims,
    verify_ticket,
)
from db import approvals as approval_queries
from db import tickets as ticket_queries
from db.audit_events import AuditEvent
from db.group_commit import WriteScope
from registry.core.problems import ErrorItem, ProblemError, invalid_request, json_pointer, refused
from registry.core.records import capability_ref
from registry.core.refusals import refuse
from registry.core.tracing import current_request_id
from registry.core.wire import Wire
from registry.release.service import parse_version_request, resolve_version
from registry.state import Registry
from registry.versions.semver import InvalidRange

GRANTED = "ticket.granted"
DENIED = "ticket.denied"
REVOKED = "ticket.revoked"

# Used when a request names no ttlSeconds (capped by CAPREG_TICKET_MAX_TTL).
DEFAULT_TTL_SECONDS = 300
IDEMPOTENCY_KEY_MAX_LENGTH = 255
# Free-text fields end up in claims, rows and audit events: no control characters (PostgreSQL text
# cannot even hold NUL).
PRINTABLE = r"^[^\x00-\x1f\x7f]*$"


# Field shapes shared by POST /v1/tickets and the MCP tool `request_ticket`.
RequestedScopes = Annotated[list[Annotated[str, msgspec.Meta(max_length=256)]], msgspec.Meta(max_length=64)]
RequestedResources = Annotated[
    list[Annotated[str, msgspec.Meta(pattern=PRINTABLE, max_length=512)]], msgspec.Meta(max_length=256)
]
OnBehalfOf = Annotated[str, msgspec.Meta(pattern=PRINTABLE, max_length=256)]


class TicketRequestBody(Wire, forbid_unknown_fields=True):
    """POST /v1/tickets body. Shapes and types here; value rules in auth.policy.validate_ticket_request."""

    audience: Annotated[str, msgspec.Meta(max_length=129, description="target agent ref 'tenant/agentId'")]
    skill: Annotated[str, msgspec.Meta(max_length=256, description="capability (skill) id")]
    scopes: RequestedScopes
    version: Annotated[str, msgspec.Meta(max_length=256, description="exact version, 'latest' or a range")] = "latest"
    resources: RequestedResources = []
    on_behalf_of: OnBehalfOf | None = None
    ttl_seconds: int | None = None
    max_depth: int = 0
    parent_ticket: Annotated[str, msgspec.Meta(max_length=16384)] | None = None


class TicketResponse(Wire):
    ticket: str
    jti: str
    expires_at: datetime
    scopes: list[str]
    resources: list[str]
    ref: str
    depth: int
    max_depth: int


class ApprovalView(Wire, omit_defaults=True):
    approval_id: str
    status: str
    request: dict[str, Any] | None = None
    ticket: TicketResponse | None = None


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """The capability version a ticket request resolved to."""

    tenant: str
    agent_id: str
    skill_id: str
    version: str
    scopes: tuple[str, ...]
    requires_approval: bool

    @property
    def ref(self) -> str:
        return capability_ref(self.tenant, self.agent_id, self.skill_id, self.version)


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """A ticket request that passed every check: what to sign, for whom, on which parent."""

    caller: Caller
    request: TicketRequest
    target: Target
    grant: TicketGrant
    root_jti: str | None
    now: int


class Idempotency(msgspec.Struct, frozen=True, kw_only=True):
    principal: str
    key: str
    body_hash: str


class IdempotencyKeyTaken(Exception):
    """Another request claimed the same Idempotency-Key first: replay its answer."""


class AlreadyCollected(Exception):
    """The approval's ticket was collected by a concurrent fetch."""


# ---------------------------------------------------------------------------
# Request parsing


def ticket_request(body: TicketRequestBody, *, max_ttl: int) -> TicketRequest:
    ttl = body.ttl_seconds if body.ttl_seconds is not None else min(DEFAULT_TTL_SECONDS, max_ttl)
    return TicketRequest(
        audience=body.audience,
        skill=body.skill,
        version=body.version,
        scopes=tuple(body.scopes),
        ttl_seconds=ttl,
        resources=tuple(body.resources),
        on_behalf_of=body.on_behalf_of,
        max_depth=body.max_depth,
    )


def check_request(req: TicketRequest, *, max_ttl: int) -> None:
    errors = validate_ticket_request(req, max_ttl=max_ttl)
    if errors:
        raise invalid_request(
            "the ticket request is invalid",
            [ErrorItem(path=json_pointer(e["path"]), message=e["message"]) for e in errors],
        )


def idempotency_of(caller: Caller, key: str | None, body: TicketRequestBody) -> Idempotency | None:
    """The Idempotency-Key claim of a request, scoped to the caller's identity (issuer, tenant and
    sub: a partner issuer's `sub` never shares another's keys); the body is hashed canonically."""
    if key is None:
        return None
    if not 1 <= len(key) <= IDEMPOTENCY_KEY_MAX_LENGTH or not key.isascii() or not key.isprintable():
        raise invalid_request(
            "Idempotency-Key must be 1 to 255 printable ASCII characters",
            [ErrorItem(path="header:Idempotency-Key", message="invalid idempotency key")],
        )
    body_hash = hashlib.sha256(msgspec.json.encode(body)).hexdigest()
    return Idempotency(principal=f"{caller.issuer} {caller.principal}", key=key, body_hash=body_hash)


def under_key(
    idempotency: Idempotency | None, status: int, answer: Any, write: Callable[[WriteScope], Awaitable[None]]
) -> Callable[[WriteScope], Awaitable[None]]:
    """`write` under an Idempotency-Key (docs/api.md#idempotency), for mints and approval requests
    alike: the key claimed first (IdempotencyKeyTaken while another request holds it), the answer
    stored in the same transaction, so a retry gets exactly what the first request got."""
    if idempotency is None:
        return write
    key = idempotency

    async def claimed(scope: WriteScope) -> None:
        if not await ticket_queries.claim_idempotency_key(scope.conn, key.principal, key.key, key.body_hash):
            raise IdempotencyKeyTaken
        await write(scope)
        await ticket_queries.store_response(scope.conn, key.principal, key.key, status, msgspec.to_builtins(answer))

    return claimed


# ---------------------------------------------------------------------------
# Evaluation


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


async def resolve_target(registry: Registry, caller: Caller, req: TicketRequest) -> Target:
    """The capability version of a ticket request, as the caller may see it (400, 404, 410 otherwise).

    Resolution is detail release's (registry.release.service.resolve_version), so `latest` and ranges name
    the same version for a ticket as for the schemas; whether it may be a ticket's target is
    auth.policy.decide_ticket_target (docs/api.md#request-a-ticket).
    """
    tenant, _, agent_id = req.audience.partition("/")
    try:
        wanted = parse_version_request(req.version)
    except InvalidRange as exc:
        raise invalid_request(
            "version is not a version, `latest` or a range", [ErrorItem(path="/version", message=str(exc))]
        ) from None
    found = await resolve_version(registry, tenant, agent_id, req.skill, wanted)
    if found is None:
        raise refused(NOT_FOUND)
    refusal = decide_ticket_target(caller, found.gate(), exact_version=wanted.exact)
    if refusal is not None:
        raise refused(refusal)
    chosen = found.cap
    return Target(
        tenant=chosen.tenant,
        agent_id=chosen.agent_id,
        skill_id=chosen.id,
        version=chosen.version,
        scopes=tuple(chosen.scopes),
        requires_approval=chosen.requires_approval,
    )


class DenialContext(TypedDict):
    """What a refused ticket request's audit event says besides the error (registry.core.refusals.refuse)."""

    event_type: str
    tenant: str
    ref: str
    scopes: list[str]
    on_behalf_of: str | None
    trace_id: str | None


async def evaluate(
    registry: Registry, caller: Caller, req: TicketRequest, parent_token: str | None, *, trace_id: str | None
) -> Plan:
    """Every check of a ticket request, in the order of docs/api.md#request-a-ticket; a refusal is audited, then raised."""
    now = int(registry.clock.epoch())
    tenant, _, agent_id = req.audience.partition("/")  # validated: `tenant/agentId`
    requested_ref = capability_ref(tenant, agent_id, req.skill, req.version)
    context = DenialContext(
        event_type=DENIED,
        tenant=tenant,
        ref=requested_ref,
        scopes=sorted(set(req.scopes)),
        on_behalf_of=req.on_behalf_of,
        trace_id=trace_id,
    )
    try:
        target = await resolve_target(registry, caller, req)
    except ProblemError as error:
        raise await refuse(registry, caller, error, **context) from None
    context["tenant"], context["ref"] = target.tenant, target.ref

    if parent_token is None:
        refusal = check_first_ticket(caller, req, target.scopes)
        if refusal is not None:
            raise await refuse(registry, caller, refused(refusal), **context)
        plan = Plan(
            caller=caller,
            request=req,
            target=target,
            grant=first_ticket_grant(caller, req, now=now),
            root_jti=None,
            now=now,
        )
        return await _within_size(registry, plan, context)

    try:
        claims = await verified_ticket(registry, parent_token)
    except InvalidTicket as exc:
        raise await refuse(
            registry, caller, refused(parent_invalid(f"the parent ticket is not valid: {exc}")), **context
        ) from None
    state = await ticket_queries.ticket_state(registry.pool, claims.jti)
    if state is None:
        raise await refuse(registry, caller, refused(PARENT_UNKNOWN), **context)
    # onBehalfOf is taken from the stored parent, not inferred from `sub` (see auth.tickets).
    parent = msgspec.structs.replace(ParentTicket.from_claims(claims.as_dict()), on_behalf_of=state["on_behalf_of"])
    refusal = check_redelegation(caller, req, parent, target.scopes, now=now) or check_parent_standing(
        active=state["active"], chain_revoked=state["chain_revoked"], capability_status=state["capability_status"]
    )
    if refusal is not None:
        raise await refuse(registry, caller, refused(refusal), **context)
    plan = Plan(
        caller=caller,
        request=req,
        target=target,
        grant=child_ticket_grant(caller, req, parent, now=now),
        root_jti=state["root_jti"],
        now=now,
    )
    return await _within_size(registry, plan, context)


def ticket_too_large(length: int) -> ProblemError:
    """The refusal of a ticket that would be longer than anything accepts (docs/api.md#request-a-ticket)."""
    error = invalid_request(
        f"the ticket would be {length} characters; at most {MAX_TICKET_LENGTH} are accepted anywhere",
        [
            ErrorItem(
                path="/resources",
                message=f"ticket_too_large: the encoded ticket would be {length} characters, "
                f"over {MAX_TICKET_LENGTH}; request fewer or shorter resources and scopes",
            )
        ],
    )
    error.reason = "ticket_too_large"
    return error


def planned_length(registry: Registry, plan: Plan) -> int:
    """The encoded length of the ticket `plan` would mint (auth.tickets.encoded_ticket_length)."""
    claims = ticket_claims(
        plan.grant,
        issuer=registry.settings.issuer,
        tenant=plan.target.tenant,
        cap=CapClaim(ref=plan.target.ref, id=plan.target.skill_id, version=plan.target.version),
        jti=new_jti(),
        now=plan.now,
    )
    return encoded_ticket_length(claims, kid=registry.keyring.signing_kid or "")


async def _within_size(registry: Registry, plan: Plan, context: DenialContext) -> Plan:
    """`plan`, unless its ticket would be over MAX_TICKET_LENGTH: then refused and audited as a
    denial (reason `ticket_too_large`) before anything is signed, stored or sent for approval."""
    length = planned_length(registry, plan)
    if length > MAX_TICKET_LENGTH:
        raise await refuse(registry, plan.caller, ticket_too_large(length), **context)
    return plan


# ---------------------------------------------------------------------------
# Minting


def _at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


async def mint(
    registry: Registry,
    plan: Plan,
    *,
    trace_id: str | None,
    idempotency: Idempotency | None = None,
    approval_id: str | None = None,
) -> TicketResponse:
    """Sign the ticket, then store it and its `ticket.granted` event in one transaction.

    Raises IdempotencyKeyTaken when a concurrent request with the same key got there first, and
    AlreadyCollected when a concurrent fetch collected the approval; both roll back. A parent
    revoked between evaluation and now is refused here (the tree lock orders the two).
    """
    # Pick up a rotation made by another process, so a retired key stops signing within seconds.
    await registry.refresh_keyring()
    keyring = registry.keyring
    target, grant, caller = plan.target, plan.grant, plan.caller
    jti = new_jti()
    claims = ticket_claims(
        grant,
        issuer=registry.settings.issuer,
        tenant=target.tenant,
        cap=CapClaim(ref=target.ref, id=target.skill_id, version=target.version),
        jti=jti,
        now=plan.now,
    )
    length = encoded_ticket_length(claims, kid=keyring.signing_kid or "")
    if length > MAX_TICKET_LENGTH:  # evaluate refused this already; a key with a longer kid may differ
        raise await refuse(
            registry,
            caller,
            ticket_too_large(length),
            event_type=DENIED,
            tenant=target.tenant,
            ref=target.ref,
            scopes=sorted(set(grant.scopes)),
            on_behalf_of=grant.on_behalf_of,
            trace_id=trace_id,
        )
    token = sign_ticket(keyring, claims)
    response = TicketResponse(
        ticket=token,
        jti=jti,
        expires_at=_at(grant.exp),
        scopes=list(grant.scopes),
        resources=list(grant.resources),
        ref=target.ref,
        depth=grant.depth,
        max_depth=grant.max_depth,
    )
    event = AuditEvent(
        type=GRANTED,
        outcome="allowed",
        tenant=target.tenant,
        actor_tenant=caller.tenant,
        actor=caller.sub,
        actor_issuer=caller.issuer,
        on_behalf_of=grant.on_behalf_of,
        ref=target.ref,
        scopes=list(grant.scopes),
        trace_id=trace_id,
        request_id=current_request_id(),
    )

    row = {
        "jti": jti,
        "parent_jti": grant.parent,
        "root_jti": plan.root_jti or jti,
        "tenant": target.tenant,
        "agent_id": target.agent_id,
        "skill_id": target.skill_id,
        "version": target.version,
        "ref": target.ref,
        "audience": grant.aud,
        "actor": caller.principal,
        "actor_tenant": caller.tenant,
        "on_behalf_of": grant.on_behalf_of,
        "scopes": list(grant.scopes),
        "resources": list(grant.resources),
        "depth": grant.depth,
        "max_depth": grant.max_depth,
        "issued_at": registry.clock.now(),
        "expires_at": _at(grant.exp),
        "act": grant.act,
        "kid": keyring.signing_kid,
    }
    if idempotency is None and grant.parent is None and approval_id is None:
        # A first ticket is one row and one event: inserted with the batch's other tickets (db.group_commit).
        await registry.writes.insert("tickets", row, [event])
        return response

    async def write(scope: WriteScope) -> None:
        conn = scope.conn
        if grant.parent is not None:
            assert plan.root_jti is not None
            await ticket_queries.lock_tree(conn, plan.root_jti)
            state = await ticket_queries.ticket_state(conn, grant.parent)
            refusal = (
                PARENT_UNKNOWN
                if state is None
                else check_parent_standing(
                    active=state["active"],
                    chain_revoked=state["chain_revoked"],
                    capability_status=state["capability_status"],
                )
            )
            if refusal is not None:
                raise refused(refusal)
        await ticket_queries.insert_ticket(conn, row)
        if approval_id is not None and not await approval_queries.collect(conn, approval_id, jti):
            raise AlreadyCollected
        scope.audit(event)

    try:
        await registry.writes.run(under_key(idempotency, 201, response, write), expected=[event])
    except ProblemError as error:
        raise await refuse(
            registry,
            caller,
            error,
            event_type=DENIED,
            tenant=target.tenant,
            ref=target.ref,
            scopes=sorted(set(grant.scopes)),
            on_behalf_of=grant.on_behalf_of,
            trace_id=trace_id,
        ) from None
    return response


# ---------------------------------------------------------------------------
# A ticket request end to end


class TicketAnswer(msgspec.Struct, frozen=True):
    """What a ticket request answers: 201 a ticket, 202 a pending approval, 200 (or the first
    answer's 202) for an Idempotency-Key replay; `body` as JSON builtins."""

    status: int
    body: dict[str, Any]


async def _replay(
    registry: Registry, caller: Caller, idempotency: Idempotency, trace_id: str | None
) -> TicketAnswer | None:
    """The recorded answer for an Idempotency-Key (200 for a ticket), 409 for another body, None if unseen."""
    row = await ticket_queries.stored_response(registry.pool, idempotency.principal, idempotency.key)
    if row is None or row["status_code"] is None:
        return None
    if row["body_hash"] != idempotency.body_hash:
        error = ProblemError(409, "idempotency_mismatch", "this Idempotency-Key was used with another request body")
        raise await refuse(registry, caller, error, event_type=DENIED, tenant=None, trace_id=trace_id)
    return TicketAnswer(status=200 if row["status_code"] == 201 else row["status_code"], body=row["response"])


async def request_ticket(
    registry: Registry, caller: Caller, body: TicketRequestBody, *, idempotency_key: str | None, trace_id: str | None
) -> TicketAnswer:
    """A ticket request of an authenticated caller, as POST /v1/tickets and the MCP tool
    `request_ticket` both make it: checked, narrowed, minted or sent for approval, audited."""
    max_ttl = registry.settings.ticket_max_ttl
    try:
        req = ticket_request(body, max_ttl=max_ttl)
        check_request(req, max_ttl=max_ttl)
        idempotency = idempotency_of(caller, idempotency_key, body)
    except ProblemError as error:
        raise await refuse(registry, caller, error, event_type=DENIED, tenant=None, trace_id=trace_id) from None

    if idempotency is not None and (replayed := await _replay(registry, caller, idempotency, trace_id)) is not None:
        return replayed
    plan = await evaluate(registry, caller, req, body.parent_ticket, trace_id=trace_id)
    try:
        if plan.target.requires_approval:
            view = await request_approval(registry, plan, body, trace_id=trace_id, idempotency=idempotency)
            return TicketAnswer(status=202, body=msgspec.to_builtins(view))
        ticket = await mint(registry, plan, trace_id=trace_id, idempotency=idempotency)
        return TicketAnswer(status=201, body=msgspec.to_builtins(ticket))
    except IdempotencyKeyTaken:
        assert idempotency is not None
        replayed = await _replay(registry, caller, idempotency, trace_id)
        if replayed is None:  # the other request's answer is gone already (over 24 h): cannot happen in practice
            raise ProblemError(409, "idempotency_mismatch", "this Idempotency-Key is in use") from None
        return replayed


# ---------------------------------------------------------------------------
# A pending approval instead of a ticket


async def request_approval(
    registry: Registry,
    plan: Plan,
    body: TicketRequestBody,
    *,
    trace_id: str | None,
    idempotency: Idempotency | None = None,
) -> ApprovalView:
    """Record a pending request for a `requiresApproval` capability and its `approval.requested` event."""
    target, grant, caller = plan.target, plan.grant, plan.caller
    approval_id = str(uuid.uuid4())
    view = ApprovalView(approval_id=approval_id, status="pending")
    stored = msgspec.to_builtins(body)
    if grant.parent is not None:
        stored["parent"] = grant.parent
    event = AuditEvent(
        type="approval.requested",
        outcome="allowed",
        tenant=target.tenant,
        actor_tenant=caller.tenant,
        actor=caller.sub,
        actor_issuer=caller.issuer,
        on_behalf_of=grant.on_behalf_of,
        ref=target.ref,
        scopes=list(grant.scopes),
        trace_id=trace_id,
        request_id=current_request_id(),
    )

    async def write(scope: WriteScope) -> None:
        await approval_queries.insert_approval(
            scope.conn,
            {
                "approval_id": approval_id,
                "tenant": target.tenant,
                "agent_id": target.agent_id,
                "skill_id": target.skill_id,
                "version": target.version,
                "ref": target.ref,
                "requester": caller.principal,
                "requester_tenant": caller.tenant,
                "requester_issuer": caller.issuer,
                "on_behalf_of": grant.on_behalf_of,
                "scopes": list(grant.scopes),
                "request": stored,
                "expires_at": _at(plan.now) + timedelta(seconds=registry.settings.approval_ttl),
            },
        )
        scope.audit(event)

    await registry.writes.run(under_key(idempotency, 202, view, write))
    return view


# ---------------------------------------------------------------------------
# Introspection and revocation


async def introspect(registry: Registry, caller: Caller, token: str) -> dict[str, Any]:
    """RFC 7662 style: the claims of a valid, unexpired, unrevoked ticket whose capability version is
    not retired, for a caller of the audience's tenant (or an auditor of the capability's); else inactive."""
    inactive = {"active": False}
    try:
        claims = await verified_ticket(registry, token)
    except InvalidTicket:
        return inactive
    if check_introspect(caller, audience=claims.aud, capability_tenant=claims.tenant) is not None:
        return inactive
    if not await registry.ticket_checks.is_active(claims.jti):
        return inactive
    return {"active": True, **claims.as_dict()}


async def revoke(registry: Registry, caller: Caller, jti: str, *, trace_id: str | None) -> list[str]:
    """Revoke a ticket and every ticket re-delegated from it, one `ticket.revoked` event each;
    the jtis revoked now, parents first."""
    ticket = await ticket_queries.get_ticket(registry.pool, jti)
    parties = (
        None
        if ticket is None
        else TicketParties(tenant=ticket["tenant"], actor=ticket["actor"], actor_tenant=ticket["actor_tenant"])
    )
    refusal = check_revoke(caller, parties)
    if refusal is not None and refusal.code == NOT_FOUND_CODE:
        # Recorded for the caller's own tenant's auditors; the event names no ticket it may not know of.
        raise await refuse(registry, caller, refused(refusal), event_type=REVOKED, tenant=None, trace_id=trace_id)
    assert ticket is not None  # a missing ticket is the policy's not_found, refused above
    if refusal is not None:
        raise await refuse(
            registry,
            caller,
            refused(refusal),
            event_type=REVOKED,
            tenant=ticket["tenant"],
            ref=ticket["ref"],
            scopes=sorted(set(ticket["scopes"])),
            on_behalf_of=ticket["on_behalf_of"],
            trace_id=trace_id,
        )
    request_id = current_request_id()  # the write runs in the group-commit task

    async def write(scope: WriteScope) -> list:
        await ticket_queries.lock_tree(scope.conn, ticket["root_jti"])
        revoked = await ticket_queries.revoke_tree(scope.conn, jti)
        revoked.sort(key=lambda row: (row["depth"], row["jti"]))
        scope.audit(
            *(
                AuditEvent(
                    type=REVOKED,
                    outcome="allowed",
                    tenant=row["tenant"],
                    actor_tenant=caller.tenant,
                    actor=caller.sub,
                    actor_issuer=caller.issuer,
                    request_id=request_id,
                    on_behalf_of=row["on_behalf_of"],
                    ref=row["ref"],
                    scopes=list(row["scopes"]),
                    # Descendants are revoked because their ancestor was.
                    reason=None if row["jti"] == jti else "ancestor_revoked",
                    trace_id=trace_id,
                )
                for row in revoked
            )
        )
        return revoked

    revoked = await registry.writes.run(write)
    return [row["jti"] for row in revoked]
