"""GET /v1/audit/proof: the RFC 6962 inclusion proof of the caller's tenant's chain head in the root
of the latest signed checkpoint (registry.audit.merkle), with that head and checkpoint, so that an auditor
holding only the JWKS can check that the registry signed the chain they read (docs/audit.md)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from db import audit as audit_queries
from db import checkpoints as checkpoint_queries
from registry.audit import merkle
from registry.audit.chain import sign_checkpoint_now
from registry.audit.checkpoints import Checkpoint, checkpoint_from_row
from registry.core.problems import not_found
from registry.core.wire import Wire

if TYPE_CHECKING:
    from registry.state import Registry

_INLINE_LEAVES = 1024  # a bigger tree is hashed in a worker thread, off the event loop


class AuditProof(Wire):
    chain: str
    chain_seq: int
    hash: str
    checkpoint: Checkpoint
    audit_path: list[str]
    index: int


async def inclusion_proof(registry: Registry, tenant: str) -> AuditProof:
    """The proof for `tenant`'s head as the latest checkpoint covers it; a chain the latest checkpoint
    does not cover yet (or a checkpoint whose key left the JWKS) gets the heads signed now. 404 when
    the tenant's chain has no entry."""
    await registry.refresh_keyring()
    await audit_queries.chain_stored(registry.pool)  # a chain no checkpoint covers yet is signed now
    row = await checkpoint_queries.latest_checkpoint(registry.pool)
    tree = await _tree(registry, row)
    if row is None or tenant not in tree.index or row.kid not in registry.keyring.public:
        if not await _has_entries(registry, tenant):
            raise not_found(f"tenant {tenant}'s audit chain has no entries yet")
        await sign_checkpoint_now(registry)
        row = await checkpoint_queries.latest_checkpoint(registry.pool)
        tree = await _tree(registry, row)
        if row is None or tenant not in tree.index:
            raise not_found(f"tenant {tenant}'s audit chain has no entries yet")
    chain_seq, digest = tree.heads[tenant]
    return AuditProof(
        chain=tenant,
        chain_seq=chain_seq,
        hash=digest,
        checkpoint=checkpoint_from_row(row),
        audit_path=[node.hex() for node in tree.path(tenant)],
        index=tree.index[tenant],
    )


_EMPTY = merkle.HeadTree()


async def _tree(registry: Registry, row) -> merkle.HeadTree:
    """The tree of checkpoint `row` (the latest only is kept): a proof then costs O(log n), and the
    heads are read from the database once per checkpoint. A new checkpoint's tree is the previous
    one's copy with the moved heads rehashed (merkle.HeadTree), swapped in whole so that a proof
    being answered never sees a tree half updated."""
    if row is None or row.root is None:
        return _EMPTY
    cached = registry.audit_tree
    if cached is not None and cached.root().hex() == row.root:
        return cached
    async with registry.audit_tree_lock:
        cached = registry.audit_tree
        if cached is not None and cached.root().hex() == row.root:
            return cached
        full = await checkpoint_queries.checkpoint_with_root(registry.pool, row.root)
        heads = checkpoint_queries.covered_heads(full) if full is not None else []
        tree = cached.copy() if cached is not None else merkle.HeadTree()
        if len(heads) > _INLINE_LEAVES:
            await asyncio.to_thread(tree.update, heads)
        else:
            tree.update(heads)
        registry.audit_tree = tree
        return tree


async def _has_entries(registry: Registry, tenant: str) -> bool:
    head = await audit_queries.chain_head(registry.pool, tenant)
    return head is not None and head[0] > 0
