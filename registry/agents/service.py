"""Agents, the service (docs/api.md#register-an-agent, #heartbeats): registering an agent and
publishing its capability versions, its public view and A2A card (cached per process,
registry.core.response_cache), its skill versions, and instance heartbeats. Decisions are
auth.policy's, schemas and compatibility registry.agents.registration's, the SQL db/agents.py and
db/capabilities.py.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import cast

import msgspec

from auth.policy import EFFECTIVE, can_see, check_heartbeat, check_publish, not_found, sees_candidates
from auth.principal import Caller
from db import agents as agent_queries
from db import capabilities as capability_queries
from db import signatures as signature_queries
from db.agents import AgentRow, LeaseRenewal
from db.capabilities import VersionDetailRow, VersionRow
from db.leases import INSTANCE_LIMIT
from registry.agents.cards import public_agent_card
from registry.agents.endpoint_urls import loopback_urls_allowed, registration_url_errors, url_problem
from registry.agents.publisher_keys import fast_path_allowed, verified_publisher
from registry.agents.registration import (
    RegistrationResult,
    VersionRef,
    apply_registration,
    check_compatibility_ahead,
    prepare_registration,
    registration_digest,
)
from registry.core import error_codes as codes
from registry.core.problems import ErrorItem, ProblemError, invalid_request, refused
from registry.core.records import AgentRegistration, PublicCapability, agent_ref
from registry.core.response_cache import EVERYONE, CachedResponse, cache_key, etag_of, expiry
from registry.core.tracing import current_request_id
from registry.discovery.service import agent_view, capability_version, public_capability
from registry.state import Registry

log = logging.getLogger("capreg")

REGISTERED = "agent.registered"
PUBLISHED = "version.published"


class _SkillRefs(msgspec.Struct):
    """Only the skill ids and versions of a registration body (everything else is skipped unread)."""

    skills: list[VersionRef] = []


async def register(
    registry: Registry,
    caller: Caller,
    tenant: str,
    agent_id: str,
    data: AgentRegistration,
    body: bytes,
    *,
    trace_id: str | None,
) -> RegistrationResult:
    """Register or update an agent and publish its new capability versions, in one transaction.

    Refusals are audited (a publish into another tenant, a change to a published version);
    malformed bodies (400) and no-op re-registrations are not: nothing was decided or changed.
    """
    ref = agent_ref(tenant, agent_id)
    refusal = check_publish(caller, tenant)
    if refusal is not None:
        raise refused(refusal).about(tenant=tenant, ref=ref)
    url_errors = registration_url_errors(data, allow_loopback=loopback_urls_allowed(registry.settings))
    if url_errors:  # before any work or write: a registration with a refused URL applies nothing
        raise invalid_request("the registration is invalid", [ErrorItem(path=p, message=m) for p, m in url_errors])
    publisher_kid = await verified_publisher(registry, caller, tenant, agent_id, data, body, trace_id=trace_id)
    prepared = await prepare_registration(data)
    await check_compatibility_ahead(registry.pool, tenant, agent_id, prepared)
    # Stored with the agent: these exact bytes, sent again, take the fast path (unchanged_registration),
    # and are what GET .../registration answers.
    prepared = msgspec.structs.replace(
        prepared, body_hash=registration_digest(body), body=body, publisher_kid=publisher_kid
    )
    request_id = current_request_id()  # the write runs in the group-commit task
    try:
        return await registry.writes.run(
            lambda scope: apply_registration(
                scope,
                caller,
                tenant,
                agent_id,
                prepared,
                trace_id=trace_id,
                request_id=request_id,
                max_agents=registry.settings.max_agents_per_tenant,
                now=registry.clock.now(),
            )
        )
    except (
        ProblemError
    ) as error:  # 409 version_conflict or incompatible_change, 400 signature_required: nothing applied
        event = None if error.code == codes.SIGNATURE_REQUIRED.code else PUBLISHED  # an attempt on a version
        raise error.about(tenant=tenant, ref=ref, event=event) from None


async def unchanged_registration(
    registry: Registry, caller: Caller | None, tenant: str, agent_id: str, body: bytes
) -> tuple[CachedResponse, list[VersionRef]] | None:
    """The agent view and skill refs when `body` is exactly the last registration applied to this
    agent and `caller` may register it: one indexed read (no batch slot, no transaction, no schema
    compiled). Agents re-register at every start, so a fleet restart is mostly this. Anything else
    (another body, a caller that would be refused, an unknown agent) is None: `register` decides,
    refuses and audits as always. Not audited, like every re-registration that changes nothing
    (docs/audit.md)."""
    if caller is None or check_publish(caller, tenant) is not None:
        return None
    stored_hash, publisher_kid, kids = await signature_queries.registration_state(registry.pool, tenant, agent_id)
    if stored_hash != registration_digest(body) or not fast_path_allowed(publisher_kid, kids or []):
        return None
    entry = await agent_view_entry(registry, tenant, agent_id)
    if entry is None:
        return None
    try:
        refs = msgspec.json.decode(body, type=_SkillRefs)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return entry, refs.skills


class _AgentSnapshot(msgspec.Struct):
    """An agent's row and the latest version of each of its skills, read together, with the change
    sequence read before them and when the next version becomes effective (the cache's terms)."""

    seq: int
    next_effective: datetime | None
    now: datetime
    agent: AgentRow
    # VersionDetailRows when read with `detail`.
    skills: list[VersionRow]


async def _snapshot(registry: Registry, tenant: str, agent_id: str, *, detail: bool) -> _AgentSnapshot | None:
    now = registry.clock.now()
    async with registry.pool_waits.acquire() as conn:
        seq, next_effective = await capability_queries.snapshot_bounds(conn, now=now)
        agent = await agent_queries.get_agent(conn, tenant, agent_id)
        skills = await capability_queries.latest_per_skill(conn, tenant, agent_id, detail=detail) if agent else []
    if agent is None:
        return None
    return _AgentSnapshot(seq, next_effective, now, agent, skills)


def _view_entry(registry: Registry, snapshot: _AgentSnapshot) -> CachedResponse:
    """The encoded public view of the snapshot's agent, kept in the cache (when still current)."""
    agent = snapshot.agent
    body = msgspec.json.encode(agent_view(agent, snapshot.skills))  # public fields only, of detail rows too
    first_lapse = agent.lease_bounds[0] if agent.lease_bounds else None
    entry = CachedResponse(
        body=body,
        etag=etag_of(body),
        seq=snapshot.seq,
        expires=expiry(registry.clock.monotonic(), snapshot.now, [snapshot.next_effective, first_lapse]),
        extra=(agent.visibility, tuple(agent.shared_with)),
    )
    registry.responses.put(_view_key(agent.tenant, agent.agent_id), entry, registry.watcher.cache_seq())
    return entry


async def agent_view_entry(registry: Registry, tenant: str, agent_id: str) -> CachedResponse | None:
    """The encoded agent public view (None: no such agent), from the per-process cache on the
    public card's terms (registry.core.response_cache): dropped on any committed change, and ending
    when the agent's first live lease lapses or a version becomes effective. A new instance of an
    already healthy agent is not a change, so `liveInstances` may lag by the cache's max age.
    Visibility is the caller's to check (`visible_view`): the entry is the same for everyone."""
    entry = registry.responses.get(
        _view_key(tenant, agent_id), registry.watcher.cache_seq(), registry.clock.monotonic()
    )
    if entry is not None:
        return entry
    snapshot = await _snapshot(registry, tenant, agent_id, detail=False)
    return None if snapshot is None else _view_entry(registry, snapshot)


def _visible(caller: Caller | None, tenant: str, entry: CachedResponse | None) -> CachedResponse:
    if entry is None or not can_see(caller, tenant=tenant, visibility=entry.extra[0], shared_with=entry.extra[1]):
        raise refused(not_found("agent"))
    return entry


async def visible_view(registry: Registry, caller: Caller | None, tenant: str, agent_id: str) -> CachedResponse:
    """The encoded public view of an agent the caller may see; 404 otherwise."""
    return _visible(caller, tenant, await agent_view_entry(registry, tenant, agent_id))


async def visible_card(
    registry: Registry, caller: Caller | None, tenant: str, agent_id: str, *, base_url: str, jku: str
) -> CachedResponse:
    """The encoded A2A public card of an agent the caller may see, signed by the registry (`jku`
    names its JWKS); 404 otherwise. The card is the same for everyone who may see it: cached per
    process with its signature (keyed by the registry URLs it names, which come from
    `Registry.public_url`), the visibility check runs every time."""
    entry = await public_card_entry(registry, tenant, agent_id, base_url=base_url, jku=jku)
    return _visible(caller, tenant, entry)


def _view_key(tenant: str, agent_id: str) -> tuple:
    return cache_key("agent-view", EVERYONE, tenant, agent_id)


def _card_key(registry: Registry, base_url: str, jku: str) -> tuple:
    # base_url names the agent. Keyed by the signing key too: a rotation changes no record, and a
    # card cached with the signature of a key since removed from the JWKS would not verify.
    return cache_key("agent-card", EVERYONE, base_url, jku, registry.keyring.signing_kid)


async def _card_entry(registry: Registry, snapshot: _AgentSnapshot, *, base_url: str, jku: str) -> CachedResponse:
    """The encoded, signed public card of the snapshot's agent (read with detail rows), kept in the
    cache (when still current)."""
    key = _card_key(registry, base_url, jku)
    agent = snapshot.agent
    rows = cast("list[VersionDetailRow]", snapshot.skills)  # read with `detail` (the card's callers')
    card = public_agent_card(agent.card, [capability_version(row) for row in rows], base_url=base_url)
    card = await registry.card_signatures.sign(card, registry.keyring, jku=jku)
    body = msgspec.json.encode(card)
    entry = CachedResponse(
        body=body,
        etag=etag_of(body),
        seq=snapshot.seq,
        expires=expiry(registry.clock.monotonic(), snapshot.now, [snapshot.next_effective]),
        extra=(agent.visibility, tuple(agent.shared_with)),
    )
    registry.responses.put(key, entry, registry.watcher.cache_seq())
    return entry


async def public_card_entry(
    registry: Registry, tenant: str, agent_id: str, *, base_url: str, jku: str
) -> CachedResponse | None:
    """The encoded, signed public card of an agent whoever may see it (None: no such agent), from
    the per-process cache; visibility is the caller's to check (`visible_card`)."""
    entry = registry.responses.get(
        _card_key(registry, base_url, jku), registry.watcher.cache_seq(), registry.clock.monotonic()
    )
    if entry is not None:
        return entry
    snapshot = await _snapshot(registry, tenant, agent_id, detail=True)
    return None if snapshot is None else await _card_entry(registry, snapshot, base_url=base_url, jku=jku)


async def registered_view(
    registry: Registry, tenant: str, agent_id: str, *, base_url: str, jku: str
) -> tuple[CachedResponse, Callable[[], Awaitable[None]]]:
    """After a registration: the agent's encoded public view for the answer, and `sign_card`, to run
    after the answer has left (a background task), which signs the agent's new public card and keeps
    it, so that its first readers are answered from the cache instead of paying for the signing. One
    read serves both (the card's detail rows hold the view's public fields)."""
    snapshot = await _snapshot(registry, tenant, agent_id, detail=True)
    if snapshot is None:  # registered just before (agents are never deleted)
        raise RuntimeError(f"{tenant}/{agent_id} was registered but cannot be read")

    async def sign_card() -> None:
        try:
            await _card_entry(registry, snapshot, base_url=base_url, jku=jku)
        except Exception as exc:  # an optimisation only: the first reader signs instead
            log.warning("signing the new card of %s/%s failed: %r", tenant, agent_id, exc)

    return _view_entry(registry, snapshot), sign_card


async def skill_versions(
    registry: Registry, caller: Caller | None, tenant: str, agent_id: str, skill_id: str
) -> list[PublicCapability]:
    """Every version of a skill of an agent the caller may see, newest first; versions not yet
    effective (auth.policy.EFFECTIVE) are not discoverable, so they stay hidden here too, and candidates are listed to
    their own tenant only (auth.policy.sees_candidates)."""
    agent = await agent_queries.get_agent(registry.pool, tenant, agent_id)
    if agent is None or not can_see(
        caller, tenant=agent.tenant, visibility=agent.visibility, shared_with=agent.shared_with
    ):
        raise refused(not_found("agent"))
    rows = await capability_queries.skill_versions(registry.pool, tenant, agent_id, skill_id)
    now = registry.clock.now()
    candidates_shown = sees_candidates(caller, tenant)
    items = [
        public_capability(r)
        for r in rows
        if EFFECTIVE.holds(r, now=now) and (candidates_shown or r.status != "candidate")
    ]
    if not items:
        raise refused(not_found("skill"))
    return items


async def heartbeat(
    registry: Registry,
    caller: Caller,
    tenant: str,
    agent_id: str,
    *,
    instance_id: str,
    url: str | None,
    ttl_seconds: int,
    load: float | None,
    trace_id: str | None = None,
) -> datetime:
    """Renew an instance's liveness lease (batched, db.leases); when it now expires. A renewal is not
    audited (docs/audit.md: liveness is not a decision); a refusal by policy is, as `request.refused`.
    A heartbeat for an unregistered agent of the caller's own tenant is a plain 404, not audited, so
    a storm of them after a restart costs no more than valid heartbeats."""
    if url is not None:  # checked before anything is queued: a refused URL renews nothing
        problem = url_problem(url, allow_loopback=loopback_urls_allowed(registry.settings))
        if problem is not None:
            raise invalid_request("the heartbeat is invalid", [ErrorItem(path="/url", message=f"the URL {problem}")])
    renewal = LeaseRenewal(tenant, agent_id, instance_id, url, ttl_seconds, load)
    visible = caller.tenant == renewal.tenant
    if not visible:  # another tenant's agent: whether the caller may know it exists decides 404 or 403
        agent = await agent_queries.get_agent(registry.pool, renewal.tenant, renewal.agent_id)
        visible = agent is not None and can_see(
            caller, tenant=renewal.tenant, visibility=agent.visibility, shared_with=agent.shared_with
        )
    refusal = check_heartbeat(caller, renewal.tenant, agent_visible=visible)
    if refusal is not None:
        raise refused(refusal).about(tenant=renewal.tenant, ref=agent_ref(renewal.tenant, renewal.agent_id))
    expires_at = await registry.leases.renew(renewal)
    if expires_at is None:  # not registered: the instance registers, then heartbeats again
        raise refused(not_found("agent; register it first"))
    if expires_at == INSTANCE_LIMIT:  # a new instance beyond CAPREG_MAX_INSTANCES: nothing written
        error = ProblemError(
            codes.INSTANCE_LIMIT,
            f"the agent has {registry.leases.max_instances} live instances, the most allowed (CAPREG_MAX_INSTANCES); "
            "renew a live instance or let one lapse",
        )
        raise error.about(tenant=renewal.tenant, ref=agent_ref(renewal.tenant, renewal.agent_id))
    return expires_at
