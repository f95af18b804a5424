"""The one path that records a refusal of an authenticated caller: the `denied` audit event (its own
transaction, nothing else written), once per error (docs/audit.md).

Every refusal of an identified caller is recorded here: by the operation boundary
(registry.operations.boundary), which records what a service raised with the subject the service
gave it (`ProblemError.about`), and by the door for a request refused before any operation runs
(`refuse_request`). Each is recorded the same way: the caller's tenant, subject and token issuer, the server's request
id, the refusal's reason (else its code), text PostgreSQL cannot store escaped (db.audit_events).
An unauthenticated caller is never audited: who asked is unknown, and anyone could grow the chain.
"""

from __future__ import annotations

import re

from litestar import Request

from auth.identifiers import TENANT_PATTERN
from auth.principal import Caller
from db.unstorable import escaped
from registry.core.problems import ProblemError, RefusalSubject
from registry.core.tracing import current_request_id
from registry.operations.audit_events import caller_event
from registry.state import Registry, registry_of

# A refusal that belongs to no operation's own event type: an endpoint's scope, a malformed or
# unstorable request, a heartbeat refused by policy. Its ref is the method and path.
REFUSED = "request.refused"
_TENANT_IN_PATH = re.compile(r"^/v1/agents/([^/]+)/")
_TENANT = re.compile(TENANT_PATTERN)


async def record_refusal(
    registry: Registry,
    caller: Caller | None,
    error: ProblemError,
    *,
    event_type: str,
    trace_id: str | None,
    reason: str | None = None,
) -> ProblemError:
    """Record `error` as refused to `caller`, about `error.subject` (nothing resolved when it has none),
    once: an error already recorded, or refused to an anonymous caller, is not recorded. `reason`
    overrides the error's own reason, else its code. Returns the error."""
    if caller is None or error.audited:
        return error
    subject = error.subject or error.about(tenant=None).subject
    assert subject is not None
    await registry.writes.record(
        [
            caller_event(
                caller,
                subject.event or event_type,
                outcome="denied",
                tenant=subject.tenant,
                on_behalf_of=subject.on_behalf_of,
                ref=subject.ref,
                scopes=subject.scopes,
                reason=reason or error.reason or error.code,
                trace_id=trace_id,
                request_id=current_request_id(),
            )
        ]
    )
    error.audited = True
    return error


def door_subject(request: Request) -> RefusalSubject:
    """What an HTTP request is about, before any service resolves more: the tenant named by the path
    (when it names a valid one), the method and path (escaped, bounded) as the ref."""
    path = request.scope["path"]
    match = _TENANT_IN_PATH.match(path)
    tenant = match.group(1) if match and _TENANT.match(match.group(1)) else None
    return RefusalSubject(tenant=tenant, ref=escaped(f"{request.method} {path}")[:1024])


def request_subject(request: Request, error: ProblemError) -> ProblemError:
    """`error` about the request itself (`door_subject`)."""
    subject = door_subject(request)
    return error.about(tenant=subject.tenant, ref=subject.ref)


async def refuse_request(
    request: Request, caller: Caller | None, error: ProblemError, *, reason: str | None = None
) -> ProblemError:
    """Record `error` as `request.refused`, about the request (`request_subject`)."""
    return await record_refusal(
        registry_of(request),
        caller,
        request_subject(request, error),
        event_type=REFUSED,
        reason=reason,
        trace_id=request.scope.get("state", {}).get("trace_id"),
    )
