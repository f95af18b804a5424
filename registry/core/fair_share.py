"""Fair shares of a shared pool: at most N concurrent heavy tasks per tenant.

The bounded schema workers (registry.core.bounded_work) are few (one per core, at most two), and a
slow-but-allowed schema keeps one busy for seconds; without a share, one tenant repeating its slowest
allowed request fills every worker and everyone else's registration waits behind it. With a share,
a tenant's tasks beyond its limit wait for its own earlier ones, never taking a worker another
tenant could use: while the pool has more workers than one tenant's share, a second tenant's task
starts at once however busy the first keeps it.

Whose task it is comes from the request: `caller_of_header` (registry.web.authentication) names the
verified caller's tenant here (`serving`), for the rest of that request's task, so every heavy task
a request starts, now or later, is counted against its tenant without each call site passing it.
Work no verified caller asked for counts against one shared `ANONYMOUS` share.

`CAPREG_TENANT_HEAVY_TASKS` sets the limit (default: half the workers, at least 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
from collections.abc import AsyncIterator

ANONYMOUS = ""
_owner: contextvars.ContextVar[str] = contextvars.ContextVar("capreg_work_owner", default=ANONYMOUS)


def serving(tenant: str) -> None:
    """Heavy work this request starts from now on counts against `tenant`'s share."""
    _owner.set(tenant)


def current_owner() -> str:
    return _owner.get()


def tenant_limit(workers: int, env: dict[str, str] | None = None) -> int:
    """CAPREG_TENANT_HEAVY_TASKS, else half of `workers` (at least 1)."""
    raw = (os.environ if env is None else env).get("CAPREG_TENANT_HEAVY_TASKS", "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            raise SystemExit(f"CAPREG_TENANT_HEAVY_TASKS must be an integer, got {raw!r}") from None
        if value < 1:
            raise SystemExit("CAPREG_TENANT_HEAVY_TASKS must be at least 1")
        return value
    return max(1, workers // 2)


class _Share:
    __slots__ = ("semaphore", "users")

    def __init__(self, limit: int) -> None:
        self.semaphore = asyncio.Semaphore(limit)
        self.users = 0  # holding or waiting: the entry is dropped at 0, so idle tenants cost nothing


class TenantShares:
    """Per-tenant concurrency limits on one event loop's use of a shared pool."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        # Keyed by loop too: a semaphore belongs to the loop it first waits on.
        self._shares: dict[tuple[int, str], _Share] = {}

    @contextlib.asynccontextmanager
    async def slot(self, tenant: str) -> AsyncIterator[None]:
        """Hold one of `tenant`'s slots for the body's duration (waiting for one if all are taken)."""
        key = (id(asyncio.get_running_loop()), tenant)
        share = self._shares.get(key)
        if share is None:
            share = self._shares[key] = _Share(self.limit)
        share.users += 1
        try:
            async with share.semaphore:
                yield
        finally:
            share.users -= 1
            if share.users == 0:
                self._shares.pop(key, None)

    def users(self, tenant: str) -> int:
        """`tenant`'s tasks holding or waiting for a slot on this loop (for tests and metrics)."""
        share = self._shares.get((id(asyncio.get_running_loop()), tenant))
        return 0 if share is None else share.users

    def in_use(self) -> int:
        """Tenants holding or waiting for a slot (for tests and metrics)."""
        return len(self._shares)
