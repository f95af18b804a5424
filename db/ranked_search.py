"""Queries of ranked search (docs/api.md#ranked-search): what the registry's lexicon knows about the
query's words, and one ranked page of capability rows.

The full-text parts are PostgreSQL's: the `english` configuration stems and drops stop words, the
weighted `search_vector` (migration 0008) tells a match in id, name or tags (weights A, B) from one
only in the description (C), and GIN indexes answer both the match and the lexicon look-up.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from db.agents import HEALTH_SQL, LIVE_INSTANCES_SQL
from db.capabilities import (
    HAS_LIVE_INSTANCE,
    IN_FORCE,
    LEASE_UNTIL_SQL,
    PUBLIC_COLUMNS,
    _like_escape,
    content_filter,
    visible_agents_filter,
)

# At most this many lexicon words one deletion away are considered per query word (common short
# stems can collide with many); the caller keeps those within one typing error.
NEAR_WORDS_MAX = 64
# The ref as capability_ref writes it, compared bytewise: the tie order of ranked results.
REF_SQL = """(c.tenant || '/' || c.agent_id || '/' || c.skill_id || '@' || c.version) COLLATE "C\""""


async def analyse_words(
    conn: asyncpg.Connection | asyncpg.Pool, words: list[str], *, correct_min: int, correct_max: int
) -> list[asyncpg.Record]:
    """Per word (in order): `stop` (the english configuration drops it), `known` (a lexicon word),
    and `near`: lexicon words sharing a one-deletion variant with it, for words of `correct_min` to
    `correct_max` characters that are neither stop words nor known."""
    return await conn.fetch(
        f"""SELECT w.word,
                   numnode(to_tsquery('english', w.word)) = 0 AS stop,
                   EXISTS (SELECT 1 FROM search_words s WHERE s.word = w.word) AS known,
                   CASE WHEN length(w.word) BETWEEN $2 AND $3
                         AND numnode(to_tsquery('english', w.word)) > 0
                         AND NOT EXISTS (SELECT 1 FROM search_words s WHERE s.word = w.word)
                        THEN ARRAY(SELECT s.word FROM search_words s
                                    WHERE s.variants && capreg_one_deletions(w.word)
                                    ORDER BY s.word LIMIT {NEAR_WORDS_MAX})
                        ELSE '{{}}'::text[] END AS near
              FROM unnest($1::text[]) WITH ORDINALITY AS w(word, n)
             ORDER BY w.n""",
        words,
        correct_min,
        correct_max,
    )


async def ranked(
    conn: asyncpg.Connection | asyncpg.Pool,
    *,
    viewer_tenant: str | None,
    any_query: str,
    word_queries: list[str],
    head_queries: list[str],
    skill: str | None = None,
    tags: list[str] | None = None,
    side_effect_max: int | None = None,
    region: str | None = None,
    agent: str | None = None,
    tenant: str | None = None,
    status: str | None = None,
    healthy_only: bool = False,
    latest_only: bool = True,
    after: tuple[int, str] | None = None,
    limit: int = 50,
) -> list[asyncpg.Record]:
    """One page of capability rows matching `any_query`, best first: `score` (words matched times
    (words + 1) plus words matched in id, name or tags) descending, then `ref` bytewise.

    The queries are `to_tsquery('english', ...)` texts built by registry.discovery.ranking from words that
    hold only letters and digits (so nothing in them is an operator): `word_queries[i]` matches the
    i-th query word (or one of its corrections), `head_queries[i]` the same restricted to id, name
    and tags (`:AB`). Filters as in db.capabilities.discover: on the (tenant, agent, skill) key before
    the latest version is chosen, on content after. `after` is the (score, ref) a page ended at.
    """
    params: list[Any] = []

    def bind(value: Any) -> str:
        params.append(value)
        return f"${len(params)}"

    # One tsquery per word (and per word restricted to id, name and tags), parsed once per query.
    words = len(word_queries)
    term_columns = [f"to_tsquery('english', {bind(any_query)}) AS any_q"]
    for i, (word_query, head_query) in enumerate(zip(word_queries, head_queries, strict=False)):
        term_columns.append(f"to_tsquery('english', {bind(word_query)}) AS w{i}")
        term_columns.append(f"to_tsquery('english', {bind(head_query)}) AS h{i}")
    terms = "SELECT " + ", ".join(term_columns)

    key_filters = []
    if tenant is not None:
        key_filters.append(f"c.tenant = {bind(tenant)}")
    if agent is not None:
        key_filters.append(f"c.agent_id = {bind(agent)}")
    if skill is not None:
        if skill.endswith("*"):
            key_filters.append(f"c.skill_id LIKE {bind(_like_escape(skill[:-1]) + '%')}")
        else:
            key_filters.append(f"c.skill_id = {bind(skill)}")
    agent_filters = [visible_agents_filter(viewer_tenant, bind)]
    if healthy_only:
        agent_filters.append(HAS_LIVE_INSTANCE)
    content_filters = ["c.search_vector @@ t.any_q"] + content_filter(
        bind, tags=tags, side_effect_max=side_effect_max, region=region, status=status
    )

    matched = " + ".join(f"(c.search_vector @@ t.w{i})::int" for i in range(words))
    head = " + ".join(f"(c.search_vector @@ t.h{i})::int" for i in range(words))
    score = f"(({matched}) * {words + 1} + ({head}))"
    where_key = " AND ".join(key_filters) if key_filters else "true"
    if latest_only:
        # The GIN index finds the skills with a matching version; each one's latest in-force
        # version (through capability_versions_order) must match itself ("the latest, if it matches").
        ranked_rows = f"""
            hits AS MATERIALIZED (
                SELECT DISTINCT c.tenant, c.agent_id, c.skill_id
                  FROM capability_versions c, t
                 WHERE c.search_vector @@ t.any_q AND {IN_FORCE} AND {where_key}),
            ranked AS (
                SELECT c.tenant, c.agent_id, c.skill_id, c.version, {score} AS score, {REF_SQL} AS ref_key
                  FROM hits h
                  JOIN agents a ON a.tenant = h.tenant AND a.agent_id = h.agent_id
                 CROSS JOIN t
                 CROSS JOIN LATERAL (
                       SELECT l.tenant, l.agent_id, l.skill_id, l.version, l.search_vector, l.tags, l.side_effect_rank,
                              l.data_regions, l.status
                         FROM capability_versions l
                        WHERE l.tenant = h.tenant AND l.agent_id = h.agent_id AND l.skill_id = h.skill_id
                          AND {IN_FORCE.replace("c.", "l.")}
                        ORDER BY l.prerelease, l.version_key DESC LIMIT 1) c
                 WHERE {" AND ".join(agent_filters + content_filters)})"""
    else:
        ranked_rows = f"""
            ranked AS (
                SELECT c.tenant, c.agent_id, c.skill_id, c.version, {score} AS score, {REF_SQL} AS ref_key
                  FROM capability_versions c
                  JOIN agents a ON a.tenant = c.tenant AND a.agent_id = c.agent_id
                 CROSS JOIN t
                 WHERE {IN_FORCE} AND {where_key} AND {" AND ".join(agent_filters + content_filters)})"""
    page = ""
    if after is not None:
        s, r = bind(after[0]), bind(after[1])
        page = f"WHERE r.score < {s} OR (r.score = {s} AND r.ref_key > {r})"
    # Rank on keys only; the page's rows alone are then read in full (health and lease figures included).
    sql = f"""
        WITH t AS MATERIALIZED ({terms}), {ranked_rows}
        SELECT {PUBLIC_COLUMNS}, p.score, p.ref_key,
               a.visibility AS agent_visibility, a.shared_with AS agent_shared_with,
               {HEALTH_SQL} AS health, {LIVE_INSTANCES_SQL} AS live_instances, {LEASE_UNTIL_SQL} AS lease_until
          FROM (SELECT r.* FROM ranked r {page} ORDER BY r.score DESC, r.ref_key LIMIT {bind(limit)}) p
          JOIN capability_versions c ON c.tenant = p.tenant AND c.agent_id = p.agent_id AND c.skill_id = p.skill_id
                                    AND c.version = p.version
          JOIN agents a ON a.tenant = c.tenant AND a.agent_id = c.agent_id
         ORDER BY p.score DESC, p.ref_key"""
    return await conn.fetch(sql, *params)
