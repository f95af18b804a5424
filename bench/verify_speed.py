"""`python -m bench.verify_speed`: how fast operator `capreg audit verify` checks a large log, end to end.

Creates a database of its own (dropped at the end unless `--keep`), writes `--events` chain entries
(default 1,000,000) over `--tenants` chains (default 100) with COPY, hashed exactly as db.audit
appends them (db.audit_events.entry_hash, realistic field values, a two-tenant event now and then),
sets the head rows, then runs `capreg audit verify` as a subprocess and reports events per second
of its wall time (process start to exit), with its CPU time.

    .venv/bin/python -m bench.verify_speed --database-url postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import secrets
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta

from db.audit import AUDIT_COLUMNS
from db.audit_events import AuditEvent, entry_hash
from db.migrate import apply_migrations
from db.pool import connect
from registry.core.signing_keys import ensure_signing_key

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _with_database(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


def _rows(events: int, tenants: int, anchor: str):
    """Entries in seq order over `tenants` chains, hashed as the registry hashes them; yields
    batches of rows (the columns of AUDIT_COLUMNS) and finally the head of every chain."""
    names = [f"tenant{n:03d}" for n in range(tenants)]
    heads = {name: (0, anchor, 0) for name in names}
    start = datetime(2026, 5, 1, tzinfo=UTC)
    seq = 0
    batch = []
    n = 0
    while n < events:
        tenant = names[n % tenants]
        actor_tenant = names[(n * 7 + 3) % tenants] if n % 10 == 0 else tenant  # one event in ten crosses
        event = AuditEvent(
            type="ticket.granted" if n % 3 else "detail.released",
            outcome="allowed",
            tenant=tenant,
            actor_tenant=actor_tenant,
            actor="router",
            on_behalf_of=f"user-{n % 97}",
            ref=f"{tenant}/ledger-agent/ledger.read@1.0.0",
            scopes=["invoice:read"],
            trace_id=f"{n:032x}",
            actor_issuer="capreg",
            request_id=f"{n:016x}",
        )
        at = start + timedelta(microseconds=n * 137)
        event_id = str(uuid.uuid4())
        for chain in sorted({tenant, actor_tenant}, key=str.encode):
            seq += 1
            chain_seq, prev, _ = heads[chain]
            chain_seq += 1
            digest = entry_hash(prev, chain=chain, chain_seq=chain_seq, event_id=event_id, seq=seq, at=at, event=event)
            heads[chain] = (chain_seq, digest, seq)
            batch.append(
                (
                    seq,
                    at,
                    event.tenant,
                    event.actor_tenant,
                    event.type,
                    event.actor,
                    event.on_behalf_of,
                    event.ref,
                    event.scopes,
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
            n += 1
        if len(batch) >= 50_000:
            yield batch
            batch = []
    if batch:
        yield batch
    yield heads


async def build(url: str, events: int, tenants: int) -> None:
    conn = await connect(url)
    try:
        await apply_migrations(conn)
        await ensure_signing_key(conn)
        anchor = await conn.fetchval("SELECT hash FROM audit_head WHERE id = 1")
        columns = AUDIT_COLUMNS.split(", ")
        for item in _rows(events, tenants, anchor):
            if isinstance(item, dict):
                await conn.executemany(
                    "INSERT INTO audit_chain_heads (chain, chain_seq, seq, hash) VALUES ($1, $2, $3, $4)",
                    [(chain, cs, s, h) for chain, (cs, h, s) in item.items()],
                )
                total = sum(cs for cs, _, _ in item.values())
                await conn.execute("SELECT setval('audit_event_seq', $1)", total)
            else:
                await conn.copy_records_to_table("audit_events", records=item, columns=columns)
        await conn.execute("ANALYZE audit_events")
    finally:
        await conn.close()


def verify(url: str) -> dict:
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "DATABASE_URL": url, "CAPREG_HOME": home}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "registry.cli", "audit", "verify"], cwd=ROOT, env=env, capture_output=True, text=True
        )
        elapsed = time.perf_counter() - wall
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "exit": done.returncode,
        "output": (done.stdout + done.stderr).strip()[:300],
        "wall_s": round(elapsed, 2),
        "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--keep", help="use (and keep) this database name; built only when it has no events")
    args = parser.parse_args()
    name = args.keep or f"capreg_bench_verify_{secrets.token_hex(3)}"
    url = _with_database(args.database_url, name)

    async def prepare() -> bool:
        admin = await connect(args.database_url)
        try:
            exists = await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
            if not exists:
                await admin.execute(f'CREATE DATABASE "{name}"')
        finally:
            await admin.close()
        if exists:
            conn = await connect(url)
            try:
                if await conn.fetchval("SELECT to_regclass('audit_events') IS NOT NULL") and await conn.fetchval(
                    "SELECT count(*) FROM audit_events"
                ):
                    return False
            finally:
                await conn.close()
        return True

    if asyncio.run(prepare()):
        started = time.perf_counter()
        asyncio.run(build(url, args.events, args.tenants))
        print(f"built {args.events} entries in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    runs = [verify(url) for _ in range(args.repeat)]
    best = min(runs, key=lambda r: r["wall_s"])
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(
        json.dumps(
            {
                "events": args.events,
                "tenants": args.tenants,
                "runs": runs,
                "events_per_s_wall": round(args.events / best["wall_s"]),
                "loadavg": load,
            },
            indent=2,
        )
    )
    if not args.keep:

        async def drop() -> None:
            admin = await connect(args.database_url)
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.close()

        asyncio.run(drop())


if __name__ == "__main__":
    main()
