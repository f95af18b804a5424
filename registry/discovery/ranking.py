"""Ranked search (docs/api.md#ranked-search), part of the discovery service: the one function that
answers "which capabilities match these words, best first" (`rank`), for `GET /v1/capabilities?q=`,
`POST /v1/offers`, the MCP tools and ARD alike.

How a query is answered:
1. `query_words` splits the text into words: runs of letters and digits, lower-cased. Everything
   else (operators of any query language, punctuation, NUL) only separates words, so it is never
   syntax.
2. The search engine (registry.search) proposes the best candidates in bounded work: BM25 over
   weighted fields fused with closeness in meaning, pre-filtered to what the caller could see.
3. The database checks the candidates, in the engine's order, against the rules that decide what
   the caller sees (db.ranked_search.checked_page): visibility, in force, latest, filters, health.
   A page short of checked candidates asks the next ones, until the engine's fixed depth.
4. Order: the engine's score (an integer, registry.search.engine.SCORE_SCALE at best), then `ref`
   bytewise; pages are keyset cursors on (score, ref); `relevance` is the score scaled to [0, 1].
"""

from __future__ import annotations

import re
from datetime import datetime

import asyncpg
import msgspec

from db import ranked_search as ranked_queries
from db.ranked_search import CheckedRow
from registry.core.cursors import decode_cursor, encode_cursor
from registry.core.problems import ErrorItem, invalid_request
from registry.search.engine import SCORE_SCALE, WORD_MAX_CHARS, Hit, Proposal
from registry.search.index_sync import SearchService

QUERY_MAX_LENGTH = 512
# Distinct words of a query that count (a 512-character query has at most 256 words; the first 32
# distinct ones are plenty for a need and keep the engine's work bounded).
MAX_WORDS = 32
# The highest score: first in every ranked list of the engine.
MAX_SCORE = SCORE_SCALE
# Candidates checked per database round trip beyond a page's own size (most pass every check).
CHECK_SLACK = 32
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

    row: CheckedRow
    relevance: float
    position: RankPosition


def query_words(q: str) -> list[str]:
    """The distinct words of `q` in order (letters and digits, lower-cased), at most MAX_WORDS."""
    words: list[str] = []
    for match in _WORD.finditer(q.lower()):
        word = match.group()
        if word not in words and len(word) <= WORD_MAX_CHARS:
            words.append(word)
            if len(words) == MAX_WORDS:
                break
    return words


def relevance(score: int) -> float:
    """An engine score scaled to [0, 1]."""
    return min(1.0, max(0.0, score / SCORE_SCALE))


def proposal(viewer: str | None, filters: SearchFilters) -> Proposal:
    """What the engine may pre-filter on: the filters the database applies after it."""
    skill = filters.skill if filters.skill is not None and not filters.skill.endswith("*") else None
    return Proposal(
        viewer=viewer,
        latest_only=filters.latest_only,
        tenant=filters.tenant,
        agent=filters.agent,
        skill=skill,
        tags=tuple(filters.tags or ()),
        side_effect_max=filters.side_effect_max,
        region=filters.region,
        status=filters.status,
    )


async def propose(conn: asyncpg.Connection | asyncpg.Pool, search: SearchService, q: str, where: Proposal) -> list[Hit]:
    """The engine's candidates for `q`, best first; none when no word of `q` counts. `conn` is the
    caller's: a catch-up with the change feed reads through it."""
    words = query_words(q)
    if not words:
        return []
    return await search.propose(conn, words, where)


async def rank(
    conn: asyncpg.Connection | asyncpg.Pool,
    search: SearchService,
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
    hits = await propose(conn, search, q, proposal(viewer, filters))
    if after is not None:
        hits = [h for h in hits if h.score < after.score or (h.score == after.score and h.ref > after.ref)]
    found: list[Ranked] = []
    start = 0
    while len(found) < limit and start < len(hits):
        chunk = hits[start : start + limit + CHECK_SLACK]
        start += len(chunk)
        rows = await ranked_queries.checked_page(
            conn,
            chunk,
            viewer_tenant=viewer,
            skill=filters.skill,
            tags=list(filters.tags) if filters.tags else None,
            side_effect_max=filters.side_effect_max,
            region=filters.region,
            agent=filters.agent,
            tenant=filters.tenant,
            status=filters.status,
            healthy_only=filters.healthy_only,
            latest_only=filters.latest_only,
            now=now,
        )
        found.extend(
            Ranked(row=row, relevance=relevance(row.score), position=RankPosition(row.score, row.ref_key))
            for row in rows
        )
    return found[:limit]


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
