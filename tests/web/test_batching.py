"""The batch queue behind group commit (db.batching): a lane has at most one batch in flight, so a
lane's requests gather while its batch commits; other lanes, and items without a lane, never wait
for it; every item is settled however its batch ends."""

from __future__ import annotations

import asyncio

import pytest

from db.batching import BatchQueue


class _Recorded(BatchQueue[tuple[str | None, int]]):
    """Items are (lane, n); each batch waits for its lane's gate (None: no gate), then answers n."""

    def __init__(self, concurrency: int = 3, fail: set[int] | None = None) -> None:
        super().__init__(max_batch=100, concurrency=concurrency)
        self.batches: list[list[int]] = []
        self.gates: dict[str | None, asyncio.Event] = {}
        self.fail = fail or set()

    def _lane(self, item: tuple[str | None, int]) -> str | None:
        return item[0]

    def gate(self, lane: str | None) -> asyncio.Event:
        return self.gates.setdefault(lane, asyncio.Event())

    async def _commit(self, batch) -> None:
        self.batches.append([n for (_, n), _ in batch])
        lane = batch[0][0][0]
        if lane in self.gates:
            await self.gates[lane].wait()
        if any(n in self.fail for (_, n), _ in batch):
            raise RuntimeError("batch failed")
        for (_, n), future in batch:
            future.set_result(n)

    async def put(self, lane: str | None, n: int):
        return await self._enqueue((lane, n))


async def _until(condition) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.002)
    raise AssertionError("condition never held")


@pytest.mark.timeout(10)
async def test_a_lanes_requests_gather_while_its_batch_is_in_flight():
    queue = _Recorded()
    queue.start()
    try:
        gate = queue.gate("a")
        first = asyncio.ensure_future(queue.put("a", 0))
        await _until(lambda: queue.batches == [[0]])
        rest = [asyncio.ensure_future(queue.put("a", n)) for n in range(1, 6)]
        await asyncio.sleep(0.02)
        assert queue.batches == [[0]]  # held: the lane's batch is in flight, and slots are free
        gate.set()
        assert await asyncio.gather(first, *rest) == [0, 1, 2, 3, 4, 5]
        assert queue.batches == [[0], [1, 2, 3, 4, 5]]  # one commit for the five that gathered
    finally:
        await queue.stop()


@pytest.mark.timeout(10)
async def test_other_lanes_and_unlaned_items_never_wait_for_a_busy_lane():
    queue = _Recorded()
    queue.start()
    try:
        queue.gate("a")  # never opened until the end: lane a stays in flight
        stuck = asyncio.ensure_future(queue.put("a", 0))
        await _until(lambda: queue.batches == [[0]])
        held = asyncio.ensure_future(queue.put("a", 1))
        assert await queue.put("b", 2) == 2
        assert await queue.put(None, 3) == 3
        assert await asyncio.gather(queue.put(None, 4), queue.put(None, 5)) == [4, 5]
        assert not held.done()
        queue.gate("a").set()
        assert await asyncio.gather(stuck, held) == [0, 1]
    finally:
        await queue.stop()


@pytest.mark.timeout(10)
async def test_a_failed_batch_frees_its_lane_and_fails_only_its_own_items():
    queue = _Recorded(fail={0})
    queue.start()
    try:
        with pytest.raises(RuntimeError):
            await queue.put("a", 0)
        assert await queue.put("a", 1) == 1  # the lane was released with the failure
    finally:
        await queue.stop()
