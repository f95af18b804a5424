"""Detail release (docs/api.md#detail-release), the service: resolve the version a caller asks for,
run the checks in order (auth.policy.decide_release), audit the outcome, then hand back what was
released. The HTTP routes (registry.release.routes) and the MCP tools (registry.mcp.tools) both call
`release`, so a capability is released, refused and audited the same way whichever door the caller
came through. Visibility is decided once per request: by `decide_release`'s first check (detail,
tools, validation, tickets), or, for the extended card, once for the agent before its skills.

The version choice, shapes and events below are pure functions over stored rows and
`CapabilityVersion`s: no I/O and no clock (callers pass `now`); only `release` reads and writes.

Decisions docs/api.md#version-selection and #release-audit record:
- `latest` is the version discovery shows as latest: the one the latest marker names
  (db.capabilities.is_latest; decided at write and by the housekeeping tick from auth.policy.IN_FORCE
  and LATEST_ORDER: the newest in-force release, or the newest in-force pre-release while a skill has
  no release).
  Ranges follow `registry.versions.semver` (npm semantics: pre-releases only when the range names
  one of the same core).
- An exact version not yet effective (`effectiveAt` in the future) does not exist yet: 404.
- Every audit event names the path's tenant as `tenant` (the record's owner sees probes of its
  records, including those that do not exist) and the caller's as `actorTenant`. A record the
  caller may not see is answered as a missing one, so its `ref` is the request as written
  (`tenant/agentId/skill@<requested version>`), never the version it resolves to.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

import msgspec

from auth.policy import (
    EFFECTIVE,
    IN_FORCE,
    NOT_FOUND,
    NOT_FOUND_CODE,
    CapabilityGate,
    Refusal,
    can_see,
    decide_release,
    decide_release_of_visible,
    not_found,
)
from auth.principal import Caller
from db import agents as agent_queries
from db import capabilities as capability_queries
from db.agents import AgentRow, LiveInstance
from db.audit_events import AuditEvent
from db.capabilities import VersionDetailRow
from registry.agents.cards import CAPREG_EXTENSION_URI, extended_agent_card, mcp_tool, openai_tool, public_agent_card
from registry.core.problems import ErrorItem, ProblemError, invalid_request, refused
from registry.core.records import CapabilityVersion, JsonSchema, PublicCapability, agent_ref, capability_ref
from registry.core.tracing import current_request_id
from registry.core.wire import Wire
from registry.discovery.service import Publisher, capability_version, public_capability, publisher_of
from registry.operations.audit_events import caller_event
from registry.release.skill_records import Leases, leases, skill_record
from registry.state import Registry
from registry.versions.semver import InvalidRange, InvalidVersion, Version, parse_range, resolve

RELEASED = "detail.released"
DENIED = "detail.denied"
LATEST = "latest"


class VersionRequest(msgspec.Struct, frozen=True):
    """A parsed `{version}` path segment: exact, `latest`, or a range."""

    text: str
    exact: bool


def parse_version_request(text: str) -> VersionRequest:
    """Classify the requested version; raises `registry.versions.semver.InvalidRange` when it is none of
    an exact semver version, `latest`, or a supported range."""
    if text == LATEST:
        return VersionRequest(text, exact=False)
    try:
        Version.parse(text)
    except InvalidVersion:
        parse_range(text)  # raises InvalidRange for anything else
        return VersionRequest(text, exact=False)
    return VersionRequest(text, exact=True)


def choose_version(
    versions: Sequence[tuple[CapabilityVersion, VersionDetailRow]], request: VersionRequest, *, now: datetime
) -> tuple[CapabilityVersion, VersionDetailRow] | None:
    """The version `request` names among one skill's versions (each with its stored row), or None.

    An exact request may name a retired version (the policy answers 410 for it) or a candidate
    (the policy lets only its own tenant have it), once effective; ranges consider only versions in
    force (auth.policy.EFFECTIVE and IN_FORCE, the rules the queries render, at `now`). `latest` is
    the version the latest marker names (db.capabilities.is_latest), the one every discovery query
    reads, not decided again here: the newest release, or while a skill has none in force its
    newest pre-release, as of the last write or housekeeping tick.
    """
    if request.text == LATEST:
        return next(((cap, row) for cap, row in versions if capability_queries.is_latest(row)), None)
    rule = EFFECTIVE if request.exact else IN_FORCE
    candidates = [(cap, row) for cap, row in versions if rule.holds(row, now=now)]
    parsed = [(Version.parse(cap.version), cap, row) for cap, row in candidates]
    chosen = resolve(request.text, [v for v, _, _ in parsed])
    if chosen is None:
        return None
    # resolve() answers one of the candidates itself; identity tells apart equal-precedence builds.
    return next((cap, row) for v, cap, row in parsed if v is chosen)


# --- What is released ----------------------------------------------------------------------------


class Interface(Wire, omit_defaults=True):
    """One of the agent's own A2A interfaces, as its stored card lists it."""

    url: str
    protocol_binding: str
    protocol_version: str | None = None
    tenant: str | None = None


class Instance(Wire):
    """A live instance lease (renewed by heartbeats)."""

    instance_id: str
    url: str | None
    expires_at: datetime
    # The instance's own estimate of how busy it is, 0 to 1, from its last heartbeat (None: not sent).
    load: float | None
    last_seen_at: datetime


class Endpoints(Wire):
    """Where to call the capability: the agent's declared A2A interfaces and its live instances
    (at most 50, the least loaded first; `instanceCount` live in all)."""

    interfaces: list[Interface]
    instances: list[Instance]
    instance_count: int


class CapabilityDetail(PublicCapability, kw_only=True):
    """The public view plus what only passes the checks: schemas, examples and endpoints."""

    input_schema: JsonSchema
    output_schema: JsonSchema
    examples: list[str]
    # Behaviour fixtures (docs/api.md#behaviour-fixtures), released as examples are.
    fixtures: list[dict[str, Any]]
    # For a candidate, the version whose fixtures a replay runs (`capreg replay`); else null.
    baseline: str | None
    endpoints: Endpoints
    publisher: Publisher


def endpoints(card: dict[str, Any], instances: Sequence[LiveInstance], instance_count: int) -> Endpoints:
    """`card` is the agent's stored A2A card; `instances` rows of live leases (already bounded,
    db.agents.lease_snapshot), `instance_count` how many are live in all."""
    return Endpoints(
        instance_count=instance_count,
        interfaces=msgspec.convert(card.get("supportedInterfaces", []), list[Interface]),
        instances=[
            Instance(
                instance_id=row.instance_id,
                url=row.url,
                expires_at=row.expires_at,
                load=row.load,
                last_seen_at=row.last_seen_at,
            )
            for row in instances
        ],
    )


def capability_detail(
    public: PublicCapability, cap: CapabilityVersion, where: Endpoints, publisher: Publisher
) -> CapabilityDetail:
    return CapabilityDetail(
        **msgspec.structs.asdict(public),
        input_schema=cap.input_schema,
        output_schema=cap.output_schema,
        examples=list(cap.examples),
        fixtures=list(cap.fixtures),
        baseline=cap.baseline,
        endpoints=where,
        publisher=publisher,
    )


def withheld_extended_card(card: dict[str, Any], *, base_url: str) -> dict[str, Any]:
    """The extended card for a caller who passes no skill's checks.

    It lists no skills and, since nothing was released, none of the agent's own interfaces or
    security schemes: the registry stays the only interface, as on the public card. The capreg
    extension is present with an empty `skills` map so clients read both cases the same way.
    A2A marks `skills` as required and non-empty; a2a-sdk clients parse the empty list.
    """
    withheld = public_agent_card(card, [], base_url=base_url)
    withheld["capabilities"] = {
        **withheld["capabilities"],
        "extensions": [
            {
                "uri": CAPREG_EXTENSION_URI,
                "description": "capreg capability fields per skill id; none released to this caller.",
                "required": False,
                "params": {"skills": {}},
            }
        ],
    }
    return withheld


# --- Refusals and audit --------------------------------------------------------------------------


def release_event(
    caller: Caller,
    *,
    tenant: str,
    ref: str,
    refusal: Refusal | None,
    scopes: Sequence[str] = (),
    trace_id: str | None = None,
) -> AuditEvent:
    """`detail.released` (no refusal) or `detail.denied` with the refusal's code as `reason`.

    `scopes` are the capability's required scopes (what was checked), when it was resolved.
    """
    return caller_event(
        caller,
        DENIED if refusal else RELEASED,
        outcome="denied" if refusal else "allowed",
        tenant=tenant,
        ref=ref,
        scopes=scopes,
        reason=refusal.code if refusal else None,
        trace_id=trace_id,
        request_id=current_request_id(),
    )


# --- The service ---------------------------------------------------------------------------------

ToolFormat = Literal["openai", "mcp"]


class Released(msgspec.Struct, frozen=True):
    """A resolved capability version (once `release` returns it, one the caller passed the checks
    for), with the rows it came from."""

    cap: CapabilityVersion
    row: VersionDetailRow
    agent: AgentRow
    # The agent's leases (registry.release.skill_records.leases): read by `release` once the checks
    # passed, since only a detail shows them (a ticket releases no instance).
    leases: Leases | None = None

    def gate(self) -> CapabilityGate:
        """What policy decides on: the version's fields with its agent's visibility and sharing."""
        return CapabilityGate.of(self.cap, visibility=self.agent.visibility, shared_with=self.agent.shared_with)


async def resolve_version(
    registry: Registry, tenant: str, agent_id: str, skill_id: str, wanted: VersionRequest
) -> Released | None:
    """The one resolution of the version a request names (docs/api.md#version-selection), for detail,
    tools, validation and tickets alike: `choose_version` among the skill's versions. None is "no
    such capability version". Whether the caller may know of it, and what may then be done with it,
    is policy's, decided next (`decide_release`, `decide_ticket_target`: visibility first, so an
    invisible version answers as a missing one), never here, so it is decided once."""
    skill = await skill_record(registry, tenant, agent_id, skill_id)
    agent = skill.agent
    if agent is None:
        return None
    chosen = choose_version(skill.versions, wanted, now=registry.clock.now())
    if chosen is None:
        return None
    return Released(cap=chosen[0], row=chosen[1], agent=agent)


async def release(
    registry: Registry,
    caller: Caller,
    *,
    tenant: str,
    agent_id: str,
    skill_id: str,
    version: str,
    trace_id: str | None,
) -> Released:
    """Resolve `version` and run the checks in the documented order (README, "Detail release");
    audit a release, or raise the refusal about what was resolved (the operation DETAIL's boundary
    records it).

    A malformed range is 400 before anything is looked up (it says nothing about any record).
    """
    try:
        wanted = parse_version_request(version)
    except InvalidRange as exc:
        raise invalid_request(
            "not a version, `latest` or a version range", [ErrorItem(path="version", message=str(exc))]
        ) from None
    ref = capability_ref(tenant, agent_id, skill_id, version)  # as requested: nothing resolved yet

    def denied(refusal: Refusal, *, ref: str, scopes: Sequence[str] = ()) -> ProblemError:
        return refused(refusal).about(tenant=tenant, ref=ref, scopes=scopes)

    found = await resolve_version(registry, tenant, agent_id, skill_id, wanted)
    if found is None:
        raise denied(NOT_FOUND, ref=ref)
    refusal = decide_release(caller, found.gate(), exact_version=wanted.exact)
    if refusal is not None and refusal.code == NOT_FOUND_CODE:  # nothing resolved may show, not even in the audit
        raise denied(refusal, ref=ref)
    if refusal is not None:
        raise denied(refusal, ref=found.cap.ref, scopes=found.cap.scopes)
    event = release_event(
        caller, tenant=tenant, ref=found.cap.ref, refusal=None, scopes=found.cap.scopes, trace_id=trace_id
    )
    await registry.writes.record([event])
    found = msgspec.structs.replace(found, leases=await leases(registry, tenant, agent_id))
    return await _with_fixtures(registry, found)


async def _with_fixtures(registry: Registry, found: Released) -> Released:
    """A released version with its fixtures, read only for it and only when it has some (they are
    not in the cached skill record: up to 100 of 64 KiB each)."""
    cap = found.cap
    if not cap.fixture_count:
        return found
    fixtures = await capability_queries.fixtures_of(registry.pool, cap.tenant, cap.agent_id, cap.id, cap.version)
    return msgspec.structs.replace(found, cap=msgspec.structs.replace(cap, fixtures=list(fixtures)))


def detail_of(released: Released) -> CapabilityDetail:
    """The capability detail: public fields, schemas, examples and endpoints (health and instances
    from the leases `release` read)."""
    public = public_capability(released.row)
    now = released.leases or Leases(instances=[], instance_count=0, health=public.health)
    public = msgspec.structs.replace(public, health=now.health, live_instances=now.instance_count)
    return capability_detail(
        public,
        released.cap,
        endpoints(released.agent.card, now.instances, now.instance_count),
        publisher_of(released.agent),
    )


def tool_definition(released: Released, format: ToolFormat) -> dict[str, Any]:  # noqa: A002
    """The released capability as an OpenAI function-calling tool or an MCP tool definition."""
    return openai_tool(released.cap) if format == "openai" else mcp_tool(released.cap)


async def extended_card(
    registry: Registry, caller: Caller, *, tenant: str, agent_id: str, base_url: str, jku: str, trace_id: str | None
) -> dict[str, Any]:
    """The A2A extended agent card, signed by the registry (`jku` names its JWKS): the latest
    in-force version of each skill whose checks the caller passes (each check audited), or the
    withheld card when none passes; 404 for an invisible agent (decided once, for the agent: each
    skill then takes the checks after visibility)."""
    agent = await agent_queries.get_agent(registry.pool, tenant, agent_id)
    if agent is None or not can_see(
        caller, tenant=agent.tenant, visibility=agent.visibility, shared_with=agent.shared_with
    ):
        raise refused(not_found("agent")).about(tenant=tenant, ref=agent_ref(tenant, agent_id))
    rows = await capability_queries.latest_per_skill(registry.pool, tenant, agent_id, detail=True)
    passed, events = [], []
    for row in rows:
        cap = capability_version(row)
        gate = CapabilityGate.of(cap, visibility=agent.visibility, shared_with=agent.shared_with)
        refusal = decide_release_of_visible(caller, gate, exact_version=False)
        events.append(
            release_event(caller, tenant=tenant, ref=cap.ref, refusal=refusal, scopes=cap.scopes, trace_id=trace_id)
        )
        if refusal is None and cap.fixture_count:
            fixtures = await capability_queries.fixtures_of(registry.pool, tenant, agent_id, cap.id, cap.version)
            cap = msgspec.structs.replace(cap, fixtures=list(fixtures))
        if refusal is None:
            passed.append(cap)
    await registry.writes.record(events)
    if not passed:
        card = withheld_extended_card(agent.card, base_url=base_url)
    else:
        card = extended_agent_card(agent.card, passed, base_url=base_url)
    return await registry.card_signatures.sign(card, registry.keyring, jku=jku)
