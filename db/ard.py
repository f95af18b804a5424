"""Queries behind ARD (docs/api.md#ard): the matched set of agents a caller may see, its pages in
relevance or identifier order, the public rows of a page's entries, and facet counts, all in SQL.

The matched set is discovery's (db.capabilities.visible_agents_filter, and the latest in-force version
of each skill: db.capabilities.latest_in_force): an agent is an entry when discovery shows the caller
at least one of its capabilities, and filters and text are decided on those latest versions, as
`versions=latest` decides them. With text, the matched set is the agents of the search engine's
candidates that are the latest in force (db.ranked_search.latest_hits), and an agent's relevance is
its best candidate's score: ranked search's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import asyncpg
import msgspec

from db.agents import HEALTH_SQL, LEASE_UNTIL_SQL, LIVE_INSTANCES_SQL
from db.capabilities import latest_in_force, serves_regions_sql, visible_agents_filter
from db.rows import typed_rows

A2A_CARD_TYPE = "application/a2a-agent-card+json"

Bind = Callable[[Any], str]

# registry.ard.names.default_domain in SQL (tests check that the two agree).
_DNS_NAME_RE = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$"


def publisher_sql(column: str, bind: Bind, configured: dict[str, str]) -> str:
    """The publisher domain of the tenant in `column`: its configured domain, else its default."""
    hex_digits = f"encode(convert_to({column}, 'UTF8'), 'hex')"
    default = f"""CASE WHEN {column} ~ '{_DNS_NAME_RE}' AND left({column}, 4) <> 'xq--'
                       THEN {column} || '.capreg.invalid'
                       ELSE concat_ws('.', 'xq--' || substr({hex_digits}, 1, 58), nullif(substr({hex_digits}, 59, 62), ''),
                                      nullif(substr({hex_digits}, 121), '')) || '.capreg.invalid' END"""
    if not configured:
        return f"({default})"
    tenants, domains = bind(list(configured)), bind(list(configured.values()))
    return f"(CASE WHEN {column} = ANY ({tenants}::text[]) THEN ({domains}::text[])[array_position({tenants}::text[], {column})] ELSE {default} END)"


class TextMatch(msgspec.Struct, frozen=True):
    """The agents a text matched (registry.ard.service.text_match): each one's best score, the
    engine's (registry.search.engine), from candidates checked to be latest in force."""

    tenants: list[str]
    agents: list[str]
    scores: list[int]


class EntryFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Constraints on the matched set (None: no constraint; an empty tuple matches nothing).
    Within a key any value matches; all keys must match."""

    agent: tuple[str, str] | None = None  # (tenant, agentId): an exact lookup
    tenants: tuple[str, ...] | None = None  # publisher / publisherId, resolved to tenants
    types: tuple[str, ...] | None = None
    tags: tuple[str, ...] | None = None
    capabilities: tuple[str, ...] | None = None
    versions: tuple[str, ...] | None = None
    side_effect_max: int | None = None
    regions: tuple[str, ...] | None = None  # an agent matches when one of its skills may serve one
    health: tuple[str, ...] | None = None
    display_name: tuple[str, ...] | None = None  # case-insensitive substrings
    updated_after: datetime | None = None
    created_after: datetime | None = None


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _agent_filters(bind: Bind, viewer_tenant: str | None, where: EntryFilter) -> list[str]:
    """The conditions on agent row `a`: visibility (discovery's) and the filters on agent fields."""
    agent_filters = [visible_agents_filter(viewer_tenant, bind)]
    if where.agent is not None:
        agent_filters.append(f"a.tenant = {bind(where.agent[0])} AND a.agent_id = {bind(where.agent[1])}")
    if where.tenants is not None:
        agent_filters.append(f"a.tenant = ANY ({bind(list(where.tenants))}::text[])")
    if where.types is not None and A2A_CARD_TYPE not in where.types:
        agent_filters.append("false")
    if where.versions is not None:
        agent_filters.append(f"a.version = ANY ({bind(list(where.versions))}::text[])")
    if where.display_name is not None:
        names = " OR ".join(f"a.name ILIKE {bind(_like(name))}" for name in where.display_name) or "false"
        agent_filters.append(f"({names})")
    if where.updated_after is not None:
        agent_filters.append(f"a.updated_at > {bind(where.updated_after)}")
    if where.created_after is not None:
        agent_filters.append(f"a.created_at > {bind(where.created_after)}")
    if where.health is not None:
        agent_filters.append(f"{HEALTH_SQL} = ANY ({bind(list(where.health))}::text[])")
    return agent_filters


def matched_ctes(bind: Bind, viewer_tenant: str | None, where: EntryFilter, text: TextMatch | None) -> str:
    """`matched` (one row per entry: tenant, agent_id, capabilities, side_effect_rank, score) as WITH
    items. An entry's skills are the latest versions in force (db.capabilities.latest_in_force: rows
    the latest marker holds, read per agent through capability_versions_latest_agent); with
    text, only the agents of `text` (each with its score) are candidates."""
    agent_filters = _agent_filters(bind, viewer_tenant, where)

    sources, score, prelude = "agents a", "0", ""
    if text is not None:
        prelude = f"""hits AS MATERIALIZED (
            SELECT * FROM unnest({bind(text.tenants)}::text[], {bind(text.agents)}::text[], {bind(text.scores)}::int[])
                       AS h(tenant, agent_id, score)), """
        sources = "hits h JOIN agents a ON a.tenant = h.tenant AND a.agent_id = h.agent_id"
        score = "h.score"

    entry_filters = ["s.capabilities IS NOT NULL"]
    aggregates = []
    if where.tags is not None:
        aggregates.append(f"bool_or(l.tags && {bind(list(where.tags))}::text[]) AS has_tag")
        entry_filters.append("s.has_tag")
    if where.capabilities is not None:
        aggregates.append(f"bool_or(l.skill_id = ANY ({bind(list(where.capabilities))}::text[])) AS has_capability")
        entry_filters.append("s.has_capability")
    if where.side_effect_max is not None:
        entry_filters.append(f"s.side_effect_rank <= {bind(where.side_effect_max)}")
    if where.regions is not None:
        aggregates.append(
            f"bool_or({serves_regions_sql('l.data_regions', f'{bind(list(where.regions))}::text[]')}) AS has_region"
        )
        entry_filters.append("s.has_region")
    # Per agent, its marked rows through capability_versions_latest_agent (no sort, no DISTINCT ON):
    # aggregated where they are read, so no statement-wide sort or spill.
    return f"""{prelude}matched AS (
        SELECT a.tenant, a.agent_id, s.capabilities, s.side_effect_rank, {score} AS score
          FROM {sources}
         CROSS JOIN LATERAL (
               SELECT array_agg(l.skill_id ORDER BY l.skill_id) AS capabilities,
                      max(l.side_effect_rank) AS side_effect_rank{"".join(", " + x for x in aggregates)}
                 FROM capability_versions l
                WHERE l.tenant = a.tenant AND l.agent_id = a.agent_id AND {latest_in_force("l")}) s
         WHERE {" AND ".join(agent_filters + entry_filters)}
    )"""


class RankedEntryRow(msgspec.Struct, frozen=True, gc=False):
    """An entry of a page in relevance order: its agent, its score and its tie-break key."""

    tenant: str
    agent_id: str
    score: int
    tie: str


class IdentifierEntryRow(msgspec.Struct, frozen=True, gc=False):
    """An entry of a page in identifier order: its agent and its identifier (`urn:air:...`)."""

    tenant: str
    agent_id: str
    identifier: str


class EntryRow(msgspec.Struct, frozen=True, gc=False):
    """An entry's public row: agent fields, lease figures and its skills' latest in-force versions."""

    tenant: str
    agent_id: str
    name: str
    description: str
    version: str
    updated_at: datetime
    health: str
    live_instances: int
    lease_until: datetime | None
    # jsonb: per skill {id, tags, sideEffectRank, regions, examples}, ordered by id.
    skills: list[dict[str, Any]]


class FacetCountRow(msgspec.Struct, frozen=True, gc=False):
    """A facet bucket (value, count n, rank rn), or with `other` a field's count beyond its limit."""

    field: str
    value: str | None
    n: int
    other: bool
    rn: int | None


class Query:
    """Bound parameters of one statement."""

    def __init__(self) -> None:
        self.params: list[Any] = []

    def bind(self, value: Any) -> str:
        self.params.append(value)
        return f"${len(self.params)}"


async def ranked_page(
    conn: asyncpg.Connection,
    *,
    viewer_tenant: str | None,
    where: EntryFilter,
    text: TextMatch | None,
    after: tuple[int, str] | None,
    limit: int,
) -> list[RankedEntryRow]:
    """Entries by relevance (their best skill's score), best first: (tenant, agent_id, score, tie). Ties in the order of the
    agents' capability refs (`tenant/agentId/...`, bytewise), as ranked discovery orders its ties,
    so both list agents in the same relative order."""
    query = Query()
    ctes = matched_ctes(query.bind, viewer_tenant, where, text)
    keyset = "true"
    if after is not None:
        s, t = query.bind(after[0]), query.bind(after[1])
        keyset = f"(r.score < {s} OR (r.score = {s} AND r.tie > {t}))"
    sql = f"""WITH {ctes}
        SELECT r.tenant, r.agent_id, r.score, r.tie FROM (
            SELECT m.tenant, m.agent_id, m.score, (m.tenant || '/' || m.agent_id || '/') COLLATE "C" AS tie
              FROM matched m) r
         WHERE {keyset}
         ORDER BY r.score DESC, r.tie
         LIMIT {query.bind(limit)}"""
    return typed_rows(RankedEntryRow, await conn.fetch(sql, *query.params))


async def identifier_page(
    conn: asyncpg.Connection,
    *,
    viewer_tenant: str | None,
    where: EntryFilter,
    configured: dict[str, str],
    after: str | None,
    limit: int,
) -> list[IdentifierEntryRow]:
    """Entries in identifier order (`urn:air:{publisher}:{agentId}`, bytewise): (tenant, agent_id, identifier).

    Bounded by the page, not the registry: an identifier is its tenant's prefix
    (`urn:air:{publisher}:`, which holds no `:` but its last) and the agent id, so identifier order
    is prefix order, then agent ids bytewise within a tenant. Each tenant (found by a loose index
    scan of agents_pkey) contributes at most `limit` entries read in order through
    agents_identifier_order, from where `after` leaves it; the page is the first `limit` of those.
    Filters on skills (tags, capabilities, side effect, regions) take the matched set instead."""
    if any(v is not None for v in (where.tags, where.capabilities, where.side_effect_max, where.regions)):
        return await _identifier_page_matched(
            conn, viewer_tenant=viewer_tenant, where=where, configured=configured, after=after, limit=limit
        )
    query = Query()
    agent_filters = _agent_filters(query.bind, viewer_tenant, where)
    publisher = publisher_sql("t.tenant", query.bind, configured)
    start = query.bind(after if after is not None else "")
    n = query.bind(limit)
    sql = f"""WITH RECURSIVE tenants AS (
            (SELECT a.tenant FROM agents a ORDER BY a.tenant LIMIT 1)
            UNION ALL
            SELECT (SELECT a.tenant FROM agents a WHERE a.tenant > t.tenant ORDER BY a.tenant LIMIT 1)
              FROM tenants t WHERE t.tenant IS NOT NULL),
        prefixes AS (
            SELECT p.tenant, p.prefix,
                   CASE WHEN left({start}, length(p.prefix)) = p.prefix THEN substr({start}, length(p.prefix) + 1)
                        ELSE '' END COLLATE "C" AS after_id
              FROM (SELECT t.tenant, ('urn:air:' || {publisher} || ':') COLLATE "C" AS prefix
                      FROM tenants t WHERE t.tenant IS NOT NULL) p
             WHERE p.prefix > {start} OR left({start}, length(p.prefix)) = p.prefix)
        SELECT e.tenant, e.agent_id, e.identifier
          FROM prefixes p
         CROSS JOIN LATERAL (
               SELECT a.tenant, a.agent_id, (p.prefix || a.agent_id) COLLATE "C" AS identifier
                 FROM agents a
                WHERE a.tenant = p.tenant AND a.agent_id COLLATE "C" > p.after_id
                  AND {" AND ".join(agent_filters)}
                  AND EXISTS (SELECT 1 FROM capability_versions l
                               WHERE l.tenant = a.tenant AND l.agent_id = a.agent_id AND {latest_in_force("l")})
                ORDER BY a.agent_id COLLATE "C"
                LIMIT {n}) e
         ORDER BY e.identifier
         LIMIT {n}"""
    return typed_rows(IdentifierEntryRow, await conn.fetch(sql, *query.params))


async def _identifier_page_matched(
    conn: asyncpg.Connection,
    *,
    viewer_tenant: str | None,
    where: EntryFilter,
    configured: dict[str, str],
    after: str | None,
    limit: int,
) -> list[IdentifierEntryRow]:
    query = Query()
    ctes = matched_ctes(query.bind, viewer_tenant, where, None)
    publisher = publisher_sql("m.tenant", query.bind, configured)
    keyset = f"i.identifier > {query.bind(after)}" if after is not None else "true"
    sql = f"""WITH {ctes}
        SELECT i.tenant, i.agent_id, i.identifier FROM (
            SELECT m.tenant, m.agent_id, ('urn:air:' || {publisher} || ':' || m.agent_id) COLLATE "C" AS identifier
              FROM matched m) i
         WHERE {keyset}
         ORDER BY i.identifier
         LIMIT {query.bind(limit)}"""
    return typed_rows(IdentifierEntryRow, await conn.fetch(sql, *query.params))


async def entry_rows(conn: asyncpg.Connection, keys: Sequence[tuple[str, str]]) -> list[EntryRow]:
    """The public rows of the given entries (agent fields, lease figures, and the latest in-force
    version of each skill: id, tags, side effect, regions, examples), in no particular order."""
    if not keys:
        return []
    records = await conn.fetch(
        f"""SELECT a.tenant, a.agent_id, a.name, a.description, a.version, a.updated_at,
                   {HEALTH_SQL} AS health, {LIVE_INSTANCES_SQL} AS live_instances, {LEASE_UNTIL_SQL} AS lease_until,
                   s.skills
              FROM unnest($1::text[], $2::text[]) AS k(tenant, agent_id)
              JOIN agents a ON a.tenant = k.tenant AND a.agent_id = k.agent_id
             CROSS JOIN LATERAL (
                   SELECT coalesce(jsonb_agg(jsonb_build_object(
                              'id', l.skill_id, 'tags', l.tags, 'sideEffectRank', l.side_effect_rank,
                              'regions', l.data_regions, 'examples', l.examples) ORDER BY l.skill_id), '[]') AS skills
                     FROM capability_versions l
                    WHERE l.tenant = a.tenant AND l.agent_id = a.agent_id AND {latest_in_force("l")}) s""",
        [k[0] for k in keys],
        [k[1] for k in keys],
    )
    return typed_rows(EntryRow, records)


# Facet fields and the SQL of their (value, count) groups over `matched`.
def _facet_groups(field: str, publisher: str, side_effects: str) -> str:
    def per_entry(column: str) -> str:  # each value once per entry, over its latest versions
        return (
            f"SELECT v AS value, count(*) AS n FROM matched m CROSS JOIN LATERAL (SELECT DISTINCT v FROM"
            f" capability_versions l CROSS JOIN unnest(l.{column}) v"
            f" WHERE l.tenant = m.tenant AND l.agent_id = m.agent_id AND {latest_in_force('l')}) x GROUP BY v"
        )

    return {
        "type": f"SELECT '{A2A_CARD_TYPE}'::text AS value, count(*) AS n FROM matched HAVING count(*) > 0",
        "tags": per_entry("tags"),
        "capabilities": "SELECT v AS value, count(*) AS n FROM matched m CROSS JOIN unnest(m.capabilities) v GROUP BY v",
        "publisher": f"SELECT {publisher} AS value, count(*) AS n FROM matched m GROUP BY m.tenant",
        "version": "SELECT a.version AS value, count(*) AS n FROM matched m JOIN agents a"
        " ON a.tenant = m.tenant AND a.agent_id = m.agent_id GROUP BY a.version",
        "metadata.capreg.sideEffectMax": f"SELECT ({side_effects})[m.side_effect_rank + 1] AS value,"
        " count(*) AS n FROM matched m GROUP BY m.side_effect_rank",
        "metadata.capreg.dataRegions": per_entry("data_regions"),
        "metadata.capreg.health": f"SELECT h.health AS value, count(*) AS n FROM (SELECT {HEALTH_SQL} AS health FROM matched m"
        " JOIN agents a ON a.tenant = m.tenant AND a.agent_id = m.agent_id) h GROUP BY h.health",
    }[field]


# ARD's field vocabulary (issue 36), one list for both: every facet field is a `query.filter` key of
# search and explore (registry.ard.service.search_filter), and no other key is.
FACET_FIELDS = (
    "type",
    "tags",
    "capabilities",
    "publisher",
    "version",
    "metadata.capreg.sideEffectMax",
    "metadata.capreg.dataRegions",
    "metadata.capreg.health",
)


class FacetRequest(msgspec.Struct, frozen=True):
    field: str
    limit: int
    min_count: int


async def facet_counts(
    conn: asyncpg.Connection,
    *,
    viewer_tenant: str | None,
    where: EntryFilter,
    text: TextMatch | None,
    facets: Sequence[FacetRequest],
    configured: dict[str, str],
    side_effect_names: Sequence[str],
) -> list[FacetCountRow]:
    """Buckets (field, value, n, other=false, rn), rn ranking them per field (count, then value bytewise), at
    most `limit` of them with at least `min_count`; and per field one row (field, NULL, n, other=true)
    with the entries counted in the buckets beyond `limit`. Counted over the whole matched set."""
    query = Query()
    ctes = matched_ctes(query.bind, viewer_tenant, where, text)
    # Bound only when asked for: a parameter the statement never names has no type (500).
    publisher = publisher_sql("m.tenant", query.bind, configured) if any(f.field == "publisher" for f in facets) else ""
    asked = {f.field for f in facets}
    side_effects = f"{query.bind(list(side_effect_names))}::text[]" if "metadata.capreg.sideEffectMax" in asked else ""
    groups = " UNION ALL ".join(
        f"SELECT {query.bind(facet.field)}::text AS field, g.value, g.n"
        f" FROM ({_facet_groups(facet.field, publisher, side_effects)}) g"
        for facet in facets
    )
    params = (
        f"SELECT * FROM unnest({query.bind([f.field for f in facets])}::text[], "
        f"{query.bind([f.limit for f in facets])}::int[], {query.bind([f.min_count for f in facets])}::int[])"
        " AS p(field, lim, min_count)"
    )
    sql = f"""WITH {ctes}, groups AS ({groups}), params AS ({params}),
        ranked AS (
            SELECT g.field, g.value, g.n, p.lim,
                   row_number() OVER (PARTITION BY g.field ORDER BY g.n DESC, g.value COLLATE "C") AS rn
              FROM groups g JOIN params p ON p.field = g.field
             WHERE g.n >= p.min_count AND g.value IS NOT NULL)
        SELECT field, value, n, false AS other, rn FROM ranked WHERE rn <= lim
        UNION ALL
        SELECT field, NULL, sum(n)::bigint, true, NULL FROM ranked WHERE rn > lim GROUP BY field"""
    return typed_rows(FacetCountRow, await conn.fetch(sql, *query.params))
