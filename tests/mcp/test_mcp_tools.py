"""registry.mcp.tools, in process: the tools' definitions, the tools with and without a sufficient token
(their grants and refusals in the audit log), bad arguments as tool errors, a NUL refused and audited
as on the JSON API, and find_capability as POST /v1/offers."""

from __future__ import annotations

import json
import secrets

import pytest

from tests.mcp_support import call, post, rpc
from tests.ticket_support import register, register_finance, skill, traced


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
        if i["tenant"] == tenant and i["agentId"] != "docs-agent"  # public, and may be found by meaning
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
