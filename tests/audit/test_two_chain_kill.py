"""An event of two tenants is one entry in each chain, written in one transaction: a replica (a real
child process, tests/two_chain_child.py) SIGKILLed while it writes such events leaves both entries
or neither, and both chains verify and stay gap-free. Killed at the worst moments we can arrange
(a sequencer step's transaction open with both chains' heads locked and no entry written; after the
whole append, before the commit) and at random moments while writes stream (among them, while the
one statement writing both chains' entries and heads runs), round after round on the same two
chains. Every event stored is chained exactly once by the next step (here the one the test runs,
as a restarted replica's would): acknowledged ones were chained before their answer."""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import signal
import sys

import pytest

from db import audit as audit_queries
from db.audit_events import AuditEvent
from db.pool import create_pool
from registry.audit.verifier import EntryVerifier
from tests.audit_support import fresh_database
from tests.conftest import ROOT

MODES = ["after-lock", "before-commit", "none"]
ROUNDS = int(os.environ.get("CAPREG_TWO_CHAIN_KILL_ROUNDS", "40"))


async def _run_and_kill(
    database_url: str, record_tenant: str, actor_tenant: str, mode: str, round_: int, rng
) -> set[str]:
    """One replica's life: it writes until killed; the refs it saw acknowledged."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.two_chain_child",
        database_url,
        record_tenant,
        actor_tenant,
        mode,
        str(round_),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ},
    )
    acked: set[str] = set()
    stop_after = rng.randint(1, 200) if mode == "none" else None
    try:
        async with asyncio.timeout(60):
            while True:
                line = (await child.stdout.readline()).decode().strip()
                assert line, (await child.stderr.read()).decode()
                word, what = line.split()
                if word == "ack":
                    acked.add(what)
                    if stop_after is not None and len(acked) >= 120 + stop_after:
                        break  # mid-stream: batches in every state, one perhaps committing
                elif word == "stalled":
                    assert what == mode
                    break
        child.send_signal(signal.SIGKILL)
        await child.wait()
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    return acked


async def _check_chain(db, chain: str, anchor: str) -> list:
    """The chain from chainSeq 1 verifies (links, hashes, gap-free) and ends at its head row."""
    head_seq, head_hash = await audit_queries.chain_head(db, chain)
    verifier = EntryVerifier(chain, start_hash=anchor)
    records = []
    async for batch in audit_queries.chain_batches(db, chain):
        assert verifier.feed_all(batch) is None, verifier.broken.describe()
        records += batch
    assert (verifier.last_chain_seq, verifier.last_hash) == (head_seq, head_hash)
    assert [r.chain_seq for r in records] == list(range(1, head_seq + 1))
    return records


@pytest.mark.timeout(600)
async def test_a_replica_killed_between_two_chains_leaves_both_entries_or_neither(server_url, tenant):
    # A database of its own: no other process of the run (the in-process app's sequencer polls
    # every second) may chain the stalling event before the child's own step reaches it.
    async with fresh_database(server_url) as database_url:
        db = await create_pool(database_url, min_size=1, max_size=4)
        try:
            await _rounds(db, database_url, tenant)
        finally:
            await db.close()


async def _rounds(db, database_url: str, tenant: str) -> None:
    record_tenant, actor_tenant = tenant, "kb" + secrets.token_hex(4)
    # Both chains started by an event of each tenant alone (a record tenant needs a chain or agents).
    async with db.acquire() as conn, conn.transaction():
        await audit_queries.append_events(  # outside any queue: the chains' first entries
            conn,
            [
                AuditEvent(type="probe.start", outcome="allowed", tenant=t, actor_tenant=t)
                for t in (record_tenant, actor_tenant)
            ],
        )
    _, anchor = await audit_queries.head(db)
    rng = random.Random(os.environ.get("CAPREG_TWO_CHAIN_KILL_SEED", "24"))
    acked: set[str] = set()
    for round_ in range(ROUNDS):
        mode = MODES[round_ % len(MODES)]
        acked |= await _run_and_kill(database_url, record_tenant, actor_tenant, mode, round_, rng)
        async with db.acquire() as conn:  # the next replica's first steps
            while await audit_queries.chain_queued(conn, most=500):
                pass
        mine = await _check_chain(db, record_tenant, anchor)
        theirs = await _check_chain(db, actor_tenant, anchor)
        crossed = [[(r.event_id, r.ref, r.at, r.seq) for r in rs if r.type == "probe.crossed"] for rs in (mine, theirs)]
        # Both entries or neither: the same events, with one eventId, time and ref, in each chain.
        by_event = [{event_id: (ref, at) for event_id, ref, at, _ in entries} for entries in crossed]
        assert by_event[0] == by_event[1], f"round {round_} ({mode}): one chain holds an entry the other lacks"
        refs = {ref for ref, _ in by_event[0].values()}
        assert len(refs) == len(crossed[0]), "an event was written twice to one chain"
        assert acked <= refs, f"round {round_} ({mode}): acknowledged but lost: {sorted(acked - refs)[:5]}"
        if mode != "none":  # stored before the step that stalled on it: chained by the next, once
            assert f"{record_tenant}/stall-{round_}" in refs, f"round {round_} ({mode}): a stored event was lost"
    assert len(acked) >= ROUNDS * 120
