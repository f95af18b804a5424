"""The operation boundary: an operation is declared once (`Operation`: its name, the scope it needs,
the event type its refusals are recorded as, its body type), and `run` is the one place that checks
the declared scope, calls the service, and records a refusal exactly once, with the subject the
service gave it (`ProblemError.about`). HTTP routes, MCP tools and the A2A binding adapt a request
to `run` and its answer back; services raise, they never record.

Statuses come from the error's kind (registry.core.error_codes), never from the door.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec

from auth.policy import check_scope
from auth.principal import Caller
from registry.core.problems import ProblemError, RefusalSubject, refused
from registry.operations.refusals import record_refusal
from registry.state import Registry

T = TypeVar("T")


class Operation(msgspec.Struct, frozen=True, kw_only=True):
    """One operation, whatever the door: `denial_event` is the audit type its refusals are recorded
    as; `scope`, when set, is checked before the service is called; `body` the type its input
    decodes to (None: no body). A refusal is recorded when it says what it refuses (the service's
    `ProblemError.about`, else the door's subject); an operation with `audit_malformed` records a
    request that does not parse too (docs/audit.md: ticket minting and offers record every refusal)."""

    name: str
    denial_event: str
    scope: str | None = None
    body: type | None = None
    audit_malformed: bool = False


async def run(
    registry: Registry,
    operation: Operation,
    caller: Caller | None,
    step: Callable[[], Awaitable[T]],
    *,
    trace_id: str | None,
    door: RefusalSubject | Callable[[], RefusalSubject] | None = None,
) -> T:
    """`step` (decode and call the service) for `caller`, after the declared scope; a refusal it
    raises is recorded once as the operation's denial event and raised on. `door` is what the door
    knows the request is about (its method and path, say), for refusals the service did not place:
    a subject, or a function making it, called only when a refusal needs it (a granted request never
    pays for it)."""
    try:
        if operation.scope is not None and caller is not None:
            if (refusal := check_scope(caller, operation.scope)) is not None:
                subject = _subject(door) or RefusalSubject()
                raise refused(refusal).about(tenant=subject.tenant, ref=subject.ref)
        return await step()
    except ProblemError as error:
        if error.subject is None and not operation.audit_malformed:
            raise  # a request that does not parse: nothing was decided (docs/audit.md)
        if error.subject is None and (place := _subject(door)) is not None:
            error.about(tenant=place.tenant, ref=place.ref, scopes=place.scopes, on_behalf_of=place.on_behalf_of)
        await record_refusal(registry, caller, error, event_type=operation.denial_event, trace_id=trace_id)
        raise


def _subject(door: RefusalSubject | Callable[[], RefusalSubject] | None) -> RefusalSubject | None:
    return door() if callable(door) else door
