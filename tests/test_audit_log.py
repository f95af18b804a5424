"""The audit log: append-only at the database level, hash-chained, verifiable."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from db.audit import append_events, iter_all
from registry.audit import AuditEvent, verify_chain
from tests.conftest import example


async def test_update_delete_truncate_are_refused_even_as_replica(db):
    await db.execute("SELECT 1")
    async with db.acquire() as conn:
        async with conn.transaction():
            await append_events(conn, [AuditEvent(type="test.event", outcome="allowed", tenant="trigger-test")])
        for statement in (
            "UPDATE audit_events SET reason = 'edited' WHERE tenant = 'trigger-test'",
            "DELETE FROM audit_events WHERE tenant = 'trigger-test'",
            "TRUNCATE audit_events",
        ):
            with pytest.raises(asyncpg.PostgresError, match="append-only"):
                await conn.execute(statement)
            with pytest.raises(asyncpg.PostgresError, match="append-only"):
                async with conn.transaction():
                    await conn.execute("SET LOCAL session_replication_role = replica")
                    await conn.execute(statement)


async def test_chain_is_valid_after_concurrent_writers(client, mint, tenant, db):
    async def register(i: int):
        body = {**example("billing-agent.json"), "skills": [{**example("billing-agent.json")["skills"][1], "version": f"1.{i}.0"}]}
        return await client.put(f"/v1/agents/{tenant}/agent-{i}", json=body, headers=mint(tenant, f"a{i}", "registry:publish"))

    responses = await asyncio.gather(*[register(i) for i in range(20)])
    assert all(r.status_code == 201 for r in responses)
    async with db.acquire() as conn:
        records = [r async for r in iter_all(conn)]
    assert verify_chain(records) is None
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
