"""HTTP: A2A's JSON-RPC binding at an agent's registry URL (docs/api.md#a2a-json-rpc).

`POST /v1/agents/{tenant}/{agentId}` is the public card's `JSONRPC` interface, beside `HTTP+JSON`
at the same URL, so that a2a-sdk's default client (JSON-RPC only) can fetch the extended card.
`GetExtendedAgentCard` goes through the same code path as `GET .../extendedAgentCard`
(registry.release.routes.serve_extended_card): same bearer-token checks, same audit, same card.
Every other method is A2A's unsupported-operation error (registry.a2a.rpc).

What concerns the JSON-RPC message is answered in JSON-RPC (HTTP 200, as A2A's JSON-RPC servers
do); what concerns the HTTP request is answered as on every other endpoint: a missing or bad token
is 401 and an agent the caller may not see is 404, both problem+json.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import PathParameter

from registry.a2a import rpc as a2a_rpc
from registry.a2a.rpc import RpcError
from registry.core.problems import problem_responses
from registry.core.records import AGENT_ID_PATTERN, TENANT_PATTERN
from registry.core.wire import Wire
from registry.release.routes import serve_extended_card
from registry.web.authentication import optional_caller
from registry.web.request_guard import body_schema

TenantPath = Annotated[str, PathParameter(pattern=TENANT_PATTERN, description="tenant id")]
AgentPath = Annotated[str, PathParameter(pattern=AGENT_ID_PATTERN, description="agent id")]


class JsonRpcRequest(Wire, forbid_unknown_fields=True):
    """A JSON-RPC 2.0 request; the one method answered is `GetExtendedAgentCard` with params `{}`."""

    jsonrpc: str
    method: str
    id: str | int | None = None
    params: dict[str, Any] = {}


class JsonRpcError(Wire):
    code: int
    message: str
    data: list[dict[str, Any]] = []


class JsonRpcResponse(Wire):
    """`result` (the extended agent card) or `error` (-32700 parse error, -32600 invalid request,
    -32602 invalid params, -32004 unsupported operation, -32009 version not supported)."""

    jsonrpc: str
    id: str | int | None
    result: dict[str, Any] | None = None
    error: JsonRpcError | None = None


async def _bounded_body(request: Request) -> bytes:
    """The body, read no further than one byte past the JSON-RPC bound (registry.a2a.rpc)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > a2a_rpc.MAX_MESSAGE_BYTES:
            break
    return b"".join(chunks)


def _answer(message: dict[str, Any]) -> Response:
    return Response(msgspec.json.encode(message), status_code=200, media_type="application/json")


@post(
    "/v1/agents/{tenant:str}/{agent_id:str}",
    status_code=200,
    summary="A2A JSON-RPC binding: GetExtendedAgentCard (the registry serves cards only)",
    description=(
        "The public card's `JSONRPC` interface. `GetExtendedAgentCard` (params `{}`) answers "
        "`{jsonrpc, id, result: <the extended card>}`, the same card, checks and audit as "
        "`GET .../extendedAgentCard`: no or a bad token is 401, an agent the caller may not see 404. "
        "Any other method is the A2A error -32004 (unsupported operation): the agent's own interfaces "
        "are in the extended card. Malformed messages are JSON-RPC errors (-32700, -32600, -32602) "
        f"with HTTP 200; bodies are at most {a2a_rpc.MAX_MESSAGE_BYTES} bytes."
    ),
    responses={
        200: ResponseSpec(data_container=JsonRpcResponse, description="a JSON-RPC response (result or error)"),
        **problem_responses(400, 401, 404),
    },
    dependencies=body_schema(JsonRpcRequest),
)
async def a2a_json_rpc(request: Request, tenant: TenantPath, agent_id: AgentPath) -> Response:
    await optional_caller(request)  # a presented token must be valid (401 otherwise), whatever the method
    try:
        call = a2a_rpc.read_call(await _bounded_body(request))
        a2a_rpc.check_version(request.headers.get("a2a-version"), call.id)
        if call.method != a2a_rpc.EXTENDED_CARD_METHOD:
            raise a2a_rpc.unsupported(call)
    except RpcError as error:
        return _answer(a2a_rpc.error_message(error))
    # Authenticates again from the same request state (verified once): 401 without a token.
    card = await serve_extended_card(request, tenant, agent_id)
    return _answer(a2a_rpc.result_message(call.id, card))


ROUTES = [a2a_json_rpc]
