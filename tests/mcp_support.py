"""Speaking MCP's JSON-RPC to the in-process app (tests/mcp): a message, a POST to /mcp, a tools/call."""

from __future__ import annotations

import json

import httpx

TOOL_NAMES = {"search_capabilities", "get_capability", "get_tool_definition", "request_ticket", "find_capability"}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def rpc(method: str, params: dict | None = None, id_: int | str = 1) -> dict:
    message = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        message["params"] = params
    return message


async def post(client, body, headers: dict | None = None, **kwargs) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await client.post("/mcp", content=content, headers={**MCP_HEADERS, **(headers or {})}, **kwargs)


async def call(client, name: str, arguments, headers: dict | None = None) -> dict:
    response = await post(client, rpc("tools/call", {"name": name, "arguments": arguments}), headers)
    assert response.status_code == 200, response.text
    return response.json()["result"]
