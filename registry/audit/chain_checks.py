"""GET /v1/audit/chain: the caller's tenant's chain (and the old single chain it is anchored to)
verified incrementally, off the event loop, at most once per interval per caller.

Each chain's verified position (chainSeq and hash) is kept in the database (audit_chain_verified,
'' for the old single chain), shared by every worker and replica: a call checks only the entries
written since, so its cost follows what is new, not the log's length nor other tenants' logs. The
entry at the position must still carry the hash verified there, and the next entry must link to it.
Hashing runs in a worker thread a batch at a time, so the event loop keeps serving. A caller asking
again within CAPREG_CHAIN_CHECK_INTERVAL seconds gets the last answer this process computed for the
chain; concurrent callers of one chain share one check (single flight per chain and process).

What this does not do: re-read entries already verified (the operator's `capreg audit verify` and
the tenant's own `capreg audit verify --url` check every entry from the start).
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from typing import TYPE_CHECKING

import asyncpg

from db import audit as audit_queries
from db import chain_checks as position_queries
from db import checkpoints as checkpoint_queries
from db.audit_events import GENESIS_HASH
from db.chain_checks import VerifiedPosition
from registry.audit.checkpoints import Checkpoint, CheckpointInvalid, checkpoint_from_row, jwks_keys, verify_checkpoint
from registry.audit.verifier import ChainBreak, ChainVerifier, EntryVerifier
from registry.core.wire import Wire

if TYPE_CHECKING:
    from auth.principal import Caller
    from registry.state import Registry

LEGACY = ""  # the old single chain's key in audit_chain_verified
_BATCH = 2000
_REMEMBERED = 10_000  # callers and chains remembered per process (least recently used dropped)


class ChainVerification(Wire):
    """The caller's tenant's chain verified up to its head (registry/audit/chain_checks.py)."""

    verified: bool
    chain: str
    chain_seq: int  # the chain's entries verified (its head when verified)
    events: int  # entries of the old single chain and of this chain verified
    head_seq: int  # the seq of the chain's last verified entry (0 before its first)
    checked_now: int  # entries this check had to read (those written since the previous one)
    checkpoint: Checkpoint | None  # the latest stored signed checkpoint
    checkpoint_signature_valid: bool | None  # None when there is no checkpoint yet
    first_bad_seq: int | None
    first_bad_chain_seq: int | None
    problem: str | None


class ChainChecks:
    """Per-process state of the chain checks: the running check per chain, the last answer per
    chain, and when each caller last had a fresh check."""

    def __init__(self) -> None:
        self.running: dict[str, asyncio.Future] = {}
        self.answers: OrderedDict[str, ChainVerification] = OrderedDict()
        self.callers: OrderedDict[tuple, float] = OrderedDict()

    def throttled(self, key: tuple, interval: float, now: float) -> bool:
        """True when `key` had a fresh check less than `interval` seconds ago (else records one now)."""
        last = self.callers.get(key)
        if last is not None and now - last < interval:
            return True
        self.callers[key] = now
        self.callers.move_to_end(key)
        while len(self.callers) > _REMEMBERED:
            self.callers.popitem(last=False)
        return False

    def remember(self, chain: str, answer: ChainVerification) -> None:
        self.answers[chain] = answer
        self.answers.move_to_end(chain)
        while len(self.answers) > _REMEMBERED:
            self.answers.popitem(last=False)


async def verify_chain(registry: Registry, caller: Caller) -> ChainVerification:
    """The caller's tenant's chain verified up to its head (see the module docstring)."""
    checks: ChainChecks = registry.chain_checks
    chain = caller.tenant
    key = (caller.issuer, caller.tenant, caller.sub)
    if (
        checks.throttled(key, registry.settings.chain_check_interval, registry.clock.monotonic())
        and chain in checks.answers
    ):
        return checks.answers[chain]
    running = checks.running.get(chain)
    if running is None or running.done():
        running = asyncio.ensure_future(_check(registry, chain))
        checks.running[chain] = running
        running.add_done_callback(functools.partial(_forget, checks, chain))
    answer = await asyncio.shield(running)
    checks.remember(chain, answer)
    return answer


def _forget(checks: ChainChecks, chain: str, done: asyncio.Future) -> None:
    if checks.running.get(chain) is done:
        del checks.running[chain]
    if not done.cancelled():
        done.exception()  # retrieved: a failed check is the caller's 5xx, not an unretrieved warning


async def _check(registry: Registry, chain: str) -> ChainVerification:
    async with registry.pool.acquire() as conn:
        await audit_queries.chain_stored(conn)  # up to every event whose answer has left
        anchor_seq, anchor = await audit_queries.head(conn)
        legacy_done, legacy_read, breach = await _advance_legacy(conn, anchor_seq)
        chain_seq, head_seq, read = 0, 0, 0
        if breach is None:
            chain_seq, head_seq, read, breach = await _advance_chain(conn, chain, anchor)
        keys = jwks_keys(await checkpoint_queries.every_public_key(conn))
        row = await checkpoint_queries.latest_checkpoint(conn)
    checkpoint = checkpoint_from_row(row) if row is not None else None
    signature_valid = None
    if checkpoint is not None:
        try:
            verify_checkpoint(checkpoint, keys)
            signature_valid = True
        except CheckpointInvalid:
            signature_valid = False
    return ChainVerification(
        verified=breach is None,
        chain=chain,
        chain_seq=chain_seq,
        events=legacy_done + chain_seq,
        head_seq=head_seq,
        checked_now=legacy_read + read,
        checkpoint=checkpoint,
        checkpoint_signature_valid=signature_valid,
        first_bad_seq=breach.seq if breach is not None else None,
        first_bad_chain_seq=breach.chain_seq if breach is not None else None,
        problem=breach.problem if breach is not None else None,
    )


async def _advance_legacy(conn: asyncpg.Connection, head_seq: int) -> tuple[int, int, ChainBreak | None]:
    """The old single chain from its verified position to its (frozen) head: (verified, read, breach)."""
    start_seq, start_hash = await position_queries.verified_position(conn, LEGACY) or (0, GENESIS_HASH)
    if start_seq > 0 and await audit_queries.hash_at(conn, start_seq) != start_hash:
        return start_seq, 0, ChainBreak(start_seq, "the event verified at this seq was changed since")
    if start_seq >= head_seq:
        return start_seq, 0, None
    verifier = ChainVerifier(start_seq=start_seq + 1, start_hash=start_hash)
    batch: list = []
    read = 0

    def feed(records: list) -> ChainBreak | None:
        for record in records:
            if verifier.feed(record) is not None:
                break
        return verifier.broken

    async for record in audit_queries.iter_all(conn, _BATCH, after=start_seq, upto=head_seq):
        batch.append(record)
        if len(batch) >= _BATCH:
            read += len(batch)
            if await asyncio.to_thread(feed, batch) is not None:
                return verifier.last_seq, read, verifier.broken
            batch = []
    read += len(batch)
    if batch and await asyncio.to_thread(feed, batch) is not None:
        return verifier.last_seq, read, verifier.broken
    if verifier.last_seq < head_seq:
        return verifier.last_seq, read, ChainBreak(verifier.last_seq + 1, "events deleted before the head")
    await position_queries.advance_verified(conn, LEGACY, VerifiedPosition(verifier.last_seq, verifier.last_hash))
    return verifier.last_seq, read, None


async def _advance_chain(conn: asyncpg.Connection, chain: str, anchor: str) -> tuple[int, int, int, ChainBreak | None]:
    """`chain` from its verified position to its head: (verified chainSeq, head seq, read, breach)."""
    head = await audit_queries.chain_head(conn, chain)
    upto, head_hash = head if head is not None else (0, anchor)
    start = await position_queries.verified_position(conn, chain)
    start_chain_seq, start_hash, start_seq = 0, anchor, 0
    if start is not None:
        start_chain_seq, start_hash = start
        entry = await audit_queries.entry_at(conn, chain, start_chain_seq)
        if entry is None or entry.hash != start_hash:
            return (
                start_chain_seq,
                0,
                0,
                ChainBreak(
                    entry.seq if entry is not None else None,
                    "the entry verified at this chainSeq was changed since",
                    chain=chain,
                    chain_seq=start_chain_seq,
                ),
            )
        start_seq = entry.seq
    entries = EntryVerifier(chain, start_chain_seq=start_chain_seq + 1, start_hash=start_hash, last_seq=start_seq)
    read = 0
    async for records in audit_queries.chain_batches(conn, chain, after=start_chain_seq, upto=upto, batch=_BATCH):
        read += len(records)
        if await asyncio.to_thread(entries.feed_all, records) is not None:
            return entries.last_chain_seq, entries.last_seq, read, entries.broken
    if entries.last_chain_seq < upto:
        return (
            entries.last_chain_seq,
            entries.last_seq,
            read,
            ChainBreak(
                None,
                f"the chain ends at chainSeq {entries.last_chain_seq} but its head row says {upto}",
                chain=chain,
                chain_seq=entries.last_chain_seq + 1,
            ),
        )
    if entries.last_hash != head_hash:
        return (
            entries.last_chain_seq,
            entries.last_seq,
            read,
            ChainBreak(
                entries.last_seq,
                "the head row does not match the chain's last entry",
                chain=chain,
                chain_seq=upto,
            ),
        )
    if upto > start_chain_seq:
        await position_queries.advance_verified(conn, chain, VerifiedPosition(upto, head_hash))
    return upto, entries.last_seq, read, None
