"""GET /v1/capabilities, agent views and the A2A public card: visibility, filters, paging, ETags."""

from __future__ import annotations

import copy

import httpx
from a2a.client import A2ACardResolver
from a2a.types import AgentCard
from google.protobuf.json_format import ParseDict

from registry.config import Settings, registry_url
from tests.conftest import example

BILLING = example("billing-agent.json")
LEDGER = example("ledger-agent.json")
LEGACY = example("legacy-0.3-search-agent.json")
GATED = (
    "inputSchema",
    "outputSchema",
    "examples",
    "supportedInterfaces",
    "billing.acme.internal",
    "ledger.acme.internal",
)


async def refs(client, headers=None, **params) -> list[str]:
    response = await client.get(
        "/v1/capabilities", params={"tenant": params.pop("tenant"), **params}, headers=headers or {}
    )
    assert response.status_code == 200, response.text
    return [item["ref"] for item in response.json()["items"]]


async def test_anonymous_sees_public_only_and_no_gated_fields(client, world):
    response = await client.get("/v1/capabilities", params={"tenant": world})
    assert response.status_code == 200
    items = response.json()["items"]
    assert {i["agentId"] for i in items} == {"billing-agent", "docs-search"}
    for field in GATED:
        assert field not in response.text
    item = next(i for i in items if i["id"] == "invoice.lookup")
    assert item["ref"] == f"{world}/billing-agent/invoice.lookup@2.0.0"
    assert item["scopes"] == ["invoice:read"] and item["dataRegions"] == ["eu"]
    assert item["status"] == "active" and item["health"] == "unknown" and item["sunsetAt"] is None


async def test_read_token_adds_own_and_shared_records(client, mint, world, other_tenant):
    own = await refs(client, mint(world, "router", "registry:read"), tenant=world)
    assert any("/ledger-agent/" in r for r in own)
    shared = await refs(client, mint(other_tenant, "router", "registry:read"), tenant=world)
    assert any("/ledger-agent/" in r for r in shared)
    stranger = await refs(client, mint("zz" + world, "router", "registry:read"), tenant=world)
    assert not any("/ledger-agent/" in r for r in stranger)
    without_scope = await refs(client, mint(world, "router", "invoice:read"), tenant=world)
    assert not any("/ledger-agent/" in r for r in without_scope)


async def test_filters(client, world):
    assert await refs(client, tenant=world, skill="invoice.lookup") == [f"{world}/billing-agent/invoice.lookup@2.0.0"]
    assert len(await refs(client, tenant=world, skill="invoice.*")) == 2
    assert await refs(client, tenant=world, tag=["finance", "payments"]) == [
        f"{world}/billing-agent/invoice.mark-paid@1.1.0"
    ]
    assert await refs(client, tenant=world, q="DOCUMENTATION") == [f"{world}/docs-search/docs.search@0.9.2"]
    assert len(await refs(client, tenant=world, sideEffectMax="none")) == 2
    assert await refs(client, tenant=world, region="us") == [f"{world}/docs-search/docs.search@0.9.2"]
    assert len(await refs(client, tenant=world, region="eu")) == 3
    assert len(await refs(client, tenant=world, agent="billing-agent")) == 2
    assert await refs(client, tenant=world, status="deprecated") == []
    assert await refs(client, tenant=world, q="100%_") == []


async def test_bad_queries_are_400(client, world):
    for params in (
        {"limit": 201},
        {"limit": 0},
        {"sideEffectMax": "explosive"},
        {"cursor": "@@@"},
        {"status": "retired"},
        {"versions": "some"},
    ):
        response = await client.get("/v1/capabilities", params=params)
        assert response.status_code == 400, (params, response.text)
        assert response.json()["code"] == "invalid_request"


async def test_invalid_token_is_401_not_anonymous(client, world):
    response = await client.get("/v1/capabilities", headers={"Authorization": "Bearer not-a-jwt"})
    assert response.status_code == 401 and response.json()["code"] == "invalid_token"


async def test_keyset_pagination_walks_every_item_once(client, mint, tenant):
    publish = mint(tenant, "publisher", "registry:publish")
    body = copy.deepcopy(BILLING)
    body["skills"] = [{**BILLING["skills"][0], "id": f"skill.n{i:02d}", "version": f"1.{i}.0"} for i in range(7)]
    assert (await client.put(f"/v1/agents/{tenant}/many", json=body, headers=publish)).status_code == 201
    seen, cursor = [], None
    while True:
        params = {"tenant": tenant, "limit": 3, **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/v1/capabilities", params=params)).json()
        seen += [i["id"] for i in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == [f"skill.n{i:02d}" for i in range(7)]


async def test_latest_and_all_versions(client, mint, tenant):
    publish = mint(tenant, "publisher", "registry:publish")
    for version in ("1.0.0", "1.2.0", "1.10.0", "2.0.0-rc.1"):
        body = {**BILLING, "skills": [{**BILLING["skills"][1], "version": version}]}
        assert (await client.put(f"/v1/agents/{tenant}/b", json=body, headers=publish)).status_code == 201
    latest = await refs(client, tenant=tenant)
    assert latest == [f"{tenant}/b/invoice.mark-paid@1.10.0"]
    every = await refs(client, tenant=tenant, versions="all")
    assert [r.split("@")[1] for r in every] == ["2.0.0-rc.1", "1.10.0", "1.2.0", "1.0.0"]
    page = (await client.get("/v1/capabilities", params={"tenant": tenant, "versions": "all", "limit": 2})).json()
    rest = (
        await client.get("/v1/capabilities", params={"tenant": tenant, "versions": "all", "cursor": page["nextCursor"]})
    ).json()
    assert [i["version"] for i in page["items"] + rest["items"]] == ["2.0.0-rc.1", "1.10.0", "1.2.0", "1.0.0"]


async def test_future_effective_versions_are_hidden(client, mint, tenant):
    publish = mint(tenant, "publisher", "registry:publish")
    body = {
        **BILLING,
        "skills": [
            {**BILLING["skills"][1], "version": "1.0.0"},
            {**BILLING["skills"][1], "version": "1.1.0", "effectiveAt": "2999-01-01T00:00:00Z"},
        ],
    }
    assert (await client.put(f"/v1/agents/{tenant}/b", json=body, headers=publish)).status_code == 201
    assert await refs(client, tenant=tenant, versions="all") == [f"{tenant}/b/invoice.mark-paid@1.0.0"]


async def test_etag_and_conditional_requests(client, mint, world):
    first = await client.get("/v1/capabilities", params={"tenant": world})
    etag = first.headers["etag"]
    again = await client.get("/v1/capabilities", params={"tenant": world}, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    weak = await client.get("/v1/capabilities", params={"tenant": world}, headers={"If-None-Match": f'"x", W/{etag}'})
    assert weak.status_code == 304
    body = {**BILLING, "skills": [{**BILLING["skills"][0], "version": "2.1.0"}]}
    await client.put(f"/v1/agents/{world}/billing-agent", json=body, headers=mint(world, "p", "registry:publish"))
    changed = await client.get("/v1/capabilities", params={"tenant": world}, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["etag"] != etag


async def test_private_agent_is_404_for_strangers(client, mint, world, other_tenant):
    for path in (f"/v1/agents/{world}/ledger-agent", f"/v1/agents/{world}/ledger-agent/.well-known/agent-card.json"):
        anonymous = await client.get(path)
        stranger = await client.get(path, headers=mint("x" + world, "r", "registry:read"))
        missing = await client.get(path.replace("ledger-agent", "no-such-agent"))
        assert anonymous.status_code == stranger.status_code == missing.status_code == 404
        assert anonymous.json()["detail"] == missing.json()["detail"]
        shared = await client.get(path, headers=mint(other_tenant, "r", "registry:read"))
        assert shared.status_code == 200


async def test_agent_view(client, world):
    response = await client.get(f"/v1/agents/{world}/billing-agent")
    assert response.status_code == 200
    view = response.json()
    assert view["name"] == "Billing Agent" and view["visibility"] == "public" and view["health"] == "unknown"
    assert sorted(s["id"] for s in view["skills"]) == ["invoice.lookup", "invoice.mark-paid"]
    for field in GATED:
        assert field not in response.text


async def test_public_agent_card_parses_with_a2a_sdk(client, world, settings):
    from a2a.utils.proto_utils import validate_proto_required_fields  # noqa: PLC0415

    path = f"/v1/agents/{world}/billing-agent/.well-known/agent-card.json"
    response = await client.get(path)
    assert response.status_code == 200
    card = response.json()
    for field in ("inputSchema", "outputSchema", "billing.acme.internal", "look up invoice"):
        assert field not in response.text
    assert card["supportedInterfaces"] == [
        {
            "url": f"{registry_url(settings)}/v1/agents/{world}/billing-agent",
            "protocolBinding": binding,
            "protocolVersion": "1.0",
        }
        for binding in ("HTTP+JSON", "JSONRPC")
    ]
    assert card["capabilities"]["extendedAgentCard"] is True
    parsed = ParseDict(card, AgentCard())
    validate_proto_required_fields(parsed)
    assert [s.id for s in parsed.skills] == ["invoice.lookup", "invoice.mark-paid"]

    transport = client._transport
    async with httpx.AsyncClient(transport=transport, base_url="http://registry.test") as http:
        resolver = A2ACardResolver(http, base_url=f"http://registry.test/v1/agents/{world}/billing-agent")
        resolved = await resolver.get_agent_card()
    assert resolved.name == "Billing Agent"
    assert resolved.supported_interfaces[0].url.endswith(f"/v1/agents/{world}/billing-agent")


async def test_values_postgres_cannot_hold_are_400_not_500(client):
    for params in ({"tag": "a\x00b"}, {"q": "\x00"}, {"agent": "x\x00"}):
        response = await client.get("/v1/capabilities", params=params)
        assert response.status_code == 400, (params, response.text)
        assert response.json()["code"] == "invalid_request"


async def test_answers_from_the_cache_still_check_the_caller(client, mint, world):
    params = {"tenant": world, "limit": 7}
    anonymous = (await client.get("/v1/capabilities", params=params)).json()["items"]
    again = (await client.get("/v1/capabilities", params=params)).json()["items"]  # served before parsing
    assert again == anonymous and not any(i["agentId"] == "ledger-agent" for i in again)
    bad = await client.get("/v1/capabilities", params=params, headers={"Authorization": "Bearer forged"})
    assert bad.status_code == 401
    own = (await client.get("/v1/capabilities", params=params, headers=mint(world, "r", "registry:read"))).json()[
        "items"
    ]
    assert any(i["agentId"] == "ledger-agent" for i in own)


async def test_the_registry_url_never_comes_from_the_request(client, world, settings):
    """Contract section 19: Host and X-Forwarded-* never change the URL a card names."""
    expected = f"{registry_url(settings)}/v1/agents/{world}/billing-agent"
    for headers in (
        {},
        {"Host": "evil.example"},
        {"X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https"},
        {"Forwarded": "host=evil.example;proto=https", "X-Forwarded-Prefix": "/x"},
    ):
        card = (
            await client.get(f"/v1/agents/{world}/billing-agent/.well-known/agent-card.json", headers=headers)
        ).json()
        assert [i["url"] for i in card["supportedInterfaces"]] == [expected, expected], headers
    assert registry_url(Settings(host="10.0.0.5", port=9000)) == "http://10.0.0.5:9000"
    assert registry_url(Settings(host="::1", port=9000)) == "http://[::1]:9000"
    assert registry_url(Settings(public_url="https://registry.example", host="::1")) == "https://registry.example"
