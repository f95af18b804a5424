"""Batched lease renewal: the heartbeats of concurrent requests renewed in one statement and one commit.

A heartbeat renews a lease; it is not an audited change. So it takes no savepoint, no audit head
and no change-feed entry, except when an agent's health flips from stale or unknown to healthy
(discovery shows health, so its caches must move on). Queued renewals are written by one
statement per batch (`INSERT ... SELECT FROM unnest(...) ON CONFLICT`, in key order, with the
flips' change-feed rows in the same statement), which commits on its own: one commit per batch. The
answer of each request leaves after that commit. A renewal is not an audited grant, so the commit
does not wait for its WAL flush (`synchronous_commit` off for the batch, db.agents.renew_leases): a
crash of PostgreSQL can lose the last few hundred ms of renewals, which only makes instances look
stale sooner; a batch that logs a health flip commits durably. Heartbeats for agents that are not
registered ride in the same statement and simply get no row back, so a storm of them costs no
more than the same number of valid ones.

A heartbeat for an instance this process renewed and knows to be live (a bounded hint, by a hash of
its key) first goes to a one-statement path (db.agents.renew_live_leases: an UPDATE that commits on
its own), so a steady fleet's batch is one round trip; whatever that statement did not renew (a new
instance, a lapsed lease, a stale hint) takes the full statement above in the same batch.

Input is validated before it is queued (registry.agents.routes.Heartbeat); should a batch fail
all the same, each renewal is retried alone, so one request can never fail another.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime
from typing import Final, Literal

import asyncpg

from db.agents import LeaseRenewal, RenewedLease, renew_leases, renew_live_leases
from db.batching import BatchQueue
from db.changes import CHANGE_CHANNEL, LOCAL_CHANGE_LISTENERS
from db.pool import PoolWaits

log = logging.getLogger("capreg.db")


# The answer for a new instance of an agent that already has its maximum of live instances.
# A literal type, so that a caller's `== INSTANCE_LIMIT` leaves a datetime.
InstanceLimit = Literal["instance_limit"]
INSTANCE_LIMIT: Final[InstanceLimit] = "instance_limit"

# How many instances' "live until" this process remembers (about 100 bytes each: a hash and a
# float); beyond it the least recently renewed are forgotten and take the full statement again.
LIVE_HINTS_MAX = 32_768
# A lease known to end sooner than this is not tried on the one-statement path (which renews only
# leases live beyond db.agents' lapse margin, 5 s): it would most likely renew nothing there.
_HINT_MARGIN_SECONDS = 6.0


class LeaseRenewals(BatchQueue[LeaseRenewal]):
    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        max_instances: int = 1000,
        max_batch: int = 512,
        concurrency: int = 4,
        waits: PoolWaits | None = None,
    ):
        super().__init__(max_batch=max_batch, concurrency=concurrency)
        self.pool = pool
        # The batch's wait for a connection, counted with the other request paths' (/metrics).
        self.waits = waits or PoolWaits(pool)
        self.max_instances = max_instances
        self._live_until: dict[int, float] = {}  # hash of (tenant, agent, instance) -> monotonic expiry

    async def renew(self, renewal: LeaseRenewal) -> datetime | InstanceLimit | None:
        """The lease's new expiry once it is durable, None when the agent is not registered, or
        INSTANCE_LIMIT when it is a new instance beyond the agent's maximum (nothing written)."""
        return await self._enqueue(renewal)

    def _remember_live(
        self, renewed: list[RenewedLease], latest: dict[tuple[str, str, str], LeaseRenewal], now: float
    ) -> None:
        """Note until when each renewed lease is live (its ttl from `now`, before the statement ran,
        so never later than the database's expiry); a refused or absent one is forgotten."""
        hints = self._live_until
        for key in latest:  # popped first, so a renewed one moves to the newest end
            hints.pop(hash(key), None)
        for lease in renewed:
            key = (lease.tenant, lease.agent_id, lease.instance_id)
            if lease.expires_at is not None and key in latest:
                hints[hash(key)] = now + latest[key].ttl_seconds
        while len(hints) > LIVE_HINTS_MAX:
            del hints[next(iter(hints))]

    async def _commit(self, batch: list[tuple[LeaseRenewal, asyncio.Future]]) -> None:
        try:
            await self._renew(batch)
        except Exception:
            if len(batch) == 1:
                raise
            log.warning("lease batch of %d failed; renewing each alone", len(batch), exc_info=True)
            await self._commit_each_alone(batch)

    async def _renew(self, batch: list[tuple[LeaseRenewal, asyncio.Future]]) -> None:
        # One row per instance (the last heartbeat wins); every request for it gets the same answer.
        latest: dict[tuple[str, str, str], LeaseRenewal] = {}
        for renewal, future in batch:
            if not future.done():
                latest[(renewal.tenant, renewal.agent_id, renewal.instance_id)] = renewal
        if not latest:
            return
        keys = sorted(latest)
        now = time.monotonic()
        hinted = [latest[key] for key in keys if self._live_until.get(hash(key), 0.0) > now + _HINT_MARGIN_SECONDS]
        async with self.waits.acquire() as conn:
            renewed = await renew_live_leases(conn, hinted) if hinted else []
            done = {(r.tenant, r.agent_id, r.instance_id) for r in renewed}
            rest = [latest[key] for key in keys if key not in done]
            if rest:
                renewed += await renew_leases(conn, rest, CHANGE_CHANNEL, max_instances=self.max_instances)
        self._remember_live(renewed, latest, now)
        flipped = [r.change_seq for r in renewed if r.change_seq is not None]
        if flipped:  # this process's caches move on before any answer leaves (read-your-writes)
            for listener in list(LOCAL_CHANGE_LISTENERS):
                listener(max(flipped))
        expiries = {(r.tenant, r.agent_id, r.instance_id): r.expires_at or INSTANCE_LIMIT for r in renewed}
        for renewal, future in batch:
            if not future.done():
                future.set_result(expiries.get((renewal.tenant, renewal.agent_id, renewal.instance_id)))
