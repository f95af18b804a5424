"""registry.mcp.jsonrpc, in process: initialize, the transport's rules, malformed JSON-RPC and bad
tokens, each answered as the protocol says (never a 5xx)."""

from __future__ import annotations

import json

import pytest

from tests.mcp_support import TOOL_NAMES, post, rpc


async def test_initialize_negotiates_and_is_stateless(client):
    response = await post(
        client,
        rpc(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        ),
    )
    assert response.status_code == 200
    assert "mcp-session-id" not in response.headers
    result = response.json()["result"]
    assert result["protocolVersion"] == "2025-06-18"
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert "side" in result["instructions"].lower()
    newer = await post(client, rpc("initialize", {"protocolVersion": "2099-01-01"}))
    assert newer.json()["result"]["protocolVersion"] == "2025-11-25"
    # No initialize needed first: any replica answers any request.
    listed = await post(client, rpc("tools/list"), {"MCP-Protocol-Version": "2025-11-25"})
    assert {tool["name"] for tool in listed.json()["result"]["tools"]} == TOOL_NAMES


@pytest.mark.parametrize(
    "body, status, code",
    [
        (b"{not json", 400, -32700),
        (b"[" + json.dumps(rpc("tools/list")).encode() + b"]", 400, -32600),
        (b"[]", 400, -32600),
        (b"7", 400, -32600),
        (json.dumps({"id": 1, "method": "tools/list"}).encode(), 400, -32600),
        (json.dumps({"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}).encode(), 400, -32600),
        (json.dumps({"jsonrpc": "2.0", "id": 1, "method": 3}).encode(), 400, -32600),
        (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]}).encode(), 400, -32600),
        (json.dumps(rpc("resources/list")).encode(), 200, -32601),
        (json.dumps(rpc("tools/call", {"name": "drop_tables", "arguments": {}})).encode(), 200, -32602),
        (json.dumps(rpc("tools/call", {"name": 5})).encode(), 200, -32602),
        (json.dumps(rpc("tools/call", {"name": "get_capability", "arguments": "ref"})).encode(), 200, -32602),
        (json.dumps(rpc("initialize", {})).encode(), 200, -32602),
        (b"[" * 100_000, 400, -32700),
    ],
)
async def test_malformed_json_rpc_is_a_json_rpc_error(client, body, status, code):
    response = await post(client, body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


async def test_transport_rules(client, mint, tenant):
    notification = await post(client, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert notification.status_code == 202 and notification.content == b""
    assert (await post(client, {"jsonrpc": "2.0", "id": 3, "result": {}})).status_code == 202
    assert (await client.get("/mcp", headers={"Accept": "text/event-stream"})).status_code == 405
    assert (await client.delete("/mcp")).status_code == 405
    old = await post(client, rpc("tools/list"), {"MCP-Protocol-Version": "1999-01-01"})
    assert old.status_code == 400 and old.json()["error"]["code"] == -32600
    foreign = await post(client, rpc("tools/list"), {"Origin": "https://evil.example"})
    assert foreign.status_code == 403
    # Without CAPREG_PUBLIC_URL a hostname's own origin is what a DNS-rebinding page sends: refused.
    rebound = await post(client, rpc("ping"), {"Origin": "http://registry.test"})
    assert rebound.status_code == 403
    huge = await post(client, rpc("tools/call", {"name": "search_capabilities", "arguments": {"q": "x" * (2 << 20)}}))
    assert huge.status_code == 413 and huge.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize("authorization", ["Bearer not-a-jwt", "Basic dXNlcjpwYXNz", "Bearer "])
async def test_an_invalid_token_is_401_as_everywhere(client, authorization):
    response = await post(client, rpc("tools/list"), {"Authorization": authorization})
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["code"] == "invalid_token"
