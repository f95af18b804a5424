"""W3C trace context: the trace id of a request (from `traceparent`, or a new one)."""

from __future__ import annotations

import re
import secrets
from contextvars import ContextVar

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")
_INVALID_TRACE_ID = "0" * 32


def trace_id_from(traceparent: str | None) -> str | None:
    """The trace id of a valid `traceparent` header, else None."""
    if not traceparent:
        return None
    match = _TRACEPARENT.match(traceparent.strip().lower())
    if match is None or match.group(1) == _INVALID_TRACE_ID:
        return None
    return match.group(1)


def new_trace_id() -> str:
    return secrets.token_hex(16)


# The server's own id for the request being handled, set by the observability middleware. Audit
# events record it beside the client's trace id, which the client chooses and may reuse.
_REQUEST_ID: ContextVar[str | None] = ContextVar("capreg_request_id", default=None)


def new_request_id() -> str:
    return secrets.token_hex(12)


def set_request_id(request_id: str | None) -> None:
    _REQUEST_ID.set(request_id)


def current_request_id() -> str | None:
    """The id of the request this code runs for (None outside a request, e.g. in the group-commit
    task: capture it before handing work over)."""
    return _REQUEST_ID.get()
