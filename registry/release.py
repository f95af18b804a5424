"""Detail release (docs/api.md#detail-release): which version a request names, what a caller who passed the
checks receives, and the audit events that record every release and refusal.

Pure functions over stored rows and `CapabilityVersion`s: no I/O and no clock (callers pass `now`).
The checks themselves are `auth.policy.decide_release`; this module only resolves and shapes.

Decisions docs/api.md#version-selection and #release-audit record:
- `latest` is the version discovery shows as latest: the newest in-force release, or the newest
  in-force pre-release when a skill has no release yet. Ranges follow `registry.versions`
  (npm semantics: pre-releases only when the range names one of the same core).
- An exact version not yet effective (`effectiveAt` in the future) does not exist yet: 404.
- Every audit event names the path's tenant as `tenant` (the record's owner sees probes of its
  records, including those that do not exist) and the caller's as `actorTenant`. A record the
  caller may not see is never resolved, so its `ref` is the request as written
  (`tenant/agentId/skill@<requested version>`), never the version it would resolve to.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from auth.policy import Decision
from auth.principal import Caller
from registry.tracing import current_request_id
from registry.audit import AuditEvent
from registry.cards import CAPREG_EXTENSION_URI, public_agent_card
from registry.problems import ProblemError
from registry.records import CapabilityVersion, JsonSchema, PublicCapability
from registry.versions import InvalidVersion, Version, parse_range, resolve
from registry.wire import Wire

RELEASED = "detail.released"
DENIED = "detail.denied"
LATEST = "latest"
# One answer for every "no such capability version", whichever part is missing or invisible.
NOT_FOUND_DETAIL = "no such capability version"


class VersionRequest(msgspec.Struct, frozen=True):
    """A parsed `{version}` path segment: exact, `latest`, or a range."""

    text: str
    exact: bool


def parse_version_request(text: str) -> VersionRequest:
    """Classify the requested version; raises `registry.versions.InvalidRange` when it is none of
    an exact semver version, `latest`, or a supported range."""
    if text == LATEST:
        return VersionRequest(text, exact=False)
    try:
        Version.parse(text)
    except InvalidVersion:
        parse_range(text)  # raises InvalidRange for anything else
        return VersionRequest(text, exact=False)
    return VersionRequest(text, exact=True)


def in_force(cap: CapabilityVersion, now: datetime) -> bool:
    """Not retired, and effective (no `effectiveAt`, or one not in the future)."""
    return cap.status != "retired" and (cap.effective_at is None or cap.effective_at <= now)


def choose_version(
    caps: Sequence[CapabilityVersion], request: VersionRequest, *, now: datetime
) -> CapabilityVersion | None:
    """The version `request` names among one skill's versions, or None.

    An exact request may name a retired version (the policy answers 410 for it); `latest` and
    ranges consider only versions in force.
    """
    if request.exact:
        candidates = [c for c in caps if c.effective_at is None or c.effective_at <= now]
    else:
        candidates = [c for c in caps if in_force(c, now)]
    parsed = [(Version.parse(c.version), c) for c in candidates]
    versions = [v for v, _ in parsed]
    chosen = resolve(request.text, versions)
    if chosen is None and request.text == LATEST:
        # No release yet: the newest pre-release, as discovery shows it.
        chosen = max(versions, default=None)
    if chosen is None:
        return None
    # resolve() answers one of the candidates itself; identity tells apart equal-precedence builds.
    return next(c for v, c in parsed if v is chosen)


def requested_ref(tenant: str, agent_id: str, skill_id: str, version: str) -> str:
    """The audit ref of a request that did not resolve to a version the caller may see."""
    return f"{tenant}/{agent_id}/{skill_id}@{version}"


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
    """Where to call the capability: the agent's declared A2A interfaces and its live instances."""

    interfaces: list[Interface]
    instances: list[Instance]


class CapabilityDetail(PublicCapability, kw_only=True):
    """The public view plus what only passes the checks: schemas, examples and endpoints."""

    input_schema: JsonSchema
    output_schema: JsonSchema
    examples: list[str]
    endpoints: Endpoints


def endpoints(card: dict[str, Any], instances: Sequence[Any]) -> Endpoints:
    """`card` is the agent's stored A2A card; `instances` rows of live leases."""
    return Endpoints(
        interfaces=msgspec.convert(card.get("supportedInterfaces", []), list[Interface]),
        instances=[
            Instance(
                instance_id=row["instance_id"], url=row["url"], expires_at=row["expires_at"],
                load=row["load"], last_seen_at=row["last_seen_at"],
            )
            for row in instances
        ],
    )


def capability_detail(public: PublicCapability, cap: CapabilityVersion, where: Endpoints) -> CapabilityDetail:
    return CapabilityDetail(
        **msgspec.structs.asdict(public),
        input_schema=cap.input_schema,
        output_schema=cap.output_schema,
        examples=list(cap.examples),
        endpoints=where,
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


def refusal(decision: Decision, *, ref: str | None = None) -> ProblemError:
    """The problem response for a refused release (`decision.allowed` is False)."""
    if decision.code == "not_found":
        return ProblemError(404, "not_found", NOT_FOUND_DETAIL)
    if decision.code == "retired":
        return ProblemError(410, "retired", f"{ref} is retired")
    if decision.code == "insufficient_scope":
        missing = list(decision.missing_scopes)
        return ProblemError(
            403, "insufficient_scope", f"releasing this capability needs the scopes: {' '.join(missing)}",
            missing_scopes=missing,
            headers={"WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{" ".join(missing)}"'},
        )
    return ProblemError(
        403, "data_location_denied",
        "this capability's data stays in regions your token's `regions` claim does not include",
    )


def release_event(
    caller: Caller,
    *,
    tenant: str,
    ref: str,
    decision: Decision,
    scopes: Sequence[str] = (),
    trace_id: str | None = None,
) -> AuditEvent:
    """`detail.released` (allowed) or `detail.denied` with the error code as `reason`.

    `scopes` are the capability's required scopes (what was checked), when it was resolved.
    """
    return AuditEvent(
        type=RELEASED if decision.allowed else DENIED,
        outcome="allowed" if decision.allowed else "denied",
        tenant=tenant,
        actor_tenant=caller.tenant,
        actor=caller.sub,
        actor_issuer=caller.issuer,
        ref=ref,
        scopes=list(scopes),
        reason=decision.code,
        trace_id=trace_id,
        request_id=current_request_id(),
    )
