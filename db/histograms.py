"""Bucketed counts of what db/ measures as it works (the size of each batch a queue cuts, the wait
for a pooled connection), for /metrics (registry.web.observability). A plain data structure, so db/
keeps importing nothing from registry/."""

from __future__ import annotations

from bisect import bisect_left

# Items per batch cut (db.batching): the queue cuts at most 128 (db.group_commit's max_batch).
BATCH_SIZE_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
# Seconds waited for a pooled connection: a wait past a few milliseconds means the pool is too small.
WAIT_BUCKETS: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)


class Histogram:
    """Observations counted per bucket (upper bounds `bounds`, one more for +Inf) and summed."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)
