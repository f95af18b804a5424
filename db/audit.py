"""Queries on the audit log: the durable queue of events not yet chained (`enqueue_events`, in the
writing request's transaction), the sequencer's step that chains them (`chain_queued`: one hash
chain per tenant), and reads."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import NamedTuple

import asyncpg
import msgspec

from db.audit_events import GENESIS_HASH, REGISTRY_CHAIN, AuditEvent, AuditRecord, entry_hash, event_chains
from db.rows import typed_rows

AUDIT_COLUMNS = (
    "seq, at, tenant, actor_tenant, type, actor, on_behalf_of, ref, scopes, outcome, reason, trace_id, prev_hash, hash, "
    "actor_issuer, request_id, chain, chain_seq, event_id"
)


# The advisory lock that makes one sequencer step at a time, cluster-wide (any number of processes
# and replicas run steps; they take turns). A constant of capreg's own ("capreg-audit" in ASCII).
CHAIN_LOCK = 0x63617072_65672D61
# A step that holds the turn and then stops talking to the database (its process paused, its event
# loop blocked) is ended by the server after this long idle in its transaction: its lock goes, its
# step rolls back with the queue as it was, and every other process's readers and steps go on. A
# step's statements follow each other within milliseconds, so only a stalled step ever waits so long.
STALLED_STEP_TIMEOUT = "5s"
_EVENT_JSON = msgspec.json.Encoder()
_EVENT_READ = msgspec.json.Decoder(AuditEvent)


async def enqueue_events(conn: asyncpg.Connection, events: list[AuditEvent]) -> None:
    """Store `events` durably, not yet chained, inside the transaction whose change they record:
    they are in the log from its commit on, and in their chains from the next sequencer step's.
    Takes no lock another writer waits for."""
    if not events:
        return
    at = datetime.now(UTC)
    await conn.execute(
        "INSERT INTO audit_queue (at, event) SELECT $1, e FROM unnest($2::text[]) WITH ORDINALITY AS q(e, n) ORDER BY n",
        at,
        [_EVENT_JSON.encode(event).decode() for event in events],
    )


async def chain_queued(conn: asyncpg.Connection, *, most: int, wait: bool = True) -> int | None:
    """One sequencer step: in one transaction, take at most `most` queued events in id order and
    append them to their chains (`append_events`); returns how many it took, or None when `wait` is
    False and another step holds the turn. Steps take turns under CHAIN_LOCK, and each reads the
    queue only once it holds the lock (a statement of its own, so its snapshot includes whatever
    the step before it chained and removed, and every event committed before it was asked for). A
    step that fails or is killed leaves the queue as it was."""
    async with conn.transaction():
        # set_config(..., true): for this transaction only, whatever the pool's connection did before.
        if wait:
            await conn.execute(
                "SELECT set_config('idle_in_transaction_session_timeout', $2, true), pg_advisory_xact_lock($1)",
                CHAIN_LOCK,
                STALLED_STEP_TIMEOUT,
            )
        elif not await conn.fetchval(
            "SELECT pg_try_advisory_xact_lock($1) FROM set_config('idle_in_transaction_session_timeout', $2, true)",
            CHAIN_LOCK,
            STALLED_STEP_TIMEOUT,
        ):
            return None
        rows = await conn.fetch(
            "DELETE FROM audit_queue WHERE id IN (SELECT id FROM audit_queue ORDER BY id LIMIT $1) "
            "RETURNING id, at, event",
            most,
        )
        if rows:
            rows = sorted(rows, key=lambda row: row["id"])
            await append_events(
                conn, [_EVENT_READ.decode(row["event"]) for row in rows], at=[row["at"] for row in rows]
            )
    return len(rows)


async def chain_stored(conn: asyncpg.Connection | asyncpg.Pool, *, most: int = 2000) -> None:
    """Chain every event stored before the call (steps, waiting for the turn): what every reader of
    the log does first, so that it never misses an event whose answer has left."""
    if isinstance(conn, asyncpg.Pool):
        async with conn.acquire() as own:
            return await chain_stored(own, most=most)
    while await chain_queued(conn, most=most) == most:
        pass


async def queued(conn: asyncpg.Connection | asyncpg.Pool) -> tuple[int, datetime | None]:
    """Events stored but not yet chained, and when the oldest of them was stored (metrics, tests)."""
    row = await conn.fetchrow("SELECT count(*) AS n, min(at) AS oldest FROM audit_queue")
    return row["n"], row["oldest"]


async def append_events(
    conn: asyncpg.Connection, events: list[AuditEvent], *, at: list[datetime] | None = None
) -> list[int]:
    """Append events to their tenants' chains (db.audit_events.event_chains: an event of two tenants
    goes to both), in the sequencer's transaction (`chain_queued`); `at`: when each was stored
    (default now). Returns the seqs.

    Only the head rows of the chains written are locked (in byte order of chain, so two batches never
    deadlock on them), until commit: each chain's chainSeq stays gap-free and its links follow commit
    order, while writes to other chains go on. seq comes from a sequence taken under those locks, so
    it increases within each chain. Callers append last before commit to keep the window short.
    """
    if not events:
        return []
    entries = [(chain, event) for event in events for chain in event_chains(event)]
    chains = sorted({chain for chain, _ in entries}, key=str.encode)
    # Usually every chain exists: its head locked and the seqs taken in one round trip.
    heads, seqs = await _lock_heads_taking_seqs(conn, chains, len(entries))
    missing = [chain for chain in chains if chain not in heads]
    if missing:
        allowed = await _creatable_chains(conn, missing, {e.actor_tenant for e in events if e.actor_tenant})
        # An event is never dropped: one that would be in no chain starts its own.
        for event in events:
            mine = event_chains(event)
            if not any(chain in heads or chain in allowed for chain in mine):
                allowed += [chain for chain in mine if chain not in allowed]
        if allowed:
            await conn.execute(
                """INSERT INTO audit_chain_heads (chain, chain_seq, seq, hash)
                   SELECT c, 0, 0, (SELECT hash FROM audit_head WHERE id = 1) FROM unnest($1::text[]) AS c
                   ON CONFLICT (chain) DO NOTHING""",
                allowed,
            )
            heads.update(await _lock_heads(conn, allowed))
        # A record tenant that does not exist gets no chain: the entry stays in the actor's chain only.
        entries = [(chain, event) for chain, event in entries if chain in heads]
        seqs = await conn.fetchval(
            "SELECT array_agg(nextval('audit_event_seq')) FROM generate_series(1, $1)", len(entries)
        )
    seqs.sort()
    now = datetime.now(UTC)
    stored = {id(event): when for event, when in zip(events, at, strict=True)} if at is not None else {}
    event_ids = {id(event): str(uuid.uuid4()) for event in events}
    rows = []
    for (chain, event), seq in zip(entries, seqs, strict=False):
        chain_seq, prev = heads[chain]
        chain_seq += 1
        event_id = event_ids[id(event)]
        when = stored.get(id(event), now)
        digest = entry_hash(prev, chain=chain, chain_seq=chain_seq, event_id=event_id, seq=seq, at=when, event=event)
        rows.append(
            (
                seq,
                when,
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
                prev,
                digest,
                event.actor_issuer,
                event.request_id,
                chain,
                chain_seq,
                event_id,
            )
        )
        heads[chain] = (chain_seq, digest)
    if not rows:
        return []
    last_seq = {row[16]: row[0] for row in rows}
    written = [chain for chain in chains if chain in last_seq]
    # The entries and the heads they advance in one statement (one round trip, not two); columns as
    # arrays, scopes (an array per entry) as one JSON text each.
    columns = [list(column) for column in zip(*rows, strict=True)]
    columns[8] = [_JSON.encode(scopes).decode() for scopes in columns[8]]
    await conn.execute(
        _APPEND,
        *columns,
        written,
        [heads[c][0] for c in written],
        [last_seq[c] for c in written],
        [heads[c][1] for c in written],
    )
    return [row[0] for row in rows]


_JSON = msgspec.json.Encoder()
_APPEND = f"""WITH appended AS (
        INSERT INTO audit_events ({AUDIT_COLUMNS})
        SELECT e.seq, e.at, e.tenant, e.actor_tenant, e.type, e.actor, e.on_behalf_of, e.ref,
               ARRAY(SELECT jsonb_array_elements_text(e.scopes::jsonb)), e.outcome, e.reason, e.trace_id,
               e.prev_hash, e.hash, e.actor_issuer, e.request_id, e.chain, e.chain_seq, e.event_id
          FROM unnest($1::bigint[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                      $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[],
                      $15::text[], $16::text[], $17::text[], $18::bigint[], $19::text[])
               AS e(seq, at, tenant, actor_tenant, type, actor, on_behalf_of, ref, scopes, outcome, reason, trace_id,
                    prev_hash, hash, actor_issuer, request_id, chain, chain_seq, event_id)
    )
    UPDATE audit_chain_heads h SET chain_seq = x.cs, seq = x.s, hash = x.h
      FROM unnest($20::text[], $21::bigint[], $22::bigint[], $23::text[]) AS x(c, cs, s, h) WHERE h.chain = x.c"""


async def _lock_heads_taking_seqs(
    conn: asyncpg.Connection, chains: list[str], n: int
) -> tuple[dict[str, tuple[int, str]], list[int]]:
    """The heads of `chains` that exist, locked (as _lock_heads), and `n` seqs taken after every one
    of those locks is held (the seqs' subquery is correlated with the aggregate of all locked rows,
    so it runs once that row exists), or no seqs when a chain does not exist yet: they are then taken
    after its creation, under its lock too, and seq has no gap."""
    row = await conn.fetchrow(
        """WITH locked AS MATERIALIZED (
               SELECT chain, chain_seq, hash FROM audit_chain_heads WHERE chain = ANY($1::text[])
                ORDER BY chain COLLATE "C" FOR UPDATE
           ), heads AS (
               SELECT array_agg(chain) AS chains, array_agg(chain_seq) AS chain_seqs, array_agg(hash) AS hashes,
                      count(*) AS locked FROM locked
           )
           SELECT chains, chain_seqs, hashes,
                  ARRAY(SELECT nextval('audit_event_seq')
                          FROM generate_series(1, CASE WHEN heads.locked = cardinality($1::text[]) THEN $2 ELSE 0 END))
                    AS seqs
             FROM heads""",
        chains,
        n,
    )
    names = row["chains"] or []
    heads = {
        chain: (chain_seq, digest)
        for chain, chain_seq, digest in zip(names, row["chain_seqs"] or [], row["hashes"] or [], strict=True)
    }
    return heads, list(row["seqs"])


async def _lock_heads(conn: asyncpg.Connection, chains: list[str]) -> dict[str, tuple[int, str]]:
    rows = await conn.fetch(
        'SELECT chain, chain_seq, hash FROM audit_chain_heads WHERE chain = ANY($1::text[]) ORDER BY chain COLLATE "C" '
        "FOR UPDATE",
        chains,
    )
    return {row["chain"]: (row["chain_seq"], row["hash"]) for row in rows}


async def _creatable_chains(conn: asyncpg.Connection, chains: list[str], actor_tenants: set[str]) -> list[str]:
    """Of chains not yet started, those that may start now: an actor's tenant (a caller's token names
    it), the registry's own, or a tenant with agents. A caller naming a tenant that does not exist in a
    path cannot create chains (each would be a leaf of every checkpoint)."""
    known = set(
        await conn.fetchval(
            "SELECT coalesce(array_agg(DISTINCT tenant), '{}') FROM agents WHERE tenant = ANY($1::text[])", chains
        )
    )
    return [c for c in chains if c in actor_tenants or c == REGISTRY_CHAIN or c in known]


def _record(row: asyncpg.Record) -> AuditRecord:
    return AuditRecord(**dict(row))


async def iter_all(conn: asyncpg.Connection, batch: int = 5000, *, after: int = 0, upto: int | None = None):
    """Every event of the old single chain with `after` < seq <= `upto` (default: to the end) in seq
    order, fetched in keyset batches so that memory stays constant however long the log is."""
    upto = upto if upto is not None else 2**63 - 1
    while True:
        rows = await conn.fetch(
            f"SELECT {AUDIT_COLUMNS} FROM audit_events WHERE chain IS NULL AND seq > $1 AND seq <= $2 "
            "ORDER BY seq LIMIT $3",
            after,
            upto,
            batch,
        )
        if not rows:
            return
        for row in rows:
            yield _record(row)
        after = rows[-1]["seq"]


async def chain_batches(
    conn: asyncpg.Connection | asyncpg.Pool, chain: str, *, after: int = 0, upto: int | None = None, batch: int = 5000
):
    """The entries of `chain` with `after` < chainSeq <= `upto`, in chainSeq order, one keyset batch
    (a list of records) at a time."""
    async for rows in chain_row_batches(conn, chain, after=after, upto=upto, batch=batch):
        yield [_record(row) for row in rows]


async def chain_row_batches(
    conn: asyncpg.Connection | asyncpg.Pool,
    chain: str,
    *,
    after: int = 0,
    upto: int | None = None,
    batch: int = 5000,
    prefetch: bool = False,
):
    """`chain_batches` as rows in AUDIT_COLUMNS order (no record built: bulk verification).

    `prefetch` (a connection, read by nothing else meanwhile): the next batch is read while the
    caller checks this one. Close the generator (contextlib.aclosing) when leaving it early: the
    read in flight is awaited then, so the connection is free again."""
    upto = upto if upto is not None else 2**63 - 1
    sql = (
        f"SELECT {AUDIT_COLUMNS} FROM audit_events WHERE chain = $1 AND chain_seq > $2 AND chain_seq <= $3 "
        "ORDER BY chain_seq LIMIT $4"
    )
    rows = await conn.fetch(sql, chain, after, upto, batch)
    while rows:
        last = rows[-1][17]
        more = len(rows) == batch and last < upto
        following = asyncio.ensure_future(conn.fetch(sql, chain, last, upto, batch)) if prefetch and more else None
        try:
            yield rows
        finally:
            if following is not None and not following.done():
                await asyncio.wait([following])  # left early: the connection is free once this read ends
        if following is not None:
            rows = following.result()
        elif more:
            rows = await conn.fetch(sql, chain, last, upto, batch)
        else:
            return


async def chain_entries_by_seq(conn: asyncpg.Connection, *, upto: int, batch: int = 5000, prefetch: bool = False):
    """Every tenant chain's entries with seq <= `upto` in seq order (the order they were written, so
    the table is read about in physical order), as rows in AUDIT_COLUMNS order, one keyset batch at
    a time; within a chain, seq order is chainSeq order. `prefetch` as in chain_row_batches."""
    sql = (
        f"SELECT {AUDIT_COLUMNS} FROM audit_events WHERE seq > $1 AND seq <= $2 AND chain IS NOT NULL "
        "ORDER BY seq LIMIT $3"
    )
    rows = await conn.fetch(sql, 0, upto, batch)
    while rows:
        last = rows[-1][0]
        more = len(rows) == batch and last < upto
        following = asyncio.ensure_future(conn.fetch(sql, last, upto, batch)) if prefetch and more else None
        try:
            yield rows
        finally:
            if following is not None and not following.done():
                await asyncio.wait([following])
        if following is not None:
            rows = following.result()
        elif more:
            rows = await conn.fetch(sql, last, upto, batch)
        else:
            return


class ChainHead(msgspec.Struct, frozen=True):
    """A chain's head row: its newest entry's chainSeq, log seq and hash."""

    chain: str
    chain_seq: int
    seq: int
    hash: str


async def chain_heads(conn: asyncpg.Connection | asyncpg.Pool) -> list[ChainHead]:
    """Every chain's head that has at least one entry, in byte order of chain."""
    rows = await conn.fetch(
        'SELECT chain, chain_seq, seq, hash FROM audit_chain_heads WHERE chain_seq > 0 ORDER BY chain COLLATE "C"'
    )
    return [ChainHead(**row) for row in rows]


async def chain_head(conn: asyncpg.Connection | asyncpg.Pool, chain: str) -> tuple[int, str] | None:
    row = await conn.fetchrow("SELECT chain_seq, hash FROM audit_chain_heads WHERE chain = $1", chain)
    return (row["chain_seq"], row["hash"]) if row is not None else None


async def hashes_at(
    conn: asyncpg.Connection | asyncpg.Pool, places: list[tuple[str, int]]
) -> dict[tuple[str, int], str]:
    """The stored hash at each (chain, chainSeq) of `places` that holds an entry, in one statement."""
    if not places:
        return {}
    rows = await conn.fetch(
        """SELECT e.chain, e.chain_seq, e.hash FROM unnest($1::text[], $2::bigint[]) AS x(c, s)
             JOIN audit_events e ON e.chain = x.c AND e.chain_seq = x.s""",
        [p[0] for p in places],
        [p[1] for p in places],
    )
    return {(row["chain"], row["chain_seq"]): row["hash"] for row in rows}


async def entries_in_ranges(
    conn: asyncpg.Connection | asyncpg.Pool, ranges: list[tuple[str, int, int]]
) -> list[AuditRecord]:
    """The entries of several chains at once: for each (chain, after, upto), those with after <
    chainSeq <= upto, ordered by chain (byte order) then chainSeq. The caller bounds the total."""
    if not ranges:
        return []
    rows = await conn.fetch(
        f"""SELECT {", ".join("e." + c for c in AUDIT_COLUMNS.split(", "))}
              FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS x(c, lo, hi)
              JOIN audit_events e ON e.chain = x.c AND e.chain_seq > x.lo AND e.chain_seq <= x.hi
             ORDER BY e.chain COLLATE "C", e.chain_seq""",
        [r[0] for r in ranges],
        [r[1] for r in ranges],
        [r[2] for r in ranges],
    )
    return [_record(row) for row in rows]


class ChainEntry(NamedTuple):
    """Where an entry of a chain stands in the whole log (`seq`) and its stored hash."""

    seq: int
    hash: str


async def entry_at(conn: asyncpg.Connection | asyncpg.Pool, chain: str, chain_seq: int) -> ChainEntry | None:
    """The entry of `chain` at `chain_seq`, None when there is none."""
    row = await conn.fetchrow(
        "SELECT seq, hash FROM audit_events WHERE chain = $1 AND chain_seq = $2", chain, chain_seq
    )
    return ChainEntry(row["seq"], row["hash"]) if row is not None else None


class EventFilter(msgspec.Struct, kw_only=True):
    """What an auditor asked for; None means "any". `actor_tenant` narrows `actor` to one tenant."""

    type: str | None = None
    actor: str | None = None
    actor_tenant: str | None = None
    skill: str | None = None
    scope: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    outcome: str | None = None  # "allowed" or "denied"


def _filter_conditions(where: EventFilter, bind) -> list[str]:
    """SQL conditions for `where`, its values bound through `bind` (value -> placeholder)."""
    filters = []
    if where.type is not None:
        filters.append(f"type = {bind(where.type)}")
    if where.actor is not None:
        filters.append(f"actor = {bind(where.actor)}")
    if where.actor_tenant is not None:
        filters.append(f"actor_tenant = {bind(where.actor_tenant)}")
    if where.skill is not None:
        # The same expression as the audit_events_*_skill indexes (migration 0003), so they apply.
        filters.append(f"audit_ref_skill(ref) = {bind(where.skill)}")
    if where.scope is not None:
        filters.append(f"{bind(where.scope)} = ANY (scopes)")
    if where.outcome is not None:
        filters.append(f"outcome = {bind(where.outcome)}")
    if where.since is not None:
        filters.append(f"at >= {bind(where.since)}")
    if where.until is not None:
        filters.append(f"at < {bind(where.until)}")
    return filters


async def tenant_events(
    conn: asyncpg.Connection | asyncpg.Pool,
    tenant: str,
    where: EventFilter,
    *,
    after: int = 0,
    upto: int | None = None,
    limit: int = 100,
) -> list[AuditRecord]:
    """One keyset page (seq > `after`, oldest first) of the events a tenant's auditors see: those
    whose record tenant or whose actor's tenant is `tenant`, from the old single chain and the
    tenant's own chain (an event of two tenants is listed once, as the entry of this tenant's chain).

    Two branches, one per tenant column, so each walks its own (column, [filter,] seq) index in seq
    order and stops after `limit` rows; the second skips rows the first already has.
    """
    params: list[object] = [tenant]

    def bind(value: object) -> str:
        params.append(value)
        return f"${len(params)}"

    filters = [f"seq > {bind(after)}", "(chain IS NULL OR chain = $1)"]
    if upto is not None:
        filters.append(f"seq <= {bind(upto)}")
    filters += _filter_conditions(where, bind)
    condition = " AND ".join(filters)
    n = bind(limit)
    rows = await conn.fetch(
        f"""SELECT {AUDIT_COLUMNS} FROM (
                (SELECT {AUDIT_COLUMNS} FROM audit_events
                  WHERE tenant = $1 AND {condition} ORDER BY seq LIMIT {n})
                UNION ALL
                (SELECT {AUDIT_COLUMNS} FROM audit_events
                  WHERE actor_tenant = $1 AND tenant IS DISTINCT FROM $1 AND {condition} ORDER BY seq LIMIT {n})
            ) visible ORDER BY seq LIMIT {n}""",
        *params,
    )
    return [_record(row) for row in rows]


class HourOutcomes(msgspec.Struct, frozen=True, gc=False):
    """How many events of one outcome in one UTC hour (`tenant_hourly_outcomes`)."""

    hour: datetime
    outcome: str
    n: int


async def tenant_hourly_outcomes(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, where: EventFilter
) -> list[HourOutcomes]:
    """Counts of the events a tenant's auditors see, per UTC hour and outcome, in hour order. The
    caller bounds the time range (`where.since` and `where.until`)."""
    params: list[object] = [tenant]

    def bind(value: object) -> str:
        params.append(value)
        return f"${len(params)}"

    condition = " AND ".join(["(chain IS NULL OR chain = $1)", *_filter_conditions(where, bind)])
    rows = await conn.fetch(
        f"""SELECT date_trunc('hour', at, 'UTC') AS hour, outcome, count(*) AS n FROM (
                (SELECT at, outcome FROM audit_events WHERE tenant = $1 AND {condition})
                UNION ALL
                (SELECT at, outcome FROM audit_events
                  WHERE actor_tenant = $1 AND tenant IS DISTINCT FROM $1 AND {condition})
            ) visible GROUP BY 1, 2 ORDER BY 1, 2""",
        *params,
    )
    return typed_rows(HourOutcomes, rows)


async def hash_at(conn: asyncpg.Connection | asyncpg.Pool, seq: int) -> str | None:
    """The stored hash of the event at `seq` (the genesis hash for 0), or None if there is none."""
    if seq == 0:
        return GENESIS_HASH
    return await conn.fetchval("SELECT hash FROM audit_events WHERE seq = $1", seq)


async def last_seq(conn: asyncpg.Connection | asyncpg.Pool) -> int:
    """The highest seq written so far (the sequence's position; entries up to it may still be committing)."""
    return await conn.fetchval("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM audit_event_seq")


async def head(conn: asyncpg.Connection | asyncpg.Pool) -> tuple[int, str]:
    """The old single chain's head: frozen since migration 0009, the anchor of every tenant's chain."""
    row = await conn.fetchrow("SELECT seq, hash FROM audit_head WHERE id = 1")
    return row["seq"], row["hash"]
