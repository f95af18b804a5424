"""GET /v1/audit/chain (registry.audit.chain_checks): per chain, incremental (a call reads only the entries
written since the position every worker shares through the database), throttled per caller, and off
the event loop (/healthz stays fast while a long chain is checked)."""

from __future__ import annotations

import asyncio
import time

from db.audit import append_events
from db.audit_events import AuditEvent


async def chain(client, mint, tenant: str, sub: str = "secops") -> dict:
    response = await client.get("/v1/audit/chain", headers=mint(tenant, sub, "audit:read"))
    assert response.status_code == 200, response.text
    return response.json()


async def add_entries(db, tenant: str, n: int, batch: int = 500) -> None:
    for start in range(0, n, batch):
        async with db.acquire() as conn, conn.transaction():
            await append_events(
                conn,
                [
                    AuditEvent(type="probe.event", outcome="allowed", tenant=tenant, actor_tenant=tenant, actor=f"w{i}")
                    for i in range(start, min(n, start + batch))
                ],
            )


async def test_each_call_reads_only_what_is_new_and_the_position_is_shared(client, mint, tenant, other_tenant, db):
    await add_entries(db, tenant, 5)
    await add_entries(db, other_tenant, 50)  # another tenant's entries are never read for this one
    first = await chain(client, mint, tenant, "a")
    assert first["verified"] and first["chain"] == tenant and first["chainSeq"] == 5 and first["checkedNow"] == 5
    assert await db.fetchval("SELECT chain_seq FROM audit_chain_verified WHERE chain = $1", tenant) == 5
    again = await chain(client, mint, tenant, "b")  # another caller: a fresh check, nothing new to read
    assert again["verified"] and again["chainSeq"] == 5 and again["checkedNow"] == 0
    await add_entries(db, tenant, 7)
    grown = await chain(client, mint, tenant, "c")
    assert grown["verified"] and grown["chainSeq"] == 12 and grown["checkedNow"] == 7
    # The position lives in the database: it is what any worker or replica starts from.
    assert await db.fetchval("SELECT chain_seq FROM audit_chain_verified WHERE chain = $1", tenant) == 12


async def test_a_caller_asking_again_within_the_interval_gets_the_last_answer(client, mint, tenant, db):
    await add_entries(db, tenant, 3)
    first = await chain(client, mint, tenant, "loop")
    await add_entries(db, tenant, 3)
    repeated = await chain(client, mint, tenant, "loop")
    assert repeated == first and repeated["chainSeq"] == 3  # throttled: no new check for this caller
    fresh = await chain(client, mint, tenant, "other")
    assert fresh["chainSeq"] == 6


async def test_healthz_stays_fast_while_a_long_chain_is_checked(client, mint, tenant, db):
    await add_entries(db, tenant, 20_000, batch=2000)
    latencies: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        while not done.is_set():
            start = time.perf_counter()
            response = await client.get("/healthz")
            latencies.append(time.perf_counter() - start)
            assert response.status_code == 200
            await asyncio.sleep(0.01)

    prober = asyncio.create_task(probe())
    await asyncio.sleep(0.05)
    start = time.perf_counter()
    report = await chain(client, mint, tenant, "big")
    took = time.perf_counter() - start
    done.set()
    await prober
    assert report["verified"] and report["checkedNow"] == 20_000
    # Hashing 20,000 entries takes a while; /healthz answered meanwhile, each time within a fraction of it.
    assert len(latencies) >= 5, (took, latencies)
    assert max(latencies) < max(0.25, took / 4), (took, sorted(latencies)[-5:])
