"""Audit events and their hash chain: the record type db/ writes and reads, and the canonical encoding
every link hashes over (docs/audit.md).

The encoding is a JSON array of every field in a fixed order, with `at` as UTC microseconds since the
epoch, so the chain verifies identically whatever the server's or the verifier's time zone.
`actorIssuer` and `requestId` (added later) are appended to the array only when either is set, so
events written before they existed hash exactly as they did.

Since migration 0009 every event is an entry of a tenant's chain (`chain`, `chainSeq`, `eventId`);
an entry's encoding starts with a version tag and those three, then `seq` and every field as above
(always all of them). Entries of the old single chain (chain None) keep their old encoding.

Events never carry text PostgreSQL cannot store: such characters are escaped when the event is built
(db.unstorable), so describing a hostile request can never fail the transaction it is written in.
The types are camelCase on the wire, like every body the registry serves (registry.core.wire).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import msgspec

from db.unstorable import escaped, unstorable

GENESIS_HASH = "0" * 64
_CHAIN_ENTRY_TAG = "capreg-chain-entry-1"
# The chain of events that belong to no tenant (none is written today: refusals need a caller, and
# every caller has a tenant); outside the tenant pattern, so no tenant can own it.
REGISTRY_CHAIN = "-registry"


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


_TEXT_FIELDS = (
    "type",
    "outcome",
    "tenant",
    "actor_tenant",
    "actor",
    "on_behalf_of",
    "ref",
    "reason",
    "trace_id",
    "actor_issuer",
    "request_id",
)


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
    chain: str | None = None  # None: an event of the old single chain (before migration 0009)
    chain_seq: int | None = None
    event_id: str | None = None


def event_chains(event: AuditEvent) -> list[str]:
    """The chains an event is written to, in byte order: its record tenant's and its actor's tenant's
    (one entry each when they differ)."""
    chains = {t for t in (event.tenant, event.actor_tenant) if t is not None}
    return sorted(chains, key=str.encode) if chains else [REGISTRY_CHAIN]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _epoch_micros(at: datetime) -> int:
    if at.tzinfo is None:  # naive: local time, as astimezone reads it
        at = at.astimezone(UTC)
    # Exact integer arithmetic on the timedelta (in C): the operator verify hashes millions of these.
    return (at - _EPOCH) // _MICROSECOND


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


def entry_hash(
    prev_hash: str, *, chain: str, chain_seq: int, event_id: str, seq: int, at: datetime, event: AuditEvent
) -> str:
    """The hash of a chain entry (since migration 0009): links `prev_hash`, and covers the entry's
    place (chain, chainSeq, eventId, seq), its time and every field of the event."""
    fields = [
        _CHAIN_ENTRY_TAG,
        chain,
        chain_seq,
        event_id,
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
        event.actor_issuer,
        event.request_id,
    ]
    return hashlib.sha256(prev_hash.encode() + b"\n" + msgspec.json.encode(fields)).hexdigest()


def row_entry_hash(row) -> str:
    """`entry_hash` of a stored entry read as a row in db.audit.AUDIT_COLUMNS order (seq, at, tenant,
    actor_tenant, type, actor, on_behalf_of, ref, scopes, outcome, reason, trace_id, prev_hash, hash,
    actor_issuer, request_id, chain, chain_seq, event_id), without building a record or an event:
    the operator's verification of millions of entries (the same fields, in entry_hash's order;
    stored values are already escaped, so building the event would change nothing)."""
    fields = [
        _CHAIN_ENTRY_TAG,
        row[16],
        row[17],
        row[18],
        row[0],
        _epoch_micros(row[1]),
        row[2],
        row[3],
        row[4],
        row[5],
        row[6],
        row[7],
        row[8],
        row[9],
        row[10],
        row[11],
        row[14],
        row[15],
    ]
    return hashlib.sha256(row[12].encode() + b"\n" + msgspec.json.encode(fields)).hexdigest()


def record_hash(record: AuditRecord) -> str:
    """Recompute a stored record's hash from its fields (what `capreg audit verify` checks)."""
    event = AuditEvent(
        type=record.type,
        outcome=record.outcome,
        tenant=record.tenant,
        actor_tenant=record.actor_tenant,
        actor=record.actor,
        on_behalf_of=record.on_behalf_of,
        ref=record.ref,
        scopes=list(record.scopes),
        reason=record.reason,
        trace_id=record.trace_id,
        actor_issuer=record.actor_issuer,
        request_id=record.request_id,
    )
    if record.chain is None:
        return event_hash(record.prev_hash, record.seq, record.at, event)
    return entry_hash(
        record.prev_hash,
        chain=record.chain,
        chain_seq=record.chain_seq or 0,
        event_id=record.event_id or "",
        seq=record.seq,
        at=record.at,
        event=event,
    )
