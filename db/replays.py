"""Queries on capability_replays: the judged replay reports of candidate versions."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import asyncpg
import msgspec


class StoredReplay(msgspec.Struct, frozen=True):
    """A judged report as listed: when, by whom, the verdict and its errors (JSON objects)."""

    at: datetime
    actor: str
    verdict: Literal["passed", "failed"]
    errors: list[dict[str, Any]]


async def insert_replay(conn: asyncpg.Connection, row: dict[str, Any]) -> None:
    await conn.execute(
        """INSERT INTO capability_replays
               (tenant, agent_id, skill_id, version, baseline, actor, actor_issuer, instance, verdict, errors)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)""",
        row["tenant"],
        row["agent_id"],
        row["skill_id"],
        row["version"],
        row["baseline"],
        row["actor"],
        row["actor_issuer"],
        row["instance"],
        row["verdict"],
        row["errors"],
    )


async def replays_of(
    conn: asyncpg.Connection | asyncpg.Pool, tenant: str, agent_id: str, skill_id: str, version: str, *, limit: int
) -> list[StoredReplay]:
    """A version's judged reports, newest first."""
    rows = await conn.fetch(
        """SELECT at, actor, verdict, errors FROM capability_replays
            WHERE tenant = $1 AND agent_id = $2 AND skill_id = $3 AND version = $4
            ORDER BY id DESC LIMIT $5""",
        tenant,
        agent_id,
        skill_id,
        version,
        limit,
    )
    return [StoredReplay(**row) for row in rows]
