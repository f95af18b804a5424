"""Queries of the server's housekeeping: pruning records past retention (never the audit log), and
announcing versions in the change feed when their effectiveAt arrives, with their skills' latest
marker re-derived in the same transaction (db.capabilities.refresh_latest)."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from auth.policy import IN_FORCE
from db.agents import prune_lapsed_leases
from db.capabilities import refresh_latest
from db.changes import record_change

EFFECTIVE = "version.effective"
# A version published by a transaction that began before the last announcement ran is still found.
_LOOKBACK = "10 minutes"


async def prune(conn: asyncpg.Connection | asyncpg.Pool, retention_days: int) -> tuple[int, int]:
    """Delete Idempotency-Key records past their 24 h replay window and approvals decided or expired
    more than `retention_days` ago. Returns (keys, approvals) deleted."""
    keys = await conn.execute("DELETE FROM ticket_idempotency WHERE created_at <= now() - interval '24 hours'")
    approvals = await conn.execute(
        """DELETE FROM approvals
            WHERE (decided_at IS NOT NULL AND decided_at <= now() - make_interval(days => $1))
               OR expires_at <= now() - make_interval(days => $1)""",
        retention_days,
    )
    return int(keys.split()[-1]), int(approvals.split()[-1])


async def prune_leases(conn: asyncpg.Connection | asyncpg.Pool) -> int:
    """Lapsed instance leases (db.agents.prune_lapsed_leases: each agent's newest row is kept)."""
    return await prune_lapsed_leases(conn)


async def announce_effective(conn: asyncpg.Connection, *, now: datetime) -> int:
    """Record a `version.effective` change for each version whose future effectiveAt has arrived by
    `now`, so it is in force (auth.policy.IN_FORCE), one replica at a time (the others skip), and
    re-derive the latest marker of those versions' skills at `now` (the app's clock, as every write
    decides it) in the same transaction: readers see the new latest version and its announcement
    together. Until this runs the version before it stays latest. Returns how many were announced."""
    async with conn.transaction():
        mark = await conn.fetchval("SELECT at FROM effective_watermark WHERE id = 1 FOR UPDATE SKIP LOCKED")
        if mark is None:
            return 0
        due = await conn.fetch(
            f"""SELECT v.tenant, v.agent_id, v.skill_id, v.tenant || '/' || v.agent_id || '/' || v.skill_id || '@' || v.version AS ref
                  FROM capability_versions v
                 WHERE v.effective_at > $1::timestamptz - interval '{_LOOKBACK}' AND {IN_FORCE.sql("v", now="$2")}
                   AND v.published_at < v.effective_at
                   AND NOT EXISTS (SELECT 1 FROM changes ch WHERE ch.kind = '{EFFECTIVE}'
                                    AND ch.ref = v.tenant || '/' || v.agent_id || '/' || v.skill_id || '@' || v.version)
                 ORDER BY v.effective_at""",
            mark,
            now,
        )
        # The refresh takes the agents' locks before the change head's (record_change), the order
        # every write takes them in, so the tick and a publish never wait on each other in a cycle.
        await refresh_latest(conn, [(r["tenant"], r["agent_id"], r["skill_id"]) for r in due], now=now)
        for row in due:
            await record_change(conn, EFFECTIVE, row["tenant"], row["agent_id"], row["ref"])
        await conn.execute("UPDATE effective_watermark SET at = $1 WHERE id = 1", now)
        return len(due)
