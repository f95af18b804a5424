"""CapregError: every failure the client reports, built from the registry's problem+json body."""

from __future__ import annotations

from typing import Any

import msgspec


class ErrorDetail(msgspec.Struct, kw_only=True):
    """One entry of a problem's `errors`: where (a JSON pointer or field name) and what."""

    path: str = ""
    message: str = ""
    kind: str | None = None
    # A replay's failing fixture (422 replay_failed).
    fixture: str | None = None


class _Problem(msgspec.Struct, rename="camel", kw_only=True):
    title: str | None = None
    status: int | None = None
    detail: str | None = None
    code: str | None = None
    trace_id: str | None = None
    errors: list[ErrorDetail] = []
    reason: str | None = None
    missing_scopes: list[str] = []


class CapregError(Exception):
    """A non-2xx answer (or no answer at all) from the registry, or a ticket that failed verification.

    `status` is the HTTP status (None when the registry could not be reached), `code` the registry's
    error code (`not_found`, `delegation_denied`, ..., `unreachable` when there was no answer,
    `invalid_ticket` from TicketVerifier), `reason` the refusal reason of `delegation_denied` (and
    the cause of `invalid_ticket`), `errors` the problem's `{path, message}` items, `trace_id` the
    request's trace id to quote to the registry's operators.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str = "error",
        reason: str | None = None,
        errors: list[ErrorDetail] | None = None,
        trace_id: str | None = None,
        missing_scopes: list[str] | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.status, self.code, self.reason = status, code, reason
        self.errors = errors or []
        self.trace_id = trace_id
        self.missing_scopes = missing_scopes or []
        self.retry_after = retry_after

    def __str__(self) -> str:
        head = f"{self.status} {self.code}" if self.status is not None else self.code
        text = f"{head}: {self.message}"
        if self.reason and self.reason not in self.message:
            text += f" ({self.reason})"
        for item in self.errors[:10]:
            text += f"; {item.path or '/'}: {item.message}"
        if len(self.errors) > 10:
            text += f"; ... {len(self.errors) - 10} more"
        return text

    def __repr__(self) -> str:
        return f"CapregError({self.status!r}, {self.code!r}, {self.message!r})"


_decoder = msgspec.json.Decoder(_Problem)


def error_from_answer(status: int, body: bytes, retry_after: float | None = None) -> CapregError:
    """The CapregError for a non-2xx answer; a body that is not a problem still gives a clear error."""
    try:
        problem = _decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        problem = _Problem()
    message = problem.detail or problem.title or _short(body) or f"HTTP {status}"
    return CapregError(
        message,
        status=status,
        code=problem.code or f"http_{status}",
        reason=problem.reason,
        errors=problem.errors,
        trace_id=problem.trace_id,
        missing_scopes=problem.missing_scopes,
        retry_after=retry_after,
    )


def invalid_ticket(reason: str, message: str) -> CapregError:
    return CapregError(message, status=401, code="invalid_ticket", reason=reason)


def _short(body: Any) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes | bytearray) else str(body)
    text = " ".join(text.split())
    return text[:200]
