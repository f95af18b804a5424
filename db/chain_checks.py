"""The shared position of each chain's incremental check (registry.audit.chain_checks): the chainSeq
and hash verified so far per chain (`audit_chain_verified`; '' is the old single chain), one row per
chain for every worker and replica. The position only ever moves forward."""

from __future__ import annotations

from typing import NamedTuple

import asyncpg


class VerifiedPosition(NamedTuple):
    """Where a chain was verified up to: its last verified chainSeq (a seq for the old single chain)
    and the hash stored there."""

    chain_seq: int
    hash: str


async def verified_position(conn: asyncpg.Connection | asyncpg.Pool, chain: str) -> VerifiedPosition | None:
    """`chain`'s verified position, None before its first check."""
    row = await conn.fetchrow("SELECT chain_seq, hash FROM audit_chain_verified WHERE chain = $1", chain)
    return VerifiedPosition(row["chain_seq"], row["hash"]) if row is not None else None


async def advance_verified(conn: asyncpg.Connection | asyncpg.Pool, chain: str, position: VerifiedPosition) -> None:
    """Move `chain`'s verified position to `position` (never back: another worker may have gone further)."""
    await conn.execute(
        """INSERT INTO audit_chain_verified (chain, chain_seq, hash, verified_at) VALUES ($1, $2, $3, now())
           ON CONFLICT (chain) DO UPDATE SET chain_seq = excluded.chain_seq, hash = excluded.hash,
                                             verified_at = excluded.verified_at
           WHERE audit_chain_verified.chain_seq < excluded.chain_seq""",
        chain,
        position.chain_seq,
        position.hash,
    )
