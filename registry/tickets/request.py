"""The ticket request (docs/api.md#request-a-ticket): the body POST /v1/tickets, the MCP tool
`request_ticket` and an offer's ticket share, its field shapes, and its parsing into an
auth.policy.TicketRequest whose value rules are checked (auth.policy.validate_ticket_request).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from auth.policy import (
    TicketRequest,
    validate_ticket_request,
)
from registry.core.problems import ErrorItem, invalid_request, json_pointer
from registry.core.wire import Wire

# Used when a request names no ttlSeconds (capped by CAPREG_TICKET_MAX_TTL).
DEFAULT_TTL_SECONDS = 300
# Free-text fields end up in claims, rows and audit events: no control characters (PostgreSQL text
# cannot even hold NUL).
PRINTABLE = r"^[^\x00-\x1f\x7f]*$"


# Field shapes shared by POST /v1/tickets and the MCP tool `request_ticket`.
RequestedScopes = Annotated[list[Annotated[str, msgspec.Meta(max_length=256)]], msgspec.Meta(max_length=64)]
RequestedResources = Annotated[
    list[Annotated[str, msgspec.Meta(pattern=PRINTABLE, max_length=512)]], msgspec.Meta(max_length=256)
]
OnBehalfOf = Annotated[str, msgspec.Meta(pattern=PRINTABLE, max_length=256)]


class TicketRequestBody(Wire, forbid_unknown_fields=True):
    """POST /v1/tickets body. Shapes and types here; value rules in auth.policy.validate_ticket_request."""

    audience: Annotated[str, msgspec.Meta(max_length=129, description="target agent ref 'tenant/agentId'")]
    skill: Annotated[str, msgspec.Meta(max_length=256, description="capability (skill) id")]
    scopes: RequestedScopes
    version: Annotated[str, msgspec.Meta(max_length=256, description="exact version, 'latest' or a range")] = "latest"
    resources: RequestedResources = []
    on_behalf_of: OnBehalfOf | None = None
    ttl_seconds: int | None = None
    max_depth: int = 0
    parent_ticket: Annotated[str, msgspec.Meta(max_length=16384)] | None = None


def ticket_request(body: TicketRequestBody, *, max_ttl: int) -> TicketRequest:
    ttl = body.ttl_seconds if body.ttl_seconds is not None else min(DEFAULT_TTL_SECONDS, max_ttl)
    return TicketRequest(
        audience=body.audience,
        skill=body.skill,
        version=body.version,
        scopes=tuple(body.scopes),
        ttl_seconds=ttl,
        resources=tuple(body.resources),
        on_behalf_of=body.on_behalf_of,
        max_depth=body.max_depth,
    )


def check_request(req: TicketRequest, *, max_ttl: int) -> None:
    errors = validate_ticket_request(req, max_ttl=max_ttl)
    if errors:
        raise invalid_request(
            "the ticket request is invalid",
            [ErrorItem(path=json_pointer(e["path"]), message=e["message"]) for e in errors],
        )
