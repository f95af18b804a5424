"""HTTP: public discovery of capabilities, and the change feed."""

from __future__ import annotations

from typing import Annotated, Literal

from litestar import Request, Response, get
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import QueryParameter

from registry.core.problems import problem_responses
from registry.core.records import MAX_FILTER_VALUES, SIDE_EFFECT_NAMES
from registry.core.response_cache import CachedResponse, cache_key, etag_matches, seen_by_tenant
from registry.discovery.service import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    QUERY_MAX_LENGTH,
    REGION_MAX_LENGTH,
    ChangePage,
    DiscoveryPage,
    DiscoveryQuery,
    change_page,
    discovery_page,
    viewer_tenant,
)
from registry.state import registry_of
from registry.web.authentication import optional_caller


async def _viewer(request: Request) -> str | None:
    return viewer_tenant(await optional_caller(request))


def _cached_answer(request: Request, entry: CachedResponse, viewer: str | None) -> Response:
    headers = {"ETag": entry.etag, **(_PUBLIC_HEADERS if viewer is None else _PRIVATE_HEADERS)}
    if etag_matches(request.headers.get("if-none-match"), entry.etag):
        return Response(b"", status_code=304, headers=headers)
    return Response(entry.body, media_type="application/json", headers=headers)


def _raw_key(request: Request, viewer: str | None) -> tuple:
    """The key of a discovery question in its exact wording (an alias of its normalised entry)."""
    return cache_key("discover-raw", seen_by_tenant(viewer), request.scope["query_string"])


async def _answer_from_cache(request: Request) -> Response | None:
    """Before parameters are parsed: a question asked before, in the same words, is answered from
    the cache (a cached entry exists only for a query that parsed and validated)."""
    registry = registry_of(request)
    viewer = await _viewer(request)
    entry = registry.responses.get(_raw_key(request, viewer), registry.watcher.cache_seq(), registry.clock.monotonic())
    return _cached_answer(request, entry, viewer) if entry is not None else None


@get(
    "/v1/capabilities",
    summary="Discover capabilities (public metadata only)",
    responses={
        304: ResponseSpec(
            data_container=None, description="Not Modified: the page is unchanged since the ETag in If-None-Match"
        ),
        **problem_responses(400, 401),
    },
    before_request=_answer_from_cache,
)
async def discover(
    request: Request,
    q: Annotated[
        str | None, QueryParameter(max_length=QUERY_MAX_LENGTH, description="text over id, name, description, tags")
    ] = None,
    skill: Annotated[
        str | None, QueryParameter(max_length=129, description="exact skill id, or a prefix ending in *")
    ] = None,
    tag: Annotated[
        list[str] | None,
        QueryParameter(
            max_items=MAX_FILTER_VALUES, description=f"repeatable, at most {MAX_FILTER_VALUES}; all must match"
        ),
    ] = None,
    side_effect_max: Annotated[
        str | None,
        QueryParameter(
            name="sideEffectMax",
            description=f"{', '.join(SIDE_EFFECT_NAMES[:-1])} or {SIDE_EFFECT_NAMES[-1]}",
            schema_extra={"enum": list(SIDE_EFFECT_NAMES)},
        ),
    ] = None,
    region: Annotated[str | None, QueryParameter(max_length=REGION_MAX_LENGTH)] = None,
    agent: Annotated[str | None, QueryParameter(max_length=64)] = None,
    tenant: Annotated[str | None, QueryParameter(max_length=64)] = None,
    status: Annotated[Literal["active", "deprecated"] | None, QueryParameter()] = None,
    versions: Annotated[Literal["latest", "all"], QueryParameter()] = "latest",
    health: Annotated[
        Literal["healthy"] | None, QueryParameter(description="healthy: only agents with a live instance")
    ] = None,
    limit: Annotated[
        int, QueryParameter(ge=1, le=MAX_LIMIT, description=f"page size, at most {MAX_LIMIT}")
    ] = DEFAULT_LIMIT,
    cursor: Annotated[str | None, QueryParameter(max_length=1024)] = None,
) -> Response[DiscoveryPage]:
    registry = registry_of(request)
    viewer = await _viewer(request)
    # Routers ask the same few questions over and over: discovery_page answers from the per-process
    # cache, which is exact (registry.core.response_cache), and a matching If-None-Match without any query.
    entry = await discovery_page(
        registry,
        viewer,
        DiscoveryQuery(
            q=q,
            skill=skill,
            tags=tuple(tag) if tag else None,
            side_effect_max=side_effect_max,
            region=region,
            agent=agent,
            tenant=tenant,
            status=status,
            versions=versions,
            health=health,
            limit=limit,
            cursor=cursor,
        ),
    )
    # The same entry under the query's exact wording, for `_answer_from_cache` next time.
    # An alias of the normalised entry: charged its key only (the body is the same object).
    registry.responses.put(_raw_key(request, viewer), entry, registry.watcher.cache_seq(), size=256)
    return _cached_answer(request, entry, viewer)


_PUBLIC_HEADERS = {"Cache-Control": "no-cache", "Vary": "Authorization"}
_PRIVATE_HEADERS = {"Cache-Control": "private, no-cache", "Vary": "Authorization"}


@get(
    "/v1/changes",
    summary="Change feed: committed changes after a sequence number, long-polling when empty",
    responses=problem_responses(400, 401),
)
async def changes(
    request: Request,
    after: Annotated[int, QueryParameter(ge=0, le=2**63 - 1)] = 0,
    wait: Annotated[int, QueryParameter(ge=0, le=30, description="seconds to long-poll when empty")] = 0,
    limit: Annotated[int, QueryParameter(ge=1, le=1000)] = 500,
) -> ChangePage:
    registry = registry_of(request)
    return await change_page(registry, await _viewer(request), after=after, wait=wait, limit=limit)


ROUTES = [discover, changes]
