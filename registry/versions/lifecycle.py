"""The version lifecycle, the service (docs/api.md#lifecycle): deprecating and retiring a published
version, and withdrawing an agent (every version of it retired, its leases ended), each checked in
the documented order, written in one transaction with its change notifications, and audited
(allowed or denied). The SQL is db/capabilities.py and db/agents.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

import msgspec

from auth.policy import NOT_FOUND, can_see, check_lifecycle
from auth.principal import Caller
from db import agents as agent_queries
from db import capabilities as capability_queries
from db.changes import CANDIDATE_CHANGE_KIND
from db.group_commit import WriteScope
from registry.core import error_codes as codes
from registry.core.problems import ErrorItem, ProblemError, invalid_request, refused
from registry.core.records import PublicCapability, agent_ref, capability_ref
from registry.core.tracing import current_request_id
from registry.core.wire import Wire
from registry.discovery.service import public_capability
from registry.operations.audit_events import caller_event
from registry.state import Registry
from registry.versions.semver import InvalidVersion, Version

DEPRECATED = "version.deprecated"
RETIRED = "version.retired"
WITHDRAWN = "agent.withdrawn"

# Applies the change to a locked version of status `status`; False when it changes nothing.
Apply = Callable[[object, str], Awaitable[bool]]


class VersionKey(msgspec.Struct, frozen=True):
    """Which version a lifecycle change names (the request path)."""

    tenant: str
    agent_id: str
    skill_id: str
    version: str


async def deprecate(
    registry: Registry,
    caller: Caller,
    key: VersionKey,
    *,
    sunset_at: datetime | None,
    message: str | None,
    trace_id: str | None,
) -> PublicCapability:
    """Still discoverable and delegable, shown with status deprecated; a retired version is 410."""

    async def apply(conn, status: str) -> bool:
        if status == "retired":
            raise ProblemError(codes.RETIRED, "a retired version cannot be deprecated")
        if status == "candidate":  # deprecated versions are in force: that would step around its replay
            raise ProblemError(
                codes.VERSION_CONFLICT,
                "a candidate is released by a passing replay, not deprecated; retire it instead",
            )
        await capability_queries.deprecate_version(
            conn, key.tenant, key.agent_id, key.skill_id, key.version, sunset_at, message
        )
        return True

    return await _change(registry, caller, key, DEPRECATED, apply, trace_id=trace_id)


async def retire(registry: Registry, caller: Caller, key: VersionKey, *, trace_id: str | None) -> PublicCapability:
    """Gone from discovery, cards and ranges; exact requests answer 410; its tickets go inactive."""

    async def apply(conn, status: str) -> bool:
        if status == "retired":
            return False  # retiring twice changes nothing
        await capability_queries.retire_version(
            conn, key.tenant, key.agent_id, key.skill_id, key.version, now=registry.clock.now()
        )
        return True

    return await _change(registry, caller, key, RETIRED, apply, trace_id=trace_id)


async def _change(
    registry: Registry, caller: Caller, key: VersionKey, event_type: str, apply: Apply, *, trace_id: str | None
) -> PublicCapability:
    """Shared steps of deprecate and retire: checks in the order of docs/api.md#lifecycle, one transaction, audited."""
    tenant, agent_id, skill_id, version = key.tenant, key.agent_id, key.skill_id, key.version
    ref = capability_ref(tenant, agent_id, skill_id, version)
    request_id = current_request_id()  # the write below runs in the group-commit task

    def refusing(error: ProblemError) -> ProblemError:
        return error.about(tenant=tenant, ref=ref)

    agent = await agent_queries.get_agent(registry.pool, tenant, agent_id)
    visible = agent is not None and can_see(
        caller, tenant=tenant, visibility=agent.visibility, shared_with=agent.shared_with
    )
    refusal = check_lifecycle(caller, tenant, agent_visible=visible)
    if refusal is not None:
        raise refusing(refused(refusal))
    try:
        Version.parse(version)
    except InvalidVersion:
        raise refusing(
            invalid_request(
                "lifecycle changes name an exact version", [ErrorItem(path="version", message="not a semantic version")]
            )
        ) from None

    async def write(scope: WriteScope) -> None:
        # The agent's lock before the version's row: the order registration takes them in
        # (db.capabilities.refresh_latest re-derives the latest marker under it).
        await agent_queries.lock_agent(scope.conn, tenant, agent_id)
        status = await capability_queries.lock_version_status(scope.conn, tenant, agent_id, skill_id, version)
        if status is None:
            raise refused(NOT_FOUND)
        if await apply(scope.conn, status):
            # A candidate was never announced: its retirement is not either.
            scope.change(CANDIDATE_CHANGE_KIND if status == "candidate" else event_type, tenant, agent_id, ref)
            scope.audit(
                caller_event(caller, event_type, tenant=tenant, ref=ref, trace_id=trace_id, request_id=request_id)
            )

    try:
        await registry.writes.run(write)
    except ProblemError as error:
        raise refusing(error) from None
    rows = await capability_queries.skill_versions(registry.pool, tenant, agent_id, skill_id)
    return public_capability(next(r for r in rows if r.version == version))


class Withdrawal(Wire):
    """What withdrawing an agent did: when it was withdrawn (the first time), the versions this
    request retired (none when it was withdrawn already) and the instance leases it ended."""

    tenant: str
    agent_id: str
    withdrawn_at: datetime
    retired: list[str]
    instances_ended: int


async def withdraw(
    registry: Registry, caller: Caller, tenant: str, agent_id: str, *, trace_id: str | None
) -> Withdrawal:
    """The agent gone for every reader at once: each version not retired yet is retired (gone from
    discovery, ARD, cards, offers and detail; its tickets inactive), its instances' leases end, and
    the agent reads as absent (404) until it is registered again. Its rows and audit trail stay.
    Withdrawing a withdrawn agent changes nothing and answers the same `withdrawnAt`."""
    ref = agent_ref(tenant, agent_id)
    request_id = current_request_id()  # the write below runs in the group-commit task
    now = registry.clock.now()

    async def write(scope: WriteScope) -> Withdrawal:
        await agent_queries.lock_agent(scope.conn, tenant, agent_id)  # registration's lock, first
        target = await agent_queries.lock_withdrawal_target(scope.conn, tenant, agent_id)
        # A withdrawn agent is absent to every other tenant; its own tenant may withdraw it again.
        visible = target is not None and (
            caller.tenant == tenant
            or (
                target.withdrawn_at is None
                and can_see(caller, tenant=tenant, visibility=target.visibility, shared_with=target.shared_with)
            )
        )
        refusal = check_lifecycle(caller, tenant, agent_visible=visible)
        if refusal is not None:
            raise refused(refusal)
        assert target is not None  # visible
        if target.withdrawn_at is not None:
            return Withdrawal(tenant, agent_id, target.withdrawn_at, [], 0)
        retired = await capability_queries.retire_agent_versions(scope.conn, tenant, agent_id, now=now)
        ended = await agent_queries.withdraw_agent(scope.conn, tenant, agent_id, now=now)
        refs = [capability_ref(tenant, agent_id, r.skill_id, r.version) for r in retired]
        for row, version_ref in zip(retired, refs, strict=True):
            # A candidate was never announced: its retirement is not either (as retire).
            scope.change(CANDIDATE_CHANGE_KIND if row.status == "candidate" else RETIRED, tenant, agent_id, version_ref)
            scope.audit(
                caller_event(caller, RETIRED, tenant=tenant, ref=version_ref, trace_id=trace_id, request_id=request_id)
            )
        scope.change(WITHDRAWN, tenant, agent_id, ref)
        scope.audit(caller_event(caller, WITHDRAWN, tenant=tenant, ref=ref, trace_id=trace_id, request_id=request_id))
        return Withdrawal(tenant, agent_id, now, refs, ended)

    try:
        return await registry.writes.run(write)
    except ProblemError as error:
        raise error.about(tenant=tenant, ref=ref) from None
