"""The audit log: append-only at the database level, hash-chained, verifiable."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from db.audit import append_events, chain_batches, head
from db.audit_events import AuditEvent
from registry.audit.verifier import EntryVerifier
from tests.conftest import example


async def chain_entries(conn, chain: str) -> list:
    return [record async for batch in chain_batches(conn, chain) for record in batch]


async def entry_break(conn, chain: str, records):
    """The first entry of `chain` that does not verify, from chainSeq 1 (anchored at the old chain's head)."""
    _, anchor = await head(conn)
    return EntryVerifier(chain, start_hash=anchor).feed_all(records)


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
        body = {
            **example("billing-agent.json"),
            "skills": [{**example("billing-agent.json")["skills"][1], "version": f"1.{i}.0"}],
        }
        return await client.put(
            f"/v1/agents/{tenant}/agent-{i}", json=body, headers=mint(tenant, f"a{i}", "registry:publish")
        )

    responses = await asyncio.gather(*[register(i) for i in range(20)])
    assert all(r.status_code == 201 for r in responses)
    async with db.acquire() as conn:
        records = await chain_entries(conn, tenant)
        assert await entry_break(conn, tenant, records) is None
    assert [r.chain_seq for r in records] == list(range(1, len(records) + 1)) and len(records) >= 40
    assert [r.seq for r in records] == sorted({r.seq for r in records})


async def test_chain_is_gap_free_and_valid_with_mixed_concurrent_writers(client, mint, tenant, db):
    """20 concurrent requests of every kind that writes the log: registrations, detail releases and
    denials, ticket grants and refusals, lifecycle changes, and denials recorded in their own
    transactions, interleaved."""
    from tests.ticket_support import register_finance, ticket_body

    await register_finance(client, mint, tenant)
    router = mint(tenant, "router", "invoice:read invoice:list ledger:read")
    version = f"/v1/agents/{tenant}/billing-agent/skills/invoice.lookup/versions/2.0.0"
    body = example("billing-agent.json")

    def request(i: int):
        kind = i % 5
        if kind == 0:
            return client.put(
                f"/v1/agents/{tenant}/extra-{i}", json=body, headers=mint(tenant, "ci", "registry:publish")
            )
        if kind == 1:
            return client.get(version, headers=router if i % 2 else mint(tenant, "nobody"))
        if kind == 2:
            return client.post("/v1/tickets", json=ticket_body(tenant, onBehalfOf=f"user-{i}"), headers=router)
        if kind == 3:
            return client.post("/v1/tickets", json=ticket_body(tenant, scopes=["invoice:write"]), headers=router)
        return client.post(
            f"/v1/agents/{tenant}/ledger-agent/skills/ledger.read/versions/1.0.0/deprecate",
            json={"message": f"deprecation {i}"},
            headers=mint(tenant, "admin", "registry:admin"),
        )

    responses = await asyncio.gather(*[request(i) for i in range(20)])
    assert all(r.status_code in (200, 201, 403) for r in responses), [
        r.text for r in responses if r.status_code >= 400 and r.status_code != 403
    ]
    async with db.acquire() as conn:
        records = await chain_entries(conn, tenant)
        assert await entry_break(conn, tenant, records) is None
    assert [r.chain_seq for r in records] == list(range(1, len(records) + 1))
    written = {r.type for r in records}
    assert written >= {
        "agent.registered",
        "version.published",
        "detail.released",
        "detail.denied",
        "ticket.granted",
        "ticket.denied",
        "version.deprecated",
    }
