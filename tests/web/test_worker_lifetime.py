"""The schema workers' lifetime (registry.core.bounded_work): the first task that needs one starts
every slot's worker, all are stopped once the pool has had no task for IDLE_SECONDS, and the next
task starts them all again."""

from __future__ import annotations

import asyncio
import os
import time

from registry.core.bounded_work import IDLE_SECONDS, BoundedWork


async def test_workers_start_together_on_first_use_and_stop_together_when_idle():
    pool = BoundedWork(workers=2, idle=IDLE_SECONDS)
    try:
        pool.start(preload=("registry.release.arguments",))
        assert pool.processes() == 0  # a server that has not registered anything holds no worker
        first = await pool.run(os.getpid)
        # One task started both: a second task, another tenant's, never waits for a start-up its
        # neighbour did not (tests/web/test_fair_share.py).
        assert first != os.getpid() and pool.processes() == 2
        assert pool.stop_idle_workers() == 0  # just used
        assert await pool.run(os.getpid) == first  # and reused (last in, first out)
        assert pool.stop_idle_workers(now=time.monotonic() + IDLE_SECONDS) == 2
        assert pool.processes() == 0
        second = await pool.run(os.getpid)  # the next task starts them again
        assert second not in (first, os.getpid()) and pool.processes() == 2
        # While a task runs, no worker is stopped, however long the others have been idle.
        busy = asyncio.ensure_future(pool.run(time.sleep, 1.0))
        while pool._idle.qsize() != 1:  # the busy task has taken one worker; the other waits
            await asyncio.sleep(0.01)
        assert pool.stop_idle_workers(now=time.monotonic() + 10 * IDLE_SECONDS) == 0
        await busy
        assert pool.processes() == 2
        assert pool.stop_idle_workers(now=time.monotonic() + IDLE_SECONDS) == 2
    finally:
        pool.close()
    assert pool.processes() == 0


async def test_two_tasks_at_once_on_a_cold_pool_use_both_workers():
    pool = BoundedWork(workers=2, idle=IDLE_SECONDS, per_tenant=2)  # both tasks are one (anonymous) owner's
    try:
        pids = await asyncio.gather(pool.run(_sleep_then_pid, 0.5), pool.run(_sleep_then_pid, 0.5))
        assert len(set(pids)) == 2 and pool.processes() == 2
    finally:
        pool.close()


def _sleep_then_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()
