"""The operator's bulk verification (EntryVerifier.feed_rows over stored rows, db.audit_events.row_entry_hash)
decides exactly as the record path (feed, record_hash): the same hash for every stored entry, and the
same first break, whatever column of whichever row was changed."""

from __future__ import annotations

import contextlib
import secrets
from datetime import UTC, datetime

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from db import audit as audit_queries
from db.audit import append_events
from db.audit_events import AuditEvent, AuditRecord, _epoch_micros, record_hash, row_entry_hash
from registry.audit.verifier import EntryVerifier

AWKWARD = [
    dict(actor="router", on_behalf_of="user-19 (Zoë Ångström)", scopes=["invoice:read", "invoice:list"]),
    dict(actor=None, ref=None, scopes=[], reason="data_location_denied", outcome="denied"),
    dict(actor='a"b\\c\n', trace_id="4bf92f3577b34da6a3ce929d0e0e4736", actor_issuer="https://idp.example"),
    dict(actor="mallory\x00", ref="x@\ud800", request_id="r-1"),  # escaped when built (db.unstorable)
]


@pytest.fixture
async def stored_rows(db, tenant):
    other = "bv" + secrets.token_hex(4)
    async with db.acquire() as conn, conn.transaction():
        await append_events(conn, [AuditEvent(type="probe.start", outcome="allowed", tenant=other, actor_tenant=other)])
    events = []
    for n in range(40):
        fields = dict(type="probe.event", outcome="allowed", tenant=tenant, actor_tenant=tenant) | AWKWARD[n % 4]
        if n % 5 == 0:
            fields["actor_tenant"] = other  # an event of two tenants
        events.append(AuditEvent(**fields))
    async with db.acquire() as conn, conn.transaction():
        await append_events(conn, events)
    _, anchor = await audit_queries.head(db)
    async with db.acquire() as conn:
        rows = [
            row for batch in [b async for b in audit_queries.chain_row_batches(conn, tenant, batch=7)] for row in batch
        ]
    return tenant, anchor, rows


def _record(row) -> AuditRecord:
    return AuditRecord(**dict(row))


async def test_the_bulk_hash_is_the_records(stored_rows):
    _, _, rows = stored_rows
    assert len(rows) == 40
    for row in rows:
        assert row_entry_hash(row) == record_hash(_record(row)) == row["hash"]


@pytest.mark.parametrize("column", ["actor", "scopes", "seq", "chain_seq", "prev_hash", "at", "event_id", "chain"])
async def test_the_bulk_path_finds_the_same_first_break(stored_rows, column):
    tenant, anchor, rows = stored_rows
    for victim in (0, 17, 39):
        changed = [dict(row) for row in rows]
        changed[victim][column] = _changed(column, changed[victim][column])
        tuples = [tuple(row.values()) for row in changed]
        # Rows as asyncpg gives them: by index (feed_rows) and by name (the record path).
        records = [_Row(t, list(rows[0].keys())) for t in tuples]
        bulk, one_by_one = EntryVerifier(tenant, start_hash=anchor), EntryVerifier(tenant, start_hash=anchor)
        for start in range(0, len(records), 6):
            bulk.feed_rows(records[start : start + 6])
        for record in records:
            one_by_one.feed(_record(record))
        assert bulk.broken is not None
        assert msgspec.to_builtins(bulk.broken) == msgspec.to_builtins(one_by_one.broken)
        assert (bulk.count, bulk.last_chain_seq, bulk.last_hash) == (
            one_by_one.count,
            one_by_one.last_chain_seq,
            one_by_one.last_hash,
        )


async def test_leaving_a_prefetching_read_early_frees_the_connection(db, stored_rows):
    tenant, _, _ = stored_rows
    async with db.acquire() as conn:
        batches = audit_queries.chain_row_batches(conn, tenant, batch=5, prefetch=True)
        async with contextlib.aclosing(batches):
            async for _ in batches:
                break
        assert await conn.fetchval("SELECT 1") == 1


def _changed(column: str, value):
    if column in ("seq", "chain_seq"):
        return value + 1
    if column == "at":
        return value.replace(microsecond=(value.microsecond + 1) % 1_000_000)
    return {"actor": "someone", "scopes": ["admin"], "prev_hash": "f" * 64, "event_id": "other"}.get(
        column, "elsewhere"
    )


class _Row:
    """A row both ways asyncpg's Record is read: by index and, through keys()/[name], by name."""

    def __init__(self, values: tuple, names: list[str]):
        self._values, self._names = values, names

    def __getitem__(self, key):
        return self._values[key] if isinstance(key, int) else self._values[self._names.index(key)]

    def keys(self):
        return list(self._names)


@given(st.datetimes(timezones=st.timezones()))
def test_epoch_microseconds_are_the_old_formulas(at):
    delta = at.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    assert _epoch_micros(at) == (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
