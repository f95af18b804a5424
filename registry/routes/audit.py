"""HTTP: the audit log and the grant report for a tenant's auditors (events, NDJSON export, live
delegation grants), signed checkpoints of the chain head (public), and the server's checkpoint writer."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated

import msgspec
from litestar import Request, Response, get
from litestar.params import QueryParameter
from litestar.response import Stream

from db import audit as audit_queries
from db import checkpoints as checkpoint_queries
from db import grants as grant_queries
from db.audit import EventFilter
from registry.audit import AuditRecord
from registry.audit_chain import ChainBroken, checkpoint_periodically, make_checkpoint
from registry.checkpoints import Checkpoint, checkpoint_from_row
from registry.grants import GrantPage, decode_cursor, grant_page
from registry.problems import ErrorItem, ProblemError, invalid_request, problem_responses
from registry.records import SKILL_ID_PATTERN
from registry.service import Registry, registry_of
from registry.wire import Wire

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
NDJSON = "application/x-ndjson"
_STREAM_BATCH = 1000

_encoder = msgspec.json.Encoder()
# RFC 3339 date-time: full date, time, optional fraction, and a mandatory offset.
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


class AuditPage(Wire):
    items: list[AuditRecord]
    next_cursor: str | None


def _rfc3339(name: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    if _RFC3339.match(value):
        with contextlib.suppress(ValueError):
            return datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    raise invalid_request(
        f"{name} must be an RFC 3339 date-time with an offset, e.g. 2026-05-01T00:00:00Z",
        [ErrorItem(path=name, message="not an RFC 3339 date-time")],
    )


def _encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"seq:{seq}".encode()).rstrip(b"=").decode()


def _decode_cursor(cursor: str) -> int:
    with contextlib.suppress(ValueError):
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, seq = raw.partition(":")
        if kind == "seq" and seq.isdigit():
            return int(seq)
    raise invalid_request("cursor is not one this registry issued", [ErrorItem(path="cursor", message="invalid cursor")])


async def _ndjson(registry: Registry, tenant: str, where: EventFilter, upto: int) -> AsyncIterator[bytes]:
    """The whole filtered result up to `upto`, one keyset batch in memory at a time; each batch on a
    pooled connection of its own, so a slow reader holds no connection between batches."""
    after = 0
    while True:
        records = await audit_queries.tenant_events(
            registry.pool, tenant, where, after=after, upto=upto, limit=_STREAM_BATCH
        )
        if not records:
            return
        yield b"".join(_encoder.encode(record) + b"\n" for record in records)
        after = records[-1].seq


@get(
    "/v1/audit/events",
    summary="Audit events of the caller's tenant, oldest first (Accept: application/x-ndjson exports them all)",
    description=(
        "Events whose record tenant or actor tenant is the caller's. Scope `audit:read`. "
        "`since` is inclusive, `until` exclusive (RFC 3339). With `Accept: application/x-ndjson` the "
        "response streams every matching event up to the head at the time of the request, one JSON "
        "object per line, and ignores `limit` and `cursor`."
    ),
    responses=problem_responses(400, 401, 403),
)
async def list_events(
    request: Request,
    event_type: Annotated[str | None, QueryParameter(name="type", max_length=128, description="event type, e.g. ticket.denied")] = None,
    actor: Annotated[str | None, QueryParameter(max_length=200, description="caller sub, or tenant/sub")] = None,
    skill: Annotated[str | None, QueryParameter(pattern=SKILL_ID_PATTERN, max_length=128, description="capability id in the event's ref")] = None,
    scope_held: Annotated[str | None, QueryParameter(name="scope", max_length=256, description="a scope the event carries")] = None,
    since: Annotated[str | None, QueryParameter(max_length=64, description="RFC 3339, inclusive")] = None,
    until: Annotated[str | None, QueryParameter(max_length=64, description="RFC 3339, exclusive")] = None,
    limit: Annotated[int, QueryParameter(ge=1, le=MAX_LIMIT, description=f"page size, at most {MAX_LIMIT}")] = DEFAULT_LIMIT,
    cursor: Annotated[str | None, QueryParameter(max_length=256)] = None,
) -> Response[AuditPage]:
    registry = registry_of(request)
    caller = await registry.require_caller(request, "audit:read")
    actor_tenant, _, actor_sub = actor.rpartition("/") if actor is not None else (None, None, None)
    where = EventFilter(
        type=event_type, actor=actor_sub, actor_tenant=actor_tenant or None, skill=skill, scope=scope_held,
        since=_rfc3339("since", since), until=_rfc3339("until", until),
    )
    if where.since is not None and where.until is not None and where.since > where.until:
        raise invalid_request("since is after until", [ErrorItem(path="since", message="must not be after until")])
    if NDJSON in request.headers.get("accept", ""):
        upto, _ = await audit_queries.head(registry.pool)
        return Stream(_ndjson(registry, caller.tenant, where, upto), media_type=NDJSON)
    after = _decode_cursor(cursor) if cursor else 0
    records = await audit_queries.tenant_events(registry.pool, caller.tenant, where, after=after, limit=limit + 1)
    page = records[:limit]
    next_cursor = _encode_cursor(page[-1].seq) if len(records) > limit else None
    return Response(AuditPage(items=page, next_cursor=next_cursor), headers={"Cache-Control": "no-store"})


@get(
    "/v1/audit/grants",
    summary="Who holds which scopes on which capabilities through delegation tickets (caller's tenant)",
    description=(
        "Tickets whose capability tenant or minting caller's tenant is the caller's. Scope `audit:read`. "
        "`active=true` (default): unexpired, unrevoked (nor any ancestor), capability version not retired; "
        "`active=false`: the others. `actor` is `tenant/sub` or a bare `sub`. Oldest first."
    ),
    responses=problem_responses(400, 401, 403),
)
async def list_grants(
    request: Request,
    actor: Annotated[str | None, QueryParameter(max_length=200, description="minting caller: tenant/sub, or sub")] = None,
    skill: Annotated[str | None, QueryParameter(pattern=SKILL_ID_PATTERN, max_length=128, description="capability id")] = None,
    scope_held: Annotated[str | None, QueryParameter(name="scope", max_length=256, description="a scope the ticket grants")] = None,
    active: Annotated[bool, QueryParameter(description="true: live grants; false: expired, revoked or retired ones")] = True,
    limit: Annotated[int, QueryParameter(ge=1, le=MAX_LIMIT, description=f"page size, at most {MAX_LIMIT}")] = DEFAULT_LIMIT,
    cursor: Annotated[str | None, QueryParameter(max_length=256)] = None,
) -> Response[GrantPage]:
    registry = registry_of(request)
    caller = await registry.require_caller(request, "audit:read")
    rows = await grant_queries.tenant_grants(
        registry.pool, viewer_tenant=caller.tenant, active=active, actor=actor, skill=skill, scope=scope_held,
        after=decode_cursor(cursor) if cursor else None, limit=limit + 1,
    )
    return Response(grant_page(rows, limit), headers={"Cache-Control": "no-store"})


@get(
    "/v1/audit/checkpoints/latest",
    summary="The latest signed checkpoint of the audit chain head (public)",
    description=(
        "`signature` is a compact JWS (alg EdDSA, typ capreg-checkpoint+jwt, kid) over "
        '{"iss", "iat", "seq", "hash", "at"}; verify it with /.well-known/jwks.json and compare the '
        "signed seq, hash and at with the fields beside it."
    ),
    responses=problem_responses(401, 503),
)
async def latest_checkpoint(request: Request) -> Response[Checkpoint]:
    registry = registry_of(request)
    await registry.caller(request)  # public, but a presented token must be valid (contract section 1)
    await registry.refresh_keyring()
    row = await checkpoint_queries.latest_checkpoint(registry.pool)
    # None yet, or signed with a key that has left the JWKS: sign the head now.
    if row is None or row["kid"] not in registry.keyring.public:
        try:
            async with registry.pool.acquire() as conn:
                checkpoint = await make_checkpoint(conn, registry.keyring, registry.settings.issuer)
        except ChainBroken as exc:
            raise ProblemError(503, "retryable_unavailable", f"no checkpoint can be signed: {exc}",
                               headers={"Retry-After": "60"}) from None
    else:
        checkpoint = checkpoint_from_row(row)
    return Response(checkpoint, headers={"Cache-Control": "no-cache"})


def start_checkpoints(registry: Registry) -> asyncio.Task | None:
    """The server's checkpoint writer (CAPREG_CHECKPOINT_INTERVAL seconds; 0 disables it)."""
    interval = registry.settings.checkpoint_interval
    if interval <= 0:
        return None
    return asyncio.create_task(checkpoint_periodically(registry, interval))


async def stop_checkpoints(task: asyncio.Task | None) -> None:
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


ROUTES = [list_events, list_grants, latest_checkpoint]
