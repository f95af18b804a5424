"""Page cursors: the one codec behind every `cursor`/`nextCursor` (discovery, audit events, grants,
tickets). A cursor is the keyset position a page ends at, as base64url JSON; it is opaque to clients
and decoded only into the shape its endpoint expects, so anything else is 400, never a 500."""

from __future__ import annotations

import base64
from typing import Any, TypeVar

import msgspec

from registry.core.problems import ErrorItem, invalid_request

T = TypeVar("T")

# Every key capreg issues fits easily; a longer string is not one of ours and is refused unread.
MAX_CURSOR_LENGTH = 1024


def encode_cursor(key: list[Any] | tuple[Any, ...]) -> str:
    return base64.urlsafe_b64encode(msgspec.json.encode(key)).rstrip(b"=").decode()


def decode_cursor(cursor: str, shape: type[T]) -> T:
    """The key `cursor` carries, typed as `shape`; 400 `invalid_request` for any string this
    registry did not issue for that endpoint."""
    try:
        if len(cursor) > MAX_CURSOR_LENGTH:
            raise ValueError("too long")
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        return msgspec.json.decode(raw, type=shape)
    except (ValueError, msgspec.DecodeError, msgspec.ValidationError):
        raise invalid_request(
            "cursor is not one this registry issued", [ErrorItem(path="cursor", message="invalid cursor")]
        ) from None
