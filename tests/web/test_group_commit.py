"""GroupCommit directly (db/group_commit.py): one request's failure stays its own, nothing
acknowledged is lost when the process dies, and concurrent batches keep both sequences gap-free."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import sys

import asyncpg
import pytest

from db.audit_events import AuditEvent
from db.group_commit import GroupCommit
from tests.conftest import ROOT


@pytest.fixture
async def probe_table(db):
    await db.execute(
        """CREATE TABLE IF NOT EXISTS group_commit_probe (tenant text NOT NULL, id text NOT NULL, PRIMARY KEY (tenant, id))"""
    )
    # Checked only at commit: a write that passes its savepoint and then fails the whole batch's commit.
    await db.execute("""CREATE TABLE IF NOT EXISTS group_commit_deferred (
                            id text, CONSTRAINT group_commit_deferred_unique UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)""")
    return db


@pytest.fixture
async def writes(db):
    group = GroupCommit(db, max_batch=64)
    group.start()
    yield group
    await group.stop()


def inserting(tenant: str, key: str, *, table: str = "group_commit_probe", ref: str | None = None):
    async def write(scope):
        if table == "group_commit_probe":
            await scope.conn.execute("INSERT INTO group_commit_probe (tenant, id) VALUES ($1, $2)", tenant, key)
        else:
            await scope.conn.execute(f"INSERT INTO {table} (id) VALUES ($1)", key)
        scope.audit(AuditEvent(type="probe.written", outcome="allowed", tenant=tenant, ref=ref or f"{tenant}/{key}"))
        scope.change("probe.written", tenant, "probe", f"{tenant}/{key}")
        return key

    return write


async def stored(db, tenant) -> set[str]:
    return {r["id"] for r in await db.fetch("SELECT id FROM group_commit_probe WHERE tenant = $1", tenant)}


async def events(db, tenant) -> list[asyncpg.Record]:
    return await db.fetch("SELECT type, ref, reason FROM audit_events WHERE tenant = $1 ORDER BY seq", tenant)


async def test_a_failing_write_fails_only_its_own_request(probe_table, writes, db):
    tenant = "gc" + secrets.token_hex(4)

    async def raises(scope):
        await scope.conn.execute("INSERT INTO group_commit_probe (tenant, id) VALUES ($1, 'undone')", tenant)
        raise ValueError("refused by its own logic")

    async def bad_value(scope):
        await scope.conn.execute("INSERT INTO group_commit_probe (tenant, id) VALUES ($1, $2)", tenant, "nul\x00here")

    good = [inserting(tenant, f"ok{n}") for n in range(20)]
    duplicate = inserting(tenant, "ok3")  # unique violation inside its savepoint
    results = await asyncio.gather(
        *[writes.run(w) for w in good[:10]],
        writes.run(raises),
        writes.run(bad_value),
        writes.run(duplicate),
        *[writes.run(w) for w in good[10:]],
        return_exceptions=True,
    )
    assert results[:10] == [f"ok{n}" for n in range(10)] and results[13:] == [f"ok{n}" for n in range(10, 20)]
    assert isinstance(results[10], ValueError)
    assert isinstance(results[11], asyncpg.CharacterNotInRepertoireError)
    assert isinstance(results[12], asyncpg.UniqueViolationError)
    assert await stored(db, tenant) == {f"ok{n}" for n in range(20)}
    # Only the writes that succeeded were audited, once each.
    assert sorted(r["ref"] for r in await events(db, tenant)) == sorted(f"{tenant}/ok{n}" for n in range(20))


async def test_a_value_the_audit_log_cannot_store_is_recorded_escaped_and_fails_nobody(probe_table, writes, db):
    tenant = "gc" + secrets.token_hex(4)
    refusal = AuditEvent(
        type="ticket.denied",
        outcome="denied",
        tenant=tenant,
        actor="mallory\x00",
        ref=f"{tenant}/x@\x00\ud800",
        reason="invalid_request",
        scopes=["a\x00b"],
    )
    results = await asyncio.gather(
        *[writes.run(inserting(tenant, f"ok{n}")) for n in range(10)],
        writes.record([refusal]),
        writes.run(inserting(tenant, "poisoned", ref=f"{tenant}/poisoned\x00")),
        return_exceptions=True,
    )
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert await stored(db, tenant) == {f"ok{n}" for n in range(10)} | {"poisoned"}
    rows = await db.fetch(
        "SELECT actor, ref, scopes FROM audit_events WHERE tenant = $1 AND type = 'ticket.denied'", tenant
    )
    # Escaped, never dropped (registry.audit.verifier).
    assert [(r["actor"], r["ref"], list(r["scopes"])) for r in rows] == [
        ("mallory\\u0000", f"{tenant}/x@\\u0000\\ud800", ["a\\u0000b"])
    ]
    assert f"{tenant}/poisoned\\u0000" in {r["ref"] for r in await events(db, tenant)}


async def test_a_batch_that_fails_at_commit_is_rerun_write_by_write(probe_table, writes, db):
    tenant = "gc" + secrets.token_hex(4)
    taken = "taken-" + tenant
    await db.execute("INSERT INTO group_commit_deferred (id) VALUES ($1)", taken)
    results = await asyncio.gather(
        *[writes.run(inserting(tenant, f"ok{n}")) for n in range(10)],
        writes.run(inserting(tenant, taken, table="group_commit_deferred")),  # passes its savepoint, fails the commit
        *[writes.run(inserting(tenant, f"ok{n}")) for n in range(10, 15)],
        return_exceptions=True,
    )
    assert isinstance(results[10], asyncpg.UniqueViolationError)
    assert [r for i, r in enumerate(results) if i != 10] == [f"ok{n}" for n in range(15)]
    assert await stored(db, tenant) == {f"ok{n}" for n in range(15)}
    assert sorted(r["ref"] for r in await events(db, tenant)) == sorted(f"{tenant}/ok{n}" for n in range(15))


async def test_nothing_acknowledged_is_lost_when_the_process_dies_between_writes_and_commit(
    probe_table, database_url, db
):
    tenant = "gc" + secrets.token_hex(4)
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.group_commit_child",
        database_url,
        tenant,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ},
    )
    acked: set[str] = set()
    try:
        async with asyncio.timeout(60):
            while True:
                line = (await child.stdout.readline()).decode().strip()
                assert line, (await child.stderr.read()).decode()
                word, key = line.split()
                if word == "ack":
                    acked.add(key)
                elif word == "written":  # its row is inserted; the commit has not happened
                    break
        child.send_signal(signal.SIGKILL)
        await child.wait()
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    present = await stored(db, tenant)
    assert len(acked) >= 200
    assert acked <= present, acked - present
    assert "stalled" not in present
    # Audit events and rows went in together or not at all.
    assert {r["ref"] for r in await events(db, tenant)} == {f"{tenant}/{key}" for key in present}


async def test_concurrent_batches_keep_the_chain_and_the_feed_gap_free(probe_table, db, database_url, tmp_path):
    tenant = "gc" + secrets.token_hex(4)
    group = GroupCommit(db, max_batch=8, concurrency=3)
    group.start()
    try:
        results = await asyncio.gather(
            *[group.run(inserting(tenant, f"w{n}")) for n in range(300)],
            *[group.record([AuditEvent(type="probe.refused", outcome="denied", tenant=tenant)]) for _ in range(50)],
        )
    finally:
        await group.stop()
    assert results[:300] == [f"w{n}" for n in range(300)]
    # The tenant's chain is gap-free from 1 and its head row is its last entry (seq may have gaps: other chains).
    audit = await db.fetchrow(
        "SELECT count(*) AS n, min(chain_seq) AS lo, max(chain_seq) AS hi FROM audit_events WHERE chain = $1", tenant
    )
    assert (audit["lo"], audit["hi"]) == (1, audit["n"]) == (1, 350)
    assert audit["hi"] == await db.fetchval("SELECT chain_seq FROM audit_chain_heads WHERE chain = $1", tenant)
    feed = await db.fetchrow("SELECT count(*) AS n, min(seq) AS lo, max(seq) AS hi FROM changes")
    assert (feed["lo"], feed["hi"]) == (1, feed["n"])
    assert len(await events(db, tenant)) == 350
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "registry.cli",
        "audit",
        "verify",
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url, "CAPREG_HOME": str(tmp_path)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, (out + err).decode()


async def test_single_row_writes_share_one_insert_and_a_bad_row_fails_alone(probe_table, writes, db):
    tenant = "gc" + secrets.token_hex(4)
    await db.execute("INSERT INTO group_commit_probe (tenant, id) VALUES ($1, 'taken')", tenant)

    def row(key: str):
        event = AuditEvent(type="probe.inserted", outcome="allowed", tenant=tenant, ref=f"{tenant}/{key}")
        return writes.insert("group_commit_probe", {"tenant": tenant, "id": key}, [event])

    results = await asyncio.gather(
        *[row(f"r{n}") for n in range(10)],
        row("taken"),
        row("nul\x00"),
        *[row(f"r{n}") for n in range(10, 20)],
        writes.run(inserting(tenant, "savepointed")),
        return_exceptions=True,
    )
    assert isinstance(results[10], asyncpg.UniqueViolationError)
    assert isinstance(results[11], asyncpg.CharacterNotInRepertoireError)
    assert [r for i, r in enumerate(results[:-1]) if i not in (10, 11)] == [None] * 20 and results[-1] == "savepointed"
    assert await stored(db, tenant) == {"taken", "savepointed"} | {f"r{n}" for n in range(20)}
    refs = sorted(r["ref"] for r in await events(db, tenant))
    assert refs == sorted([f"{tenant}/r{n}" for n in range(20)] + [f"{tenant}/savepointed"])


async def test_a_write_is_answered_once_stored_whatever_holds_a_chain_head(writes, db):
    """A chain's head row held (as a sequencer step of another replica holds it until its commit): a
    write is answered all the same, its event durable in the queue, and chained once the head is
    free (db.audit_sequencer)."""
    busy = "gc" + secrets.token_hex(4)
    probe = AuditEvent(type="probe.event", outcome="allowed", tenant=busy, actor_tenant=busy)
    await writes.record([probe])  # the chain exists
    async with db.acquire() as holder:
        async with holder.transaction():
            await holder.execute("SELECT 1 FROM audit_chain_heads WHERE chain = $1 FOR UPDATE", busy)
            await asyncio.wait_for(asyncio.gather(*[writes.record([probe]) for _ in range(5)]), timeout=20)
            stored = await holder.fetchval("SELECT count(*) FROM audit_queue WHERE event LIKE '%' || $1 || '%'", busy)
            assert stored >= 1  # answered, durable, and not all chained while the head is held
    assert await db.fetchval("SELECT max(chain_seq) FROM audit_events WHERE chain = $1", busy) == 6
    assert not await db.fetchval("SELECT count(*) FROM audit_queue WHERE event LIKE '%' || $1 || '%'", busy)


async def test_an_event_of_two_tenants_is_one_entry_in_each_chain_in_one_transaction(writes, db, tenant, other_tenant):
    await writes.record(
        [AuditEvent(type="probe.event", outcome="allowed", tenant=other_tenant, actor_tenant=other_tenant)]
    )
    await writes.record(
        [
            AuditEvent(
                type="ticket.granted",
                outcome="allowed",
                tenant=other_tenant,
                actor_tenant=tenant,
                actor="router",
                ref=f"{other_tenant}/a/s@1.0.0",
            )
        ]
    )
    rows = await db.fetch(
        "SELECT chain, chain_seq, event_id, at, type, ref FROM audit_events WHERE chain = ANY($1::text[]) AND type = 'ticket.granted'",
        [tenant, other_tenant],
    )
    assert sorted((r["chain"], r["chain_seq"]) for r in rows) == sorted([(tenant, 1), (other_tenant, 2)])
    assert len({(r["event_id"], r["at"], r["type"], r["ref"]) for r in rows}) == 1


async def test_a_write_alone_that_is_a_deadlock_victim_is_run_again(probe_table, writes, db):
    """PostgreSQL rolls a deadlock's victim back whole and lets the other transaction go on: the
    victim's write, run again, succeeds. It answered 500 when it was alone in its batch."""
    tenant = "gc" + secrets.token_hex(4)
    attempts = []
    inner = inserting(tenant, "victim")

    async def victim_once(scope):
        attempts.append(1)
        result = await inner(scope)
        if len(attempts) == 1:
            raise asyncpg.DeadlockDetectedError("deadlock detected")
        return result

    assert await asyncio.wait_for(writes.run(victim_once), timeout=20) == "victim"
    assert len(attempts) == 2
    assert await stored(db, tenant) == {"victim"}
    assert [r["type"] for r in await events(db, tenant)] == ["probe.written"]
