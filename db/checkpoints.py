"""Queries on audit_checkpoints: signed heads of the audit chain (append-only, like the log)."""

from __future__ import annotations

from datetime import datetime

import asyncpg
import msgspec

CHECKPOINT_COLUMNS = "seq, hash, at, kid, signature, root, chains"
HEAD_COLUMNS = "head_chains, head_chain_seqs, head_hashes"
# Checkpoint writers of every replica take turns (make_checkpoint): a later checkpoint never covers less.
CHECKPOINT_LOCK = 0x6361_7072_6567_0009


class StoredCheckpoint(msgspec.Struct, frozen=True, kw_only=True):
    """A row of audit_checkpoints. `root` and `chains` are None on a checkpoint from before chains
    per tenant; the head_* columns are read only when asked for (None otherwise)."""

    seq: int
    hash: str
    at: datetime
    kid: str
    signature: str
    root: str | None
    chains: int | None
    head_chains: list[str] | None = None
    head_chain_seqs: list[int] | None = None
    head_hashes: list[str] | None = None


def _stored(row: asyncpg.Record | None) -> StoredCheckpoint | None:
    return StoredCheckpoint(**row) if row is not None else None


async def insert_checkpoint(
    conn: asyncpg.Connection | asyncpg.Pool,
    *,
    seq: int,
    hash: str,
    at: datetime,
    kid: str,
    signature: str,
    root: str,
    heads: list[tuple[str, int, str]],
) -> None:
    """Store a checkpoint and the chain heads (sorted by chain) its root covers; one per root and key."""
    await conn.execute(
        f"INSERT INTO audit_checkpoints ({CHECKPOINT_COLUMNS}, {HEAD_COLUMNS}) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (root, kid) WHERE root IS NOT NULL DO NOTHING",
        seq,
        hash,
        at,
        kid,
        signature,
        root,
        len(heads),
        [h[0] for h in heads],
        [h[1] for h in heads],
        [h[2] for h in heads],
    )


async def latest_checkpoint(
    conn: asyncpg.Connection | asyncpg.Pool, *, with_heads: bool = False
) -> StoredCheckpoint | None:
    """The newest checkpoint (`with_heads`: with the chain heads it covers)."""
    columns = f"{CHECKPOINT_COLUMNS}, {HEAD_COLUMNS}" if with_heads else CHECKPOINT_COLUMNS
    return _stored(await conn.fetchrow(f"SELECT {columns} FROM audit_checkpoints ORDER BY id DESC LIMIT 1"))


def covered_heads(row: StoredCheckpoint) -> list[tuple[str, int, str]]:
    """The (chain, chainSeq, hash) heads a checkpoint read `with_heads` covers, in tree order."""
    if row.root is None:
        return []
    return list(zip(row.head_chains or [], row.head_chain_seqs or [], row.head_hashes or [], strict=False))


async def every_public_key(conn: asyncpg.Connection | asyncpg.Pool) -> list[dict]:
    """The public JWK of every signing key ever used, retired ones included: an old checkpoint stays
    verifiable after its key left the JWKS."""
    rows = await conn.fetch("SELECT public_jwk FROM signing_keys ORDER BY created_at")
    return [dict(row["public_jwk"]) for row in rows]


async def checkpoint_with_root(conn: asyncpg.Connection | asyncpg.Pool, root: str) -> StoredCheckpoint | None:
    """A stored checkpoint that signed `root`, with the heads it covers."""
    return _stored(
        await conn.fetchrow(
            f"SELECT {CHECKPOINT_COLUMNS}, {HEAD_COLUMNS} FROM audit_checkpoints WHERE root = $1 ORDER BY id LIMIT 1",
            root,
        )
    )
