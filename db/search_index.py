"""Queries that feed the search engine (retired versions are never shown, so never indexed) (registry.search): every capability version's searchable
fields with its agent's visibility, for a whole rebuild or for the agents a run of the change feed
touched, and the change feed's agents after a sequence number."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg
import msgspec

from db.changes import HEALTH_CHANGE_KIND
from db.rows import typed_rows

# One row per version: what the engine indexes (text and the facts it may pre-filter on). The
# database stays the judge of every rule; these only let the engine propose likely candidates.
# DocumentRow's fields, in this order.
_DOC_COLUMNS = """c.tenant, c.agent_id, c.skill_id, c.version, c.name, c.description, c.tags, c.examples,
       c.latest, c.status, c.side_effect_rank, c.data_regions,
       a.name AS agent_name, a.description AS agent_description, a.visibility, a.shared_with"""


class DocumentRow(msgspec.Struct, frozen=True, gc=False):
    """One version's searchable fields and its agent's visibility (_DOC_COLUMNS, in order)."""

    tenant: str
    agent_id: str
    skill_id: str
    version: str
    name: str
    description: str
    tags: list[str]
    examples: list[Any]  # jsonb array (the engine indexes its strings)
    latest: bool
    status: str
    side_effect_rank: int
    data_regions: list[str]
    agent_name: str
    agent_description: str
    visibility: str
    shared_with: list[str]


class ChangedAgentRow(msgspec.Struct, frozen=True, gc=False):
    """One committed change: its sequence number, kind and agent."""

    seq: int
    kind: str
    tenant: str
    agent_id: str


async def snapshot(
    conn: asyncpg.Connection, consume: Callable[[list[DocumentRow]], None], *, batch: int = 20_000
) -> int:
    """Every version's document, in primary-key order, handed to `consume` `batch` rows at a time;
    answers the change sequence the rows are as of (read in the same snapshot)."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        seq: int = await conn.fetchval("SELECT seq FROM change_head WHERE id = 1")
        cursor = await conn.cursor(
            f"""SELECT {_DOC_COLUMNS}
                  FROM capability_versions c JOIN agents a ON a.tenant = c.tenant AND a.agent_id = c.agent_id
                 WHERE c.status <> 'retired'
                 ORDER BY c.tenant, c.agent_id, c.skill_id, c.version"""
        )
        while rows := await cursor.fetch(batch):
            consume(typed_rows(DocumentRow, rows))
    return seq


# Changes that alter nothing the engine indexes: an agent's health (one each time an agent comes alive).
NOT_INDEXED_KINDS = (HEALTH_CHANGE_KIND,)


async def changed_agents(conn: asyncpg.Connection | asyncpg.Pool, after: int, *, limit: int) -> list[ChangedAgentRow]:
    """The (seq, kind, tenant, agent_id) of committed changes after `after`, in order, at most
    `limit`. Sequence numbers become visible in order (db.changes.record_changes), so this is a
    prefix."""
    return typed_rows(
        ChangedAgentRow,
        await conn.fetch(
            "SELECT seq, kind, tenant, agent_id FROM changes WHERE seq > $1 ORDER BY seq LIMIT $2", after, limit
        ),
    )


async def agent_documents(conn: asyncpg.Connection | asyncpg.Pool, agents: list[tuple[str, str]]) -> list[DocumentRow]:
    """The documents of every version of `agents` (tenant, agent_id) as they are now."""
    records = await conn.fetch(
        f"""SELECT {_DOC_COLUMNS}
              FROM unnest($1::text[], $2::text[]) AS k(tenant, agent_id)
              JOIN capability_versions c ON c.tenant = k.tenant AND c.agent_id = k.agent_id
              JOIN agents a ON a.tenant = c.tenant AND a.agent_id = c.agent_id
             WHERE c.status <> 'retired'""",
        [t for t, _ in agents],
        [a for _, a in agents],
    )
    return typed_rows(DocumentRow, records)
