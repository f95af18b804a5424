"""The audit event of what a caller did or was refused: one builder, so that every event names its
caller the same way (the caller's tenant, subject and token issuer) beside what it is about.

`request_id` is the server's id of the request (registry.core.tracing.current_request_id), passed in
because a write that runs in the group-commit task (db.group_commit) no longer sees the request's."""

from __future__ import annotations

from collections.abc import Iterable

from auth.principal import Caller
from db.audit_events import AuditEvent


def caller_event(
    caller: Caller,
    event_type: str,
    *,
    tenant: str | None,
    ref: str | None,
    trace_id: str | None,
    request_id: str | None,
    outcome: str = "allowed",
    scopes: Iterable[str] = (),
    on_behalf_of: str | None = None,
    reason: str | None = None,
) -> AuditEvent:
    """`event_type` by `caller` about `tenant`'s `ref` (allowed unless `outcome` says otherwise)."""
    return AuditEvent(
        type=event_type,
        outcome=outcome,
        tenant=tenant,
        actor_tenant=caller.tenant,
        actor=caller.sub,
        actor_issuer=caller.issuer,
        on_behalf_of=on_behalf_of,
        ref=ref,
        scopes=list(scopes),
        reason=reason,
        trace_id=trace_id,
        request_id=request_id,
    )
