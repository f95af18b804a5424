"""The app served inside the caller's own event loop, with an httpx client speaking ASGI to it: what
the tests, the benchmarks (bench/walks.py, bench/cpu_per_request.py) and a program embedding the
registry use instead of a server process, so that they share the app's loop and its pool.

(litestar's AsyncTestClient runs the app on a portal thread's loop instead.) The lifespan is entered
and exited in one task: its cancel scopes demand it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
from litestar import Litestar


@contextlib.asynccontextmanager
async def lifespan_running(application: Litestar) -> AsyncIterator[Litestar]:
    """`application`'s lifespan, started (its start-up error raised here) and ended on exit."""
    started, stop = asyncio.Event(), asyncio.Event()

    async def run_lifespan() -> None:
        async with application.lifespan():
            started.set()
            await stop.wait()

    task = asyncio.create_task(run_lifespan())
    waiting = asyncio.ensure_future(started.wait())
    await asyncio.wait([waiting, task], return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        waiting.cancel()
        task.result()  # start-up failed: raise its error
    try:
        yield application
    finally:
        stop.set()
        await task


@contextlib.asynccontextmanager
async def served_in_process(application: Litestar) -> AsyncIterator[httpx.AsyncClient]:
    """`application` running (lifespan_running), and a client whose requests it answers in-process."""
    async with lifespan_running(application):
        # litestar declares its ASGI callables narrower than httpx's transport accepts.
        transport = httpx.ASGITransport(app=application)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://registry.test") as client:
            yield client
