"""Evaluating a ticket request (docs/api.md#request-a-ticket): the capability version it resolves to
(as detail release resolves it, registry.release.service.resolve_version), the first-ticket
narrowing (auth.policy.check_first_ticket) or a re-delegation (registry.tickets.redelegation),
and the size of the ticket it would mint, checked before anything is signed: a Plan, or a refusal
raised about what the request asked for as far as it was resolved (`Asked`).
"""

from __future__ import annotations

import msgspec

from auth.policy import (
    NOT_FOUND,
    TicketGrant,
    TicketRequest,
    check_first_ticket,
    decide_ticket_target,
    first_ticket_grant,
)
from auth.principal import Caller
from auth.tickets import (
    MAX_TICKET_LENGTH,
    CapClaim,
    encoded_ticket_length,
    new_jti,
    ticket_claims,
)
from registry.core.problems import ErrorItem, ProblemError, invalid_request, refused
from registry.core.records import capability_ref
from registry.release.service import parse_version_request, resolve_version
from registry.state import Registry
from registry.tickets.redelegation import redelegated_grant
from registry.versions.semver import InvalidRange


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


class Asked(msgspec.Struct, frozen=True, kw_only=True):
    """What a ticket request is about, as far as it is resolved: the subject of its refusals."""

    tenant: str
    ref: str
    scopes: tuple[str, ...]
    on_behalf_of: str | None

    def refusing(self, error: ProblemError) -> ProblemError:
        return error.about(tenant=self.tenant, ref=self.ref, scopes=self.scopes, on_behalf_of=self.on_behalf_of)


async def evaluate(
    registry: Registry, caller: Caller, req: TicketRequest, parent_token: str | None, *, trace_id: str | None
) -> Plan:
    """Every check of a ticket request, in the order of docs/api.md#request-a-ticket; a refusal is
    raised about what the request asked for, as far as it was resolved (the boundary records it)."""
    now = int(registry.clock.epoch())
    tenant, _, agent_id = req.audience.partition("/")  # validated: `tenant/agentId`
    requested_ref = capability_ref(tenant, agent_id, req.skill, req.version)
    asked = Asked(
        tenant=tenant, ref=requested_ref, scopes=tuple(sorted(set(req.scopes))), on_behalf_of=req.on_behalf_of
    )
    try:
        target = await resolve_target(registry, caller, req)
    except ProblemError as error:
        raise asked.refusing(error) from None
    asked = msgspec.structs.replace(asked, tenant=target.tenant, ref=target.ref)

    root_jti: str | None = None
    if parent_token is None:
        refusal = check_first_ticket(caller, req, target.scopes)
        if refusal is not None:
            raise asked.refusing(refused(refusal))
        grant = first_ticket_grant(caller, req, now=now)
    else:
        try:
            grant, root_jti = await redelegated_grant(registry, caller, req, target.scopes, parent_token, now=now)
        except ProblemError as error:
            raise asked.refusing(error) from None
    plan = Plan(caller=caller, request=req, target=target, grant=grant, root_jti=root_jti, now=now)
    return _within_size(registry, plan, asked)


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


def _within_size(registry: Registry, plan: Plan, asked: Asked) -> Plan:
    """`plan`, unless its ticket would be over MAX_TICKET_LENGTH: then refused (reason
    `ticket_too_large`) before anything is signed, stored or sent for approval."""
    length = planned_length(registry, plan)
    if length > MAX_TICKET_LENGTH:
        raise asked.refusing(ticket_too_large(length))
    return plan
