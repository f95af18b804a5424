"""Offers (docs/api.md#offers), the service behind `POST /v1/offers` and the MCP tool
`find_capability`: which capability, which version, which instance, now, for one caller.

Candidates come from discovery (registry.discovery.ranking.rank for a `need`, db.capabilities.discover for a
`skill` alone: the latest in-force version per agent and skill, discovery's visibility); each is
then put to detail release's own decision (auth.policy.decide_release), so an offer is exactly a
capability the caller could be released right now. Ordering and scores are pure functions below
(`offer_order`, `why_of`, `scores`); only `make_offers` reads and writes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec

from auth.policy import CapabilityGate, Refusal, decide_release
from auth.principal import Caller
from db import agents as agent_queries
from db import capabilities as capability_queries
from db.audit_events import AuditEvent
from registry.core.problems import ErrorItem, ProblemError, invalid_request, problem_of
from registry.core.records import SIDE_EFFECT_ORDER, SKILL_ID_MAX_LENGTH, agent_ref, capability_ref
from registry.core.tracing import current_request_id
from registry.core.wire import Wire
from registry.discovery import ranking
from registry.discovery.service import REGION_MAX_LENGTH, public_capability, side_effect_rank
from registry.state import Registry
from registry.tickets import service as tickets

OFFER_MADE = "offer.made"
MAX_LIMIT = 20
DEFAULT_LIMIT = 5
# Matching capabilities weighed per request (best first); `excluded` counts among these. Bounds the
# work of one request whatever the need matches.
CANDIDATES_MAX = 500
# The score's parts: relevance dominates; risk, load and latency tell apart near-equals.
WEIGHTS = {"relevance": 0.6, "risk": 0.2, "load": 0.1, "slo": 0.1}
_MAX_SIDE_EFFECT = max(SIDE_EFFECT_ORDER.values())


class OfferTicket(Wire, forbid_unknown_fields=True):
    """The ticket to mint for the first offer: POST /v1/tickets' body without audience, skill,
    version (the offer's) and parentTicket (an offer starts a chain)."""

    scopes: tickets.RequestedScopes
    resources: tickets.RequestedResources = []
    on_behalf_of: tickets.OnBehalfOf | None = None
    ttl_seconds: int | None = None
    max_depth: int = 0


class OfferRequest(Wire, forbid_unknown_fields=True):
    need: (
        Annotated[
            str,
            msgspec.Meta(max_length=ranking.QUERY_MAX_LENGTH, description="what the capability should do, in words"),
        ]
        | None
    ) = None
    skill: (
        Annotated[
            str, msgspec.Meta(max_length=SKILL_ID_MAX_LENGTH + 1, description="exact skill id, or a prefix ending in *")
        ]
        | None
    ) = None
    tags: Annotated[list[Annotated[str, msgspec.Meta(max_length=128)]], msgspec.Meta(max_length=32)] = []
    region: Annotated[str, msgspec.Meta(max_length=REGION_MAX_LENGTH)] | None = None
    side_effect_max: str | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT
    ticket: OfferTicket | None = None


class OfferInstance(Wire):
    instance_id: str
    url: str | None
    load: float | None
    expires_at: datetime


class Why(Wire):
    """Each part in [0, 1], higher is better."""

    relevance: float
    risk: float
    load: float
    slo: float


class Offer(Wire, omit_defaults=True):
    ref: str
    agent: str
    id: str
    version: str
    name: str
    side_effect: str
    requires_approval: bool
    score: float
    why: Why
    instance: OfferInstance
    ticket: dict[str, Any] | None = None
    approval: dict[str, Any] | None = None
    ticket_error: dict[str, Any] | None = None


class Excluded(Wire):
    scope: int = 0
    region: int = 0
    unhealthy: int = 0


class OfferAnswer(Wire):
    offers: list[Offer]
    excluded: Excluded


# --- Pure parts ----------------------------------------------------------------------------------


def parse_request(body: OfferRequest, *, max_ttl: int) -> int | None:
    """Check what the body's types cannot say; answers sideEffectMax's rank. 400 with pointers."""
    # An empty `need` is no need, as an empty `q` is no `q` in discovery.
    if not body.need and body.skill is None:
        raise invalid_request(
            "an offer needs `need` or `skill`",
            [
                ErrorItem(path="/need", message="give `need` (words) or `skill` (an id)"),
            ],
        )
    try:
        rank = side_effect_rank(body.side_effect_max)
    except ProblemError as error:
        error.errors = [ErrorItem(path="/sideEffectMax", message=e.message) for e in error.errors or []]
        raise
    if body.ticket is not None:
        # The checks POST /v1/tickets makes on the same fields (the target is not known yet).
        try:
            tickets.check_request(
                _ticket_request(body.ticket, "placeholder/agent", "placeholder", "1.0.0", max_ttl), max_ttl=max_ttl
            )
        except ProblemError as error:
            error.errors = [ErrorItem(path="/ticket" + (e.path or ""), message=e.message) for e in error.errors or []]
            raise
    return rank


def _ticket_body(ticket: OfferTicket, audience: str, skill: str, version: str) -> tickets.TicketRequestBody:
    return tickets.TicketRequestBody(
        audience=audience,
        skill=skill,
        version=version,
        scopes=list(ticket.scopes),
        resources=list(ticket.resources),
        on_behalf_of=ticket.on_behalf_of,
        ttl_seconds=ticket.ttl_seconds,
        max_depth=ticket.max_depth,
    )


def _ticket_request(ticket: OfferTicket, audience: str, skill: str, version: str, max_ttl: int):
    return tickets.ticket_request(_ticket_body(ticket, audience, skill, version), max_ttl=max_ttl)


def exclusion(caller: Caller, gate: CapabilityGate, *, region: str | None, live: bool) -> str | None:
    """Why a visible, matching capability is not offered (the first reason), or None to offer it;
    "invisible" for what the caller may not see (never counted)."""
    refusal: Refusal | None = decide_release(caller, gate, exact_version=False)
    if refusal is not None:
        return {"insufficient_scope": "scope", "data_location_denied": "region"}.get(refusal.code, "invisible")
    if region is not None and gate.data_regions and region not in gate.data_regions:
        return "region"
    if not live:
        return "unhealthy"
    return None


def _latency(row: Any) -> float | None:
    slo = row["slo"]
    value = slo.get("latencyP99Ms") if isinstance(slo, dict) else None
    return float(value) if isinstance(value, (int, float)) and value >= 0 else None


def offer_order(score: int, row: Any, instance: Any) -> tuple:
    """Relevance first (ranked score, higher first), then lower side effect, lower instance load
    (none sent: as fully loaded), lower p99 latency (none declared: last), then ref."""
    load = instance["load"]
    latency = _latency(row)
    return (
        -score,
        SIDE_EFFECT_ORDER[row["side_effect"]],
        1.0 if load is None else load,
        float("inf") if latency is None else latency,
        capability_ref(row["tenant"], row["agent_id"], row["skill_id"], row["version"]),
    )


def why_of(relevance: float, row: Any, instance: Any) -> Why:
    load = instance["load"]
    latency = _latency(row)
    return Why(
        relevance=round(min(1.0, max(0.0, relevance)), 4),
        risk=round(1 - SIDE_EFFECT_ORDER[row["side_effect"]] / _MAX_SIDE_EFFECT, 4),
        load=round(0.0 if load is None else 1 - min(1.0, max(0.0, load)), 4),
        # 1 at 0 ms, 0.5 at one second, towards 0 beyond; nothing declared is 0.
        slo=round(0.0 if latency is None else 1000 / (1000 + latency), 4),
    )


def scores(whys: Sequence[Why]) -> list[float]:
    """The weighted sum of each offer's parts, held non-increasing down the (already ordered) list:
    an offer never scores above one ranked before it."""
    result: list[float] = []
    for why in whys:
        raw = round(sum(weight * getattr(why, part) for part, weight in WEIGHTS.items()), 4)
        result.append(min(raw, result[-1]) if result else raw)
    return [min(1.0, max(0.0, s)) for s in result]


# --- The service ---------------------------------------------------------------------------------


class _Candidate(msgspec.Struct):
    row: Any
    score: int
    relevance: float


async def _candidates(registry: Registry, caller: Caller, body: OfferRequest, rank: int | None) -> list[_Candidate]:
    """Matching capabilities the caller may see, latest per agent and skill, best first."""
    tags = tuple(body.tags) if body.tags else None
    now = datetime.now(UTC)
    async with registry.pool.acquire() as conn:
        if body.need:
            filters = ranking.SearchFilters(skill=body.skill, tags=tags, side_effect_max=rank)
            found = await ranking.rank(conn, caller.tenant, body.need, filters, limit=CANDIDATES_MAX, now=now)
            return [_Candidate(r.row, r.position.score, r.relevance) for r in found]
        rows = await capability_queries.discover(
            conn,
            viewer_tenant=caller.tenant,
            skill=body.skill,
            tags=list(tags) if tags else None,
            side_effect_max=rank,
            limit=CANDIDATES_MAX,
            now=now,
        )
    # A skill named without words: every match is as relevant as the next.
    return [_Candidate(row, 0, 1.0) for row in rows]


async def make_offers(registry: Registry, caller: Caller, body: OfferRequest, *, trace_id: str | None) -> OfferAnswer:
    """The offers for one request of an authenticated caller holding `registry:read` (the route and
    the MCP tool check that); each offer audited as `offer.made` before the answer leaves."""
    rank = parse_request(body, max_ttl=registry.settings.ticket_max_ttl)
    candidates = await _candidates(registry, caller, body, rank)
    excluded: Counter[str] = Counter()
    eligible = []
    for candidate in candidates:
        row = candidate.row
        gate = CapabilityGate.of(
            public_capability(row), visibility=row["agent_visibility"], shared_with=row["agent_shared_with"]
        )
        reason = exclusion(caller, gate, region=body.region, live=row["live_instances"] > 0)
        if reason is None:
            eligible.append(candidate)
        elif reason != "invisible":
            excluded[reason] += 1
    instances = await agent_queries.least_loaded_instances(
        registry.pool, sorted({(c.row["tenant"], c.row["agent_id"]) for c in eligible})
    )
    placed = []
    for candidate in eligible:
        instance = instances.get((candidate.row["tenant"], candidate.row["agent_id"]))
        if instance is None:  # its last lease lapsed since the candidates were read
            excluded["unhealthy"] += 1
        else:
            placed.append((offer_order(candidate.score, candidate.row, instance), candidate, instance))
    placed.sort(key=lambda item: item[0])
    chosen = placed[: body.limit]
    whys = [why_of(candidate.relevance, candidate.row, instance) for _, candidate, instance in chosen]
    offers = [
        Offer(
            ref=capability_ref(row["tenant"], row["agent_id"], row["skill_id"], row["version"]),
            agent=agent_ref(row["tenant"], row["agent_id"]),
            id=row["skill_id"],
            version=row["version"],
            name=row["name"],
            side_effect=row["side_effect"],
            requires_approval=row["requires_approval"],
            score=score,
            why=why,
            instance=OfferInstance(
                instance_id=instance["instance_id"],
                url=instance["url"],
                load=instance["load"],
                expires_at=instance["expires_at"],
            ),
        )
        for (_, candidate, instance), why, score in zip(chosen, whys, scores(whys), strict=False)
        for row in (candidate.row,)
    ]
    # An offer releases an instance URL: audited before the answer leaves, like a detail release.
    await registry.writes.record(
        [
            AuditEvent(
                type=OFFER_MADE,
                outcome="allowed",
                tenant=row["tenant"],
                actor_tenant=caller.tenant,
                actor=caller.sub,
                actor_issuer=caller.issuer,
                ref=offer.ref,
                scopes=list(row["scopes"]),
                trace_id=trace_id,
                request_id=current_request_id(),
            )
            for offer, (_, candidate, _) in zip(offers, chosen, strict=False)
            for row in (candidate.row,)
        ]
    )
    if body.ticket is not None and offers:
        offers[0] = await _with_ticket(registry, caller, offers[0], body.ticket, trace_id=trace_id)
    return OfferAnswer(offers=offers, excluded=Excluded(**excluded))


async def _with_ticket(
    registry: Registry, caller: Caller, offer: Offer, ticket: OfferTicket, *, trace_id: str | None
) -> Offer:
    """The first offer with what POST /v1/tickets answers for it: a ticket, a pending approval, or
    the refusal (audited there as `ticket.denied`); the offer stands either way."""
    body = _ticket_body(ticket, offer.agent, offer.id, offer.version)
    try:
        answer = await tickets.request_ticket(registry, caller, body, idempotency_key=None, trace_id=trace_id)
    except ProblemError as error:
        return msgspec.structs.replace(offer, ticket_error=msgspec.to_builtins(problem_of(error, trace_id)))
    if answer.status == 202:
        return msgspec.structs.replace(
            offer, approval={"approvalId": answer.body["approvalId"], "status": answer.body["status"]}
        )
    return msgspec.structs.replace(offer, ticket=answer.body)
