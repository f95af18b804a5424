"""A process that writes through GroupCommit and says which writes were acknowledged, so that
tests/web/test_group_commit.py can kill it mid-batch: `python -m tests.group_commit_child URL TENANT`.

Prints `ack <id>` once a write's `run` returned (its batch committed), `written <id>` when the
stalling write has inserted its row and is holding its batch open before the commit.
"""

from __future__ import annotations

import asyncio
import sys

from db.audit_events import AuditEvent
from db.group_commit import GroupCommit
from db.pool import create_pool


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(url: str, tenant: str) -> None:
    pool = await create_pool(url, min_size=2, max_size=6)
    writes = GroupCommit(pool, max_batch=8)
    writes.start()

    def insert(key: str, stall: bool = False):
        async def write(scope):
            await scope.conn.execute("INSERT INTO group_commit_probe (tenant, id) VALUES ($1, $2)", tenant, key)
            scope.audit(AuditEvent(type="probe.written", outcome="allowed", tenant=tenant, ref=f"{tenant}/{key}"))
            if stall:
                say(f"written {key}")
                await asyncio.sleep(3600)  # hold the batch open between the write and the commit
            return key

        return write

    async def one(key: str) -> None:
        await writes.run(insert(key))
        say(f"ack {key}")

    await asyncio.gather(*[one(f"w{n}") for n in range(200)])
    stalled = asyncio.create_task(writes.run(insert("stalled", stall=True)))
    # Other writes queued behind the stalled batch (and possibly in it): never acknowledged.
    await asyncio.gather(stalled, *[one(f"late{n}") for n in range(20)])


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
