"""Queries of ranked search (docs/api.md#ranked-search): what the registry's lexicon knows about the
query's words, and one ranked page of capability rows.

The full-text parts are PostgreSQL's: the `english` configuration stems and drops stop words, the
weighted `search_vector` (migration 0008) tells a match in id, name or tags (weights A, B) from one
only in the description (C), and GIN indexes answer both the match and the lexicon look-up.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import asyncpg
import msgspec

from db.agents import HEALTH_SQL, LIVE_INSTANCES_SQL
from db.capabilities import (
    HAS_LIVE_INSTANCE,
    LEASE_UNTIL_SQL,
    PUBLIC_COLUMNS,
    _like_escape,
    content_filter,
    in_force,
    latest_in_force,
    visible_agents_filter,
)

# At most this many lexicon words one deletion away are considered per query word (common short
# stems can collide with many); the caller keeps those within one typing error.
NEAR_WORDS_MAX = 64
# The ref as capability_ref writes it, compared bytewise: the tie order of ranked results.
REF_SQL = """(c.tenant || '/' || c.agent_id || '/' || c.skill_id || '@' || c.version) COLLATE "C\""""


class WordQueries(msgspec.Struct, frozen=True):
    """The tsquery texts of a query's words (registry.discovery.ranking.plan_query: stop words
    dropped, corrections added): `word_queries[i]` matches the i-th word, `head_queries[i]` the same
    in id, name or tags only (`:AB`), `any_query` any word."""

    any_query: str
    word_queries: list[str]
    head_queries: list[str]


def terms_sql(bind: Callable[[Any], str], words: WordQueries) -> str:
    """A one-row SELECT of the parsed tsqueries (`any_q`, `w{i}`, `h{i}`), parsed once per statement."""
    columns = [f"to_tsquery('english', {bind(words.any_query)}) AS any_q"]
    for i, (word_query, head_query) in enumerate(zip(words.word_queries, words.head_queries, strict=False)):
        columns.append(f"to_tsquery('english', {bind(word_query)}) AS w{i}")
        columns.append(f"to_tsquery('english', {bind(head_query)}) AS h{i}")
    return "SELECT " + ", ".join(columns)


def match_sql(bind: Callable[[Any], str], words: WordQueries, alias: str = "c") -> str:
    """Row `alias` matches any word. The tsquery is spelt here with its own parameter rather than
    read from the terms row, so that a custom plan sees the value and estimates how many rows match
    (from the vector column's statistics): a word in a few rows is read through the GIN index, a word
    in most rows by walking the visible agents (docs/performance.md#ranked-search)."""
    return f"{alias}.search_vector @@ to_tsquery('english', {bind(words.any_query)})"


def score_sql(words: WordQueries, alias: str = "c", terms: str = "t") -> str:
    """The relevance of version row `alias` against the terms row `terms` (terms_sql): words
    matched times (words + 1), plus words matched in id, name or tags. The one ranker: ranked
    search, offers and ARD (db.ard) all order by it."""
    n = len(words.word_queries)
    matched = " + ".join(f"({alias}.search_vector @@ {terms}.w{i})::int" for i in range(n))
    head = " + ".join(f"({alias}.search_vector @@ {terms}.h{i})::int" for i in range(n))
    return f"(({matched}) * {n + 1} + ({head}))"


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
    words: WordQueries,
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
    now: datetime,
) -> list[asyncpg.Record]:
    """One page of capability rows matching `words.any_query`, best first: `score` (score_sql)
    descending, then `ref` bytewise.

    The queries are `to_tsquery('english', ...)` texts built by registry.discovery.ranking from words
    that hold only letters and digits (so nothing in them is an operator). Filters as in
    db.capabilities.discover, decided on the latest version ("the latest, if it matches") in force
    at `now`. `after` is the (score, ref) a page ended at.
    """
    params: list[Any] = []

    def bind(value: Any) -> str:
        params.append(value)
        return f"${len(params)}"

    terms = terms_sql(bind, words)

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
    content_filters = [match_sql(bind, words)] + content_filter(
        bind, tags=tags, side_effect_max=side_effect_max, region=region, status=status
    )

    score = score_sql(words)
    where_key = " AND ".join(key_filters) if key_filters else "true"
    # The GIN index finds matching versions; with `latest`, only those the latest marker holds (a
    # partial index), each confirmed the latest in force at `now` (db.capabilities.latest_in_force).
    moment = bind(now)
    version_filter = latest_in_force("c", moment) if latest_only else in_force("c", moment)
    ranked_rows = f"""
            ranked AS (
                SELECT c.tenant, c.agent_id, c.skill_id, c.version, {score} AS score, {REF_SQL} AS ref_key
                  FROM capability_versions c
                  JOIN agents a ON a.tenant = c.tenant AND a.agent_id = c.agent_id
                 CROSS JOIN t
                 WHERE {version_filter} AND {where_key} AND {" AND ".join(agent_filters + content_filters)})"""
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
