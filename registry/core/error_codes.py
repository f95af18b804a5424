"""The error codes of docs/api.md#error-codes and the HTTP status of each: the only place a status of
an error is said. Every error capreg raises names one of these kinds; `ProblemError` reads its
status from here, so no door or service picks a status of its own.

The table is built row by row at import: a row registered twice, or a second status for a code not
declared a variant, fails the import (as asyncpg registers each SQLSTATE once), and
`tests/web/test_error_codes.py` holds the table equal to the documented one. A code may answer at
more than one status only where the documentation says so (`invalid_request` for a method not served,
405, and a media type not accepted, 415); each such row is its own named kind.
"""

from __future__ import annotations

import msgspec


class ErrorKind(msgspec.Struct, frozen=True):
    """One row of the table: the wire `code` and the HTTP `status` it answers with."""

    code: str
    status: int


class _Table:
    def __init__(self) -> None:
        self.rows: list[ErrorKind] = []
        self._by_code: dict[str, ErrorKind] = {}

    def row(self, code: str, status: int, *, variant: bool = False) -> ErrorKind:
        """Register a row; `variant` marks a documented second status of a code already registered."""
        kind = ErrorKind(code, status)
        if kind in self.rows:
            raise RuntimeError(f"error code {code!r} at {status} is registered twice")
        if variant != (code in self._by_code):
            raise RuntimeError(f"error code {code!r} at {status}: a second status must be declared a variant")
        self.rows.append(kind)
        self._by_code.setdefault(code, kind)
        return kind

    def of(self, code: str) -> ErrorKind:
        """The kind of a code (its first, main status); KeyError for a code not in the table."""
        return self._by_code[code]

    def codes(self) -> frozenset[str]:
        return frozenset(self._by_code)


TABLE = _Table()

INVALID_REQUEST = TABLE.row("invalid_request", 400)
SIGNATURE_REQUIRED = TABLE.row("signature_required", 400)
SIGNATURE_INVALID = TABLE.row("signature_invalid", 400)
INVALID_TOKEN = TABLE.row("invalid_token", 401)
INSUFFICIENT_SCOPE = TABLE.row("insufficient_scope", 403)
TENANT_MISMATCH = TABLE.row("tenant_mismatch", 403)
DATA_LOCATION_DENIED = TABLE.row("data_location_denied", 403)
DELEGATION_DENIED = TABLE.row("delegation_denied", 403)
NOT_FOUND = TABLE.row("not_found", 404)
METHOD_NOT_ALLOWED = TABLE.row("invalid_request", 405, variant=True)
VERSION_CONFLICT = TABLE.row("version_conflict", 409)
INCOMPATIBLE_CHANGE = TABLE.row("incompatible_change", 409)
IDEMPOTENCY_MISMATCH = TABLE.row("idempotency_mismatch", 409)
NOT_CANDIDATE = TABLE.row("not_candidate", 409)
INSTANCE_LIMIT = TABLE.row("instance_limit", 409)
RETIRED = TABLE.row("retired", 410)
PAYLOAD_TOO_LARGE = TABLE.row("payload_too_large", 413)
UNSUPPORTED_MEDIA_TYPE = TABLE.row("invalid_request", 415, variant=True)
REPLAY_FAILED = TABLE.row("replay_failed", 422)
RATE_LIMITED = TABLE.row("rate_limited", 429)
INTERNAL_ERROR = TABLE.row("internal_error", 500)
RETRYABLE_UNAVAILABLE = TABLE.row("retryable_unavailable", 503)
