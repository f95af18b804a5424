"""`python -m bench.checkpoint_tree`: the cost of signing a checkpoint (registry.audit.chain.make_checkpoint)
with many tenant chains, when 1, 100 or every chain moved since the previous one.

Creates a database of its own (dropped at the end unless `--keep`), starts `--tenants` chains (default
10,000) with one entry each, signs a first checkpoint, then for each `--moved` count appends one
entry to that many chains and signs again, `--repeat` times. Reports per checkpoint: wall time, CPU
time of this process, SHA-256 computations of the Merkle tree (registry.audit.merkle) and SQL
statements sent. The server keeps one tree per process across checkpoints; so does this script.

    .venv/bin/python -m bench.checkpoint_tree --database-url postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import inspect
import json
import random
import secrets
import statistics
import time
from datetime import UTC, datetime

from db import audit as audit_queries
from db.audit_events import AuditEvent
from db.migrate import apply_migrations
from db.pool import connect
from registry.audit import chain as audit_chain
from registry.audit import merkle
from registry.core.signing_keys import ensure_signing_key, load_keyring


class _CountingSha256:
    """hashlib as registry.audit.merkle sees it, counting sha256() calls."""

    def __init__(self):
        self.calls = 0

    def sha256(self, data=b""):
        self.calls += 1
        return hashlib.sha256(data)


def _with_database(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


async def _append_one_each(conn, tenants: list[str]) -> None:
    for start in range(0, len(tenants), 1000):
        async with conn.transaction():
            await audit_queries.append_events(
                conn,
                [
                    AuditEvent(type="bench.event", outcome="allowed", tenant=t, actor_tenant=t, ref=f"{t}/bench")
                    for t in tenants[start : start + 1000]
                ],
            )


async def run(args: argparse.Namespace) -> dict:
    name = f"capreg_bench_tree_{secrets.token_hex(3)}"
    admin = await connect(args.database_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    results: dict = {"tenants": args.tenants, "database": name, "checkpoints": {}}
    conn = await connect(_with_database(args.database_url, name))
    try:
        await apply_migrations(conn)
        await ensure_signing_key(conn)
        keyring = await load_keyring(conn)
        tenants = [f"t{n:05d}" for n in range(args.tenants)]
        await _append_one_each(conn, tenants)
        counter = _CountingSha256()
        merkle.hashlib = counter  # type: ignore[assignment]  # counts the tree's hashes only
        statements = 0

        def count(_record) -> None:
            nonlocal statements
            statements += 1

        conn.add_query_logger(count)
        extra = {}
        if "tree" in inspect.signature(audit_chain.make_checkpoint).parameters:
            extra["tree"] = merkle.HeadTree()  # type: ignore[attr-defined]  # one per process, as the server

        async def checkpoint() -> dict:
            nonlocal statements
            counter.calls, statements = 0, 0
            wall, cpu = time.perf_counter(), time.process_time()
            await audit_chain.make_checkpoint(conn, keyring, "bench", at=datetime.now(UTC), **extra)
            return {
                "wall_ms": round((time.perf_counter() - wall) * 1000, 1),
                "cpu_ms": round((time.process_time() - cpu) * 1000, 1),
                "hashes": counter.calls,
                "statements": statements,
            }

        results["checkpoints"]["first"] = await checkpoint()
        rng = random.Random(24)
        for moved in args.moved:
            moved = min(moved, len(tenants))
            runs = []
            for _ in range(args.repeat):
                conn.remove_query_logger(count)
                await _append_one_each(conn, sorted(rng.sample(tenants, moved)))
                conn.add_query_logger(count)
                runs.append(await checkpoint())
            results["checkpoints"][f"moved_{moved}"] = {
                key: statistics.median(r[key] for r in runs) for key in ("wall_ms", "cpu_ms", "hashes", "statements")
            }
    finally:
        await conn.close()
        if not args.keep:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    with open("/proc/loadavg") as f:
        results["loadavg"] = f.read().split()[:3]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--moved", type=int, nargs="+", default=[1, 100, 10_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the database")
    print(json.dumps(asyncio.run(run(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()
