"""Audit log service: a tenant's auditors read its events (a page, the whole NDJSON export, hourly
outcome counts) under one filter language. The SQL is db/audit.py; the grant report is
registry/tickets/grants.py; chain verification and checkpoints are registry/audit/chain.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated

import msgspec

from db import audit as audit_queries
from db.audit import EventFilter
from db.audit_events import AuditRecord
from registry.core.cursors import decode_cursor, encode_cursor
from registry.core.date_times import parse_date_time, shifted
from registry.core.problems import ErrorItem, invalid_request
from registry.core.wire import Wire

if TYPE_CHECKING:
    from registry.state import Registry

MAX_HOURS = 7 * 24
_STREAM_BATCH = 1000

_encoder = msgspec.json.Encoder()


class AuditPage(Wire):
    items: list[AuditRecord]
    next_cursor: str | None


class HourCount(Wire):
    hour: datetime  # the start of a UTC hour
    allowed: int
    denied: int


class HourlyOutcomes(Wire):
    since: datetime
    until: datetime
    hours: list[HourCount]


class EventQuery(msgspec.Struct, frozen=True, kw_only=True):
    """The filters of an events question as the caller wrote them, already checked for length."""

    type: str | None = None
    actor: str | None = None  # a caller sub, or tenant/sub
    skill: str | None = None
    scope: str | None = None
    outcome: str | None = None
    since: str | None = None  # RFC 3339, inclusive
    until: str | None = None  # RFC 3339, exclusive


async def event_page(
    registry: Registry, tenant: str, query: EventQuery, *, limit: int, cursor: str | None
) -> AuditPage:
    """One page, oldest first, of the events whose record or actor tenant is `tenant`."""
    where = _event_filter(query, parse_date_time("since", query.since), parse_date_time("until", query.until))
    after = _after_seq(cursor) if cursor else 0
    await audit_queries.chain_stored(registry.pool)  # every event whose answer has left (db.audit_sequencer)
    records = await audit_queries.tenant_events(registry.pool, tenant, where, after=after, limit=limit + 1)
    page = records[:limit]
    next_cursor = encode_cursor([page[-1].seq]) if len(records) > limit else None
    return AuditPage(items=page, next_cursor=next_cursor)


async def event_export(registry: Registry, tenant: str, query: EventQuery) -> AsyncIterator[bytes]:
    """Every matching event up to the head as it is now, as NDJSON: the filters are checked (400)
    before the stream starts."""
    where = _event_filter(query, parse_date_time("since", query.since), parse_date_time("until", query.until))
    await audit_queries.chain_stored(registry.pool)
    upto = await audit_queries.last_seq(registry.pool)
    return _ndjson(registry, tenant, where, upto)


async def hourly_outcomes(registry: Registry, tenant: str, query: EventQuery) -> HourlyOutcomes:
    """The events `event_page` would list, counted per UTC hour and outcome; every hour of the range
    is present. Default range: the 24 hours up to the end of the current hour; at most MAX_HOURS."""
    until_at = parse_date_time("until", query.until)
    if until_at:
        end = _hour_floor(until_at, up=True, name="until")
    else:
        end = _hour_floor(registry.clock.now()) + timedelta(hours=1)
    since_at = parse_date_time("since", query.since)
    start = _hour_floor(since_at) if since_at else shifted("until", end, timedelta(hours=-24))
    if end - start > timedelta(hours=MAX_HOURS):
        raise invalid_request(
            f"since and until may be at most {MAX_HOURS} hours apart",
            [ErrorItem(path="since", message=f"more than {MAX_HOURS} hours before until")],
        )
    where = _event_filter(query, start, end)
    await audit_queries.chain_stored(registry.pool)
    rows = await audit_queries.tenant_hourly_outcomes(registry.pool, tenant, where)
    counts = {(row.hour, row.outcome): row.n for row in rows}
    hours = []
    hour = start
    while hour < end:
        hours.append(
            HourCount(hour=hour, allowed=counts.get((hour, "allowed"), 0), denied=counts.get((hour, "denied"), 0))
        )
        hour += timedelta(hours=1)
    return HourlyOutcomes(since=start, until=end, hours=hours)


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


def _event_filter(query: EventQuery, since: datetime | None, until: datetime | None) -> EventFilter:
    actor_tenant, _, actor_sub = query.actor.rpartition("/") if query.actor is not None else (None, None, None)
    if since is not None and until is not None and since > until:
        raise invalid_request("since is after until", [ErrorItem(path="since", message="must not be after until")])
    return EventFilter(
        type=query.type,
        actor=actor_sub,
        actor_tenant=actor_tenant or None,
        skill=query.skill,
        scope=query.scope,
        outcome=query.outcome,
        since=since,
        until=until,
    )


def _after_seq(cursor: str) -> int:
    """The seq an events cursor resumes after."""
    (seq,) = decode_cursor(cursor, tuple[Annotated[int, msgspec.Meta(ge=0)]])
    return seq


def _hour_floor(at: datetime, *, up: bool = False, name: str = "until") -> datetime:
    """`at` (UTC) cut to its hour (`up`: the next hour boundary unless already on one)."""
    floor = at.replace(minute=0, second=0, microsecond=0)
    return shifted(name, floor, timedelta(hours=1)) if up and floor != at else floor
