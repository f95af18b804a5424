"""`python -m bench.hot_path_plans DSN`: EXPLAIN (ANALYZE, BUFFERS) of every statement a detail
release, a ticket mint and an introspection run, on a database loaded by bench.cpu_per_request
(`--keep NAME`), for one of its public agents. Writes are explained inside a transaction that is
rolled back. Prints, per statement, its execution time, shared buffers hit/read and the plan.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
import uuid

import asyncpg

from db.agents import (
    AGENT_COLUMNS,
    HEALTH_SQL,
    LEASE_BOUNDS_SQL,
    LEASE_SNAPSHOT_SQL,
    LIVE_INSTANCES_SQL,
    MAX_LISTED_INSTANCES,
)
from db.capabilities import VERSION_DETAIL_COLUMNS
from db.tickets import TICKET_STATE_SQL


async def explain(conn: asyncpg.Connection, title: str, sql: str, *params) -> dict:
    async def explained(options: str):
        tx = conn.transaction()  # ANALYZE runs the statement: undo each run (a savepoint inside one)
        await tx.start()
        try:
            return await conn.fetch(f"EXPLAIN ({options}) {sql}", *params)
        finally:
            await tx.rollback()

    plan = json.loads((await explained("ANALYZE, BUFFERS, FORMAT JSON"))[0][0])[0]
    top = plan["Plan"]
    figures = {
        "statement": title,
        "ms": round(plan["Execution Time"], 3),
        "hit": top.get("Shared Hit Blocks", 0),
        "read": top.get("Shared Read Blocks", 0),
    }
    text = "\n".join(r[0] for r in await explained("ANALYZE, BUFFERS"))
    print(f"-- {title}: {figures['ms']} ms, buffers hit {figures['hit']} read {figures['read']}\n{text}\n")
    return figures


async def main(dsn: str) -> list[dict]:
    conn = await asyncpg.connect(dsn)
    try:
        counts = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM agents) AS agents, (SELECT count(*) FROM capability_versions) AS versions, "
            "(SELECT count(*) FROM tickets) AS tickets, (SELECT count(*) FROM audit_events) AS events, "
            "(SELECT count(*) FROM agent_instances) AS instances"
        )
        print(dict(counts))
        target = await conn.fetchrow(
            "SELECT c.tenant, c.agent_id, c.skill_id, c.version FROM capability_versions c JOIN agents a "
            "USING (tenant, agent_id) WHERE a.visibility = 'public' ORDER BY c.tenant, c.agent_id LIMIT 1"
        )
        t, a, s, v = target["tenant"], target["agent_id"], target["skill_id"], target["version"]
        ticket = await conn.fetchval("SELECT jti FROM tickets ORDER BY issued_at DESC LIMIT 1")
        out = [
            await explain(
                conn,
                "snapshot_bounds",
                """SELECT (SELECT seq FROM change_head WHERE id = 1) AS seq,
                          (SELECT min(effective_at) FROM capability_versions
                            WHERE effective_at > $1::timestamptz AND status <> 'retired') AS next_effective""",
                dt.datetime.now(dt.UTC),
            ),
            await explain(
                conn,
                "get_agent",
                f"""SELECT {AGENT_COLUMNS}, {HEALTH_SQL} AS health, {LIVE_INSTANCES_SQL} AS live_instances,
                           {LEASE_BOUNDS_SQL} AS lease_bounds FROM agents a WHERE a.tenant = $1 AND a.agent_id = $2""",
                t,
                a,
            ),
            await explain(
                conn,
                "skill_versions",
                f"""SELECT {VERSION_DETAIL_COLUMNS}
                      FROM capability_versions c JOIN agents a ON a.tenant = c.tenant AND a.agent_id = c.agent_id
                     WHERE c.tenant = $1 AND c.agent_id = $2 AND c.skill_id = $3 ORDER BY c.version_key DESC""",
                t,
                a,
                s,
            ),
            await explain(
                conn,
                "lease_snapshot",
                LEASE_SNAPSHOT_SQL,
                t,
                a,
                MAX_LISTED_INSTANCES,
            ),
        ]
        if ticket:
            out.append(
                await explain(
                    conn,
                    "ticket_state (re-delegation)",
                    TICKET_STATE_SQL,
                    ticket,
                    dt.datetime.now(dt.UTC),
                )
            )
        tx = conn.transaction()
        await tx.start()
        try:
            jti = str(uuid.uuid4())
            out.append(
                await explain(
                    conn,
                    "ticket insert (with its foreign key check)",
                    """INSERT INTO tickets (jti, root_jti, tenant, agent_id, skill_id, version, ref, audience, actor,
                                            actor_tenant, scopes, resources, depth, max_depth, issued_at, expires_at, act, kid)
                       VALUES ($1, $1, $2, $3, $4, $5, 'x', 'x', 'x', $2, '{}', '{}', 0, 0, now(),
                               now() + interval '5 minutes', '{}'::jsonb, 'k')""",
                    jti,
                    t,
                    a,
                    s,
                    v,
                )
            )
            out.append(
                await explain(
                    conn,
                    "audit heads locked, seqs taken",
                    """SELECT chain, chain_seq, hash FROM audit_chain_heads WHERE chain = ANY($1::text[])
                        ORDER BY chain COLLATE "C" FOR UPDATE""",
                    [t],
                )
            )
        finally:
            await tx.rollback()
        return out
    finally:
        await conn.close()


if __name__ == "__main__":
    figures = asyncio.run(main(sys.argv[1]))
    print(json.dumps(figures, indent=1))
