"""A replica writing events of two tenants (record tenant A, actor tenant B: one entry in each chain)
through GroupCommit, whose sequencer step stops at a chosen point of its transaction so that
tests/audit/test_two_chain_kill.py can SIGKILL it there: `python -m tests.two_chain_child URL A B MODE ROUND`.

MODE is where the sequencer step chaining the event marked `stall` (stored, not yet chained: its
write's own transaction has committed) stops, its transaction open:
- `after-lock`: both chains' head rows are locked and the seqs taken; no entry is written yet;
- `before-commit`: the append is done (both chains' entries and head rows), the commit is not;
- `none`: nothing stops; the parent kills at a moment of its choosing while writes stream.
Both chains' entries and their head rows go in with one statement (db.audit.append_events), so no
moment between the first chain's entry and the second's exists to stop at: a kill while that
statement runs is what `none` gives, at random.

Prints `ack <ref>` once a write's `record` returned (its batch committed) and `stalled <point>` when
the stalling batch reached its point.
"""

from __future__ import annotations

import asyncio
import sys

import db.group_commit as group_commit
from db import audit as audit_queries
from db.audit_events import AuditEvent
from db.pool import create_pool

STALL_REF = "stall"


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _hold(point: str) -> None:
    say(f"stalled {point}")
    await asyncio.sleep(3600)  # the transaction stays open until the parent kills the process


class _StallingConnection:
    """The batch's connection, stopping the append at MODE (every other call passes through)."""

    def __init__(self, conn, mode: str, stall_ref: str):
        self._conn, self._mode, self._stall_ref = conn, mode, stall_ref

    def __getattr__(self, name):
        return getattr(self._conn, name)

    async def execute(self, sql: str, *args):
        if self._mode == "after-lock" and "INSERT INTO audit_events" in sql and self._stall_ref in args[7]:
            await _hold("after-lock")  # args[7]: the entries' refs
        return await self._conn.execute(sql, *args)


async def main(url: str, record_tenant: str, actor_tenant: str, mode: str, round_: str) -> None:
    stall_ref = f"{record_tenant}/{STALL_REF}-{round_}"
    real_append = audit_queries.append_events

    async def append_events(conn, events, **options):
        if not any(event.ref == stall_ref for event in events):
            return await real_append(conn, events, **options)
        seqs = await real_append(_StallingConnection(conn, mode, stall_ref), events, **options)
        if mode == "before-commit":
            await _hold("before-commit")
        return seqs

    audit_queries.append_events = append_events  # the sequencer step's append (db.audit.chain_queued)
    pool = await create_pool(url, min_size=2, max_size=6)
    writes = group_commit.GroupCommit(pool, max_batch=8, concurrency=3)
    writes.start()

    def event(ref: str) -> AuditEvent:
        return AuditEvent(
            type="probe.crossed", outcome="allowed", tenant=record_tenant, actor_tenant=actor_tenant, ref=ref
        )

    async def one(ref: str) -> None:
        await writes.record([event(ref)])
        say(f"ack {ref}")

    async def stream(prefix: str, count: int) -> None:
        for n in range(count):
            await one(f"{record_tenant}/r{round_}-{prefix}{n}")

    # Concurrent writers: several batches in flight, each event in both chains.
    await asyncio.gather(*[stream(f"w{k}-", 15) for k in range(8)])
    if mode == "none":
        await asyncio.gather(*[stream(f"x{k}-", 10**6) for k in range(8)])
        return
    stalled = asyncio.ensure_future(writes.record([event(stall_ref)]))
    await asyncio.gather(stalled, *[stream(f"late{k}-", 10**6) for k in range(4)])


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
