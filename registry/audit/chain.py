"""Checking the stored audit chains and signing their heads: the I/O shell around registry.audit.verifier (hash
links), registry.audit.merkle (the tree over chain heads) and registry.audit.checkpoints (signed roots), shared by
`capreg audit verify|checkpoint` and the server: the operator's verification of every chain, the
checkpoint writer and the latest checkpoint. (GET /v1/audit/chain is registry.audit.chain_checks.)

Reads stream in keyset batches, so memory stays constant however long the log is. Reads stop at the
head rows read first: every entry up to a committed head is itself committed (both are written in one
transaction), so concurrent appends never look like a broken chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import asyncpg
import msgspec

from db import audit as audit_queries
from db import checkpoints as checkpoint_queries
from db.audit_events import GENESIS_HASH, row_entry_hash
from registry.audit import merkle
from registry.audit.checkpoints import (
    CHECKPOINT_TYP,
    Checkpoint,
    CheckpointInvalid,
    checkpoint_claims,
    checkpoint_from_row,
    verify_checkpoint,
)
from registry.audit.verifier import ChainBreak, ChainVerifier, EntryVerifier
from registry.core import error_codes as codes
from registry.core.problems import ProblemError

if TYPE_CHECKING:
    from registry.state import Registry

log = logging.getLogger("capreg.audit")


class ChainBroken(Exception):
    """The stored log does not verify; `breach` names the first bad entry."""

    def __init__(self, breach: ChainBreak):
        super().__init__(breach.describe())
        self.breach = breach


class VerifyReport(msgspec.Struct):
    events: int  # entries checked: the old single chain's events and every tenant chain's entries
    head_seq: int  # the old single chain's head
    checkpoints: list[int]  # seqs of the signed checkpoints the log was checked against
    breach: ChainBreak | None
    chains: int = 0  # tenant chains checked
    last_seq: int = 0  # the highest seq among every chain's head row: the newest event checked


PROGRESS_EVERY = 1000


async def verify_stored_chain(
    conn: asyncpg.Connection,
    keys: Mapping[str, Any],
    *,
    external: Sequence[Checkpoint] = (),
    batch: int = 5000,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """Every chain checked from its start (operator `capreg audit verify`): the old single chain from
    genesis to its head row, then every tenant's chain from chainSeq 1 (anchored at that head) to its
    head row, then the latest stored checkpoint and any `external` ones (kept by a monitor).

    Edits, deletions and reorderings inside a chain break a link; deletions at a chain's tail are
    caught by its head row or a checkpoint covering more; a rewritten-and-rehashed chain by the
    signed root (or, for checkpoints from before chains per tenant, the signed hash).
    """
    await audit_queries.chain_stored(conn)  # every event stored so far is checked (db.audit_sequencer)
    # Checkpoints and heads before the entries: anything written meanwhile is past what we hold them to.
    stored = await checkpoint_queries.latest_checkpoint(conn, with_heads=True)
    checkpoints = [checkpoint_from_row(stored)] if stored is not None else []
    checkpoints += list(external)
    covered = checkpoint_queries.covered_heads(stored) if stored is not None else []
    heads = {row.chain: (row.chain_seq, row.hash, row.seq) for row in await audit_queries.chain_heads(conn)}
    head_seq, head_hash = await audit_queries.head(conn)
    total = head_seq + sum(head[0] for head in heads.values())
    checked = 0

    def tick(done: int) -> None:
        if progress is not None and done % PROGRESS_EVERY == 0:
            progress(done, total)  # (entries checked, entries in all): for a progress bar

    def tick_many(count: int) -> None:
        nonlocal checked
        before, checked = checked, checked + count
        if progress is not None and before // PROGRESS_EVERY != checked // PROGRESS_EVERY:
            progress(checked, total)

    # The old single chain, against its (frozen) head and the checkpoints signed before chains per tenant.
    legacy = [c for c in checkpoints if c.root is None]
    wanted = {c.seq for c in legacy}
    seen = {0: GENESIS_HASH}
    verifier = ChainVerifier()
    async for record in audit_queries.iter_all(conn, batch, upto=max([head_seq, *wanted])):
        checked += 1
        tick(checked)
        if verifier.feed(record) is not None:
            return VerifyReport(checked - 1, head_seq, [c.seq for c in checkpoints], verifier.broken)
        if record.seq in wanted:
            seen[record.seq] = record.hash

    def report(breach: ChainBreak | None) -> VerifyReport:
        last_seq = max([head_seq, *(head[2] for head in heads.values())])
        return VerifyReport(
            checked, head_seq, [c.seq for c in checkpoints], breach, chains=len(heads), last_seq=last_seq
        )

    end = verifier.last_seq
    if end < head_seq:
        return report(
            ChainBreak(
                end + 1, f"the log ends at seq {end} but its head row says {head_seq} (events deleted at the tail)"
            )
        )
    if end > head_seq or verifier.last_hash != head_hash:
        return report(
            ChainBreak(head_seq, f"the head row (seq {head_seq}) does not match the log's last event (seq {end})")
        )
    for checkpoint in checkpoints:
        try:
            verify_checkpoint(checkpoint, keys)
        except CheckpointInvalid as exc:
            return report(
                ChainBreak(checkpoint.seq, f"the checkpoint for seq {checkpoint.seq} is not validly signed: {exc}")
            )
    for checkpoint in legacy:
        if checkpoint.seq > end:
            return report(
                ChainBreak(
                    end + 1,
                    f"the log ends at seq {end} but a checkpoint signed at {checkpoint.at} covers seq {checkpoint.seq} "
                    "(events deleted at the tail)",
                )
            )
        if seen.get(checkpoint.seq) != checkpoint.hash:
            return report(
                ChainBreak(
                    checkpoint.seq,
                    f"the hash at seq {checkpoint.seq} differs from the checkpoint signed at {checkpoint.at} "
                    "(the log was rewritten at or before this seq)",
                )
            )

    # Every tenant's chain, from chainSeq 1, each against its head row and the heads of the signed
    # checkpoints: the latest stored one, and the stored one behind each external root.
    signed: list[list[tuple[str, int, str]]] = []
    rooted: list[tuple[str, int | None, int]] = []  # (root, tree size, seq) of each of `signed`
    if stored is not None and stored.root is not None:
        signed.append(covered)
        rooted.append((stored.root, stored.chains, stored.seq))
    for checkpoint in checkpoints:
        if checkpoint.root is None or (rooted and checkpoint.root == rooted[0][0]):
            continue
        row = await checkpoint_queries.checkpoint_with_root(conn, checkpoint.root)
        if row is None:
            return report(
                ChainBreak(
                    checkpoint.seq,
                    f"the checkpoint signed at {checkpoint.at} is no longer stored "
                    "(its heads cannot be checked: the checkpoints were rewritten)",
                )
            )
        signed.append(checkpoint_queries.covered_heads(row))
        rooted.append((checkpoint.root, checkpoint.chains, checkpoint.seq))
    for heads_signed, (root, size, seq) in zip(signed, rooted, strict=False):
        if merkle.heads_root(heads_signed).hex() != root or len(heads_signed) != size:
            return report(ChainBreak(seq, "the heads stored with a checkpoint do not give its signed root"))
    wanted_heads: dict[str, set[tuple[int, str]]] = {}
    for heads_signed in signed:
        for chain, chain_seq, digest in heads_signed:
            wanted_heads.setdefault(chain, set()).add((chain_seq, digest))
    signed_heads = wanted_heads
    for chain in signed_heads.keys() - heads.keys():
        return report(ChainBreak(None, "the chain's head row is missing (entries deleted)", chain=chain, chain_seq=1))
    # Every chain at once in one pass in seq order (about the table's physical order); a chain that does
    # not pass it is read again alone in chainSeq order, which finds and names its first break exactly.
    passed = await _scan_chains(conn, heads, head_hash, batch, tick_many)
    signed_at = await audit_queries.hashes_at(
        conn, [(chain, chain_seq) for chain, wanted in signed_heads.items() for chain_seq, _ in wanted]
    )
    for chain in sorted(heads, key=str.encode):
        upto, head_digest, _ = heads[chain]
        entries = passed.get(chain)
        if entries is None:
            entries = EntryVerifier(chain, start_hash=head_hash)
            rows = audit_queries.chain_row_batches(conn, chain, upto=upto, batch=batch, prefetch=True)
            async with contextlib.aclosing(rows):
                async for records in rows:
                    breach = entries.feed_rows(records)
                    tick_many(len(records))
                    if breach is not None:
                        return report(breach)
        last = entries.last_chain_seq
        if last < upto:
            return report(
                ChainBreak(
                    None,
                    f"the chain ends at chainSeq {last} but its head row says {upto} (entries deleted at the tail)",
                    chain=chain,
                    chain_seq=last + 1,
                )
            )
        if entries.last_hash != head_digest:
            return report(
                ChainBreak(
                    entries.last_seq, "the head row does not match the chain's last entry", chain=chain, chain_seq=upto
                )
            )
        for signed_seq, signed_digest in sorted(signed_heads.get(chain, ())):
            if signed_seq > upto:
                return report(
                    ChainBreak(
                        None,
                        f"the chain ends at chainSeq {upto} but a signed checkpoint covers "
                        f"chainSeq {signed_seq} (entries deleted at the tail)",
                        chain=chain,
                        chain_seq=upto + 1,
                    )
                )
            if signed_at.get((chain, signed_seq)) != signed_digest:
                return report(
                    ChainBreak(
                        None,
                        f"the hash at chainSeq {signed_seq} differs from a signed checkpoint "
                        "(the chain was rewritten at or before it)",
                        chain=chain,
                        chain_seq=signed_seq,
                    )
                )
    return report(None)


# Entries of moved chains fetched per statement when a checkpoint checks what is new (many small
# chains in one statement; a chain with more entries than this is streamed on its own).
_CHECK_BATCH = 5000
# A tree this big is updated in a worker thread, off the event loop.
_INLINE_LEAVES = 1024


async def _scan_chains(
    conn: asyncpg.Connection,
    heads: dict[str, tuple[int, str, int]],
    anchor: str,
    batch: int,
    tick_many: Callable[[int], None],
) -> dict[str, EntryVerifier]:
    """The chains whose entries, read in seq order, are exactly chainSeq 1 to the head row's, each
    linked and hashed right (their verifiers, at the head); the others are left out, to be read
    again in chainSeq order. Passing here implies passing there: the same entries in the same order,
    checked the same way as EntryVerifier.feed_rows (inline: one pass over rows of every chain)."""
    # Per chain: [last chainSeq, last hash, last seq, head chainSeq]; None once it failed here.
    state: dict[str, list | None] = {chain: [0, anchor, 0, head[0]] for chain, head in heads.items()}
    upto = max((head[2] for head in heads.values()), default=0)
    rows = audit_queries.chain_entries_by_seq(conn, upto=upto, batch=batch, prefetch=True)
    async with contextlib.aclosing(rows):
        async for records in rows:
            fed = 0
            for row in records:
                at = state.get(row[16])
                if at is None:
                    continue  # no head row (reported by the head checks), or already failed here
                chain_seq = row[17]
                if chain_seq > at[3]:
                    continue  # written after the head rows were read
                if chain_seq != at[0] + 1 or row[12] != at[1] or row[0] <= at[2] or row_entry_hash(row) != row[13]:
                    state[row[16]] = None
                    continue
                at[0], at[1], at[2] = chain_seq, row[13], row[0]
                fed += 1
            tick_many(fed)
    passed = {}
    for chain, at in state.items():
        if at is not None and at[0] == at[3]:
            verifier = EntryVerifier(chain, start_chain_seq=at[0] + 1, start_hash=at[1], last_seq=at[2])
            verifier.count = at[0]
            passed[chain] = verifier
    return passed


async def make_checkpoint(
    conn: asyncpg.Connection, keyring, issuer: str, *, at: datetime, tree: merkle.HeadTree | None = None
) -> Checkpoint:
    """Sign the Merkle root over every chain head, after checking each chain's entries written since
    the previous checkpoint (only those: the cost follows what is new, not the log's length).

    `tree` is the caller's tree kept between checkpoints (the server keeps one per process): only
    the leaves of chains that moved, and the nodes above them, are rehashed. Chains that did not
    move since the previous checkpoint are signed as they were signed then, unread; moved ones are
    checked from the entry the previous checkpoint signed, in a few statements for many chains.

    Writers take turns (an advisory lock), so a later checkpoint never covers less than an earlier one.
    Nothing new is written when the latest checkpoint already has this root and the current key.
    Raises ChainBroken (and signs nothing) when a chain does not extend the previous checkpoint.
    """
    tree = tree if tree is not None else merkle.HeadTree()
    await audit_queries.chain_stored(conn)  # the checkpoint covers every event stored so far
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", checkpoint_queries.CHECKPOINT_LOCK)
        latest = await checkpoint_queries.latest_checkpoint(conn, with_heads=True)
        heads = [(row.chain, row.chain_seq, row.hash, row.seq) for row in await audit_queries.chain_heads(conn)]
        heads_now = [(chain, chain_seq, digest) for chain, chain_seq, digest, _ in heads]
        root = (await _update_tree(tree, heads_now)).hex()
        if latest is not None and latest.root == root and latest.kid == keyring.signing_kid:
            return checkpoint_from_row(latest)
        anchor_seq, anchor = await audit_queries.head(conn)
        before = {
            chain: (chain_seq, digest)
            for chain, chain_seq, digest in (checkpoint_queries.covered_heads(latest) if latest is not None else [])
        }
        await _check_moved_chains(conn, before, heads_now, anchor)
        # seq and hash: the newest entry covered (the old chain's head while no tenant chain has one).
        newest_seq, newest_hash = max(((h[3], h[2]) for h in heads), default=(anchor_seq, anchor))
        claims = checkpoint_claims(
            issuer=issuer, seq=newest_seq, hash=newest_hash, at=at, root=root, chains=len(heads_now)
        )
        signature = keyring.sign(claims, typ=CHECKPOINT_TYP)
        await checkpoint_queries.insert_checkpoint(
            conn,
            seq=newest_seq,
            hash=newest_hash,
            at=at,
            kid=keyring.signing_kid,
            signature=signature,
            root=root,
            heads=heads_now,
        )
        stored = await checkpoint_queries.latest_checkpoint(conn)
    assert stored is not None  # inserted just above, in this transaction
    return checkpoint_from_row(stored)


async def _update_tree(tree: merkle.HeadTree, heads: list[tuple[str, int, str]]) -> bytes:
    """`tree.update(heads)`, in a worker thread for a big tree. Cancelled meanwhile, it still waits
    for the thread: the tree is never left being changed once the checkpoint lock is released."""
    if len(heads) <= _INLINE_LEAVES:
        return tree.update(heads)
    update = asyncio.ensure_future(asyncio.to_thread(tree.update, heads))
    try:
        return await asyncio.shield(update)
    except asyncio.CancelledError:
        await asyncio.wait([update])
        raise


async def _check_moved_chains(
    conn: asyncpg.Connection,
    before: dict[str, tuple[int, str]],
    heads: list[tuple[str, int, str]],
    anchor: str,
) -> None:
    """Raise ChainBroken unless every chain extends the head the previous checkpoint signed: its
    entry there still carries the signed hash, and the entries since link to it and to the head row."""
    current = {chain for chain, _, _ in heads}
    for chain in before:
        if chain not in current:
            raise ChainBroken(ChainBreak(None, "the chain's head row is missing", chain=chain, chain_seq=1))
    moved = [
        (chain, chain_seq, digest) for chain, chain_seq, digest in heads if before.get(chain) != (chain_seq, digest)
    ]
    signed_at = await audit_queries.hashes_at(conn, [(c, before[c][0]) for c, _, _ in moved if before.get(c, (0,))[0]])
    ranges = []
    for chain, chain_seq, _ in moved:
        start_seq, start_hash = before.get(chain, (0, anchor))
        if start_seq >= chain_seq or (start_seq > 0 and signed_at.get((chain, start_seq)) != start_hash):
            raise ChainBroken(
                ChainBreak(
                    None,
                    "the chain no longer contains the last signed checkpoint's head",
                    chain=chain,
                    chain_seq=start_seq,
                )
            )
        ranges.append((chain, start_seq, chain_seq))
    head_of = heads_by_chain(heads)
    # Chains in groups of at most _CHECK_BATCH entries, one statement each; a longer one streamed alone.
    group: list[tuple[str, int, int]] = []
    size = 0
    for entry_range in [*ranges, None]:
        if entry_range is not None and entry_range[2] - entry_range[1] > _CHECK_BATCH:
            await _check_entries(conn, [entry_range], before, anchor, head_of, stream=True)
            continue
        if group and (entry_range is None or size + entry_range[2] - entry_range[1] > _CHECK_BATCH):
            await _check_entries(conn, group, before, anchor, head_of)
            group, size = [], 0
        if entry_range is not None:
            group.append(entry_range)
            size += entry_range[2] - entry_range[1]


def heads_by_chain(heads: list[tuple[str, int, str]]) -> dict[str, tuple[int, str]]:
    return {chain: (chain_seq, digest) for chain, chain_seq, digest in heads}


async def _check_entries(
    conn: asyncpg.Connection,
    ranges: list[tuple[str, int, int]],
    before: dict[str, tuple[int, str]],
    anchor: str,
    heads: dict[str, tuple[int, str]],
    *,
    stream: bool = False,
) -> None:
    """The entries of `ranges` (chain, after, upto) link from the signed head to the head row."""
    by_chain: dict[str, list] = {chain: [] for chain, _, _ in ranges}
    if stream:
        ((chain, after, upto),) = ranges
        batches = audit_queries.chain_batches(conn, chain, after=after, upto=upto)
    else:

        async def one_batch():
            yield await audit_queries.entries_in_ranges(conn, ranges)

        batches = one_batch()
    verifiers = {
        chain: EntryVerifier(chain, start_chain_seq=after + 1, start_hash=before.get(chain, (0, anchor))[1])
        for chain, after, _ in ranges
    }
    async for records in batches:
        for record in records:
            by_chain[record.chain].append(record)
        for chain, entries in by_chain.items():
            if entries and (breach := verifiers[chain].feed_all(entries)) is not None:
                raise ChainBroken(breach)
            entries.clear()
    for chain, _, _ in ranges:
        verifier = verifiers[chain]
        if (verifier.last_chain_seq, verifier.last_hash) != heads[chain]:
            raise ChainBroken(
                ChainBreak(
                    None,
                    "the head row does not match the chain's last entry",
                    chain=chain,
                    chain_seq=verifier.last_chain_seq + 1,
                )
            )


async def latest_checkpoint(registry: Registry) -> Checkpoint:
    """The latest stored checkpoint; when there is none yet (or only one from before chains per
    tenant), or its key has left the JWKS, the heads signed now (503 retryable_unavailable when the
    log does not verify)."""
    await registry.refresh_keyring()
    row = await checkpoint_queries.latest_checkpoint(registry.pool)
    if row is not None and row.root is not None and row.kid in registry.keyring.public:
        return checkpoint_from_row(row)
    return await sign_checkpoint_now(registry)


async def sign_checkpoint_now(registry: Registry) -> Checkpoint:
    """The heads as they are now, signed (or the latest checkpoint, when it already covers them)."""
    try:
        async with registry.pool.acquire() as conn:
            return await make_checkpoint(
                conn, registry.keyring, registry.settings.issuer, at=registry.clock.now(), tree=registry.checkpoint_tree
            )
    except ChainBroken as exc:
        raise ProblemError(
            codes.RETRYABLE_UNAVAILABLE, f"no checkpoint can be signed: {exc}", headers={"Retry-After": "60"}
        ) from None


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


# While no checkpoint covers an event, the writer looks this often for the first events to sign.
FIRST_EVENTS_POLL_SECONDS = 1.0


async def checkpoint_periodically(registry: Registry, interval: float) -> None:
    """The server's checkpoint writer: now, as soon as there are events while none is signed yet,
    then every `interval` seconds (every replica may run one; they converge on one row per head and
    key). An empty log's checkpoint vouches for nothing, so the first events are not left to wait
    for the interval."""
    while True:
        delay = interval
        try:
            await registry.refresh_keyring()
            async with registry.pool.acquire() as conn:
                checkpoint = await make_checkpoint(
                    conn,
                    registry.keyring,
                    registry.settings.issuer,
                    at=registry.clock.now(),
                    tree=registry.checkpoint_tree,
                )
            if checkpoint.seq == 0:
                delay = min(interval, FIRST_EVENTS_POLL_SECONDS)
        except asyncio.CancelledError:
            raise
        except ChainBroken as exc:
            log.error("audit checkpoint refused: %s", exc)
        except Exception as exc:  # the database may be briefly away; try again next round
            log.warning("audit checkpoint failed: %r", exc)
        await asyncio.sleep(delay)
