"""Idempotency-Key on ticket requests (docs/api.md#idempotency): the key a caller's request claims
(scoped to the caller's identity, the body hashed canonically) and the write run under it, the
answer stored in the same transaction for a retry to replay. The SQL is db/tickets.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from auth.principal import Caller
from db import tickets as ticket_queries
from db.group_commit import WriteScope
from registry.core.problems import ErrorItem, invalid_request
from registry.tickets.request import TicketRequestBody

IDEMPOTENCY_KEY_MAX_LENGTH = 255


class Idempotency(msgspec.Struct, frozen=True, kw_only=True):
    principal: str
    key: str
    body_hash: str


class IdempotencyKeyTaken(Exception):
    """Another request claimed the same Idempotency-Key first: replay its answer."""


def idempotency_of(caller: Caller, key: str | None, body: TicketRequestBody) -> Idempotency | None:
    """The Idempotency-Key claim of a request, scoped to the caller's identity (issuer, tenant and
    sub: a partner issuer's `sub` never shares another's keys); the body is hashed canonically."""
    if key is None:
        return None
    if not 1 <= len(key) <= IDEMPOTENCY_KEY_MAX_LENGTH or not key.isascii() or not key.isprintable():
        raise invalid_request(
            "Idempotency-Key must be 1 to 255 printable ASCII characters",
            [ErrorItem(path="header:Idempotency-Key", message="invalid idempotency key")],
        )
    body_hash = hashlib.sha256(msgspec.json.encode(body)).hexdigest()
    return Idempotency(principal=f"{caller.issuer} {caller.principal}", key=key, body_hash=body_hash)


def under_key(
    idempotency: Idempotency | None, status: int, answer: Any, write: Callable[[WriteScope], Awaitable[None]]
) -> Callable[[WriteScope], Awaitable[None]]:
    """`write` under an Idempotency-Key (docs/api.md#idempotency), for mints and approval requests
    alike: the key claimed first (IdempotencyKeyTaken while another request holds it), the answer
    stored in the same transaction, so a retry gets exactly what the first request got."""
    if idempotency is None:
        return write
    key = idempotency

    async def claimed(scope: WriteScope) -> None:
        if not await ticket_queries.claim_idempotency_key(scope.conn, key.principal, key.key, key.body_hash):
            raise IdempotencyKeyTaken
        await write(scope)
        await ticket_queries.store_response(scope.conn, key.principal, key.key, status, msgspec.to_builtins(answer))

    return claimed
