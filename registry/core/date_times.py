"""Date-times a caller gives (query parameters and body fields): the one parser and range check.

Every date-time is read as RFC 3339 with a mandatory offset, converted to UTC, and must lie within
what both Python and PostgreSQL represent (0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z).
An offset can push a value written inside that range outside it (`0001-01-01T00:00:00+23:59`), and
so can arithmetic on a valid one (the next hour boundary after `9999-12-31T23:30:00Z`): both are the
caller's 400 `invalid_request` naming the parameter, never an OverflowError. Arithmetic on a caller's
date-time goes through `shifted` for that reason.

Body fields are decoded by msgspec as `datetime`; their Structs call `check_date_time` from
`__post_init__`, whose refusal msgspec reports with the field's pointer (registry.core.problems).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from registry.core.problems import ErrorItem, invalid_request

# RFC 3339 date-time: full date, time, optional fraction, and a mandatory offset.
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
RANGE = "0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z (in UTC, both ends excluded)"


class DateTimeOutOfRange(ValueError):
    """A date-time outside the representable range, after conversion to UTC or arithmetic."""


def utc(name: str, at: datetime) -> datetime:
    """`at` in UTC, or DateTimeOutOfRange naming `name`."""
    if at.tzinfo is None or at.utcoffset() is None:
        raise DateTimeOutOfRange(f"{name} must carry an offset (e.g. Z)")
    try:
        converted = at.astimezone(UTC)
    except OverflowError:
        raise DateTimeOutOfRange(f"{name} is outside {RANGE}") from None
    # asyncpg writes the very first and last instants as -infinity/infinity and reads them back as
    # naive datetimes (no offset on the wire): they are outside the range too.
    if converted.replace(tzinfo=None) in (datetime.min, datetime.max):
        raise DateTimeOutOfRange(f"{name} is outside {RANGE}")
    return converted


def parse_date_time(name: str, value: str | None, *, path: str | None = None) -> datetime | None:
    """A query parameter's RFC 3339 text as an aware UTC datetime; 400 naming `name` otherwise. `path`:
    the parameter that holds the date when it is part of another (`filter` of ARD's list, whose
    clause `updatedAfter > '...'` is `name`); the error's pointer, `name` by default."""
    if value is None:
        return None
    at = None
    if _RFC3339.match(value):
        try:
            at = datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
        except ValueError:
            at = None
    if at is None:
        raise invalid_request(
            f"{name} must be an RFC 3339 date-time with an offset, e.g. 2026-05-01T00:00:00Z",
            [ErrorItem(path=path or name, message=f"{name}: not an RFC 3339 date-time")],
        )
    return _or_400(name, lambda: utc(name, at), path=path)


def shifted(name: str, at: datetime, delta: timedelta) -> datetime:
    """`at + delta` for a date-time derived from parameter `name`; 400 naming it on overflow."""

    def add() -> datetime:
        try:
            return at + delta
        except OverflowError:
            raise DateTimeOutOfRange(f"{name} is too close to the end of {RANGE}") from None

    return _or_400(name, add)


def check_date_time(field: str, at: datetime | None) -> None:
    """For a Struct's __post_init__: refuse a body date-time that does not convert to UTC. The
    message form lets the decoding error carry the field's pointer."""
    if at is None:
        return
    try:
        utc(field, at)
    except DateTimeOutOfRange as error:
        raise ValueError(f"field `{field}`: {error}") from None


def _or_400(name: str, compute, *, path: str | None = None):
    try:
        return compute()
    except DateTimeOutOfRange as error:
        raise invalid_request(str(error), [ErrorItem(path=path or name, message=str(error))]) from None
