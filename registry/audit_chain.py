"""Checking the stored audit chain and signing its head: the I/O shell around registry.audit (hash
links) and registry.checkpoints (signed heads), shared by `capreg audit verify|checkpoint` and the server,
and the audit service's chain operations: the verification report (`verify_chain`, one at a time per
process), the latest checkpoint (`latest_checkpoint`) and the server's checkpoint writer.

Reads stream in keyset batches, so memory stays constant however long the log is. Reads stop at the
head row read first: every event up to a committed head is itself committed (both are written in one
transaction), so concurrent appends never look like a broken chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import asyncpg
import msgspec

from db import audit as audit_queries
from db import checkpoints as checkpoint_queries
from db.audit_events import GENESIS_HASH
from registry.audit import ChainBreak, ChainVerifier
from registry.checkpoints import (
    CHECKPOINT_TYP,
    Checkpoint,
    CheckpointInvalid,
    checkpoint_claims,
    checkpoint_from_row,
    jwks_keys,
    verify_checkpoint,
)
from registry.problems import ProblemError
from registry.wire import Wire

if TYPE_CHECKING:
    from registry.state import Registry

log = logging.getLogger("capreg.audit")


class ChainBroken(Exception):
    """The stored log does not verify; `breach.seq` is the first bad seq."""

    def __init__(self, breach: ChainBreak):
        super().__init__(f"audit chain broken at seq {breach.seq}: {breach.problem}")
        self.breach = breach


class VerifyReport(msgspec.Struct):
    events: int
    head_seq: int
    checkpoints: list[int]  # seqs of the signed checkpoints the log was checked against
    breach: ChainBreak | None


PROGRESS_EVERY = 1000


async def verify_stored_chain(
    conn: asyncpg.Connection,
    keys: Mapping[str, Any],
    *,
    external: list[Checkpoint] = (),
    batch: int = 5000,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """Recompute every link from genesis, then hold the end of the log against the head row, the
    latest stored signed checkpoint and any `external` ones (kept outside the database by a monitor).

    Edits, deletions and reorderings inside the log break a link; deletions at the tail are caught by
    a head or checkpoint that covers a higher seq; a rewritten-and-rehashed log by a checkpoint hash.
    """
    # The checkpoint before the head: a checkpoint written in between would cover a seq past our head.
    stored = await checkpoint_queries.latest_checkpoint(conn)
    checkpoints = [checkpoint_from_row(stored)] if stored is not None else []
    checkpoints += list(external)
    head_seq, head_hash = await audit_queries.head(conn)

    wanted = {c.seq for c in checkpoints}
    seen = {0: GENESIS_HASH}
    verifier = ChainVerifier()
    async for record in audit_queries.iter_all(conn, batch, upto=max([head_seq, *wanted])):
        if progress is not None and record.seq % PROGRESS_EVERY == 0:
            progress(record.seq, head_seq)  # (events checked up to seq, head seq): for a progress bar
        if verifier.feed(record) is not None:
            return VerifyReport(verifier.count, head_seq, [c.seq for c in checkpoints], verifier.broken)
        if record.seq in wanted:
            seen[record.seq] = record.hash

    def report(breach: ChainBreak | None) -> VerifyReport:
        return VerifyReport(verifier.count, head_seq, [c.seq for c in checkpoints], breach)

    end = verifier.last_seq
    if end < head_seq:
        return report(ChainBreak(end + 1, f"the log ends at seq {end} but its head row says {head_seq} (events deleted at the tail)"))
    if end > head_seq or verifier.last_hash != head_hash:
        return report(ChainBreak(head_seq, f"the head row (seq {head_seq}) does not match the log's last event (seq {end})"))
    for checkpoint in checkpoints:
        try:
            verify_checkpoint(checkpoint, keys)
        except CheckpointInvalid as exc:
            return report(ChainBreak(checkpoint.seq, f"the checkpoint for seq {checkpoint.seq} is not validly signed: {exc}"))
        if checkpoint.seq > end:
            return report(ChainBreak(
                end + 1,
                f"the log ends at seq {end} but a checkpoint signed at {checkpoint.at} covers seq {checkpoint.seq} "
                "(events deleted at the tail)",
            ))
        if seen.get(checkpoint.seq) != checkpoint.hash:
            return report(ChainBreak(
                checkpoint.seq,
                f"the hash at seq {checkpoint.seq} differs from the checkpoint signed at {checkpoint.at} "
                "(the log was rewritten at or before this seq)",
            ))
    return report(None)


async def make_checkpoint(conn: asyncpg.Connection, keyring, issuer: str) -> Checkpoint:
    """Sign the current chain head, after checking the links written since the previous checkpoint.

    Nothing new is written when the latest checkpoint already covers the head with the current key.
    Raises ChainBroken (and signs nothing) when the log does not extend the previous checkpoint.
    """
    latest = await checkpoint_queries.latest_checkpoint(conn)
    head_seq, head_hash = await audit_queries.head(conn)
    if latest is not None and latest["seq"] == head_seq and latest["kid"] == keyring.signing_kid:
        return checkpoint_from_row(latest)
    start_seq, start_hash = (latest["seq"], latest["hash"]) if latest is not None else (0, GENESIS_HASH)
    if start_seq > head_seq or await audit_queries.hash_at(conn, start_seq) != start_hash:
        raise ChainBroken(ChainBreak(start_seq, "the log no longer contains the last signed checkpoint's head"))
    verifier = ChainVerifier(start_seq=start_seq + 1, start_hash=start_hash)
    async for record in audit_queries.iter_all(conn, after=start_seq, upto=head_seq):
        if verifier.feed(record) is not None:
            raise ChainBroken(verifier.broken)
    if (verifier.last_seq, verifier.last_hash) != (head_seq, head_hash):
        raise ChainBroken(ChainBreak(verifier.last_seq + 1, "the head row does not match the log's last event"))
    at = datetime.now(timezone.utc)
    claims = checkpoint_claims(issuer=issuer, seq=head_seq, hash=head_hash, at=at)
    signature = keyring.sign(claims, typ=CHECKPOINT_TYP)
    await checkpoint_queries.insert_checkpoint(
        conn, seq=head_seq, hash=head_hash, at=at, kid=keyring.signing_kid, signature=signature
    )
    # Another replica may have signed the same head with the same key first: serve the stored one.
    stored = await checkpoint_queries.latest_checkpoint(conn)
    return checkpoint_from_row(stored)


class ChainVerification(Wire):
    """The stored chain checked from genesis (registry/audit_chain.py, as `capreg audit verify`)."""

    verified: bool
    events: int
    head_seq: int
    checkpoint: Checkpoint | None  # the latest stored signed checkpoint
    checkpoint_signature_valid: bool | None  # None when there is no checkpoint yet
    first_bad_seq: int | None
    problem: str | None


async def verify_chain(registry: Registry) -> ChainVerification:
    """The whole stored chain verified as `capreg audit verify` does, with the latest checkpoint."""
    # Single flight: the check reads the whole log, so a burst of callers costs one read, not many.
    running = registry.chain_verification
    if running is None or running.done():
        running = asyncio.ensure_future(_verify_chain(registry))
        registry.chain_verification = running
    return await asyncio.shield(running)


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


async def latest_checkpoint(registry: Registry) -> Checkpoint:
    """The latest stored checkpoint; when there is none yet, or its key has left the JWKS, the head
    signed now (503 retryable_unavailable when the log does not verify)."""
    await registry.refresh_keyring()
    row = await checkpoint_queries.latest_checkpoint(registry.pool)
    if row is not None and row["kid"] in registry.keyring.public:
        return checkpoint_from_row(row)
    try:
        async with registry.pool.acquire() as conn:
            return await make_checkpoint(conn, registry.keyring, registry.settings.issuer)
    except ChainBroken as exc:
        raise ProblemError(503, "retryable_unavailable", f"no checkpoint can be signed: {exc}",
                           headers={"Retry-After": "60"}) from None


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
                checkpoint = await make_checkpoint(conn, registry.keyring, registry.settings.issuer)
            if checkpoint.seq == 0:
                delay = min(interval, FIRST_EVENTS_POLL_SECONDS)
        except asyncio.CancelledError:
            raise
        except ChainBroken as exc:
            log.error("audit checkpoint refused: %s", exc)
        except Exception as exc:  # the database may be briefly away; try again next round
            log.warning("audit checkpoint failed: %r", exc)
        await asyncio.sleep(delay)
