"""Offers (docs/api.md#offers), the service behind `POST /v1/offers` and the MCP tool
`find_capability`: which capability, which version, which instance, now, for one caller.

Candidates come from discovery (registry.discovery.ranking.rank for a `need`, db.capabilities.discover for a
`skill` alone: the latest in-force version per agent and skill, discovery's visibility); each is
then put to detail release's own decision (auth.policy.decide_release), so an offer is exactly a
capability the caller could be released right now. Ordering and scores are pure functions below
(`decide_candidates`, `offer_order`, `why_of`, `scores`); the service around them reads and writes.

Why it is cheap per request (docs/performance.md#offers): the decided candidates are kept per
process for each (release profile, need's words, filters) on the terms of the response cache, and
the chosen offers with their least-loaded instances for at most LEASES_MAX_AGE, as detail release
keeps instances (choosing reads only the instances of the groups of equals that fill `limit`).
Every request, cached or not, writes its `offer.made` events before the answer leaves.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from datetime import datetime
from typing import Annotated, Any

import msgspec

from auth.policy import CapabilityGate, Refusal, decide_release, release_profile, serves_regions
from auth.principal import Caller
from db import agents as agent_queries
from db import capabilities as capability_queries
from db.agents import LiveInstance
from db.capabilities import DiscoverRow
from registry.core.problems import ErrorItem, ProblemError, invalid_request, problem_of
from registry.core.records import MAX_FILTER_VALUES, SIDE_EFFECT_ORDER, SKILL_ID_MAX_LENGTH, agent_ref, capability_ref
from registry.core.response_cache import LEASES_MAX_AGE, CachedResponse, cache_key, decided_for, expiry
from registry.core.tracing import current_request_id
from registry.core.wire import Wire
from registry.discovery import ranking
from registry.discovery.service import REGION_MAX_LENGTH, public_capability, side_effect_rank
from registry.operations.audit_events import caller_event
from registry.operations.boundary import run
from registry.state import Registry
from registry.tickets import request as ticket_requests
from registry.tickets.operations import MINT
from registry.tickets.service import request_ticket

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

    scopes: ticket_requests.RequestedScopes
    resources: ticket_requests.RequestedResources = []
    on_behalf_of: ticket_requests.OnBehalfOf | None = None
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
    tags: Annotated[list[Annotated[str, msgspec.Meta(max_length=128)]], msgspec.Meta(max_length=MAX_FILTER_VALUES)] = []
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
            ticket_requests.check_request(
                _ticket_request(body.ticket, "placeholder/agent", "placeholder", "1.0.0", max_ttl), max_ttl=max_ttl
            )
        except ProblemError as error:
            error.errors = [ErrorItem(path="/ticket" + (e.path or ""), message=e.message) for e in error.errors or []]
            raise
    return rank


def _ticket_body(ticket: OfferTicket, audience: str, skill: str, version: str) -> ticket_requests.TicketRequestBody:
    return ticket_requests.TicketRequestBody(
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
    return ticket_requests.ticket_request(_ticket_body(ticket, audience, skill, version), max_ttl=max_ttl)


def exclusion(caller: Caller, gate: CapabilityGate, *, region: str | None, live: bool) -> str | None:
    """Why a visible, matching capability is not offered (the first reason), or None to offer it;
    "invisible" for what the caller may not see (never counted)."""
    refusal: Refusal | None = decide_release(caller, gate, exact_version=False)
    if refusal is not None:
        return {"insufficient_scope": "scope", "data_location_denied": "region"}.get(refusal.code, "invisible")
    if region is not None and not serves_regions(gate.data_regions, (region,)):
        return "region"
    if not live:
        return "unhealthy"
    return None


class Candidate(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A matching capability the caller may be offered: what its offer, its order and its audit
    event need (the gate it was decided on is not kept)."""

    tenant: str
    agent_id: str
    skill_id: str
    version: str
    name: str
    side_effect: str
    requires_approval: bool
    scopes: tuple[str, ...]
    latency: float | None
    score: int
    relevance: float

    @property
    def ref(self) -> str:
        return capability_ref(self.tenant, self.agent_id, self.skill_id, self.version)


# A decided group is kept encoded (about 100 bytes a candidate, against about 700 as objects), and
# decoded only when a request reaches it: most requests fill their limit from the first groups.
_encode_group = msgspec.msgpack.Encoder().encode
_decode_group = msgspec.msgpack.Decoder(list[Candidate]).decode


class Eligible(msgspec.Struct, frozen=True):
    """The outcome of deciding one request's candidates for one release profile: the offerable ones
    cut into groups of equals in `static_order` (instance load orders each group), each group
    msgpack-encoded, and the counts of the excluded. `complete` is False when groups were left out
    after the first ones that hold `keep` candidates (what a cache keeps)."""

    groups: list[bytes]
    excluded: dict[str, int]
    complete: bool

    def candidates(self, group: int) -> list[Candidate]:
        return _decode_group(self.groups[group])


def _latency(slo: Any) -> float | None:
    value = slo.get("latencyP99Ms") if isinstance(slo, dict) else None
    return float(value) if isinstance(value, (int, float)) and value >= 0 else None


def static_order(candidate: Candidate) -> tuple:
    """Relevance first (ranked score, higher first), then lower side effect: the part of the offer
    order that needs no instance (`offer_order` is the whole)."""
    return (-candidate.score, SIDE_EFFECT_ORDER[candidate.side_effect])


def offer_order(candidate: Candidate, instance: LiveInstance) -> tuple:
    """Relevance first (ranked score, higher first), then lower side effect, lower instance load
    (none sent: as fully loaded), lower p99 latency (none declared: last), then ref."""
    load = instance.load
    return (
        *static_order(candidate),
        1.0 if load is None else load,
        float("inf") if candidate.latency is None else candidate.latency,
        candidate.ref,
    )


def groups_of_equals(offerable: Sequence[Candidate]) -> list[list[Candidate]]:
    """`offerable` (in static_order) cut into runs of equal static_order: instance load orders each."""
    runs: list[list[Candidate]] = []
    for candidate in offerable:
        if runs and static_order(runs[-1][0]) == static_order(candidate):
            runs[-1].append(candidate)
        else:
            runs.append([candidate])
    return runs


def decide_candidates(
    caller: Caller, matches: Sequence[tuple[DiscoverRow, int, float]], *, region: str | None, keep: int | None = None
) -> Eligible:
    """Put each match (discovery row, score, relevance) to detail release's decision (`exclusion`):
    the offerable ones in groups of equals, the others counted by reason (never the invisible).
    With `keep`, only the first groups that hold `keep` offerable candidates are kept."""
    excluded: Counter[str] = Counter()
    offerable = []
    for row, score, relevance in matches:
        gate = CapabilityGate.of(
            public_capability(row), visibility=row.agent_visibility, shared_with=row.agent_shared_with
        )
        reason = exclusion(caller, gate, region=region, live=row.live_instances > 0)
        if reason is None:
            offerable.append(
                Candidate(
                    tenant=row.tenant,
                    agent_id=row.agent_id,
                    skill_id=row.skill_id,
                    version=row.version,
                    name=row.name,
                    side_effect=row.side_effect,
                    requires_approval=row.requires_approval,
                    scopes=tuple(row.scopes),
                    latency=_latency(row.slo),
                    score=score,
                    relevance=relevance,
                )
            )
        elif reason != "invisible":
            excluded[reason] += 1
    offerable.sort(key=static_order)
    groups, held = [], 0
    for group in groups_of_equals(offerable):
        if keep is not None and held >= keep:
            break
        groups.append(_encode_group(group))
        held += len(group)
    return Eligible(groups=groups, excluded=dict(excluded), complete=held == len(offerable))


def why_of(candidate: Candidate, instance: Any) -> Why:
    load = instance.load
    latency = candidate.latency
    return Why(
        relevance=round(min(1.0, max(0.0, candidate.relevance)), 4),
        risk=round(1 - SIDE_EFFECT_ORDER[candidate.side_effect] / _MAX_SIDE_EFFECT, 4),
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

# Offerable candidates a cached decision keeps: the groups of equals that fill the largest `limit`
# twice over, so that instances lapsing since (rare: liveness is exact as of the entry) rarely leave
# a request short; one that is short decides afresh, uncached.
KEEP = 2 * MAX_LIMIT


def _cache_key(kind: str, caller: Caller, body: OfferRequest, rank: int | None, *more: Hashable) -> tuple:
    """Everything the decided candidates depend on: the caller's release profile (all the decision
    reads of it), the need's words (all ranking reads of it), the filters and the region."""
    words = tuple(ranking.query_words(body.need)) if body.need else None
    tags = tuple(sorted(set(body.tags))) if body.tags else None
    return cache_key(kind, decided_for(release_profile(caller)), words, body.skill, tags, rank, body.region, *more)


async def _matches(registry: Registry, caller: Caller, body: OfferRequest, rank: int | None, now: datetime):
    """Matching capabilities the caller may see, latest per agent and skill, best first, as
    (row, score, relevance); and the change sequence and next effective moment read before them."""
    tags = tuple(body.tags) if body.tags else None
    async with registry.reads.connection() as conn:
        seq, next_effective = await capability_queries.snapshot_bounds(conn, now=now)
        if body.need:
            filters = ranking.SearchFilters(skill=body.skill, tags=tags, side_effect_max=rank)
            found = await ranking.rank(
                conn, registry.search, caller.tenant, body.need, filters, limit=CANDIDATES_MAX, now=now
            )
            return [(r.row, r.position.score, r.relevance) for r in found], seq, next_effective
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
    return [(row, 0, 1.0) for row in rows], seq, next_effective


async def eligible(registry: Registry, caller: Caller, body: OfferRequest, rank: int | None) -> Eligible:
    """The request's candidates decided for the caller, from the per-process cache on the terms of
    registry.core.response_cache (kept for one change sequence: a new version, a visibility, scope,
    region or status change, an agent coming alive all advance it; until the first version that
    becomes effective and the first lease that lapses among the candidates; 10 s at most)."""
    key = _cache_key("offers", caller, body, rank)
    entry = registry.release_cache.get(key, registry.watcher.cache_seq(), registry.clock.monotonic())
    if entry is not None:
        return entry.extra
    now = registry.clock.now()
    matches, seq, next_effective = await registry.reads.once(
        key, registry.watcher.cache_seq(), lambda: _matches(registry, caller, body, rank, now)
    )
    decided = decide_candidates(caller, matches, region=body.region, keep=KEEP)
    boundaries = [next_effective, *(row.lease_until for row, _, _ in matches)]
    expires = expiry(registry.clock.monotonic(), now, boundaries)
    registry.release_cache.put(
        key, CachedResponse(body=b"", etag="", seq=seq, expires=expires, extra=decided), registry.watcher.cache_seq()
    )
    return decided


async def _placed(
    registry: Registry, decided: Eligible, limit: int, excluded: Counter[str]
) -> list[tuple[Candidate, Any]]:
    """The first `limit` offerable candidates in offer order with their instances, reading the
    instances of one group of equals at a time (only as many groups as fill `limit`). A candidate
    whose instances lapsed since it was decided is counted unhealthy."""
    placed: list[tuple[Candidate, Any]] = []
    for index in range(len(decided.groups)):
        group = decided.candidates(index)
        instances = await agent_queries.least_loaded_instances(
            registry.pool, sorted({(c.tenant, c.agent_id) for c in group})
        )
        ready = []
        for candidate in group:
            instance = instances.get((candidate.tenant, candidate.agent_id))
            if instance is None:
                excluded["unhealthy"] += 1
            else:
                ready.append((candidate, instance))
        ready.sort(key=lambda pair: offer_order(*pair))
        placed.extend(ready)
        if len(placed) >= limit:
            break
    return placed[:limit]


class _Chosen(msgspec.Struct, frozen=True):
    offers: list[tuple[Candidate, Any]]
    excluded: dict[str, int]


async def _chosen(
    registry: Registry, caller: Caller, body: OfferRequest, rank: int | None
) -> tuple[list[tuple[Candidate, Any]], Counter[str]]:
    """The request's offers in order, each with its agent's least-loaded live instance, and the
    exclusion counts. Kept per process for the request's cache key and `limit` for at most
    LEASES_MAX_AGE (and never past a chosen instance's lease, nor a committed change): instances and
    loads are then as old as detail release's."""
    key = _cache_key("offers-placed", caller, body, rank, body.limit)
    seq = registry.watcher.cache_seq()
    entry = registry.release_cache.get(key, seq, registry.clock.monotonic())
    if entry is not None:
        return entry.extra.offers, Counter(entry.extra.excluded)
    decided = await eligible(registry, caller, body, rank)
    excluded = Counter(decided.excluded)
    chosen = await _placed(registry, decided, body.limit, excluded)
    if len(chosen) < body.limit and not decided.complete:
        # Instances lapsed among the kept candidates: decide afresh over all of them, uncached.
        matches, _, _ = await _matches(registry, caller, body, rank, registry.clock.now())
        decided = decide_candidates(caller, matches, region=body.region)
        excluded = Counter(decided.excluded)
        chosen = await _placed(registry, decided, body.limit, excluded)
    if seq is not None:  # the instances were read after `seq` was known: at least that new
        leases = [instance.expires_at for _, instance in chosen]
        expires = expiry(registry.clock.monotonic(), registry.clock.now(), leases, max_age=LEASES_MAX_AGE)
        registry.release_cache.put(
            key,
            CachedResponse(body=b"", etag="", seq=seq, expires=expires, extra=_Chosen(chosen, dict(excluded))),
            registry.watcher.cache_seq(),
        )
    return chosen, excluded


async def make_offers(registry: Registry, caller: Caller, body: OfferRequest, *, trace_id: str | None) -> OfferAnswer:
    """The offers for one request of an authenticated caller holding `registry:read` (the route and
    the MCP tool check that); each offer audited as `offer.made` before the answer leaves."""
    rank = parse_request(body, max_ttl=registry.settings.ticket_max_ttl)
    chosen, excluded = await _chosen(registry, caller, body, rank)
    whys = [why_of(candidate, instance) for candidate, instance in chosen]
    offers = [
        Offer(
            ref=candidate.ref,
            agent=agent_ref(candidate.tenant, candidate.agent_id),
            id=candidate.skill_id,
            version=candidate.version,
            name=candidate.name,
            side_effect=candidate.side_effect,
            requires_approval=candidate.requires_approval,
            score=score,
            why=why,
            instance=OfferInstance(
                instance_id=instance.instance_id,
                url=instance.url,
                load=instance.load,
                expires_at=instance.expires_at,
            ),
        )
        for (candidate, instance), why, score in zip(chosen, whys, scores(whys), strict=True)
    ]
    # An offer releases an instance URL: audited before the answer leaves, like a detail release.
    await registry.writes.record(
        [
            caller_event(
                caller,
                OFFER_MADE,
                tenant=candidate.tenant,
                ref=offer.ref,
                scopes=candidate.scopes,
                trace_id=trace_id,
                request_id=current_request_id(),
            )
            for offer, (candidate, _) in zip(offers, chosen, strict=True)
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
        answer = await run(
            registry,
            MINT,
            caller,
            lambda: request_ticket(registry, caller, body, idempotency_key=None, trace_id=trace_id),
            trace_id=trace_id,
        )
    except ProblemError as error:
        return msgspec.structs.replace(offer, ticket_error=msgspec.to_builtins(problem_of(error, trace_id)))
    if answer.status == 202:
        return msgspec.structs.replace(
            offer, approval={"approvalId": answer.body["approvalId"], "status": answer.body["status"]}
        )
    return msgspec.structs.replace(offer, ticket=answer.body)
