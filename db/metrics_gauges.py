"""The SQL of /metrics' database gauges: what the database holds rather than what one process counts
(the audit queue's backlog, live leases, the change feed's head), read in one statement when
/metrics is scraped and cached for a few seconds by registry.web.observability, never per request."""

from __future__ import annotations

import asyncpg
import msgspec

from db.agents import lease_live


class DatabaseReadings(msgspec.Struct, frozen=True):
    audit_queued: int  # events stored by writes, not yet appended to their chains (db.audit_sequencer)
    audit_oldest_seconds: float  # age of the oldest of them (0 when none is queued)
    live_leases: int  # agent instances whose lease has not expired
    change_head: int  # the change feed's head (change_head.seq)


_READINGS = f"""
SELECT
    (SELECT count(*) FROM audit_queue) AS audit_queued,
    (SELECT coalesce(extract(epoch FROM now() - min(at)), 0)::float8 FROM audit_queue) AS audit_oldest_seconds,
    (SELECT count(*) FROM agent_instances i WHERE {lease_live("i")}) AS live_leases,
    (SELECT seq FROM change_head WHERE id = 1) AS change_head
"""


async def read_gauges(conn: asyncpg.Connection | asyncpg.Pool) -> DatabaseReadings:
    row = await conn.fetchrow(_READINGS)
    return DatabaseReadings(
        audit_queued=row["audit_queued"],
        audit_oldest_seconds=max(0.0, row["audit_oldest_seconds"]),
        live_leases=row["live_leases"],
        change_head=row["change_head"] or 0,
    )
