"""Queries on the change feed: a gap-free sequence advanced by every write in its own transaction."""

from __future__ import annotations

from datetime import datetime

import asyncpg
import msgspec

from auth.policy import EFFECTIVE, VISIBLE

CHANGE_CHANNEL = "capreg_changes"
# A change to a candidate version (published as one, or retired while one): it moves the sequence,
# so caches drop, but the feed never shows it (docs/api.md#the-replay-gate).
CANDIDATE_CHANGE_KIND = "version.candidate"
# An agent came alive (db.agents.renew_leases): caches drop; nothing it publishes changed.
HEALTH_CHANGE_KIND = "agent.health"

# Called with the new seq by record_change, before the write commits: this process's caches stop
# serving at once (read-your-writes), without waiting for the NOTIFY to come back.
LOCAL_CHANGE_LISTENERS: set = set()


async def record_change(conn: asyncpg.Connection, kind: str, tenant: str, agent_id: str, ref: str) -> int:
    """Advance the change sequence and log one change; call last in the write's transaction."""
    return (await record_changes(conn, [(kind, tenant, agent_id, ref)]))[-1]


async def record_changes(conn: asyncpg.Connection, changes: list[tuple[str, str, str, str]]) -> list[int]:
    """Advance the change sequence by len(changes) and log them (kind, tenant, agent_id, ref) in
    three statements whatever their number; call last in the write's transaction.

    The head row lock is held until commit, so sequence numbers become visible in order and a
    reader polling `after=N` never skips a change that commits later with a smaller number.
    """
    if not changes:
        return []
    last = await conn.fetchval("UPDATE change_head SET seq = seq + $1 WHERE id = 1 RETURNING seq", len(changes))
    seqs = list(range(last - len(changes) + 1, last + 1))
    await conn.execute(
        """INSERT INTO changes (seq, kind, tenant, agent_id, ref, at)
           SELECT s, k, t, a, r, now() FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[]) AS x(s, k, t, a, r)""",
        seqs,
        *(list(column) for column in zip(*changes, strict=False)),
    )
    # Delivered on commit only; lets other processes invalidate caches and wake long-polls.
    await conn.execute("SELECT pg_notify($1, $2)", CHANGE_CHANNEL, str(last))
    for listener in list(LOCAL_CHANGE_LISTENERS):
        listener(last)
    return seqs


class ChangeRow(msgspec.Struct, frozen=True):
    """One entry of the change feed."""

    seq: int
    kind: str
    ref: str
    at: datetime


async def current_seq(conn: asyncpg.Connection | asyncpg.Pool) -> int:
    return await conn.fetchval("SELECT seq FROM change_head WHERE id = 1")


async def changes_after(
    conn: asyncpg.Connection | asyncpg.Pool, after: int, *, tenant: str | None, limit: int, upto: int, now: datetime
) -> list[ChangeRow]:
    """Changes after `after` on records the caller's tenant may see (None: public records only).

    A change on a version not yet effective at `now` (auth.policy.EFFECTIVE) is left out, as discovery leaves
    the version out; once it is effective, a `version.effective` change announces it (db.housekeeping).
    Changes to candidates are never shown: one passing its replay is announced as `version.published`.
    """
    rows = await conn.fetch(
        f"""SELECT c.seq, c.kind, c.ref, c.at
             FROM changes c JOIN agents a ON a.tenant = c.tenant AND a.agent_id = c.agent_id
            WHERE c.seq > $1 AND c.seq <= $4 AND c.kind <> $5
              AND {VISIBLE.sql("a", viewer="$2")}
              AND NOT EXISTS (SELECT 1 FROM capability_versions v
                               WHERE v.tenant = c.tenant AND v.agent_id = c.agent_id AND NOT {EFFECTIVE.sql("v", now="$6")}
                                 AND c.ref = v.tenant || '/' || v.agent_id || '/' || v.skill_id || '@' || v.version)
            ORDER BY c.seq LIMIT $3""",
        after,
        tenant,
        limit,
        upto,
        CANDIDATE_CHANGE_KIND,
        now,
    )
    return [ChangeRow(**row) for row in rows]
