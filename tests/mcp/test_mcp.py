"""The MCP endpoint end to end (registry.mcp.routes, registry.mcp.bridge): the official `mcp` client
against a real `capreg serve`, over HTTP and through `capreg mcp` on stdio, with and without a
sufficient token; fuzzed bodies, none of them a 5xx; the bridge with the registry unreachable; the
browser Origin rule."""

from __future__ import annotations

import json
import os
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
from tests.mcp_support import MCP_HEADERS, TOOL_NAMES, rpc
from tests.ticket_support import skill

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
