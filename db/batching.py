"""The queue behind every batched write (db.group_commit, db.leases): requests enqueue an item and
await its future; one task cuts the queue into batches of at most `max_batch` and runs up to
`concurrency` of them at once (one writes while another waits for its commit to be durable).
Subclasses say how a batch is written (`_commit`; `_settle` fails what it left unsettled and releases
the slot), and may put items in lanes (`_lane`): a batch holds items of one lane only (the audit
chains they lock). The size of every batch cut is counted (`batch_sizes`, for /metrics)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

from db.histograms import BATCH_SIZE_BUCKETS, Histogram

Item = TypeVar("Item")


class BatchQueue(Generic[Item]):
    def __init__(self, *, max_batch: int, concurrency: int):
        self.max_batch = max_batch
        self._slots = asyncio.Semaphore(concurrency)
        self._batches: set[asyncio.Task] = set()
        self._queue: list[tuple[Item, asyncio.Future]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.batch_sizes = Histogram(BATCH_SIZE_BUCKETS)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Finish the batches in flight; whatever is still queued fails (the process is going away)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._batches:
            await asyncio.gather(*self._batches, return_exceptions=True)
        for _, future in self._queue:
            if not future.done():
                future.set_exception(ConnectionError("the registry is shutting down"))

    async def _enqueue(self, item: Item) -> Any:
        """Queue `item` for the next batch; its outcome once the batch is written."""
        future = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        self._wake.set()
        return await future

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                await self._slots.acquire()
                batch = self._cut()
                self.batch_sizes.observe(len(batch))
                task = asyncio.create_task(self._settle(batch))
                self._batches.add(task)
                task.add_done_callback(self._batches.discard)

    def _lane(self, item: Item) -> Hashable:
        """Items of different lanes never share a batch (default: one lane)."""
        return None

    def _cut(self) -> list[tuple[Item, asyncio.Future]]:
        """The next batch: the oldest item and the next ones of its lane, up to `max_batch`."""
        lane = self._lane(self._queue[0][0])
        if lane is None and all(self._lane(item) is None for item, _ in self._queue[: self.max_batch]):
            batch = self._queue[: self.max_batch]
            del self._queue[: self.max_batch]
            return batch
        batch, rest = [], []
        for entry in self._queue:
            if len(batch) < self.max_batch and self._lane(entry[0]) == lane:
                batch.append(entry)
            else:
                rest.append(entry)
        self._queue = rest
        return batch

    async def _settle(self, batch: list[tuple[Item, asyncio.Future]]) -> None:
        """Write `batch` (`_commit`), fail every future it left unsettled with the error that stopped
        it, and release the slot: a failed batch never stops the queue."""
        try:
            await self._commit(batch)
        except Exception as exc:
            self._failed(exc, batch)
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
        finally:
            self._slots.release()

    def _failed(self, exc: Exception, batch: list[tuple[Item, asyncio.Future]]) -> None:
        """Called with the error that stopped `batch`, before its futures fail (default: nothing)."""

    async def _commit(self, batch: list[tuple[Item, asyncio.Future]]) -> None:
        """Write `batch` and settle the futures of what it wrote; raise if it could not."""
        raise NotImplementedError

    async def _commit_each_alone(self, batch: list[tuple[Item, asyncio.Future]]) -> None:
        """After `batch` failed whole: each item written alone (`_commit`), so that one item can never
        fail another; an item that fails alone fails with its own error."""
        for item in batch:
            try:
                await self._commit([item])
            except Exception as exc:
                if not item[1].done():
                    item[1].set_exception(exc)
