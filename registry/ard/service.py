"""ARD, the Agentic Resource Discovery API (docs/api.md#ard): the manifest, search, list, exact
lookup and explore, answering what discovery answers the same caller, as ARD catalog entries.

One entry per agent discovery shows the caller (db.ard's matched set, through
db.capabilities.visible_agents_filter), built from public rows only: never schemas, endpoints or instance
URLs. Request shapes are strict and bounded; every refusal is a ProblemError that
registry.core.problems answers in ARD's envelope on /ard/*.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Literal, TypedDict, TypeVar, get_args
from urllib.parse import urlsplit

import asyncpg
import msgspec

from db import ard as ard_queries
from db import capabilities as capability_queries
from db import ranked_search as ranked_queries
from db.ard import A2A_CARD_TYPE, FACET_FIELDS, EntryFilter, FacetRequest, TextMatch
from registry.ard.names import Publishers, agent_urn, parse_agent_urn
from registry.core.cursors import decode_cursor, encode_cursor
from registry.core.date_times import parse_date_time
from registry.core.problems import ErrorItem, ProblemError, invalid_request, not_found
from registry.core.records import MAX_FILTER_VALUES, SIDE_EFFECT_NAMES, SIDE_EFFECT_ORDER, Health
from registry.core.response_cache import DEFAULT_MAX_AGE, CachedResponse, etag_of, expiry
from registry.core.wire import Wire
from registry.discovery import ranking

if TYPE_CHECKING:
    from registry.state import Registry

REGISTRY_TYPE = "application/ai-registry+json"
TEXT_MAX_LENGTH = 512
SEARCH_PAGE_SIZE = 10
LIST_PAGE_SIZE = 20
MAX_PAGE_SIZE = 100
FACET_LIMIT = 20
MAX_FACET_LIMIT = 1000
LIST_FILTER_MAX_LENGTH = 2048
REPRESENTATIVE_QUERIES = 5
HEALTH_VALUES: tuple[str, ...] = get_args(Health)

FilterValue = Annotated[str, msgspec.Meta(max_length=256)]
FilterValues = FilterValue | Annotated[list[FilterValue], msgspec.Meta(max_length=MAX_FILTER_VALUES)]


class QueryModel(Wire, forbid_unknown_fields=True):
    text: Annotated[str, msgspec.Meta(max_length=TEXT_MAX_LENGTH)] | None = None
    filter: Annotated[dict[str, FilterValues], msgspec.Meta(max_length=16)] | None = None


class SearchRequest(Wire, forbid_unknown_fields=True):
    query: QueryModel
    federation: Literal["auto", "referrals", "none"] = "auto"
    page_size: Annotated[int, msgspec.Meta(ge=1, le=MAX_PAGE_SIZE)] = SEARCH_PAGE_SIZE
    page_token: Annotated[str, msgspec.Meta(max_length=1024)] | None = None


class FacetRequestBody(Wire, forbid_unknown_fields=True):
    field: Annotated[str, msgspec.Meta(max_length=128)]
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_FACET_LIMIT)] = FACET_LIMIT
    min_count: Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] = 1


class ResultType(Wire, forbid_unknown_fields=True):
    facets: Annotated[list[FacetRequestBody], msgspec.Meta(min_length=1, max_length=len(FACET_FIELDS))]


class ExploreRequest(Wire, forbid_unknown_fields=True):
    result_type: ResultType
    query: QueryModel | None = None


class ArdEntry(Wire, omit_defaults=True):
    """An ARD catalog entry (ARD's `catalogEntry`) for one agent."""

    identifier: str
    display_name: str
    type: str
    url: str
    description: str | None = None
    tags: list[str] | None = None
    capabilities: list[str] | None = None
    representative_queries: list[str] | None = None
    version: str | None = None
    updated_at: datetime | None = None
    metadata: dict[str, str | int] | None = None


class ArdSearchResult(ArdEntry, omit_defaults=True, kw_only=True):
    score: int
    source: str


class SearchResponse(Wire, omit_defaults=True):
    results: list[ArdSearchResult]
    page_token: str | None = None


class ListResponse(Wire, omit_defaults=True):
    items: list[ArdEntry]
    # ARD's OpenAPI names the next page `pageToken`; section 20 of the contract `nextPageToken`: both.
    page_token: str | None = None
    next_page_token: str | None = None


class FacetBucket(Wire):
    value: str
    count: int


class FacetResult(Wire):
    buckets: list[FacetBucket]
    other_count: int = 0


class ExploreResponse(Wire):
    result_type: Literal["facets"]
    facets: dict[str, FacetResult]


class ManifestHost(Wire, omit_defaults=True):
    display_name: str
    identifier: str | None = None


class Manifest(Wire):
    spec_version: str
    host: ManifestHost
    entries: list[ArdEntry]


# ---------------------------------------------------------------------------
# The manifest


def registry_identifier(public_url: str) -> str:
    """`urn:air:{host}:registry:capreg` where the registry's host is a DNS name, else under
    capreg.invalid (an IP address or a single label is no publisher)."""
    host = (urlsplit(public_url).hostname or "").lower().rstrip(".")
    try:
        ipaddress.ip_address(host)
        is_address = True
    except ValueError:
        is_address = False
    parsed = None if is_address else parse_agent_urn(agent_urn(host, "capreg"))
    return f"urn:air:{parsed.publisher if parsed else 'capreg.invalid'}:registry:capreg"


def manifest(display_name: str, public_url: str) -> Manifest:
    return Manifest(
        spec_version="1.0",
        host=ManifestHost(display_name=display_name, identifier=public_url),
        entries=[
            ArdEntry(
                identifier=registry_identifier(public_url),
                display_name=display_name,
                type=REGISTRY_TYPE,
                url=f"{public_url}/ard",
                description="ARD Registry API over capreg's discovery: search, list, exact lookup and explore of A2A agents.",
                tags=["registry", "a2a", "search"],
            )
        ],
    )


# ---------------------------------------------------------------------------
# Filters


def _bad(path: str, message: str):
    return invalid_request(message, [ErrorItem(path=path, message=message)])


def _values(key: str, value: str | list[str]) -> tuple[str, ...]:
    values = (value,) if isinstance(value, str) else tuple(value)
    if not values:
        raise _bad(f"/query/filter/{key}", f"filter {key!r} needs at least one value")
    return values


# The keys `query.filter` accepts: ARD's one field vocabulary, the fields explore facets on.
SEARCH_FILTER_KEYS = FACET_FIELDS


class _SearchFields(TypedDict, total=False):
    """The EntryFilter fields `query.filter` can set."""

    types: tuple[str, ...]
    tags: tuple[str, ...]
    capabilities: tuple[str, ...]
    tenants: tuple[str, ...]
    versions: tuple[str, ...]
    side_effect_max: int
    regions: tuple[str, ...]
    health: tuple[str, ...]


def search_filter(raw: dict[str, str | list[str]] | None, publishers: Publishers) -> EntryFilter:
    """`query.filter` of search and explore: OR within a key, AND across keys; any other key is 400."""
    fields: _SearchFields = {}
    for key, value in (raw or {}).items():
        values = _values(key, value)
        if key == "type":
            fields["types"] = values
        elif key == "tags":
            fields["tags"] = values
        elif key == "capabilities":
            fields["capabilities"] = values
        elif key == "publisher":
            fields["tenants"] = _tenants_of(values, publishers)
        elif key == "version":
            fields["versions"] = values
        elif key == "metadata.capreg.sideEffectMax":
            unknown = [v for v in values if v not in SIDE_EFFECT_ORDER]
            if unknown:
                raise _bad(f"/query/filter/{key}", f"{key} values must be among {', '.join(SIDE_EFFECT_NAMES)}")
            fields["side_effect_max"] = max(SIDE_EFFECT_ORDER[v] for v in values)
        elif key == "metadata.capreg.dataRegions":
            fields["regions"] = values
        elif key == "metadata.capreg.health":
            if any(v not in HEALTH_VALUES for v in values):
                raise _bad(f"/query/filter/{key}", f"{key} values must be among {', '.join(HEALTH_VALUES)}")
            fields["health"] = values
        else:
            raise _bad(
                f"/query/filter/{key[:100]}",
                f"unsupported filter key {key[:100]!r}; supported: {', '.join(SEARCH_FILTER_KEYS)}",
            )
    return EntryFilter(**fields)


def _tenants_of(domains: tuple[str, ...], publishers: Publishers) -> tuple[str, ...]:
    """The tenants named by publisher domains (an unknown domain names none)."""
    return tuple(t for t in (publishers.tenant_of(d) for d in domains) if t is not None)


LIST_FILTER_FIELDS = ("displayName", "type", "publisherId", "updatedAfter", "createdAfter")


def list_filter(expression: str | None, publishers: Publishers) -> EntryFilter:
    """ARD Appendix A: `field = 'v1,v2' AND field2 > '2026-01-01T00:00:00Z'`. Fields displayName
    (case-insensitive substring), type, publisherId (comma-separated values, OR), createdAfter and
    updatedAfter (ISO 8601, `>` or `=`). Anything else is 400."""
    if not expression or not expression.strip():
        return EntryFilter()
    if len(expression) > LIST_FILTER_MAX_LENGTH:
        raise _bad("filter", f"filter is longer than {LIST_FILTER_MAX_LENGTH} characters")
    values_of: dict[str, tuple[str, ...]] = {}  # displayName, type, publisherId
    moments: dict[str, datetime] = {}  # updatedAfter, createdAfter
    for field, operator, value in _clauses(expression):
        if field not in LIST_FILTER_FIELDS:
            raise _bad(
                "filter", f"unsupported filter field {field[:100]!r}; supported: {', '.join(LIST_FILTER_FIELDS)}"
            )
        if field in values_of or field in moments:
            raise _bad("filter", f"filter field {field!r} is given twice")
        if field in ("updatedAfter", "createdAfter"):
            if operator not in (">", "="):
                raise _bad("filter", f"{field} takes '>' or '='")
            # The one date parser and range check: a value PostgreSQL cannot hold is the caller's 400
            # naming the field, not a DataError from the query.
            moment = parse_date_time(field, value, path="filter")
            assert moment is not None  # a value was given
            moments[field] = moment
            continue
        if operator != "=":
            raise _bad("filter", f"{field} takes '='")
        values = tuple(v.strip() for v in value.split(",") if v.strip())
        if not values:
            raise _bad("filter", f"{field} needs at least one value")
        if len(values) > MAX_FILTER_VALUES:  # as query.filter's lists of search and explore
            raise _bad("filter", f"{field} takes at most {MAX_FILTER_VALUES} values, got {len(values)}")
        values_of[field] = values
    return EntryFilter(
        display_name=values_of.get("displayName"),
        types=values_of.get("type"),
        tenants=_tenants_of(values_of["publisherId"], publishers) if "publisherId" in values_of else None,
        updated_after=moments.get("updatedAfter"),
        created_after=moments.get("createdAfter"),
    )


def _clauses(expression: str) -> list[tuple[str, str, str]]:
    """The `field op value` clauses of an AND-joined expression, read left to right in one pass
    (no regular expression: the input is the caller's)."""
    clauses: list[tuple[str, str, str]] = []
    text, i, n = expression, 0, len(expression)

    def skip_space(at: int) -> int:
        while at < n and text[at].isspace():
            at += 1
        return at

    while True:
        i = skip_space(i)
        start = i
        while i < n and (text[i].isascii() and (text[i].isalnum() or text[i] in "._")):
            i += 1
        field = text[start:i]
        if not field:
            raise _bad("filter", f"expected a field name at character {start}")
        i = skip_space(i)
        if text.startswith(">=", i) or text.startswith("<=", i) or text.startswith("!=", i):
            raise _bad("filter", f"operator {text[i : i + 2]!r} is not supported: use '=' (or '>' for dates)")
        if i >= n or text[i] not in "=>":
            raise _bad("filter", f"expected '=' or '>' after {field[:100]!r}")
        operator = text[i]
        i = skip_space(i + 1)
        if i < n and text[i] in "'\"":
            quote = text[i]
            end = text.find(quote, i + 1)
            if end < 0:
                raise _bad("filter", "unterminated quoted value")
            value, i = text[i + 1 : end], end + 1
        else:
            start = i
            while i < n and not text[i].isspace():
                i += 1
            value = text[start:i]
            if not value:
                raise _bad("filter", f"expected a value for {field[:100]!r}")
        clauses.append((field, operator, value))
        i = skip_space(i)
        if i >= n:
            return clauses
        if text[i : i + 3].upper() != "AND" or (i + 3 < n and not text[i + 3].isspace()):
            raise _bad("filter", f"expected AND at character {i}")
        i += 3


# ---------------------------------------------------------------------------
# Text, scores and page tokens


async def text_match(registry: Registry, conn: asyncpg.Connection, viewer: str | None, text: str) -> TextMatch | None:
    """The agents `text` matches for `viewer`, each with its best skill's score: ranked search's
    candidates (registry.discovery.ranking.propose) that are the latest in force (the marker); None
    when no word of `text` counts. Visibility and filters are decided after, on the agents."""
    words = ranking.query_words(text)
    if not words:
        return None
    hits = await ranking.propose(conn, registry.search, text, ranking.Proposal(viewer=viewer, latest_only=True))
    best: dict[tuple[str, str], int] = {}
    for row in await ranked_queries.latest_hits(conn, hits) if hits else []:
        key = (row.tenant, row.agent_id)
        best[key] = max(best.get(key, 0), row.score)
    return TextMatch(tenants=[t for t, _ in best], agents=[a for _, a in best], scores=list(best.values()))


def ard_score(score: int) -> int:
    """An agent's ranked-search score (its best skill's) as ARD's integer 0-100: ranked search's
    relevance (registry.discovery.ranking.relevance, in [0, 1]) times 100, rounded down; monotone, so scores
    never increase down a list in relevance order."""
    return max(0, min(100, int(ranking.relevance(score) * 100 + 1e-9)))


def _fingerprint(*parts: object) -> str:
    return hashlib.sha256(msgspec.json.encode(parts)).hexdigest()[:16]


PageKey = TypeVar("PageKey", bound=tuple[object, ...])


def _page_key(token: str | None, kind: str, fingerprint: str, shape: type[PageKey]) -> PageKey | None:
    """A page token as `shape`: (kind, fingerprint, *the keyset position); 400 for a token this
    registry did not issue for the same question (kind, caller's view, text, filter)."""
    if token is None:
        return None
    try:
        decoded = decode_cursor(token, shape)
    except ProblemError:
        raise _bad("/pageToken", "pageToken is not one this registry issued") from None
    if decoded[0] != kind or decoded[1] != fingerprint:
        raise _bad("/pageToken", "pageToken was issued for another query")
    return decoded


# ---------------------------------------------------------------------------
# Answers


class ArdContext(msgspec.Struct, frozen=True):
    """What shaping an entry needs: where the registry is, and its publishers."""

    public_url: str
    publishers: Publishers
    viewer: str | None

    @property
    def source(self) -> str:
        return f"{self.public_url}/ard"


def _entry(ctx: ArdContext, row: ard_queries.EntryRow) -> ArdEntry:
    tenant, agent_id = row.tenant, row.agent_id
    skills = row.skills
    tags = sorted({tag for skill in skills for tag in skill["tags"]})
    regions = sorted({region for skill in skills for region in skill["regions"]})
    examples = [e for skill in skills for e in skill["examples"] if isinstance(e, str)]
    side_effect = max((skill["sideEffectRank"] for skill in skills), default=0)
    return ArdEntry(
        identifier=agent_urn(ctx.publishers.domain_of(tenant), agent_id),
        display_name=row.name or agent_id,
        type=A2A_CARD_TYPE,
        url=f"{ctx.public_url}/v1/agents/{tenant}/{agent_id}/.well-known/agent-card.json",
        description=row.description,
        tags=tags or None,
        capabilities=[skill["id"] for skill in skills] or None,
        representative_queries=examples[:REPRESENTATIVE_QUERIES] if len(examples) >= 2 else None,
        version=row.version,
        updated_at=row.updated_at,
        metadata={
            "capreg.ref": f"{tenant}/{agent_id}",
            "capreg.sideEffectMax": SIDE_EFFECT_NAMES[side_effect],
            # ARD metadata values are scalars: the regions its skills name, comma-separated.
            "capreg.dataRegions": ",".join(regions),
            "capreg.health": row.health,
            "capreg.liveInstances": row.live_instances,
            "capreg.publisherDomain": "configured" if ctx.publishers.is_configured(tenant) else "default",
        },
    )


async def _entries(
    conn: asyncpg.Connection, ctx: ArdContext, keys: list[tuple[str, str]]
) -> tuple[list[ArdEntry], list]:
    """Entries for the keys, in the keys' order, and the moments their lease figures change by
    themselves (a cached answer ends at the first)."""
    rows = {(r.tenant, r.agent_id): r for r in await ard_queries.entry_rows(conn, keys)}
    found = [rows[key] for key in keys if key in rows]
    return [_entry(ctx, row) for row in found], [row.lease_until for row in found]


class Answer(msgspec.Struct):
    """An answer and how long it stays true: the change sequence read before its queries, and the
    moments it may change by time alone (leases lapsing, versions coming into force)."""

    body: object
    seq: int
    boundaries: list
    # Depends on the leases of agents not shown (health filter or facet): kept one second at most.
    short: bool = False


_encoder = msgspec.json.Encoder()


async def cached_answer(registry: Registry, key: tuple, compute: Callable[[], Awaitable[Answer]]) -> CachedResponse:
    """The encoded answer for `key` (the question: endpoint, caller's view, registry URL, request
    bytes) from the per-process response cache (exact: registry.core.response_cache), else computed
    once for everyone asking it at the same moment (registry.core.read_admission.ReadAdmission.once)."""
    seq = registry.watcher.cache_seq()
    entry = registry.responses.get(key, seq, registry.clock.monotonic())
    if entry is not None:
        return entry
    return await registry.reads.once(key, seq, lambda: _computed(registry, key, compute))


async def _computed(registry: Registry, key: tuple, compute: Callable[[], Awaitable[Answer]]) -> CachedResponse:
    answer = await compute()
    body = _encoder.encode(answer.body)
    expires = expiry(
        registry.clock.monotonic(),
        registry.clock.now(),
        answer.boundaries,
        max_age=1.0 if answer.short else DEFAULT_MAX_AGE,
    )
    entry = CachedResponse(body=body, etag=etag_of(body), seq=answer.seq, expires=expires)
    registry.responses.put(key, entry, registry.watcher.cache_seq())
    return entry


@contextlib.asynccontextmanager
async def _snapshot(registry: Registry) -> AsyncIterator[tuple[asyncpg.Connection, int, list]]:
    """One read-only snapshot, so a page and its entries come from the same moment (the latest
    marker's among them); with the change sequence and the next effective moment read first
    (db.capabilities.snapshot_bounds)."""
    now = registry.clock.now()
    async with registry.reads.connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        seq, next_effective = await capability_queries.snapshot_bounds(conn, now=now)
        yield conn, seq, [next_effective]


async def search(registry: Registry, ctx: ArdContext, request: SearchRequest) -> Answer:
    text = request.query.text
    if text is None or not text.strip():
        raise _bad("/query/text", "query.text is required (1 to 512 characters)")
    where = search_filter(request.query.filter, ctx.publishers)
    fingerprint = _fingerprint("search", ctx.viewer, text, request.query.filter)
    key = _page_key(request.page_token, "s", fingerprint, tuple[str, str, int, str])
    after = key[2:] if key is not None else None
    async with _snapshot(registry) as (conn, seq, boundaries):
        plan = await text_match(registry, conn, ctx.viewer, text)
        if plan is None:
            return Answer(SearchResponse(results=[]), seq, boundaries)
        rows = await ard_queries.ranked_page(
            conn,
            viewer_tenant=ctx.viewer,
            where=where,
            text=plan,
            after=after,
            limit=request.page_size + 1,
        )
        page = rows[: request.page_size]
        entries, leases = await _entries(conn, ctx, [(r.tenant, r.agent_id) for r in page])
    scores = {(r.tenant, r.agent_id): r.score for r in page}
    results = [
        ArdSearchResult(**msgspec.structs.asdict(entry), score=ard_score(scores[_key_of(entry)]), source=ctx.source)
        for entry in entries
    ]
    token = None
    if len(rows) > request.page_size:
        last = page[-1]
        token = encode_cursor(["s", fingerprint, last.score, last.tie])
    return Answer(
        SearchResponse(results=results, page_token=token), seq, boundaries + leases, short=where.health is not None
    )


def _key_of(entry: ArdEntry) -> tuple[str, str]:
    assert entry.metadata is not None  # every entry this module builds carries capreg.ref (_entry)
    tenant, _, agent_id = str(entry.metadata["capreg.ref"]).partition("/")
    return tenant, agent_id


async def list_agents(
    registry: Registry,
    ctx: ArdContext,
    *,
    expression: str | None,
    order_by: str | None,
    page_size: int,
    page_token: str | None,
) -> Answer:
    if order_by is not None and order_by.strip().lower() not in ("identifier", "identifier asc"):
        raise _bad("orderBy", "entries are listed in identifier order only (orderBy=identifier)")
    where = list_filter(expression, ctx.publishers)
    fingerprint = _fingerprint("list", ctx.viewer, expression or "")
    key = _page_key(page_token, "l", fingerprint, tuple[str, str, str])
    async with _snapshot(registry) as (conn, seq, boundaries):
        rows = await ard_queries.identifier_page(
            conn,
            viewer_tenant=ctx.viewer,
            where=where,
            configured=ctx.publishers.configured,
            after=key[2] if key is not None else None,
            limit=page_size + 1,
        )
        page = rows[:page_size]
        entries, leases = await _entries(conn, ctx, [(r.tenant, r.agent_id) for r in page])
    token = encode_cursor(["l", fingerprint, page[-1].identifier]) if len(rows) > page_size else None
    return Answer(ListResponse(items=entries, page_token=token, next_page_token=token), seq, boundaries + leases)


async def lookup(registry: Registry, ctx: ArdContext, identifier: str) -> Answer:
    """The entry of one identifier: 404 alike for an absent agent and one the caller may not see."""
    urn = parse_agent_urn(identifier)
    if urn is None:
        raise _bad("identifier", "identifier is not of the form urn:air:{publisher}:{agentId}")
    tenant = ctx.publishers.tenant_of(urn.publisher)
    if tenant is None:
        raise not_found("no such agent")
    where = EntryFilter(agent=(tenant, urn.agent_id))
    async with _snapshot(registry) as (conn, seq, boundaries):
        rows = await ard_queries.ranked_page(
            conn, viewer_tenant=ctx.viewer, where=where, text=None, after=None, limit=1
        )
        entries, leases = await _entries(conn, ctx, [(r.tenant, r.agent_id) for r in rows])
    if not entries:
        raise not_found("no such agent")
    return Answer(entries[0], seq, boundaries + leases)


async def explore(registry: Registry, ctx: ArdContext, request: ExploreRequest) -> Answer:
    query = request.query or QueryModel()
    where = search_filter(query.filter, ctx.publishers)
    facets: list[FacetRequest] = []
    for i, facet in enumerate(request.result_type.facets):
        if facet.field not in FACET_FIELDS:
            raise _bad(
                f"/resultType/facets/{i}/field",
                f"unsupported facet field {facet.field[:100]!r}; supported: {', '.join(FACET_FIELDS)}",
            )
        if any(f.field == facet.field for f in facets):
            raise _bad(f"/resultType/facets/{i}/field", f"facet {facet.field!r} is requested twice")
        facets.append(FacetRequest(field=facet.field, limit=facet.limit, min_count=facet.min_count))
    short = where.health is not None or any(f.field == "metadata.capreg.health" for f in facets)
    async with _snapshot(registry) as (conn, seq, boundaries):
        text = None
        if query.text and query.text.strip():
            text = await text_match(registry, conn, ctx.viewer, query.text)
            if text is None:  # no word that counts: the matched set is empty, as in search
                empty = ExploreResponse(result_type="facets", facets={f.field: FacetResult(buckets=[]) for f in facets})
                return Answer(empty, seq, boundaries)
        rows = await ard_queries.facet_counts(
            conn,
            viewer_tenant=ctx.viewer,
            where=where,
            text=text,
            facets=facets,
            configured=ctx.publishers.configured,
            side_effect_names=SIDE_EFFECT_NAMES,
        )
    results = {f.field: FacetResult(buckets=[], other_count=0) for f in facets}
    for row in sorted((r for r in rows if not r.other), key=lambda r: r.rn or 0):
        assert row.value is not None  # a bucket has a value and a rank (db.ard.facet_counts)
        results[row.field].buckets.append(FacetBucket(value=row.value, count=row.n))
    for row in rows:
        if row.other:
            results[row.field].other_count = row.n
    return Answer(ExploreResponse(result_type="facets", facets=results), seq, boundaries, short=short)
