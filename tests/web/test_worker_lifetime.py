"""The schema workers' lifetime (registry.core.bounded_work): started by the first task that needs
one, stopped after IDLE_SECONDS without work, started again by the next task."""

from __future__ import annotations

import asyncio
import os
import time

from registry.core.bounded_work import IDLE_SECONDS, BoundedWork


async def test_workers_start_on_first_use_and_stop_when_idle():
    pool = BoundedWork(workers=2, idle=IDLE_SECONDS)
    try:
        pool.start(preload=("registry.release.arguments",))
        assert pool.processes() == 0  # a server that has not registered anything holds no worker
        first = await pool.run(os.getpid)
        assert first != os.getpid() and pool.processes() == 1  # one task at a time: one worker
        assert pool.stop_idle_workers() == 0  # just used
        assert await pool.run(os.getpid) == first  # and reused
        assert pool.stop_idle_workers(now=time.monotonic() + IDLE_SECONDS) == 1
        assert pool.processes() == 0
        second = await pool.run(os.getpid)  # the slot starts a new worker for the next task
        assert second not in (first, os.getpid()) and pool.processes() == 1
        # A worker running a task is never stopped, however long since its previous task.
        busy = asyncio.ensure_future(pool.run(time.sleep, 1.0))
        while pool._idle.qsize() != 1:  # the busy task has taken the worker; the other slot is empty
            await asyncio.sleep(0.01)
        assert pool.stop_idle_workers(now=time.monotonic() + 10 * IDLE_SECONDS) == 0
        await busy
        assert pool.processes() == 1
    finally:
        pool.close()
    assert pool.processes() == 0
