"""Detail release as a service: resolve the version a caller asks for, run the checks in order
(auth.policy.decide_release), audit the outcome, then hand back what was released.

The HTTP routes (registry.routes.details) and the MCP tools (registry.mcp_server) both call
`release`, so a capability is released, refused and audited the same way whichever door the
caller came through. The pure parts (version choice, shapes, events) are in registry.release.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any, Literal

import msgspec

from auth.policy import NOT_FOUND, CapabilityGate, Decision, can_see, decide_release
from auth.principal import Caller
from registry.cards import mcp_tool, openai_tool
from registry.discovery import public_capability
from registry.problems import ErrorItem, ProblemError, invalid_request
from registry.records import CapabilityVersion
from registry.release import (
    CapabilityDetail,
    capability_detail,
    choose_version,
    endpoints,
    parse_version_request,
    refusal,
    release_event,
    requested_ref,
)
from registry.service import Registry
from registry.skill_records import skill_record
from registry.versions import InvalidRange

ToolFormat = Literal["openai", "mcp"]


class Released(msgspec.Struct, frozen=True):
    """A capability version the caller passed the checks for, with the rows it came from."""

    cap: CapabilityVersion
    row: Any
    agent: Any
    instances: Any


async def release(
    registry: Registry, caller: Caller, *, tenant: str, agent_id: str, skill_id: str, version: str,
    trace_id: str | None,
) -> Released:
    """Resolve `version` and run the checks in the documented order (README, "Detail release");
    audit the outcome, then answer or raise the refusal.

    A malformed range is 400 before anything is looked up (it says nothing about any record).
    """
    try:
        wanted = parse_version_request(version)
    except InvalidRange as exc:
        raise invalid_request("not a version, `latest` or a version range", [ErrorItem(path="version", message=str(exc))]) from None
    ref = requested_ref(tenant, agent_id, skill_id, version)

    async def denied(decision: Decision, *, ref: str, scopes: Sequence[str] = ()) -> ProblemError:
        event = release_event(caller, tenant=tenant, ref=ref, decision=decision, scopes=scopes, trace_id=trace_id)
        await registry.writes.record([event])
        return refusal(decision, ref=ref)

    skill = await skill_record(registry, tenant, agent_id, skill_id)
    agent = skill.agent
    if agent is None or not can_see(
        caller, tenant=agent["tenant"], visibility=agent["visibility"], shared_with=agent["shared_with"]
    ):
        raise await denied(NOT_FOUND, ref=ref)
    chosen = choose_version([cap for cap, _ in skill.versions], wanted, now=datetime.now(timezone.utc))
    if chosen is None:
        raise await denied(NOT_FOUND, ref=ref)
    row = next(row for cap, row in skill.versions if cap is chosen)
    gate = CapabilityGate.of(chosen, visibility=agent["visibility"], shared_with=agent["shared_with"])
    decision = decide_release(caller, gate, exact_version=wanted.exact)
    if not decision.allowed:
        raise await denied(decision, ref=chosen.ref, scopes=chosen.scopes)
    event = release_event(caller, tenant=tenant, ref=chosen.ref, decision=decision, scopes=chosen.scopes, trace_id=trace_id)
    await registry.writes.record([event])
    return Released(cap=chosen, row=row, agent=agent, instances=skill.instances)


def detail_of(released: Released) -> CapabilityDetail:
    """The capability detail: public fields, schemas, examples and endpoints."""
    return capability_detail(
        public_capability(released.row), released.cap, endpoints(released.agent["card"], released.instances)
    )


def tool_definition(released: Released, format: ToolFormat) -> dict[str, Any]:  # noqa: A002
    """The released capability as an OpenAI function-calling tool or an MCP tool definition."""
    return openai_tool(released.cap) if format == "openai" else mcp_tool(released.cap)
