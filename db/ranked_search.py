"""Queries of ranked search (docs/api.md#ranked-search): the database's check of the candidates the
search engine proposed (registry.search), in the engine's order. The engine only proposes; every
rule that decides what a caller sees (visibility, in force, latest, filters, health) is decided
here, by the same definitions discovery uses (db.capabilities)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

import asyncpg
import msgspec

from db.agents import HAS_LIVE_INSTANCE, HEALTH_SQL, LEASE_UNTIL_SQL, LIVE_INSTANCES_SQL
from db.capabilities import (
    PUBLIC_COLUMNS,
    DiscoverRow,
    _like_escape,
    content_filter,
    in_force,
    latest_in_force,
    visible_agents_filter,
)
from db.rows import typed_rows

# The ref as capability_ref writes it, compared bytewise: the tie order of ranked results.
REF_SQL = """(c.tenant || '/' || c.agent_id || '/' || c.skill_id || '@' || c.version) COLLATE "C\""""


class Candidate(Protocol):
    """A proposed version (registry.search.engine.Hit)."""

    @property
    def tenant(self) -> str: ...
    @property
    def agent_id(self) -> str: ...
    @property
    def skill_id(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def score(self) -> int: ...


def _candidates(bind: Any, hits: Sequence[Candidate]) -> str:
    """The candidates as a relation h(tenant, agent_id, skill_id, version, score, ord)."""
    columns = [bind([getattr(h, name) for h in hits]) for name in ("tenant", "agent_id", "skill_id", "version")]
    return (
        f"unnest({columns[0]}::text[], {columns[1]}::text[], {columns[2]}::text[], {columns[3]}::text[],"
        f" {bind([h.score for h in hits])}::int[]) WITH ORDINALITY AS h(tenant, agent_id, skill_id, version, score, ord)"
    )


class CheckedRow(DiscoverRow, frozen=True, gc=False):
    """A candidate the database admitted: its discovery row (db.capabilities.DiscoverRow), then the
    engine's score and the ref compared bytewise, the tie order (checked_page)."""

    score: int
    ref_key: str


async def checked_page(
    conn: asyncpg.Connection | asyncpg.Pool,
    hits: Sequence[Candidate],
    *,
    viewer_tenant: str | None,
    skill: str | None = None,
    tags: list[str] | None = None,
    side_effect_max: int | None = None,
    region: str | None = None,
    agent: str | None = None,
    tenant: str | None = None,
    status: str | None = None,
    healthy_only: bool = False,
    latest_only: bool = True,
    now: datetime,
) -> list[CheckedRow]:
    """The rows of the candidates `hits` that the viewer may see and the filters admit, in the
    order of `hits`, each with its `score` and `ref_key`. Filters as in db.capabilities.discover,
    decided on the latest version in force (its marker: "the latest, if it matches"), or with
    `latest_only` false on every version in force at `now`."""
    params: list[Any] = []

    def bind(value: Any) -> str:
        params.append(value)
        return f"${len(params)}"

    relation = _candidates(bind, hits)
    filters = []
    if tenant is not None:
        filters.append(f"c.tenant = {bind(tenant)}")
    if agent is not None:
        filters.append(f"c.agent_id = {bind(agent)}")
    if skill is not None:
        if skill.endswith("*"):
            filters.append(f"c.skill_id LIKE {bind(_like_escape(skill[:-1]) + '%')}")
        else:
            filters.append(f"c.skill_id = {bind(skill)}")
    filters.append(visible_agents_filter(viewer_tenant, bind))
    if healthy_only:
        filters.append(HAS_LIVE_INSTANCE)
    filters += content_filter(bind, tags=tags, side_effect_max=side_effect_max, region=region, status=status)
    filters.append(latest_in_force("c") if latest_only else in_force("c", bind(now)))
    sql = f"""
        SELECT {PUBLIC_COLUMNS}, a.visibility AS agent_visibility, a.shared_with AS agent_shared_with,
               {HEALTH_SQL} AS health, {LIVE_INSTANCES_SQL} AS live_instances, {LEASE_UNTIL_SQL} AS lease_until,
               h.score, {REF_SQL} AS ref_key
          FROM {relation}
          JOIN capability_versions c ON c.tenant = h.tenant AND c.agent_id = h.agent_id AND c.skill_id = h.skill_id
                                    AND c.version = h.version
          JOIN agents a ON a.tenant = c.tenant AND a.agent_id = c.agent_id
         WHERE {" AND ".join(filters)}
         ORDER BY h.ord"""
    return typed_rows(CheckedRow, await conn.fetch(sql, *params))


class LatestHitRow(msgspec.Struct, frozen=True, gc=False):
    """A candidate that is the latest version in force of its skill: its agent and the engine's score."""

    tenant: str
    agent_id: str
    score: int


async def latest_hits(conn: asyncpg.Connection | asyncpg.Pool, hits: Sequence[Candidate]) -> list[LatestHitRow]:
    """Of the candidates, those that are the latest version in force of their skill (its marker):
    (tenant, agent_id, score), in the order of `hits` (ARD's matched set: db.ard.matched_ctes)."""
    params: list[Any] = []

    def bind(value: Any) -> str:
        params.append(value)
        return f"${len(params)}"

    relation = _candidates(bind, hits)
    sql = f"""
        SELECT h.tenant, h.agent_id, h.score
          FROM {relation}
          JOIN capability_versions c ON c.tenant = h.tenant AND c.agent_id = h.agent_id AND c.skill_id = h.skill_id
                                    AND c.version = h.version
         WHERE {latest_in_force("c")}
         ORDER BY h.ord"""
    return typed_rows(LatestHitRow, await conn.fetch(sql, *params))
