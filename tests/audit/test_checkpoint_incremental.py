"""The checkpoint writer across checkpoints (registry.audit.chain.make_checkpoint with a kept tree):
the signed root is always the from-scratch root of the chain heads, proofs of every chain lead to it,
moved chains are checked in grouped statements (and a break in any of them refuses the checkpoint,
naming the chain), and a chain longer than a group is streamed on its own. A throw-away database
(tampering needs a log nobody else shares)."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from db import audit as audit_queries
from db import checkpoints as checkpoint_queries
from db.audit_events import AuditEvent
from db.pool import connect
from registry.audit import chain as audit_chain
from registry.audit import merkle
from registry.audit.chain import ChainBroken, make_checkpoint
from registry.core.signing_keys import load_keyring
from tests.audit_support import fresh_database


async def _append(conn, tenants: list[str], per_chain: int = 1) -> None:
    async with conn.transaction():
        await audit_queries.append_events(
            conn,
            [
                AuditEvent(type="probe.event", outcome="allowed", tenant=t, actor_tenant=t, ref=f"{t}/{n}")
                for t in tenants
                for n in range(per_chain)
            ],
        )


async def _heads(conn) -> list[tuple[str, int, str]]:
    return [(r.chain, r.chain_seq, r.hash) for r in await audit_queries.chain_heads(conn)]


@pytest.fixture
async def log(server_url):
    async with fresh_database(server_url) as url:
        conn = await connect(url)
        try:
            yield conn
        finally:
            await conn.close()


async def test_every_checkpoint_signs_the_from_scratch_root_and_proofs_lead_to_it(log, monkeypatch):
    monkeypatch.setattr(audit_chain, "_CHECK_BATCH", 7)  # small groups, and some chains streamed alone
    keyring = await load_keyring(log)
    tree = merkle.HeadTree()
    tenants = [f"t{n:03d}" for n in range(40)]
    rng = random.Random(24)
    await _append(log, tenants[:25])
    for round_ in range(8):
        moved = rng.sample(tenants[:25], rng.randint(1, 25))
        await _append(log, moved, per_chain=rng.choice([1, 2, 9]))  # 9 > the group size: streamed
        if round_ % 3 == 2:
            await _append(log, tenants[25 + round_ : 27 + round_])  # new chains, anywhere in the order
        checkpoint = await make_checkpoint(log, keyring, "capreg", at=datetime.now(UTC), tree=tree)
        heads = await _heads(log)
        assert checkpoint.root == merkle.heads_root(heads).hex() and checkpoint.chains == len(heads)
        stored = await checkpoint_queries.latest_checkpoint(log, with_heads=True)
        assert checkpoint_queries.covered_heads(stored) == heads
        for index, head in enumerate(heads):
            leaf = merkle.leaf_hash(merkle.leaf_bytes(*head))
            assert merkle.root_from_path(index, len(heads), leaf, tree.path(head[0])).hex() == checkpoint.root


async def _tamper(conn, *statements: str) -> None:
    await conn.execute("ALTER TABLE audit_events DISABLE TRIGGER ALL")
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.execute("ALTER TABLE audit_events ENABLE TRIGGER ALL")


@pytest.mark.parametrize("per_chain", [1, 9])  # grouped with other chains, or streamed alone
async def test_a_break_in_any_moved_chain_refuses_the_checkpoint_and_names_it(log, monkeypatch, per_chain):
    monkeypatch.setattr(audit_chain, "_CHECK_BATCH", 7)
    keyring = await load_keyring(log)
    tree = merkle.HeadTree()
    tenants = [f"t{n:03d}" for n in range(12)]
    await _append(log, tenants, per_chain=2)
    first = await make_checkpoint(log, keyring, "capreg", at=datetime.now(UTC), tree=tree)
    await _append(log, tenants[3:9], per_chain=per_chain)
    await _tamper(
        log, f"UPDATE audit_events SET actor = 'someone' WHERE chain = 't006' AND chain_seq = {2 + per_chain}"
    )
    with pytest.raises(ChainBroken) as refused:
        await make_checkpoint(log, keyring, "capreg", at=datetime.now(UTC), tree=tree)
    assert refused.value.breach.chain == "t006" and refused.value.breach.chain_seq == 2 + per_chain
    assert (await checkpoint_queries.latest_checkpoint(log)).root == first.root  # nothing signed
    # The signed head itself rewritten: the chain no longer extends the last checkpoint.
    await _tamper(log, "UPDATE audit_events SET hash = repeat('e', 64) WHERE chain = 't004' AND chain_seq = 2")
    await _tamper(log, f"UPDATE audit_events SET actor = NULL WHERE chain = 't006' AND chain_seq = {2 + per_chain}")
    with pytest.raises(ChainBroken) as refused:
        await make_checkpoint(log, keyring, "capreg", at=datetime.now(UTC), tree=tree)
    assert refused.value.breach.chain == "t004" and "no longer contains" in refused.value.breach.problem


async def test_a_fresh_tree_and_a_kept_one_sign_the_same(log):
    keyring = await load_keyring(log)
    kept = merkle.HeadTree()
    await _append(log, [f"t{n}" for n in range(30)])
    await make_checkpoint(log, keyring, "capreg", at=datetime.now(UTC), tree=kept)
    await _append(log, ["t3", "t17"])
    signed = await make_checkpoint(log, keyring, "capreg", at=datetime.now(UTC), tree=kept)
    assert signed.root == merkle.heads_root(await _heads(log)).hex()
    assert (
        await make_checkpoint(log, keyring, "capreg", at=datetime.now(UTC))
    ).root == signed.root  # the CLI's way: no tree kept


async def test_operator_verify_ignores_entries_written_after_it_read_the_heads(log, monkeypatch):
    """Entries committed while `capreg audit verify` runs are past the head rows it read first: its
    one pass in seq order skips them, and the log verifies (nothing falls back to a second read)."""
    from db.checkpoints import every_public_key
    from registry.audit.checkpoints import jwks_keys

    tenants = [f"t{n}" for n in range(6)]
    await _append(log, tenants, per_chain=3)
    read_heads = audit_queries.chain_heads
    fallback = []

    async def heads_then_more(conn):
        heads = await read_heads(conn)
        await _append(log, tenants[::2], per_chain=2)  # committed after the heads were read
        return heads

    real_batches = audit_queries.chain_row_batches

    def counted_batches(*args, **kwargs):
        fallback.append(args[1])
        return real_batches(*args, **kwargs)

    monkeypatch.setattr(audit_queries, "chain_heads", heads_then_more)
    monkeypatch.setattr(audit_queries, "chain_row_batches", counted_batches)
    report = await audit_chain.verify_stored_chain(log, jwks_keys(await every_public_key(log)))
    assert report.breach is None and report.chains == 6 and report.events == 18
    assert fallback == []
