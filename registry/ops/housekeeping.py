"""The server's periodic chores: pruning idempotency keys and approvals past CAPREG_RETENTION_DAYS
and lapsed instance leases (the audit log is never pruned), and announcing versions whose effectiveAt has arrived in the
change feed (docs/security.md), re-deriving their skills' latest marker as it does (db.housekeeping.announce_effective):
a version becomes latest at the first tick after its effectiveAt, ANNOUNCE_SECONDS at most while the server runs.
Every replica runs them; they are safe to run concurrently."""

from __future__ import annotations

import asyncio
import logging

from db import housekeeping as queries

log = logging.getLogger("capreg.housekeeping")

# Also the bound on how long a version whose effectiveAt has come waits to become latest (docs/api.md).
ANNOUNCE_SECONDS = 1.0
PRUNE_SECONDS = 600.0


async def run_housekeeping(registry) -> None:
    next_prune = 0.0  # at start-up, then every PRUNE_SECONDS
    while True:
        try:
            async with registry.pool.acquire() as conn:
                await queries.announce_effective(conn, now=registry.clock.now())
                if registry.clock.monotonic() >= next_prune:
                    keys, approvals = await queries.prune(conn, registry.settings.retention_days)
                    next_prune = registry.clock.monotonic() + PRUNE_SECONDS
                    leases = await queries.prune_leases(conn)
                    if keys or approvals or leases:
                        log.info(
                            "pruned %d idempotency keys, %d approvals and %d lapsed leases", keys, approvals, leases
                        )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the database may be briefly away; try again next round
            log.warning("housekeeping failed: %r", exc)
        await asyncio.sleep(ANNOUNCE_SECONDS)
