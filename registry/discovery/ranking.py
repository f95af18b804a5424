"""Ranked search (docs/api.md#ranked-search), part of the discovery service: the one function that
answers "which capabilities match these words, best first" (`rank`), for `GET /v1/capabilities?q=`,
`POST /v1/offers`, the MCP tools and ARD alike.

How a query is answered:
1. `query_words` splits the text into words: runs of letters and digits, lower-cased. Everything
   else (operators of tsquery, SQL, punctuation, NUL) only separates words, so it is never syntax.
2. One look-up in the registry's lexicon (db.ranked_search.analyse_words) tells which words are
   English stop words (PostgreSQL's list: ignored) and, for words of 5 to 32 letters that the lexicon
   does not hold, which lexicon words share a one-deletion variant with them (a GIN index);
   `within_one_typo` (rapidfuzz's optimal string alignment distance) keeps those one typing error away.
   Why this and not trigrams: the deletion variants are exact strings, so the index look-up is
   selective and in plain SQL on both servers (no pg_trgm), and the final check is a maintained C
   implementation of the distance the contract names (transpositions count as one error).
3. Each remaining word becomes a tsquery of itself or its corrections (`english`: stemmed, so
   `invoices`, `invoicing` and `invoice` meet); an item matches when any word's query does.
4. Order: more words matched first, then more of them matched in id, name or tags (weights A, B),
   then `ref`. That order is one integer per item, `score`, so pages are keyset cursors on
   (score, ref); `relevance` is that score scaled to [0, 1].
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import asyncpg
import msgspec
from rapidfuzz.distance import OSA

from db import ranked_search as ranked_queries
from registry.core.cursors import decode_cursor, encode_cursor
from registry.core.problems import ErrorItem, invalid_request

QUERY_MAX_LENGTH = 512
# Distinct words of a query that count (a 512-character query has at most 256 words; the first 32
# distinct ones are plenty for a need and keep the per-item work bounded).
MAX_WORDS = 32
# Longer words are never in the lexicon (capreg_lexicon_words) and are matched exactly only.
CORRECT_MIN, CORRECT_MAX = 5, 32
# to_tsquery takes words of up to 2,046 bytes; longer runs can match nothing anyway.
WORD_MAX_BYTES = 2046
# The highest score: every word matched, each in id, name or tags.
MAX_SCORE = MAX_WORDS * (MAX_WORDS + 2)
_WORD = re.compile(r"[^\W_]+")


class SearchFilters(msgspec.Struct, frozen=True, kw_only=True):
    """Filters of section 3 applied to a ranked search (see db.capabilities.discover)."""

    skill: str | None = None
    tags: tuple[str, ...] | None = None
    side_effect_max: int | None = None
    region: str | None = None
    agent: str | None = None
    tenant: str | None = None
    status: str | None = None
    healthy_only: bool = False
    latest_only: bool = True


class RankPosition(msgspec.Struct, frozen=True, array_like=True):
    """Where a ranked page ends: the last item's score and ref."""

    score: int
    ref: str


class Ranked(msgspec.Struct, frozen=True):
    """One ranked result: its discovery row (plus agent visibility and sharing), and its relevance."""

    row: Any
    relevance: float
    words: int
    words_matched: int
    head_matched: int
    position: RankPosition


# The tsquery texts of a query's words (after stop words and corrections): db.ranked_search's.
QueryPlan = ranked_queries.WordQueries


def query_words(q: str) -> list[str]:
    """The distinct words of `q` in order (letters and digits, lower-cased), at most MAX_WORDS."""
    words: list[str] = []
    for match in _WORD.finditer(q.lower()):
        word = match.group()
        if word not in words and len(word.encode()) <= WORD_MAX_BYTES:
            words.append(word)
            if len(words) == MAX_WORDS:
                break
    return words


def within_one_typo(a: str, b: str) -> bool:
    """One substitution, insertion, deletion or adjacent transposition apart (or equal)."""
    return OSA.distance(a, b, score_cutoff=1) <= 1


def plan_query(analysed: list[tuple[str, bool, list[str]]]) -> QueryPlan | None:
    """The tsquery texts for words analysed as (word, stop word, near lexicon words); None when no
    word counts. Words hold letters and digits only, so joining them with `|` is safe syntax."""
    word_queries, head_queries = [], []
    for word, stop, near in analysed:
        if stop:
            continue
        alternatives = [word, *(w for w in near if w != word and within_one_typo(word, w))]
        word_queries.append(" | ".join(alternatives))
        head_queries.append(" | ".join(f"{w}:AB" for w in alternatives))
    if not word_queries:
        return None
    return QueryPlan(
        any_query=" | ".join(f"( {w} )" for w in word_queries),
        word_queries=word_queries,
        head_queries=head_queries,
    )


def relevance(score: int, words: int) -> float:
    """`score` (matched * (words + 1) + matched in id/name/tags) scaled to [0, 1]."""
    best = words * (words + 2)
    return min(1.0, max(0.0, score / best)) if best else 0.0


async def plan_text(conn: asyncpg.Connection | asyncpg.Pool, q: str) -> QueryPlan | None:
    """The tsquery texts of `q` after one look-up in the lexicon (steps 1-3 above); None when no
    word counts (the query matches nothing). Ranked search and ARD both start here."""
    words = query_words(q)
    if not words:
        return None
    analysed = await ranked_queries.analyse_words(conn, words, correct_min=CORRECT_MIN, correct_max=CORRECT_MAX)
    return plan_query([(r["word"], r["stop"], list(r["near"])) for r in analysed])


async def rank(
    conn: asyncpg.Connection | asyncpg.Pool,
    viewer: str | None,
    q: str,
    filters: SearchFilters = SearchFilters(),  # noqa: B008 (a frozen Struct, never mutated)
    *,
    after: RankPosition | None = None,
    limit: int = 50,
    now: datetime,
) -> list[Ranked]:
    """At most `limit` capabilities visible to `viewer` (registry.discovery.service.viewer_tenant) matching
    `q`, best first, after `after`, as in force at `now`. A query with no word that counts matches nothing."""
    plan = await plan_text(conn, q)
    if plan is None:
        return []
    n = len(plan.word_queries)
    rows = await ranked_queries.ranked(
        conn,
        viewer_tenant=viewer,
        words=plan,
        skill=filters.skill,
        tags=list(filters.tags) if filters.tags else None,
        side_effect_max=filters.side_effect_max,
        region=filters.region,
        agent=filters.agent,
        tenant=filters.tenant,
        status=filters.status,
        healthy_only=filters.healthy_only,
        latest_only=filters.latest_only,
        after=(after.score, after.ref) if after is not None else None,
        limit=limit,
        now=now,
    )
    return [
        Ranked(
            row=row,
            relevance=relevance(row["score"], n),
            words=n,
            words_matched=row["score"] // (n + 1),
            head_matched=row["score"] % (n + 1),
            position=RankPosition(row["score"], row["ref_key"]),
        )
        for row in rows
    ]


_RANKED_CURSOR = "ranked"


def encode_position(position: RankPosition) -> str:
    """The opaque cursor of a ranked page ending at `position`."""
    return encode_cursor([_RANKED_CURSOR, position.score, position.ref])


def decode_position(cursor: str) -> RankPosition:
    """The position a ranked cursor carries; 400 `invalid_request` for anything else (a cursor of
    unranked discovery included)."""
    tag, score, ref = decode_cursor(cursor, tuple[str, int, str])
    if tag != _RANKED_CURSOR or not 0 <= score <= MAX_SCORE or len(ref) > 1024:
        raise invalid_request(
            "cursor is not one this registry issued", [ErrorItem(path="cursor", message="invalid cursor")]
        )
    return RankPosition(score, ref)
