"""The one path that refuses an authenticated caller: record the `denied` audit event (its own
transaction, nothing else written), then hand back the error to raise (docs/audit.md).

Every refusal of an identified caller goes through `refuse` (registration, lifecycle, detail
release, tickets, approvals, revocation, malformed or unstorable requests, MCP tools), so each is
recorded the same way: the caller's tenant, subject and token issuer, the server's request id,
the refusal's reason (else its code), text PostgreSQL cannot store escaped (db.audit_events).
An unauthenticated caller is never audited: who asked is unknown, and anyone could grow the chain.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from litestar import Request

from auth.identifiers import TENANT_PATTERN
from auth.principal import Caller
from db.audit_events import AuditEvent
from db.unstorable import escaped
from registry.core.problems import ProblemError
from registry.core.tracing import current_request_id
from registry.state import Registry, registry_of

# A refusal that belongs to no operation's own event type: an endpoint's scope, a malformed or
# unstorable request, a heartbeat refused by policy. Its ref is the method and path.
REFUSED = "request.refused"
_TENANT_IN_PATH = re.compile(r"^/v1/agents/([^/]+)/")
_TENANT = re.compile(TENANT_PATTERN)


async def refuse(
    registry: Registry,
    caller: Caller | None,
    error: ProblemError,
    *,
    event_type: str,
    tenant: str | None,
    ref: str | None = None,
    scopes: Sequence[str] = (),
    on_behalf_of: str | None = None,
    reason: str | None = None,
    trace_id: str | None,
) -> ProblemError:
    """Audit `error` as refused to `caller` (once: an error already audited is not recorded again)
    and return it; `reason` overrides the error's own reason, else its code."""
    if caller is None or getattr(error, "audited", False):
        return error
    await registry.writes.record(
        [
            AuditEvent(
                type=event_type,
                outcome="denied",
                tenant=tenant,
                actor_tenant=caller.tenant,
                actor=caller.sub,
                actor_issuer=caller.issuer,
                on_behalf_of=on_behalf_of,
                ref=ref,
                scopes=list(scopes),
                reason=reason or error.reason or error.code,
                trace_id=trace_id,
                request_id=current_request_id(),
            )
        ]
    )
    error.audited = True  # type: ignore[attr-defined]
    return error


async def refuse_request(
    request: Request, caller: Caller | None, error: ProblemError, *, reason: str | None = None
) -> ProblemError:
    """`refuse` as `request.refused`: the tenant named by the path (when it names a valid one), the
    method and path (escaped, bounded) as the ref."""
    path = request.scope["path"]
    match = _TENANT_IN_PATH.match(path)
    tenant = match.group(1) if match and _TENANT.match(match.group(1)) else None
    return await refuse(
        registry_of(request),
        caller,
        error,
        event_type=REFUSED,
        tenant=tenant,
        ref=escaped(f"{request.method} {path}")[:1024],
        reason=reason,
        trace_id=request.scope.get("state", {}).get("trace_id"),
    )
