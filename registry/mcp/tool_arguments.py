"""The arguments of the MCP tools (registry.mcp.tools): msgspec Structs whose JSON Schemas are what
`tools/list` shows, bounded as the HTTP API bounds the same inputs (discovery's query limits, the
ticket request's types)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from registry.core.records import MAX_FILTER_VALUES, SideEffect
from registry.core.wire import Wire
from registry.discovery.service import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    QUERY_MAX_LENGTH,
    REGION_MAX_LENGTH,
    VERSION_REQUEST_MAX_LENGTH,
)
from registry.offers import service as offer_service
from registry.tickets.idempotency import IDEMPOTENCY_KEY_MAX_LENGTH
from registry.tickets.request import OnBehalfOf, RequestedResources, RequestedScopes

REF_MAX_LENGTH = 64 + 1 + 64 + 1 + 128 + 1 + VERSION_REQUEST_MAX_LENGTH

Ref = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=REF_MAX_LENGTH,
        description=(
            "capability ref 'tenant/agentId/skillId@version' as search_capabilities returns it in `ref`; "
            "the version may be exact ('2.0.0'), 'latest', or a range ('^2', '~2.1', '>=2,<3'); "
            "without '@version' the latest is meant"
        ),
    ),
]


# The one spelling of the side-effect ceiling both search_capabilities and find_capability take.
SideEffectMax = Annotated[
    SideEffect,
    msgspec.Meta(description="the most dangerous side effect you accept: none < idempotent < write < destructive"),
]


class SearchArguments(Wire, forbid_unknown_fields=True):
    q: (
        Annotated[
            str,
            msgspec.Meta(
                max_length=QUERY_MAX_LENGTH,
                description="words to look for in capability ids, names, descriptions and tags",
            ),
        ]
        | None
    ) = None
    tag: (
        Annotated[
            list[Annotated[str, msgspec.Meta(max_length=128)]],
            msgspec.Meta(max_length=MAX_FILTER_VALUES, description="tags the capability must all carry"),
        ]
        | Annotated[str, msgspec.Meta(max_length=128)]
        | None
    ) = None
    side_effect_max: SideEffectMax | None = None
    region: (
        Annotated[
            str,
            msgspec.Meta(
                max_length=REGION_MAX_LENGTH,
                description="data region the capability must serve (e.g. 'eu')",
            ),
        ]
        | None
    ) = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_LIMIT, description=f"results per page, at most {MAX_LIMIT}")] = (
        DEFAULT_LIMIT
    )
    cursor: (
        Annotated[
            str,
            msgspec.Meta(
                max_length=1024,
                description="`nextCursor` of the previous page, to read the next one",
            ),
        ]
        | None
    ) = None


class CapabilityArguments(Wire, forbid_unknown_fields=True):
    ref: Ref


class ToolDefinitionArguments(Wire, forbid_unknown_fields=True):
    ref: Ref
    format: Annotated[
        Literal["mcp", "openai"],
        msgspec.Meta(
            description="'mcp' for an MCP tool definition, 'openai' for an OpenAI function-calling tool",
        ),
    ] = "mcp"


class TicketArguments(Wire, forbid_unknown_fields=True):
    ref: Ref
    scopes: Annotated[
        RequestedScopes,
        msgspec.Meta(
            description="the capability scopes the ticket grants: only what the call needs, a subset of the "
            "capability's `scopes` and of your token's",
        ),
    ]
    ttl_seconds: (
        Annotated[
            int,
            msgspec.Meta(
                description="ticket lifetime in seconds (the registry caps it, 900 by default); 300 when omitted",
            ),
        ]
        | None
    ) = None
    on_behalf_of: (
        Annotated[
            OnBehalfOf,
            msgspec.Meta(
                description="the end user the call is made for, when there is one",
            ),
        ]
        | None
    ) = None
    resources: Annotated[
        RequestedResources,
        msgspec.Meta(
            description="restrict the ticket to these resources (e.g. 'invoice:inv-2026-091'); omitted: all",
        ),
    ] = []
    idempotency_key: (
        Annotated[
            str,
            msgspec.Meta(
                min_length=1,
                max_length=IDEMPOTENCY_KEY_MAX_LENGTH,
                description="repeat a request with the same key and arguments to get the same ticket instead of a new one",
            ),
        ]
        | None
    ) = None


class FindArguments(Wire, forbid_unknown_fields=True):
    need: Annotated[
        str,
        msgspec.Meta(
            min_length=1,
            max_length=QUERY_MAX_LENGTH,
            description="what you need done, in plain words (e.g. 'look up an unpaid invoice'); typos and word forms are fine",
        ),
    ]
    region: (
        Annotated[
            str,
            msgspec.Meta(
                max_length=REGION_MAX_LENGTH,
                description="the data region the work must stay in (e.g. 'eu'), if any",
            ),
        ]
        | None
    ) = None
    side_effect_max: SideEffectMax | None = None
    limit: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            le=offer_service.MAX_LIMIT,
            description=f"offers to return, best first (1 to {offer_service.MAX_LIMIT})",
        ),
    ] = offer_service.DEFAULT_LIMIT
