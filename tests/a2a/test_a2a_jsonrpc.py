"""A2A's JSON-RPC binding at an agent's registry URL: a2a-sdk's default client (`ClientConfig()`,
JSON-RPC only) gets the extended card from a capreg public card, with the same checks and audit as
`GET .../extendedAgentCard`; every other method is A2A's unsupported-operation error; garbage is a
JSON-RPC error, never a 5xx."""

from __future__ import annotations

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError
from a2a.types import GetExtendedAgentCardRequest, GetTaskRequest, Message, Part, Role, SendMessageRequest
from a2a.utils.errors import UnsupportedOperationError

from registry.a2a import rpc as a2a_rpc
from registry.config import registry_url
from tests.conftest import example

BILLING = example("billing-agent.json")


def rpc(method: str = "GetExtendedAgentCard", params: dict | None = None, id: str | int | None = "1") -> dict:  # noqa: A002
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": {} if params is None else params}


async def events_of(db, response: httpx.Response) -> list[tuple]:
    # one row per event: an event of two tenants has an entry in each tenant's chain
    rows = await db.fetch(
        "SELECT type, ref, reason FROM (SELECT DISTINCT ON (coalesce(event_id, seq::text)) type, ref, reason, seq FROM audit_events WHERE trace_id = $1 ORDER BY coalesce(event_id, seq::text), seq) e ORDER BY seq",
        response.headers.get_list("x-trace-id")[0],
    )
    return [tuple(r) for r in rows]


async def test_default_a2a_client_gets_the_extended_card(live_server, mint, tenant, db):
    """What a router following a2a-sdk's own docs does: resolve the public card, create a client with
    the default config, ask for the extended card (bearer token in the call context)."""
    base, _, _ = live_server
    publish = mint(tenant, "publisher", "registry:publish")
    agent_url = f"{base}/v1/agents/{tenant}/billing-agent"
    router = mint(tenant, "router", "invoice:read", regions=["eu"])
    # (async: a blocking call would stall the in-process app sharing the database)
    async with httpx.AsyncClient(timeout=30) as http:
        put = await http.put(agent_url, json=BILLING, headers=publish)
        assert put.status_code == 201, put.text
        public = await A2ACardResolver(http, base_url=agent_url).get_agent_card()
    assert [(i.protocol_binding, i.url) for i in public.supported_interfaces] == [
        ("HTTP+JSON", agent_url),
        ("JSONRPC", agent_url),
    ]
    client = ClientFactory(ClientConfig()).create(public)
    try:
        card = await client.get_extended_agent_card(
            GetExtendedAgentCardRequest(), context=ClientCallContext(service_parameters=router)
        )
        assert [s.id for s in card.skills] == ["invoice.lookup"]
        assert [i.url for i in card.supported_interfaces] == ["https://billing.acme.internal/a2a"]

        with pytest.raises(A2AClientError, match="401"):
            await client.get_extended_agent_card(GetExtendedAgentCardRequest())

        message = SendMessageRequest(message=Message(role=Role.ROLE_USER, message_id="m-1", parts=[Part(text="hi")]))
        with pytest.raises(UnsupportedOperationError, match="extended card"):
            await client.send_message(message, context=ClientCallContext(service_parameters=router)).__anext__()
        with pytest.raises(UnsupportedOperationError, match="serves only the agent's cards"):
            await client.get_task(GetTaskRequest(id="t-1"))
    finally:
        await client.close()

    # Audited as the HTTP+JSON path audits: one event per skill, released or withheld.
    rows = await db.fetch(
        "SELECT type, ref, reason FROM audit_events WHERE actor_tenant = $1 AND chain = $1 AND type LIKE 'detail.%' ORDER BY seq",
        tenant,
    )
    assert [tuple(r) for r in rows] == [
        ("detail.released", f"{tenant}/billing-agent/invoice.lookup@2.0.0", None),
        ("detail.denied", f"{tenant}/billing-agent/invoice.mark-paid@1.1.0", "insufficient_scope"),
    ]


async def test_same_card_and_checks_as_the_http_json_path(client, mint, world, other_tenant, db):
    url = f"/v1/agents/{world}/billing-agent"
    caller = mint(world, "router", "invoice:read", regions=["eu"])
    rest = await client.get(f"{url}/extendedAgentCard", headers=caller)
    answer = await client.post(url, json=rpc(id=7), headers=caller)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("application/json")
    body = answer.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == 7 and "error" not in body
    assert body["result"] == rest.json()
    assert await events_of(db, answer) == [
        ("detail.released", f"{world}/billing-agent/invoice.lookup@2.0.0", None),
        ("detail.denied", f"{world}/billing-agent/invoice.mark-paid@1.1.0", "insufficient_scope"),
    ]

    # The same refusals, as problem+json at the HTTP level: no token, a bad token, an invisible agent.
    anonymous = await client.post(url, json=rpc())
    assert anonymous.status_code == 401 and anonymous.json()["code"] == "invalid_token"
    forged = await client.post(url, json=rpc("SendMessage"), headers={"Authorization": "Bearer not-a-jwt"})
    assert forged.status_code == 401
    stranger = mint("s" + world, "r", "ledger:write", regions=["eu"])
    hidden = await client.post(f"/v1/agents/{world}/ledger-agent", json=rpc(), headers=stranger)
    missing = await client.post(f"/v1/agents/{world}/no-such-agent", json=rpc(), headers=stranger)
    assert hidden.status_code == missing.status_code == 404
    assert await events_of(db, hidden) == [("detail.denied", f"{world}/ledger-agent", "not_found")]
    shared = await client.post(
        f"/v1/agents/{world}/ledger-agent", json=rpc(), headers=mint(other_tenant, "r", "ledger:write", regions=["us"])
    )
    assert [s["id"] for s in shared.json()["result"]["skills"]] == ["ledger.reverse-entry"]


async def test_other_methods_are_unsupported_operations(client, mint, world, db):
    url = f"/v1/agents/{world}/billing-agent"
    caller = mint(world, "router", "invoice:read", regions=["eu"])
    for method in ("SendMessage", "GetTask", "message/send", "x" * 128):
        answer = await client.post(url, json=rpc(method, {"message": {}}), headers=caller)
        assert answer.status_code == 200, answer.text
        error = answer.json()["error"]
        assert error["code"] == a2a_rpc.UNSUPPORTED_OPERATION == -32004
        assert "only the agent's cards" in error["message"] and "supportedInterfaces" in error["message"]
        assert error["data"][0]["reason"] == "UNSUPPORTED_OPERATION"
        assert method not in error["message"]
        assert await events_of(db, answer) == []
    # The answer does not depend on whether the agent exists, nor on a token.
    nowhere = await client.post(f"/v1/agents/{world}/no-such-agent", json=rpc("SendMessage"))
    assert nowhere.json()["error"]["code"] == -32004


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"", -32700),
        (b"{not json", -32700),
        (b"\xff\xfe", -32700),
        (b"[" * 10_000, -32700),
        (b"[]", -32600),
        (b'[{"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard"}]', -32600),
        (b'"GetExtendedAgentCard"', -32600),
        (b"null", -32600),
        (b'{"id": 1, "method": "GetExtendedAgentCard"}', -32600),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "GetExtendedAgentCard"}', -32600),
        (b'{"jsonrpc": "2.0", "id": true, "method": "GetExtendedAgentCard"}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1.5, "method": "GetExtendedAgentCard"}', -32600),
        (b'{"jsonrpc": "2.0", "id": {}, "method": "GetExtendedAgentCard"}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": 5}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": ""}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "extra": 1}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": "x"}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": []}', -32602),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {"x": 1}}', -32602),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {"tenant": "acme"}}', -32602),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {"tenant": 3}}', -32602),
        (b'{"jsonrpc": "2.0", "id": "\\u0000", "method": "Get\\u0000"}', -32004),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}}' + b" " * 20_000, -32600),
    ],
)
async def test_garbage_is_a_json_rpc_error(client, mint, world, db, body, code):
    answer = await client.post(
        f"/v1/agents/{world}/billing-agent",
        content=body,
        headers={**mint(world, "router", "invoice:read", regions=["eu"]), "Content-Type": "application/json"},
    )
    assert answer.status_code == 200, answer.text
    reply = answer.json()
    assert reply["jsonrpc"] == "2.0" and reply["error"]["code"] == code, reply
    assert "result" not in reply
    assert await events_of(db, answer) == []


async def test_ids_are_echoed_and_versions_checked(client, mint, world):
    url = f"/v1/agents/{world}/billing-agent"
    caller = mint(world, "router", "invoice:read", regions=["eu"])
    for request_id in ("abc", 0, -5, None):
        answer = await client.post(url, json=rpc(id=request_id), headers=caller)
        assert answer.json()["id"] == request_id and "result" in answer.json()
    no_id = await client.post(url, json={"jsonrpc": "2.0", "method": "GetExtendedAgentCard"}, headers=caller)
    assert no_id.json()["id"] is None and "result" in no_id.json()
    too_long = await client.post(url, json=rpc(id="x" * 300), headers=caller)
    assert too_long.json()["id"] is None and too_long.json()["error"]["code"] == -32600
    for version, ok in (
        ("1.0", True),
        ("1.0.3", True),
        (" 1.0 ", True),
        ("0.3", False),
        ("2.0", False),
        ("one", False),
    ):
        answer = await client.post(url, json=rpc(), headers={**caller, "A2A-Version": version})
        assert ("result" in answer.json()) is ok, (version, answer.text)
        if not ok:
            assert answer.json()["error"]["code"] == -32009


async def test_public_card_lists_both_bindings(client, world, settings):
    card = (await client.get(f"/v1/agents/{world}/billing-agent/.well-known/agent-card.json")).json()
    url = f"{registry_url(settings)}/v1/agents/{world}/billing-agent"
    assert card["supportedInterfaces"] == [
        {"url": url, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
    ]
