"""The MCP endpoint: the official `mcp` client against a real `capreg serve`, over HTTP and through
`capreg mcp` on stdio; the four tools with and without a sufficient token, their grants and refusals
in the audit log; and malformed JSON-RPC, bad tokens and hostile bodies, none of them a 5xx."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

import httpx
import httpx2
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.conftest import ROOT, capreg
from tests.ticket_support import register, register_finance, skill, traced

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


# ---------------------------------------------------------------------------
# The protocol, in process


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


async def test_tool_definitions_are_written_for_a_model(client):
    tools = {t["name"]: t for t in (await post(client, rpc("tools/list"))).json()["result"]["tools"]}
    for tool in tools.values():
        assert tool["inputSchema"]["type"] == "object"
        assert tool["inputSchema"]["additionalProperties"] is False
        assert len(tool["description"]) > 150
    assert "none < idempotent < write < destructive" in tools["search_capabilities"]["description"]
    assert "only" in tools["get_capability"]["description"] and "schemas" in tools["get_capability"]["description"]
    assert tools["request_ticket"]["inputSchema"]["required"] == ["ref", "scopes"]
    assert tools["search_capabilities"]["inputSchema"]["properties"]["sideEffectMax"]["description"]


async def test_tools_anonymous_and_with_tokens(client, mint, tenant):
    await register_finance(client, mint, tenant)
    await register(
        client, mint, tenant, "docs-agent", [skill("docs.search", "1.0.0", [], tags=["docs"])], visibility="public"
    )
    ref = f"{tenant}/docs-agent/docs.search@1.0.0"

    found = await call(client, "search_capabilities", {"q": "docs.search", "tag": "docs", "sideEffectMax": "none"})
    assert found["isError"] is False
    assert [item["ref"] for item in found["structuredContent"]["items"] if item["tenant"] == tenant] == [ref]
    http = (
        await client.get("/v1/capabilities", params={"q": "docs.search", "tag": "docs", "sideEffectMax": "none"})
    ).json()
    assert found["structuredContent"] == http
    assert json.loads(found["content"][0]["text"]) == http
    # The tenant's own private records need registry:read, as on GET /v1/capabilities.
    private = {"q": "invoice.lookup", "limit": 200}
    assert not [
        i
        for i in (await call(client, "search_capabilities", private))["structuredContent"]["items"]
        if i["tenant"] == tenant
    ]
    reader = mint(tenant, "router", "registry:read invoice:read invoice:list")
    mine = (await call(client, "search_capabilities", private, reader))["structuredContent"]["items"]
    # Ranked words (docs/api.md#ranked-search): both words of the id first, then "invoice" alone.
    assert [i["ref"] for i in mine if i["tenant"] == tenant][0] == f"{tenant}/billing-agent/invoice.lookup@2.0.0"

    anonymous = await call(client, "get_capability", {"ref": ref})
    assert anonymous["isError"] is True
    assert anonymous["structuredContent"]["status"] == 401 and anonymous["structuredContent"]["code"] == "invalid_token"

    detail = await call(client, "get_capability", {"ref": f"{tenant}/billing-agent/invoice.lookup@^2"}, reader)
    assert detail["isError"] is False
    http_detail = await client.get(
        f"/v1/agents/{tenant}/billing-agent/skills/invoice.lookup/versions/^2", headers=reader
    )
    assert detail["structuredContent"] == http_detail.json()
    assert "inputSchema" in detail["structuredContent"] and "endpoints" in detail["structuredContent"]

    short = mint(tenant, "router", "invoice:read")
    refused = await call(client, "get_capability", {"ref": f"{tenant}/billing-agent/invoice.lookup"}, short)
    assert refused["isError"] is True
    assert refused["structuredContent"]["code"] == "insufficient_scope"
    assert refused["structuredContent"]["missingScopes"] == ["invoice:list"]

    for fmt in ("mcp", "openai"):
        tool = await call(
            client,
            "get_tool_definition",
            {"ref": f"{tenant}/billing-agent/invoice.lookup@2.0.0", "format": fmt},
            reader,
        )
        http_tool = await client.get(
            f"/v1/agents/{tenant}/billing-agent/skills/invoice.lookup/versions/2.0.0/tool",
            params={"format": fmt},
            headers=reader,
        )
        assert tool["structuredContent"] == http_tool.json()
    unseen = await call(client, "get_tool_definition", {"ref": f"{tenant}/nobody/invoice.lookup"}, reader)
    assert unseen["isError"] is True and unseen["structuredContent"]["code"] == "not_found"


async def test_request_ticket_is_post_v1_tickets(client, mint, tenant, db):
    await register_finance(client, mint, tenant)
    router = mint(tenant, "router", "invoice:read invoice:list ledger:write")
    ref = f"{tenant}/billing-agent/invoice.lookup@^2"
    headers, trace_id = traced(router)
    granted = await call(
        client,
        "request_ticket",
        {"ref": ref, "scopes": ["invoice:read"], "ttlSeconds": 120, "onBehalfOf": "user-19", "idempotencyKey": "k-1"},
        headers,
    )
    assert granted["isError"] is False
    ticket = granted["structuredContent"]
    assert ticket["ref"] == f"{tenant}/billing-agent/invoice.lookup@2.0.0" and ticket["scopes"] == ["invoice:read"]
    events = await db.fetch("SELECT type, outcome, actor FROM audit_events WHERE trace_id = $1", trace_id)
    assert [(e["type"], e["outcome"], e["actor"]) for e in events] == [("ticket.granted", "allowed", "router")]

    # The same key and arguments: the same ticket; other arguments under the key: 409.
    again = await call(
        client,
        "request_ticket",
        {"ref": ref, "scopes": ["invoice:read"], "ttlSeconds": 120, "onBehalfOf": "user-19", "idempotencyKey": "k-1"},
        router,
    )
    assert again["structuredContent"]["jti"] == ticket["jti"]
    other = await call(
        client, "request_ticket", {"ref": ref, "scopes": ["invoice:list"], "idempotencyKey": "k-1"}, router
    )
    assert other["isError"] is True and other["structuredContent"]["code"] == "idempotency_mismatch"

    escalation = await call(client, "request_ticket", {"ref": ref, "scopes": ["invoice:write"]}, router)
    assert escalation["isError"] is True
    assert escalation["structuredContent"]["code"] == "delegation_denied"
    assert escalation["structuredContent"]["reason"] == "scope_escalation"

    pending = await call(
        client,
        "request_ticket",
        {"ref": f"{tenant}/ledger-agent/ledger.reverse-entry", "scopes": ["ledger:write"]},
        router,
    )
    assert pending["isError"] is False
    approval_id = pending["structuredContent"]["approvalId"]
    assert pending["structuredContent"]["status"] == "pending"
    assert approval_id in pending["content"][0]["text"] and "pending" in pending["content"][0]["text"].lower()

    # Arguments of the wrong type are the caller's own refusal, audited like a malformed POST body.
    headers, trace_id = traced(router)
    wrong = await call(client, "request_ticket", {"ref": ref, "scopes": ["invoice:read"], "ttlSeconds": "30"}, headers)
    assert wrong["isError"] is True and wrong["structuredContent"]["code"] == "invalid_request"
    assert wrong["structuredContent"]["errors"][0]["path"] == "/ttlSeconds"
    assert [
        (e["type"], e["outcome"])
        for e in await db.fetch("SELECT type, outcome FROM audit_events WHERE trace_id = $1", trace_id)
    ] == [("ticket.denied", "denied")]

    anonymous = await call(client, "request_ticket", {"ref": ref, "scopes": ["invoice:read"]})
    assert anonymous["isError"] is True and anonymous["structuredContent"]["code"] == "invalid_token"


@pytest.mark.parametrize(
    "arguments, path",
    [
        ({"ref": 7}, "/ref"),
        ({"ref": "a/b/c", "extra": 1}, ""),
        ({"ref": "no-slashes"}, "/ref"),
        ({"ref": "a/b/c@"}, "/ref"),
        ({"ref": "a/b/c@not a range"}, "version"),
        ({"ref": "a/b/c\x00"}, ""),
    ],
)
async def test_bad_arguments_are_tool_errors(client, mint, tenant, arguments, path):
    result = await call(client, "get_capability", arguments, mint(tenant, "router", "registry:read"))
    assert result["isError"] is True
    problem = result["structuredContent"]
    assert problem["status"] == 400 and problem["code"] == "invalid_request"
    if path:
        assert problem["errors"][0]["path"] == path


@pytest.mark.parametrize(
    "arguments",
    [
        {"limit": 0},
        {"limit": 201},
        {"limit": "5"},
        {"limit": 5.0},
        {"limit": True},
        {"sideEffectMax": "harmless"},
        {"cursor": "nope"},
        {"tag": [1]},
        {"q": "x" * 513},
    ],
)
async def test_bad_search_arguments_are_tool_errors(client, arguments):
    result = await call(client, "search_capabilities", arguments)
    assert result["isError"] is True and result["structuredContent"]["code"] == "invalid_request"


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


# ---------------------------------------------------------------------------
# The official client against a real `capreg serve`


def token(env: dict, tenant: str, sub: str, scopes: str) -> str:
    return capreg(env, "token", "mint", "--tenant", tenant, "--sub", sub, "--scope", scopes).stdout.strip()


@pytest.fixture
def live_finance(live_server, tenant):
    """The finance agents registered on the live server; tokens of a router, a weak caller and an auditor."""
    base, env, _ = live_server
    publish = {"Authorization": "Bearer " + token(env, tenant, "publisher", "registry:publish")}
    with httpx.Client(base_url=base) as http:
        for agent_id, skills in {
            "billing-agent": [skill("invoice.lookup", "2.0.0", ["invoice:read", "invoice:list"])],
            "ledger-agent": [skill("ledger.reverse-entry", "1.0.0", ["ledger:write"], sideEffect="destructive")],
        }.items():
            body = {
                **json.loads((ROOT / "tests" / "examples" / "billing-agent.json").read_text()),
                "visibility": "public",
                "skills": skills,
            }
            assert http.put(f"/v1/agents/{tenant}/{agent_id}", json=body, headers=publish).status_code in (200, 201)
    return {
        "base": base,
        "env": env,
        "tenant": tenant,
        "router": token(env, tenant, "router", "registry:read invoice:read invoice:list ledger:write"),
        "weak": token(env, tenant, "intern", "registry:read"),
        "auditor": token(env, tenant, "auditor", "audit:read"),
    }


async def exercise(client: Client, world: dict, who: str) -> dict:
    """List the tools and call each; answers by tool name."""
    tenant = world["tenant"]
    listed = await client.list_tools()
    assert {tool.name for tool in listed.tools} == TOOL_NAMES
    ref = f"{tenant}/billing-agent/invoice.lookup@^2"
    results = {
        "search": await client.call_tool("search_capabilities", {"q": "invoice.lookup", "limit": 200}),
        "detail": await client.call_tool("get_capability", {"ref": ref}),
        "tool": await client.call_tool("get_tool_definition", {"ref": ref, "format": "openai"}),
        "ticket": await client.call_tool(
            "request_ticket", {"ref": ref, "scopes": ["invoice:read"], "onBehalfOf": f"{who}-user"}
        ),
        "approval": await client.call_tool(
            "request_ticket", {"ref": f"{tenant}/ledger-agent/ledger.reverse-entry", "scopes": ["ledger:write"]}
        ),
        "unknown": None,
    }
    assert any(item["tenant"] == tenant for item in results["search"].structured_content["items"])
    return results


def leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def audit_events(world: dict, **params) -> list[dict]:
    with httpx.Client(base_url=world["base"]) as http:
        response = http.get(
            "/v1/audit/events",
            params={"limit": 1000, **params},
            headers={"Authorization": f"Bearer {world['auditor']}"},
        )
    assert response.status_code == 200, response.text
    return response.json()["items"]


def assert_sufficient(results: dict, world: dict) -> None:
    assert not any(r.is_error for key, r in results.items() if r is not None)
    assert "inputSchema" in results["detail"].structured_content
    assert results["tool"].structured_content["type"] == "function"
    assert results["ticket"].structured_content["scopes"] == ["invoice:read"]
    assert results["approval"].structured_content["status"] == "pending"


def assert_insufficient(results: dict) -> None:
    assert results["search"].is_error is False
    for key, code in {
        "detail": "insufficient_scope",
        "tool": "insufficient_scope",
        "ticket": "delegation_denied",
    }.items():
        assert results[key].is_error is True, key
        assert results[key].structured_content["code"] == code, results[key].structured_content


async def test_official_client_over_http(live_finance):
    world = live_finance
    url = world["base"] + "/mcp"
    for who, expect in (("router", assert_sufficient), ("weak", None)):
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {world[who]}"}) as http_client:
            async with Client(streamable_http_client(url, http_client=http_client)) as client:
                results = await exercise(client, world, who)
        if expect is None:
            assert_insufficient(results)
        else:
            expect(results, world)
    async with Client(url) as anonymous:
        listed = await anonymous.list_tools()
        assert {tool.name for tool in listed.tools} == TOOL_NAMES
        found = await anonymous.call_tool("search_capabilities", {"q": "invoice.lookup", "limit": 200})
        assert any(item["tenant"] == world["tenant"] for item in found.structured_content["items"])
        refused = await anonymous.call_tool(
            "request_ticket", {"ref": f"{world['tenant']}/billing-agent/invoice.lookup", "scopes": ["invoice:read"]}
        )
        assert refused.is_error and refused.structured_content["code"] == "invalid_token"
    # An invalid token fails on HTTP before any tool runs (401), so the client cannot even connect.
    async with httpx2.AsyncClient(headers={"Authorization": "Bearer forged"}) as http_client:
        with pytest.raises(BaseException) as refused:
            async with Client(streamable_http_client(url, http_client=http_client)) as client:
                await client.list_tools()
    assert any(isinstance(e, MCPError) for e in leaves(refused.value))
    with httpx.Client(base_url=world["base"]) as http:
        unauthorized = http.post(
            "/mcp", json=rpc("tools/list"), headers={**MCP_HEADERS, "Authorization": "Bearer forged"}
        )
    assert unauthorized.status_code == 401 and unauthorized.headers["www-authenticate"].startswith("Bearer")

    events = audit_events(world)
    seen = {(e["type"], e["actor"], e["outcome"], e["reason"]) for e in events}
    assert ("ticket.granted", "router", "allowed", None) in seen
    assert ("approval.requested", "router", "allowed", None) in seen
    assert ("detail.released", "router", "allowed", None) in seen
    assert ("detail.denied", "intern", "denied", "insufficient_scope") in seen
    assert ("ticket.denied", "intern", "denied", "scope_escalation") in seen
    granted = [e for e in events if e["type"] == "ticket.granted" and e["onBehalfOf"] == "router-user"]
    assert granted and granted[0]["ref"] == f"{world['tenant']}/billing-agent/invoice.lookup@2.0.0"


async def test_official_client_over_stdio_bridge(live_finance):
    world = live_finance
    for who in ("router", "weak"):
        env = {**os.environ, "CAPREG_URL": world["base"], "CAPREG_TOKEN": world[who]}
        server = StdioServerParameters(
            command=sys.executable, args=["-m", "registry.cli", "mcp"], env=env, cwd=str(ROOT)
        )
        async with Client(server) as client:
            results = await exercise(client, world, f"stdio-{who}")
        if who == "router":
            assert_sufficient(results, world)
        else:
            assert_insufficient(results)
    # --url/--token override the environment; a bad token is a JSON-RPC error carrying the 401 problem.
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "registry.cli", "mcp", "--url", world["base"], "--token", "forged"],
        env={k: v for k, v in os.environ.items() if k not in ("CAPREG_URL", "CAPREG_TOKEN")},
        cwd=str(ROOT),
    )
    with pytest.raises(BaseException) as refused:
        async with Client(server) as client:
            await client.list_tools()
    errors = [e for e in leaves(refused.value) if isinstance(e, MCPError)]
    assert errors and "401" in str(errors[0]) and errors[0].error.data["code"] == "invalid_token"

    events = audit_events(world)
    seen = {(e["type"], e["actor"], e["outcome"], e["reason"]) for e in events}
    assert ("ticket.denied", "intern", "denied", "scope_escalation") in seen
    assert any(e["type"] == "ticket.granted" and e["onBehalfOf"] == "stdio-router-user" for e in events)


# ---------------------------------------------------------------------------
# Fuzzing: whatever arrives at /mcp, never a 5xx

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
_names = st.sampled_from(sorted(TOOL_NAMES) + ["", "nope"]) | st.text(max_size=12)
_arguments = (
    st.fixed_dictionaries(
        {},
        optional={
            "ref": st.text(max_size=40) | _json,
            "q": _json,
            "tag": _json,
            "sideEffectMax": _json,
            "region": _json,
            "limit": _json,
            "cursor": _json,
            "format": _json,
            "scopes": _json,
            "ttlSeconds": _json,
            "onBehalfOf": _json,
            "resources": _json,
            "idempotencyKey": _json,
        },
    )
    | _json
)
_messages = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0") | _json},
    optional={
        "id": st.integers() | st.text(max_size=8) | _json,
        "method": st.sampled_from(["initialize", "ping", "tools/list", "tools/call", "x"]) | _json,
        "params": st.fixed_dictionaries(
            {}, optional={"name": _names, "arguments": _arguments, "protocolVersion": _json}
        )
        | _json,
    },
)
_bodies = (
    _messages.map(lambda m: json.dumps(m).encode())
    | st.binary(max_size=64)
    | _json.map(lambda v: json.dumps(v).encode())
)


@pytest.fixture
def live_http(live_finance):
    with httpx.Client(base_url=live_finance["base"]) as http:
        yield http


@hypothesis_settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(body=_bodies, authenticated=st.booleans(), version=st.sampled_from([None, "2025-11-25", "2025-03-26", "x"]))
def test_fuzzed_json_rpc_never_5xx(live_finance, live_http, body, authenticated, version):
    headers = dict(MCP_HEADERS)
    if authenticated:
        headers["Authorization"] = f"Bearer {live_finance['router']}"
    if version:
        headers["MCP-Protocol-Version"] = version
    response = live_http.post("/mcp", content=body, headers=headers)
    assert response.status_code < 500, response.text
    if response.status_code != 202:
        assert response.headers["content-type"].startswith(("application/json", "application/problem+json"))


def test_bridge_answers_every_request_when_the_registry_is_unreachable():
    lines = [
        json.dumps(rpc("initialize", {"protocolVersion": "2025-11-25"})),
        "not json",
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json.dumps(rpc("tools/list", id_="b")),
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("CAPREG_URL", "CAPREG_TOKEN")}
    done = subprocess.run(
        [sys.executable, "-m", "registry.cli", "mcp", "--url", "http://127.0.0.1:1"],
        cwd=ROOT,
        env=env,
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    # One answer per request (the notification gets none), each a JSON-RPC error; stdout holds nothing else.
    assert sorted(str(a["id"]) for a in answers) == ["1", "None", "b"]
    assert all(a["error"]["code"] == -32603 and "unreachable" in a["error"]["message"] for a in answers)


def test_a_browser_origin_must_be_the_registrys_own():
    from registry.mcp.routes import _origin_allowed

    assert _origin_allowed("https://capreg.example", "https://capreg.example", "http://10.0.0.5:8080/")
    assert not _origin_allowed("http://evil.example:8080", "https://capreg.example", "http://evil.example:8080/")
    # no public URL: only loopback and IP-literal hosts, which DNS rebinding cannot name
    assert _origin_allowed("http://127.0.0.1:8080", None, "http://127.0.0.1:8080/")
    assert _origin_allowed("http://localhost:8080", None, "http://localhost:8080/")
    assert _origin_allowed("http://[::1]:8080", None, "http://[::1]:8080/")
    assert not _origin_allowed("http://evil.example:8080", None, "http://evil.example:8080/")
    assert not _origin_allowed("http://127.0.0.1:9999", None, "http://127.0.0.1:8080/")


async def test_a_nul_in_tool_arguments_is_refused_and_audited_as_on_the_json_api(client, mint, tenant, db):
    trace_id = secrets.token_hex(16)
    headers = {**mint(tenant, "router", "registry:read"), "traceparent": f"00-{trace_id}-{'1' * 16}-01"}
    for name in ("get_capability", "request_ticket"):
        arguments = (
            {"ref": f"{tenant}/a/b\x00"} if name == "get_capability" else {"ref": f"{tenant}/a/b", "scopes": ["x\x00"]}
        )
        result = await call(client, name, arguments, headers)
        assert result["isError"] is True and result["structuredContent"]["code"] == "invalid_request"
    rows = await db.fetch("SELECT type, reason, ref FROM audit_events WHERE trace_id = $1 ORDER BY seq", trace_id)
    assert [(r["type"], r["reason"]) for r in rows] == [("request.refused", "invalid_request: NUL")] * 2
    assert [r["ref"] for r in rows] == ["POST /mcp get_capability", "POST /mcp request_ticket"]


# ---------------------------------------------------------------------------
# find_capability: POST /v1/offers as a tool (docs/api.md#offers)


async def test_find_capability_is_the_offers_answer(client, mint, tenant, db):
    from tests.search_support import agent, heartbeat, publish
    from tests.search_support import skill as plain_skill

    await publish(
        client,
        mint,
        tenant,
        {
            "billing": agent(
                plain_skill("invoice.lookup", "Look up an invoice", "Returns one invoice."), visibility="tenant"
            )
        },
    )
    await heartbeat(client, mint, tenant, "billing", "i1", load=0.3)
    router = mint(tenant, "router", "registry:read")
    found = await call(client, "find_capability", {"need": "look up an invocie", "limit": 3}, router)
    assert found["isError"] is False
    http = (await client.post("/v1/offers", json={"need": "look up an invocie", "limit": 3}, headers=router)).json()
    assert found["structuredContent"] == http
    assert (
        http["offers"][0]["ref"] == f"{tenant}/billing/invoice.lookup@1.0.0"
        and http["offers"][0]["instance"]["load"] == 0.3
    )
    assert await db.fetchval("SELECT count(*) FROM audit_events WHERE tenant = $1 AND type = 'offer.made'", tenant) == 2

    anonymous = await call(client, "find_capability", {"need": "invoice"})
    assert anonymous["isError"] is True and anonymous["structuredContent"]["status"] == 401
    no_read = await call(client, "find_capability", {"need": "invoice"}, mint(tenant, "router", "invoice:read"))
    assert no_read["isError"] is True and no_read["structuredContent"]["code"] == "insufficient_scope"
    for bad in ({"need": "x", "limit": 21}, {"need": "x", "sideEffectMax": "explosive"}, {}, {"need": "x" * 513}):
        result = await call(client, "find_capability", bad, router)
        assert result["isError"] is True and result["structuredContent"]["code"] == "invalid_request", bad
    refused = await db.fetch("SELECT type FROM audit_events WHERE actor_tenant = $1 AND outcome = 'denied'", tenant)
    assert {r["type"] for r in refused} == {"request.refused"} and len(refused) == 5
    empty = await call(client, "find_capability", {"need": "zzzqqq"}, router)
    assert (
        empty["isError"] is False
        and empty["structuredContent"]["offers"] == []
        and "excluded" in empty["content"][0]["text"]
    )
