"""HTTP: the audit log and the grant report for a tenant's auditors (events, NDJSON export, hourly
outcome counts, live delegation grants, verification of the whole chain), signed checkpoints of the
chain head (public), and the server's checkpoint writer."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from typing import Annotated, Literal

import msgspec
from litestar import Request, Response, get
from litestar.params import QueryParameter
from litestar.response import Stream

from db import audit as audit_queries
from db import checkpoints as checkpoint_queries
from db import grants as grant_queries
from db.audit import EventFilter
from registry.authentication import authenticate, optional_caller
from db.audit_events import AuditRecord
from registry.audit_chain import ChainBroken, checkpoint_periodically, make_checkpoint, verify_stored_chain
from registry.checkpoints import Checkpoint, CheckpointInvalid, checkpoint_from_row, jwks_keys, verify_checkpoint
from registry.cursors import decode_cursor, encode_cursor
from registry.grants import GrantOrder, GrantPage, grant_page, grant_position
from registry.problems import ErrorItem, ProblemError, invalid_request, problem_responses
from registry.records import SKILL_ID_PATTERN
from registry.state import Registry, registry_of
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


def _after_seq(cursor: str) -> int:
    """The seq an events cursor resumes after."""
    (seq,) = decode_cursor(cursor, tuple[Annotated[int, msgspec.Meta(ge=0)]])
    return seq


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


TypeQuery = Annotated[str | None, QueryParameter(name="type", max_length=128, description="event type, e.g. ticket.denied")]
ActorQuery = Annotated[str | None, QueryParameter(max_length=200, description="caller sub, or tenant/sub")]
SkillQuery = Annotated[str | None, QueryParameter(pattern=SKILL_ID_PATTERN, max_length=128, description="capability id in the event's ref")]
ScopeQuery = Annotated[str | None, QueryParameter(name="scope", max_length=256, description="a scope the event carries")]
OutcomeQuery = Annotated[Literal["allowed", "denied"] | None, QueryParameter(description="allowed or denied")]
SinceQuery = Annotated[str | None, QueryParameter(max_length=64, description="RFC 3339, inclusive")]
UntilQuery = Annotated[str | None, QueryParameter(max_length=64, description="RFC 3339, exclusive")]


def _event_filter(event_type, actor, skill, scope_held, outcome, since: datetime | None, until: datetime | None) -> EventFilter:
    actor_tenant, _, actor_sub = actor.rpartition("/") if actor is not None else (None, None, None)
    if since is not None and until is not None and since > until:
        raise invalid_request("since is after until", [ErrorItem(path="since", message="must not be after until")])
    return EventFilter(
        type=event_type, actor=actor_sub, actor_tenant=actor_tenant or None, skill=skill, scope=scope_held,
        outcome=outcome, since=since, until=until,
    )


@get(
    "/v1/audit/events",
    summary="Audit events of the caller's tenant, oldest first (Accept: application/x-ndjson exports them all)",
    description=(
        "Events whose record tenant or actor tenant is the caller's. Scope `audit:read`. "
        "`since` is inclusive, `until` exclusive (RFC 3339); `outcome` keeps allowed or denied events. "
        "With `Accept: application/x-ndjson` the response streams every matching event up to the head at the time of the request, one JSON "
        "object per line, and ignores `limit` and `cursor`."
    ),
    responses=problem_responses(400, 401, 403),
)
async def list_events(
    request: Request,
    event_type: TypeQuery = None,
    actor: ActorQuery = None,
    skill: SkillQuery = None,
    scope_held: ScopeQuery = None,
    outcome: OutcomeQuery = None,
    since: SinceQuery = None,
    until: UntilQuery = None,
    limit: Annotated[int, QueryParameter(ge=1, le=MAX_LIMIT, description=f"page size, at most {MAX_LIMIT}")] = DEFAULT_LIMIT,
    cursor: Annotated[str | None, QueryParameter(max_length=256)] = None,
) -> Response[AuditPage]:
    registry = registry_of(request)
    caller = await authenticate(request, "audit:read")
    where = _event_filter(event_type, actor, skill, scope_held, outcome, _rfc3339("since", since), _rfc3339("until", until))
    if NDJSON in request.headers.get("accept", ""):
        upto, _ = await audit_queries.head(registry.pool)
        return Stream(_ndjson(registry, caller.tenant, where, upto), media_type=NDJSON)
    after = _after_seq(cursor) if cursor else 0
    records = await audit_queries.tenant_events(registry.pool, caller.tenant, where, after=after, limit=limit + 1)
    page = records[:limit]
    next_cursor = encode_cursor([page[-1].seq]) if len(records) > limit else None
    return Response(AuditPage(items=page, next_cursor=next_cursor), headers={"Cache-Control": "no-store"})


@get(
    "/v1/audit/grants",
    summary="Who holds which scopes on which capabilities through delegation tickets (caller's tenant)",
    description=(
        "Tickets whose capability tenant or minting caller's tenant is the caller's. Scope `audit:read`. "
        "`active=true` (default): unexpired, unrevoked (nor any ancestor), capability version not retired; "
        "`active=false`: the others. `actor` is `tenant/sub` or a bare `sub`. Oldest first, or with "
        "`order=expiry` the soonest to expire first (a cursor belongs to the order it was issued in)."
    ),
    responses=problem_responses(400, 401, 403),
)
async def list_grants(
    request: Request,
    actor: Annotated[str | None, QueryParameter(max_length=200, description="minting caller: tenant/sub, or sub")] = None,
    skill: Annotated[str | None, QueryParameter(pattern=SKILL_ID_PATTERN, max_length=128, description="capability id")] = None,
    scope_held: Annotated[str | None, QueryParameter(name="scope", max_length=256, description="a scope the ticket grants")] = None,
    active: Annotated[bool, QueryParameter(description="true: live grants; false: expired, revoked or retired ones")] = True,
    order: Annotated[GrantOrder, QueryParameter(description="issued (oldest first) or expiry (soonest first)")] = "issued",
    limit: Annotated[int, QueryParameter(ge=1, le=MAX_LIMIT, description=f"page size, at most {MAX_LIMIT}")] = DEFAULT_LIMIT,
    cursor: Annotated[str | None, QueryParameter(max_length=256)] = None,
) -> Response[GrantPage]:
    registry = registry_of(request)
    caller = await authenticate(request, "audit:read")
    rows = await grant_queries.tenant_grants(
        registry.pool, viewer_tenant=caller.tenant, active=active, actor=actor, skill=skill, scope=scope_held,
        after=grant_position(cursor, order) if cursor else None, limit=limit + 1, order=order,
    )
    return Response(grant_page(rows, limit, order), headers={"Cache-Control": "no-store"})


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
    await optional_caller(request)  # public, but a presented token must be valid (docs/api.md#identities-and-tokens)
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


MAX_HOURS = 7 * 24


class HourCount(Wire):
    hour: datetime  # the start of a UTC hour
    allowed: int
    denied: int


class HourlyOutcomes(Wire):
    since: datetime
    until: datetime
    hours: list[HourCount]


@get(
    "/v1/audit/events/hourly",
    summary="Allowed and denied audit events per UTC hour (the events filters; at most 7 days)",
    description=(
        "The events `GET /v1/audit/events` would list for the same filters, counted per UTC hour and "
        "outcome; every hour of the range is present, empty ones with zeros. Scope `audit:read`. "
        f"Default range: the 24 hours up to the end of the current hour; at most {MAX_HOURS} hours."
    ),
    responses=problem_responses(400, 401, 403),
)
async def hourly_outcomes(
    request: Request,
    event_type: TypeQuery = None,
    actor: ActorQuery = None,
    skill: SkillQuery = None,
    scope_held: ScopeQuery = None,
    outcome: OutcomeQuery = None,
    since: SinceQuery = None,
    until: UntilQuery = None,
) -> Response[HourlyOutcomes]:
    registry = registry_of(request)
    caller = await authenticate(request, "audit:read")
    until_at = _rfc3339("until", until)
    end = _hour_floor(until_at, up=True) if until_at else _hour_floor(datetime.now(timezone.utc)) + timedelta(hours=1)
    start = _hour_floor(_rfc3339("since", since) or end - timedelta(hours=24))
    if end - start > timedelta(hours=MAX_HOURS):
        raise invalid_request(
            f"since and until may be at most {MAX_HOURS} hours apart",
            [ErrorItem(path="since", message=f"more than {MAX_HOURS} hours before until")],
        )
    where = _event_filter(event_type, actor, skill, scope_held, outcome, start, end)
    rows = await audit_queries.tenant_hourly_outcomes(registry.pool, caller.tenant, where)
    counts = {(row["hour"], row["outcome"]): row["n"] for row in rows}
    hours = []
    hour = start
    while hour < end:
        hours.append(HourCount(hour=hour, allowed=counts.get((hour, "allowed"), 0), denied=counts.get((hour, "denied"), 0)))
        hour += timedelta(hours=1)
    return Response(HourlyOutcomes(since=start, until=end, hours=hours), headers={"Cache-Control": "no-store"})


def _hour_floor(at: datetime, *, up: bool = False) -> datetime:
    """`at` in UTC cut to its hour (`up`: the next hour boundary unless already on one)."""
    at = at.astimezone(timezone.utc)
    floor = at.replace(minute=0, second=0, microsecond=0)
    return floor + timedelta(hours=1) if up and floor != at else floor


class ChainVerification(Wire):
    """The stored chain checked from genesis (registry/audit_chain.py, as `capreg audit verify`)."""

    verified: bool
    events: int
    head_seq: int
    checkpoint: Checkpoint | None  # the latest stored signed checkpoint
    checkpoint_signature_valid: bool | None  # None when there is no checkpoint yet
    first_bad_seq: int | None
    problem: str | None


@get(
    "/v1/audit/chain",
    summary="Verify the whole audit chain against its head and the latest signed checkpoint (audit:read)",
    description=(
        "Recomputes every hash link from genesis and holds the log against the head row and the latest "
        "signed checkpoint, exactly as `capreg audit verify` does. `firstBadSeq` names the first event "
        "that does not verify. One verification runs per server process at a time; concurrent callers "
        "share its result."
    ),
    responses=problem_responses(401, 403),
)
async def verify_chain(request: Request) -> Response[ChainVerification]:
    registry = registry_of(request)
    await authenticate(request, "audit:read")
    state = request.app.state
    # Single flight: the check reads the whole log, so a burst of callers costs one read, not many.
    running = state.get("chain_verification")
    if running is None or running.done():
        running = asyncio.ensure_future(_verify_chain(registry))
        state["chain_verification"] = running
    return Response(await asyncio.shield(running), headers={"Cache-Control": "no-store"})


async def _verify_chain(registry: Registry) -> ChainVerification:
    async with registry.pool.acquire() as conn:
        keys = jwks_keys(await checkpoint_queries.every_public_key(conn))
        report = await verify_stored_chain(conn, keys)
        row = await checkpoint_queries.latest_checkpoint(conn)
    checkpoint = checkpoint_from_row(row) if row is not None else None
    signature_valid = None
    if checkpoint is not None:
        try:
            verify_checkpoint(checkpoint, keys)
            signature_valid = True
        except CheckpointInvalid:
            signature_valid = False
    breach = report.breach
    return ChainVerification(
        verified=breach is None, events=report.events, head_seq=report.head_seq, checkpoint=checkpoint,
        checkpoint_signature_valid=signature_valid,
        first_bad_seq=breach.seq if breach is not None else None, problem=breach.problem if breach is not None else None,
    )


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


ROUTES = [list_events, hourly_outcomes, list_grants, latest_checkpoint, verify_chain]
