"""HTTP: the audit log and the grant report for a tenant's auditors (events, NDJSON export, hourly
outcome counts, live delegation grants, verification of the whole chain), and signed checkpoints of
the chain head (public). The operations are registry.audit.operations, served through
registry.web.operation_door; the services are registry.audit.log, registry.tickets.grants and registry.audit.chain."""

from __future__ import annotations

from typing import Annotated, Literal

from litestar import Request, Response, get
from litestar.params import QueryParameter
from litestar.response import Stream

from auth.principal import Caller
from registry.audit import chain as audit_chain
from registry.audit import chain_checks
from registry.audit import log as audit_log
from registry.audit import proof as audit_proof
from registry.audit.chain_checks import ChainVerification
from registry.audit.checkpoints import Checkpoint
from registry.audit.log import MAX_HOURS, AuditPage, EventQuery, HourlyOutcomes
from registry.audit.operations import CHAIN, EVENTS, GRANTS, HOURLY, PROOF
from registry.audit.proof import AuditProof
from registry.core.problems import problem_responses
from registry.core.records import SKILL_ID_PATTERN
from registry.state import registry_of
from registry.tickets.grants import GrantOrder, GrantPage, grant_listing
from registry.web.authentication import optional_caller
from registry.web.operation_door import serve

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
NDJSON = "application/x-ndjson"


TypeQuery = Annotated[
    str | None, QueryParameter(name="type", max_length=128, description="event type, e.g. ticket.denied")
]
ActorQuery = Annotated[str | None, QueryParameter(max_length=200, description="caller sub, or tenant/sub")]
SkillQuery = Annotated[
    str | None, QueryParameter(pattern=SKILL_ID_PATTERN, max_length=128, description="capability id in the event's ref")
]
ScopeQuery = Annotated[
    str | None, QueryParameter(name="scope", max_length=256, description="a scope the event carries")
]
OutcomeQuery = Annotated[Literal["allowed", "denied"] | None, QueryParameter(description="allowed or denied")]
SinceQuery = Annotated[str | None, QueryParameter(max_length=64, format="date-time", description="RFC 3339, inclusive")]
UntilQuery = Annotated[str | None, QueryParameter(max_length=64, format="date-time", description="RFC 3339, exclusive")]


@get(
    "/v1/audit/events",
    summary="Audit events of the caller's tenant, oldest first (Accept: application/x-ndjson exports them all)",
    description=(
        "Events whose record tenant or actor tenant is the caller's. Scope `audit:read`. "
        "`since` is inclusive, `until` exclusive (RFC 3339); `outcome` keeps allowed or denied events. "
        "With `Accept: application/x-ndjson` the response streams every matching event up to the head at the time of the request, one JSON "
        "object per line, and ignores `limit` and `cursor`."
    ),
    responses=problem_responses(400, 401, 403),
)
async def list_events(
    request: Request,
    event_type: TypeQuery = None,
    actor: ActorQuery = None,
    skill: SkillQuery = None,
    scope_held: ScopeQuery = None,
    outcome: OutcomeQuery = None,
    since: SinceQuery = None,
    until: UntilQuery = None,
    limit: Annotated[
        int, QueryParameter(ge=1, le=MAX_LIMIT, description=f"page size, at most {MAX_LIMIT}")
    ] = DEFAULT_LIMIT,
    cursor: Annotated[str | None, QueryParameter(max_length=256)] = None,
) -> Response[AuditPage]:
    registry = registry_of(request)
    query = EventQuery(
        type=event_type, actor=actor, skill=skill, scope=scope_held, outcome=outcome, since=since, until=until
    )

    async def events(caller: Caller, _: None) -> Response[AuditPage]:
        if NDJSON in request.headers.get("accept", ""):
            # The export is a Stream; the annotation names the JSON page, which litestar documents in OpenAPI.
            return Stream(await audit_log.event_export(registry, caller.tenant, query), media_type=NDJSON)  # type: ignore[return-value]
        page = await audit_log.event_page(registry, caller.tenant, query, limit=limit, cursor=cursor)
        return Response(page, headers={"Cache-Control": "no-store"})

    return await serve(request, EVENTS, events)


@get(
    "/v1/audit/grants",
    summary="Who holds which scopes on which capabilities through delegation tickets (caller's tenant)",
    description=(
        "Tickets whose capability tenant or minting caller's tenant is the caller's. Scope `audit:read`. "
        "`active=true` (default): unexpired, unrevoked (nor any ancestor), capability version not retired; "
        "`active=false`: the others. `actor` is `tenant/sub` or a bare `sub`. Oldest first, or with "
        "`order=expiry` the soonest to expire first (a cursor belongs to the order it was issued in)."
    ),
    responses=problem_responses(400, 401, 403),
)
async def list_grants(
    request: Request,
    actor: Annotated[
        str | None, QueryParameter(max_length=200, description="minting caller: tenant/sub, or sub")
    ] = None,
    skill: Annotated[
        str | None, QueryParameter(pattern=SKILL_ID_PATTERN, max_length=128, description="capability id")
    ] = None,
    scope_held: Annotated[
        str | None, QueryParameter(name="scope", max_length=256, description="a scope the ticket grants")
    ] = None,
    active: Annotated[
        bool, QueryParameter(description="true: live grants; false: expired, revoked or retired ones")
    ] = True,
    order: Annotated[
        GrantOrder, QueryParameter(description="issued (oldest first) or expiry (soonest first)")
    ] = "issued",
    limit: Annotated[
        int, QueryParameter(ge=1, le=MAX_LIMIT, description=f"page size, at most {MAX_LIMIT}")
    ] = DEFAULT_LIMIT,
    cursor: Annotated[str | None, QueryParameter(max_length=256)] = None,
) -> Response[GrantPage]:
    registry = registry_of(request)
    page = await serve(
        request,
        GRANTS,
        lambda caller, _: grant_listing(
            registry,
            caller.tenant,
            active=active,
            actor=actor,
            skill=skill,
            scope=scope_held,
            limit=limit,
            cursor=cursor,
            order=order,
        ),
    )
    return Response(page, headers={"Cache-Control": "no-store"})


@get(
    "/v1/audit/checkpoints/latest",
    summary="The latest signed checkpoint of the audit chain head (public)",
    description=(
        "`signature` is a compact JWS (alg EdDSA, typ capreg-checkpoint+jwt, kid) over "
        '{"iss", "iat", "seq", "hash", "at", "root", "chains"}; verify it with /.well-known/jwks.json and '
        "compare the signed values with the fields beside them. `root` is the RFC 6962 tree hash over every "
        "chain head; `seq` and `hash` are the newest entry covered."
    ),
    responses=problem_responses(401, 503),
)
async def latest_checkpoint(request: Request) -> Response[Checkpoint]:
    registry = registry_of(request)
    await optional_caller(request)  # public, but a presented token must be valid (docs/api.md#identities-and-tokens)
    return Response(await audit_chain.latest_checkpoint(registry), headers={"Cache-Control": "no-cache"})


@get(
    "/v1/audit/events/hourly",
    summary="Allowed and denied audit events per UTC hour (the events filters; at most 7 days)",
    description=(
        "The events `GET /v1/audit/events` would list for the same filters, counted per UTC hour and "
        "outcome; every hour of the range is present, empty ones with zeros. Scope `audit:read`. "
        f"Default range: the 24 hours up to the end of the current hour; at most {MAX_HOURS} hours."
    ),
    responses=problem_responses(400, 401, 403),
)
async def hourly_outcomes(
    request: Request,
    event_type: TypeQuery = None,
    actor: ActorQuery = None,
    skill: SkillQuery = None,
    scope_held: ScopeQuery = None,
    outcome: OutcomeQuery = None,
    since: SinceQuery = None,
    until: UntilQuery = None,
) -> Response[HourlyOutcomes]:
    registry = registry_of(request)
    query = EventQuery(
        type=event_type, actor=actor, skill=skill, scope=scope_held, outcome=outcome, since=since, until=until
    )
    outcomes = await serve(request, HOURLY, lambda caller, _: audit_log.hourly_outcomes(registry, caller.tenant, query))
    return Response(outcomes, headers={"Cache-Control": "no-store"})


@get(
    "/v1/audit/chain",
    summary="The caller's tenant's audit chain verified up to its head (audit:read)",
    description=(
        "Checks the entries of the caller's tenant's chain (and of the old single chain it is anchored to) "
        "written since the last verified position, which every server shares through the database: hash, "
        "link, gap-free chainSeq. `firstBadChainSeq` names the first entry that does not verify. Hashing "
        "runs off the event loop; a caller asking again within CAPREG_CHAIN_CHECK_INTERVAL seconds gets the "
        "last answer. The full check from chainSeq 1 is `capreg audit verify --url`."
    ),
    responses=problem_responses(401, 403),
)
async def verify_chain(request: Request) -> Response[ChainVerification]:
    registry = registry_of(request)
    verification = await serve(request, CHAIN, lambda caller, _: chain_checks.verify_chain(registry, caller))
    return Response(verification, headers={"Cache-Control": "no-store"})


@get(
    "/v1/audit/proof",
    summary="The inclusion proof of the caller's tenant's chain head in the latest signed checkpoint (audit:read)",
    description=(
        "RFC 6962 inclusion proof: leaf `index` is UTF-8 `{chain}\\n{chainSeq}\\n{hash}`, the tree is over every "
        "chain head sorted by chain in byte order (`checkpoint.chains` leaves), `auditPath` leads to "
        "`checkpoint.root`. 404 when the tenant's chain has no entry."
    ),
    responses=problem_responses(401, 403, 404, 503),
)
async def audit_inclusion_proof(request: Request) -> Response[AuditProof]:
    registry = registry_of(request)
    proof = await serve(request, PROOF, lambda caller, _: audit_proof.inclusion_proof(registry, caller.tenant))
    return Response(proof, headers={"Cache-Control": "no-store"})


ROUTES = [list_events, hourly_outcomes, list_grants, latest_checkpoint, verify_chain, audit_inclusion_proof]
