"""HTTP: ARD, the Agentic Resource Discovery API (docs/api.md#ard): the manifest at
/.well-known/ard.json and the Registry API under /ard. Errors on /ard/* are ARD's envelope
(registry.core.problems.is_ard_path); the service is registry.ard.service.
"""

from __future__ import annotations

from typing import Annotated

from litestar import Request, Response, get, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import PathParameter, QueryParameter

from registry.ard import service as ard
from registry.core.problems import PROBLEM_MEDIA_TYPE, TITLES, ArdError, Problem
from registry.core.response_cache import CachedResponse, cache_key, seen_by_tenant
from registry.discovery.service import viewer_tenant
from registry.state import registry_of
from registry.web.authentication import optional_caller
from registry.web.request_guard import body_schema, read_body


def _ard_errors(*statuses: int) -> dict[int, ResponseSpec]:
    return {
        status: ResponseSpec(
            data_container=ArdError,
            media_type="application/json",
            description=TITLES.get(status, "Error"),
            generate_examples=False,
        )
        for status in sorted({400, 429, 503, *statuses})
    }


async def _context(request: Request) -> ard.ArdContext:
    """The caller's view (discovery's: registry.discovery.service.viewer_tenant) and where the registry is."""
    registry = registry_of(request)
    caller = await optional_caller(request)  # a presented token must be valid: 401 otherwise
    return ard.ArdContext(
        public_url=registry.public_url(),
        publishers=registry.publishers,
        viewer=viewer_tenant(caller),
    )


_PRIVATE = {"Cache-Control": "private, no-store", "Vary": "Authorization"}


def _answer(entry: CachedResponse) -> Response:
    # Answers are cached per process (registry.ard.service.cached_answer), never by intermediaries.
    return Response(entry.body, media_type="application/json", headers=_PRIVATE)


@get(
    "/.well-known/ard.json",
    summary="ARD manifest: this registry and where its ARD Registry API is",
    responses={
        503: ResponseSpec(data_container=Problem, media_type=PROBLEM_MEDIA_TYPE, description="Service Unavailable")
    },
)
async def ard_manifest(request: Request) -> ard.Manifest:
    registry = registry_of(request)
    return ard.manifest(registry.settings.display_name, registry.public_url())


@post(
    "/ard/search",
    status_code=200,
    summary="ARD search: agents ranked by relevance to query.text (discovery's visibility)",
    dependencies=body_schema(ard.SearchRequest),
    responses=_ard_errors(400, 401, 413),
)
async def ard_search(request: Request) -> Response[ard.SearchResponse]:
    ctx, registry = await _context(request), registry_of(request)

    async def compute() -> ard.Answer:
        return await ard.search(registry, ctx, await read_body(request, ard.SearchRequest))

    return _answer(
        await ard.cached_answer(
            registry, cache_key("ard-search", seen_by_tenant(ctx.viewer), ctx.public_url, await request.body()), compute
        )
    )


@get(
    "/ard/agents",
    summary="ARD list: visible agents in identifier order",
    responses=_ard_errors(400, 401),
)
async def ard_list(
    request: Request,
    filter_: Annotated[
        str | None,
        QueryParameter(
            name="filter",
            max_length=ard.LIST_FILTER_MAX_LENGTH,
            description="ARD Appendix A: displayName, type, publisherId, updatedAfter, createdAfter",
        ),
    ] = None,
    order_by: Annotated[
        str | None, QueryParameter(name="orderBy", max_length=64, description="identifier (the only order)")
    ] = None,
    page_size: Annotated[int, QueryParameter(name="pageSize", ge=1, le=ard.MAX_PAGE_SIZE)] = ard.LIST_PAGE_SIZE,
    page_token: Annotated[str | None, QueryParameter(name="pageToken", max_length=1024)] = None,
) -> Response[ard.ListResponse]:
    ctx, registry = await _context(request), registry_of(request)

    async def compute() -> ard.Answer:
        return await ard.list_agents(
            registry,
            ctx,
            expression=filter_,
            order_by=order_by,
            page_size=page_size,
            page_token=page_token,
        )

    key = cache_key("ard-list", seen_by_tenant(ctx.viewer), ctx.public_url, filter_, order_by, page_size, page_token)
    return _answer(await ard.cached_answer(registry, key, compute))


@get(
    "/ard/agents/{identifier:str}",
    summary="ARD exact lookup of one agent by its urn:air identifier (percent-encoded as one segment)",
    responses=_ard_errors(400, 401, 404),
)
async def ard_lookup(
    request: Request,
    identifier: Annotated[str, PathParameter(max_length=1024, description="urn:air:{publisher}:{agentId}")],
) -> Response[ard.ArdEntry]:
    ctx, registry = await _context(request), registry_of(request)

    async def compute() -> ard.Answer:
        return await ard.lookup(registry, ctx, identifier)

    key = cache_key("ard-agent", seen_by_tenant(ctx.viewer), ctx.public_url, identifier)
    return _answer(await ard.cached_answer(registry, key, compute))


@post(
    "/ard/explore",
    status_code=200,
    summary="ARD explore: facet counts over every visible agent that matches",
    dependencies=body_schema(ard.ExploreRequest),
    responses=_ard_errors(400, 401, 413),
)
async def ard_explore(request: Request) -> Response[ard.ExploreResponse]:
    ctx, registry = await _context(request), registry_of(request)

    async def compute() -> ard.Answer:
        return await ard.explore(registry, ctx, await read_body(request, ard.ExploreRequest))

    return _answer(
        await ard.cached_answer(
            registry,
            cache_key("ard-explore", seen_by_tenant(ctx.viewer), ctx.public_url, await request.body()),
            compute,
        )
    )


ROUTES = [ard_manifest, ard_search, ard_list, ard_lookup, ard_explore]
