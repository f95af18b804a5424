"""W3C trace context: the trace id of a request (from `traceparent`, or a new one)."""

from __future__ import annotations

import re
import secrets

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
