"""Audit events and their hash chain: the record type db/ writes and reads, and the canonical encoding
every link hashes over (docs/audit.md).

The encoding is a JSON array of every field in a fixed order, with `at` as UTC microseconds since the
epoch, so the chain verifies identically whatever the server's or the verifier's time zone.
`actorIssuer` and `requestId` (added later) are appended to the array only when either is set, so
events written before they existed hash exactly as they did.

Events never carry text PostgreSQL cannot store: such characters are escaped when the event is built
(db.unstorable), so describing a hostile request can never fail the transaction it is written in.
The types are camelCase on the wire, like every body the registry serves (registry.wire).
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone

import msgspec

from db.unstorable import escaped, unstorable

GENESIS_HASH = "0" * 64


class AuditEvent(msgspec.Struct, rename="camel", kw_only=True):
    """One audit event as written (seq, at and the hashes are assigned when it is appended)."""

    type: str
    outcome: str  # "allowed" | "denied"
    tenant: str | None = None
    actor_tenant: str | None = None
    actor: str | None = None
    on_behalf_of: str | None = None
    ref: str | None = None
    scopes: list[str] = []
    reason: str | None = None
    trace_id: str | None = None
    # The `iss` of the caller's token (None when no caller was authenticated).
    actor_issuer: str | None = None
    # The server's own id for the request (the client chooses trace ids, which may collide).
    request_id: str | None = None

    def __post_init__(self) -> None:
        for name in _TEXT_FIELDS:
            value = getattr(self, name)
            if value is not None and unstorable(value):
                setattr(self, name, escaped(value))
        if any(unstorable(s) for s in self.scopes):
            self.scopes = [escaped(s) for s in self.scopes]


_TEXT_FIELDS = ("type", "outcome", "tenant", "actor_tenant", "actor", "on_behalf_of", "ref", "reason", "trace_id",
                "actor_issuer", "request_id")


class AuditRecord(msgspec.Struct, rename="camel", kw_only=True):
    """An appended event, as the audit API returns it."""

    seq: int
    at: datetime
    type: str
    outcome: str
    tenant: str | None
    actor_tenant: str | None
    actor: str | None
    on_behalf_of: str | None
    ref: str | None
    scopes: list[str]
    reason: str | None
    trace_id: str | None
    prev_hash: str
    hash: str
    actor_issuer: str | None = None
    request_id: str | None = None


def _epoch_micros(at: datetime) -> int:
    delta = at.astimezone(timezone.utc) - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def event_hash(prev_hash: str, seq: int, at: datetime, event: AuditEvent) -> str:
    fields = [
            seq,
            _epoch_micros(at),
            event.tenant,
            event.actor_tenant,
            event.type,
            event.actor,
            event.on_behalf_of,
            event.ref,
            list(event.scopes),
            event.outcome,
            event.reason,
            event.trace_id,
    ]
    if event.actor_issuer is not None or event.request_id is not None:
        fields += [event.actor_issuer, event.request_id]
    canonical = msgspec.json.encode(fields)
    return hashlib.sha256(prev_hash.encode() + b"\n" + canonical).hexdigest()


def record_hash(record: AuditRecord) -> str:
    """Recompute a stored record's hash from its fields (what `capreg audit verify` checks)."""
    event = AuditEvent(
        type=record.type, outcome=record.outcome, tenant=record.tenant, actor_tenant=record.actor_tenant,
        actor=record.actor, on_behalf_of=record.on_behalf_of, ref=record.ref, scopes=list(record.scopes),
        reason=record.reason, trace_id=record.trace_id, actor_issuer=record.actor_issuer,
        request_id=record.request_id,
    )
    return event_hash(record.prev_hash, record.seq, record.at, event)
