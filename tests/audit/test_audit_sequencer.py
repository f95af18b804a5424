"""The window between stored and chained (db/audit_sequencer.py, docs/audit.md#stored-then-chained),
bounded in sequencer rounds rather than seconds: a batch's events are chained within two rounds of its
answer, events nobody announced (a killed process stored them) within two polls, and a reader in the
window sees every stored event, chained first. Each test has a database of its own: no other
process's sequencer takes its turns."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys

import pytest

from db import audit as audit_queries
from db.audit_events import AuditEvent
from db.audit_sequencer import AuditSequencer
from db.group_commit import GroupCommit
from db.pool import create_pool
from tests.audit_support import fresh_database
from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(120)


def _events(tenant: str, n: int) -> list[AuditEvent]:
    return [
        AuditEvent(type="probe.event", outcome="allowed", tenant=tenant, actor_tenant=tenant, ref=f"{tenant}/{i}")
        for i in range(n)
    ]


async def _until_drained(pool) -> None:
    while (await audit_queries.queued(pool))[0]:
        await asyncio.sleep(0.01)


async def _chain(pool, tenant: str) -> list[tuple[int, str]]:
    rows = await pool.fetch("SELECT chain_seq, ref FROM audit_events WHERE chain = $1 ORDER BY chain_seq", tenant)
    return [(row["chain_seq"], row["ref"]) for row in rows]


@pytest.fixture
async def own_pool(server_url):
    async with fresh_database(server_url) as url:
        pool = await create_pool(url, min_size=1, max_size=4)
        try:
            yield url, pool
        finally:
            await pool.close()


async def test_a_batchs_events_are_chained_within_two_rounds_of_its_answer(own_pool):
    _, pool = own_pool
    group = GroupCommit(pool, max_batch=16)
    group.sequencer.poll_seconds = 3600  # no poll: only the batch's own wake-up can chain them
    group.start()
    try:
        await group.record(_events("win", 5))
        await _until_drained(pool)
        assert 1 <= group.sequencer.rounds <= 2
    finally:
        await group.stop()
    assert await _chain(pool, "win") == [(i + 1, f"win/{i}") for i in range(5)]


async def test_events_nobody_announced_are_chained_within_two_polls(own_pool):
    _, pool = own_pool
    sequencer = AuditSequencer(pool, poll_seconds=0.05)
    sequencer.start()
    try:
        while sequencer.rounds < 1:
            await asyncio.sleep(0.01)
        before = sequencer.rounds
        async with pool.acquire() as conn, conn.transaction():  # as a process killed after its commit left them
            await audit_queries.enqueue_events(conn, _events("orphan", 3))
        await _until_drained(pool)
        # The round under way at the commit may have read the queue just before it; the next one cannot.
        assert sequencer.rounds - before <= 2
    finally:
        await sequencer.stop()
    assert [ref for _, ref in await _chain(pool, "orphan")] == ["orphan/0", "orphan/1", "orphan/2"]


async def test_a_verifier_in_the_window_chains_first_and_sees_every_stored_event(own_pool, tmp_path):
    url, pool = own_pool
    async with pool.acquire() as conn, conn.transaction():
        await audit_queries.enqueue_events(conn, _events("window", 4))
    assert (await audit_queries.queued(pool))[0] == 4  # no sequencer runs here: stored, not chained
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "registry.cli",
        "audit",
        "verify",
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url, "CAPREG_HOME": str(tmp_path)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, (out + err).decode()
    assert (await audit_queries.queued(pool))[0] == 0
    assert [ref for _, ref in await _chain(pool, "window")] == [f"window/{i}" for i in range(4)]


async def test_a_stalled_step_holding_the_turn_is_ended_and_the_others_go_on(own_pool, monkeypatch):
    """A process paused mid-step (its event loop blocked, as a synchronous test blocks the in-process
    app's) held the chain lock for as long as it was paused, and every other process's readers waited
    with it. The server ends such a step after STALLED_STEP_TIMEOUT idle: it rolls back, the queue
    keeps its events, and the waiting reader chains them."""
    url, pool = own_pool
    monkeypatch.setattr(audit_queries, "STALLED_STEP_TIMEOUT", "1s")
    async with pool.acquire() as conn:
        await audit_queries.enqueue_events(conn, _events("stall", 3))
    append_events = audit_queries.append_events
    never = asyncio.Event()

    async def stalled_append(conn, events, *, at=None):
        await never.wait()  # the step holds the turn and says nothing more

    monkeypatch.setattr(audit_queries, "append_events", stalled_append)
    stalled = await pool.acquire()
    step = asyncio.ensure_future(audit_queries.chain_queued(stalled, most=10))
    while not await pool.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"):
        await asyncio.sleep(0.01)
    monkeypatch.setattr(audit_queries, "append_events", append_events)
    try:
        await asyncio.wait_for(audit_queries.chain_stored(pool), timeout=60)
        assert await _chain(pool, "stall") == [(i + 1, f"stall/{i}") for i in range(3)]
    finally:
        step.cancel()
        with contextlib.suppress(BaseException):
            await step
        with contextlib.suppress(BaseException):
            await pool.release(stalled)


@pytest.mark.timeout(30)
async def test_a_stop_that_meets_a_wake_up_still_stops(own_pool):
    """stop() cancelling the task in the very round a wake-up ends its wait: asyncio.wait_for of
    Python 3.11 returns the finished wait and drops the cancellation, so the sequencer ran on and
    stop() never returned (found as a group-commit test whose teardown timed out in CI)."""
    _, pool = own_pool
    sequencer = AuditSequencer(pool, poll_seconds=3600)
    sequencer.start()
    for _ in range(20):
        await asyncio.sleep(0)  # it waits for a wake-up now
        sequencer.stored()  # ... which ends its wait in the same round as the cancellation
        await asyncio.wait_for(sequencer.stop(), timeout=10)
        assert sequencer._task is None
        sequencer.start()
    await sequencer.stop()
