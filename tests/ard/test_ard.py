"""ARD (docs/api.md#ard) against the real app and PostgreSQL: answers valid against ARD's own JSON
Schema and OpenAPI (from ARD's checkout: tests/ard_support.py), visibility (invisible and absent answer alike, facets never
count what the caller cannot see), every filter key, paging without repeats, each bad input and the
error envelope (ARD's on /ard/* only), and agreement with GET /v1/capabilities?q=."""

from __future__ import annotations

import json
import secrets
from urllib.parse import quote

import pytest

from registry.config import registry_url
from tests.ard_support import assert_valid
from tests.conftest import count_rows

pytestmark = pytest.mark.asyncio(loop_scope="session")

A2A = "application/a2a-agent-card+json"


def skill(skill_id: str, *, words: str = "", tags=(), side_effect="none", regions=None, examples=None) -> dict:
    body = {
        "id": skill_id,
        "name": f"{skill_id} {words}".strip(),
        "description": f"Does {skill_id} {words}".strip(),
        "tags": list(tags),
        "version": "1.0.0",
        "inputSchema": {"type": "object"},
        "sideEffect": side_effect,
        "scopes": [],
    }
    if regions is not None:
        body["dataRegions"] = list(regions)
    if examples is not None:
        body["examples"] = list(examples)
    return body


def agent(name: str, skills: list[dict], *, visibility="public", version="1.0.0", shared_with=()) -> dict:
    return {
        "name": name,
        "description": f"{name} for tests",
        "version": version,
        "supportedInterfaces": [
            {"url": "https://agents.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "visibility": visibility,
        "sharedWith": list(shared_with),
        "skills": skills,
    }


async def register(client, mint, tenant: str, agent_id: str, body: dict) -> None:
    response = await client.put(
        f"/v1/agents/{tenant}/{agent_id}", json=body, headers=mint(tenant, "publisher", "registry:publish")
    )
    assert response.status_code in (200, 201), response.text


def urn(tenant: str, agent_id: str) -> str:
    return f"urn:air:{tenant}.capreg.invalid:{agent_id}"


async def search(client, body: dict, headers=None) -> dict:
    response = await client.post("/ard/search", json=body, headers=headers)
    assert response.status_code == 200, response.text
    assert_valid("SearchResponse", response.json())
    return response.json()


async def everything(client, body: dict, headers=None) -> list[dict]:
    """Every result of a search, page by page."""
    results, token = [], None
    for _ in range(100):
        page = await search(client, {**body, **({"pageToken": token} if token else {})}, headers)
        results += page["results"]
        token = page.get("pageToken")
        if not token:
            return results
    raise AssertionError("paging did not end")


def ids(results: list[dict]) -> list[str]:
    return [r["identifier"] for r in results]


@pytest.fixture
async def fleet(client, mint, tenant, other_tenant) -> str:
    """Tenant T with a word of its own (`word`) in every agent: public alpha (finance, eu, none),
    public beta (ops, us, write; two examples), private gamma shared with other_tenant (destructive),
    private delta (not shared), and a public agent whose only skill is retired."""
    word = "zq" + secrets.token_hex(4)
    await register(
        client,
        mint,
        tenant,
        "alpha",
        agent(
            "Alpha",
            [
                skill(
                    "pay.lookup", words=word, tags=["finance", "invoice"], regions=["eu"], examples=["find invoice 7"]
                ),
            ],
        ),
    )
    await register(
        client,
        mint,
        tenant,
        "beta",
        agent(
            "Beta",
            [
                skill(
                    "ops.restart",
                    words=word,
                    tags=["ops"],
                    side_effect="write",
                    regions=["us"],
                    examples=["restart web", "restart db"],
                ),
                skill("ops.status", words="status", tags=["ops", "status"]),
            ],
            version="2.0.0",
        ),
    )
    await register(
        client,
        mint,
        tenant,
        "gamma",
        agent(
            "Gamma",
            [
                skill("ledger.reverse", words=word, tags=["finance"], side_effect="destructive"),
            ],
            visibility="tenant",
            shared_with=[other_tenant],
        ),
    )
    await register(
        client,
        mint,
        tenant,
        "delta",
        agent("Delta", [skill("secret.thing", words=word, tags=["finance"])], visibility="tenant"),
    )
    await register(client, mint, tenant, "gone", agent("Gone", [skill("old.thing", words=word, tags=["finance"])]))
    admin = mint(tenant, "admin", "registry:admin")
    response = await client.post(f"/v1/agents/{tenant}/gone/skills/old.thing/versions/1.0.0/retire", headers=admin)
    assert response.status_code == 200, response.text
    return word


# ---------------------------------------------------------------------------
# Shapes


async def test_manifest_is_a_valid_ard_manifest(client, settings):
    response = await client.get("/.well-known/ard.json")
    assert response.status_code == 200
    body = response.json()
    assert_valid("AICatalogManifest", body)
    assert body["host"] == {"displayName": "capreg", "identifier": registry_url(settings)}
    [entry] = body["entries"]
    assert entry["type"] == "application/ai-registry+json"
    assert entry["url"] == f"{registry_url(settings)}/ard"
    # the registry listens on an IP address here, not a DNS name
    assert entry["identifier"] == "urn:air:capreg.invalid:registry:capreg"


async def test_entries_are_public_metadata_only(client, mint, tenant, fleet, settings):
    results = await everything(client, {"query": {"text": fleet}, "pageSize": 100})
    by_id = {r["identifier"]: r for r in results}
    assert set(by_id) == {urn(tenant, "alpha"), urn(tenant, "beta")}
    beta = by_id[urn(tenant, "beta")]
    assert beta["displayName"] == "Beta" and beta["type"] == A2A and beta["version"] == "2.0.0"
    assert beta["url"] == f"{registry_url(settings)}/v1/agents/{tenant}/beta/.well-known/agent-card.json"
    assert beta["capabilities"] == ["ops.restart", "ops.status"]
    assert beta["tags"] == ["ops", "status"]
    assert beta["representativeQueries"] == ["restart web", "restart db"]
    assert beta["metadata"] == {
        "capreg.ref": f"{tenant}/beta",
        "capreg.sideEffectMax": "write",
        "capreg.dataRegions": "us",
        "capreg.health": "unknown",
        "capreg.liveInstances": 0,
        "capreg.publisherDomain": "default",
    }
    assert beta["source"] == f"{registry_url(settings)}/ard" and isinstance(beta["score"], int)
    # one example is not enough for representativeQueries (ARD wants two to five)
    assert "representativeQueries" not in by_id[urn(tenant, "alpha")]
    raw = json.dumps(results)
    for secret in ("inputSchema", "outputSchema", "supportedInterfaces", "agents.example", "endpoints"):
        assert secret not in raw


# ---------------------------------------------------------------------------
# Visibility


async def test_visibility_is_discoverys(client, mint, tenant, other_tenant, fleet):
    stranger = mint("s" + secrets.token_hex(4), "reader", "registry:read")
    partner = mint(other_tenant, "reader", "registry:read")
    owner = mint(tenant, "reader", "registry:read")
    no_read_scope = mint(tenant, "publisher", "registry:publish")
    expected = {
        None: {"alpha", "beta"},
        "stranger": {"alpha", "beta"},
        "no_read_scope": {"alpha", "beta"},  # discovery adds tenant records for registry:read only
        "partner": {"alpha", "beta", "gamma"},
        "owner": {"alpha", "beta", "gamma", "delta"},
    }
    headers = {None: None, "stranger": stranger, "no_read_scope": no_read_scope, "partner": partner, "owner": owner}
    for who, agents in expected.items():
        h = headers[who]
        found = {
            r["metadata"]["capreg.ref"].split("/")[1] for r in await everything(client, {"query": {"text": fleet}}, h)
        }
        assert found == agents, who
        # discovery shows the same agents to the same caller
        response = await client.get("/v1/capabilities", params={"q": fleet, "tenant": tenant, "limit": 200}, headers=h)
        assert {i["agentId"] for i in response.json()["items"]} == agents, who
        listed = await client.get(
            "/ard/agents", params={"filter": f"publisherId = '{tenant}.capreg.invalid'", "pageSize": 100}, headers=h
        )
        assert listed.status_code == 200
        assert_valid("ListResponse", listed.json())
        assert {i["identifier"] for i in listed.json()["items"]} == {urn(tenant, a) for a in agents}, who
        explored = await client.post(
            "/ard/explore",
            json={
                "query": {"text": fleet},
                "resultType": {"facets": [{"field": "publisher"}, {"field": "tags"}, {"field": "type"}]},
            },
            headers=h,
        )
        assert explored.status_code == 200
        assert_valid("ExploreResponse", explored.json())
        facets = explored.json()["facets"]
        assert facets["publisher"]["buckets"] == [{"value": f"{tenant}.capreg.invalid", "count": len(agents)}]
        assert facets["type"]["buckets"] == [{"value": A2A, "count": len(agents)}]
        finance = {"alpha", "gamma", "delta"} & agents
        assert {"value": "finance", "count": len(finance)} in facets["tags"]["buckets"]
        for name in ("alpha", "beta", "gamma", "delta", "gone"):
            response = await client.get(f"/ard/agents/{quote(urn(tenant, name), safe='')}", headers=h)
            if name in agents:
                assert response.status_code == 200, (who, name)
                assert_valid("catalogEntry", response.json())
                assert "score" not in response.json() and "source" not in response.json()
            else:
                assert response.status_code == 404, (who, name)
                assert response.json() == {"errorCode": "NOT_FOUND", "message": "no such agent"}


async def test_invisible_and_absent_answer_alike(client, tenant, fleet):
    invisible = await client.get(f"/ard/agents/{quote(urn(tenant, 'delta'), safe='')}")
    absent = await client.get(f"/ard/agents/{quote(urn(tenant, 'no-such-agent'), safe='')}")
    unknown_publisher = await client.get("/ard/agents/urn:air:nobody.example:alpha")
    for response in (invisible, absent, unknown_publisher):
        assert response.status_code == 404
        assert response.content == absent.content
        assert response.headers["content-type"] == absent.headers["content-type"]


# ---------------------------------------------------------------------------
# Filters


async def _found(client, fleet, filter_, headers=None) -> set[str]:
    results = await everything(client, {"query": {"text": fleet, "filter": filter_}}, headers)
    return {r["metadata"]["capreg.ref"].split("/")[1] for r in results}


async def test_every_filter_key(client, mint, tenant, fleet):
    owner = mint(tenant, "reader", "registry:read")
    domain = f"{tenant}.capreg.invalid"
    cases = [
        ({"type": A2A}, {"alpha", "beta", "gamma", "delta"}),
        ({"type": ["application/mcp-server-card+json"]}, set()),
        ({"type": ["application/mcp-server-card+json", A2A]}, {"alpha", "beta", "gamma", "delta"}),
        ({"tags": ["ops"]}, {"beta"}),
        ({"tags": ["ops", "invoice"]}, {"alpha", "beta"}),  # OR within a key
        ({"tags": "status"}, {"beta"}),  # a bare scalar is one value
        ({"capabilities": ["ledger.reverse", "pay.lookup"]}, {"alpha", "gamma"}),
        ({"publisher": [domain]}, {"alpha", "beta", "gamma", "delta"}),
        ({"publisher": [domain.upper()]}, {"alpha", "beta", "gamma", "delta"}),
        ({"publisher": ["nobody.example"]}, set()),
        ({"version": ["2.0.0"]}, {"beta"}),
        ({"metadata.capreg.sideEffectMax": ["none"]}, {"alpha", "delta"}),
        ({"metadata.capreg.sideEffectMax": ["write"]}, {"alpha", "beta", "delta"}),
        ({"metadata.capreg.sideEffectMax": ["none", "write"]}, {"alpha", "beta", "delta"}),  # OR: up to the highest
        ({"metadata.capreg.dataRegions": ["us"]}, {"beta", "gamma", "delta"}),  # skills without regions serve any
        ({"metadata.capreg.dataRegions": ["eu"]}, {"alpha", "beta", "gamma", "delta"}),  # beta's ops.status has none
        ({"metadata.capreg.health": ["unknown"]}, {"alpha", "beta", "gamma", "delta"}),
        ({"metadata.capreg.health": ["healthy"]}, set()),
        ({"tags": ["finance"], "metadata.capreg.sideEffectMax": "none"}, {"alpha", "delta"}),  # AND across keys
        ({"tags": ["finance"], "capabilities": ["ops.restart"]}, set()),
    ]
    for filter_, expected in cases:
        assert await _found(client, fleet, filter_, owner) == expected, filter_
    heartbeat = await client.post(
        f"/v1/agents/{tenant}/beta/heartbeat",
        json={"instanceId": "i-1", "url": "https://beta.example/a2a", "ttlSeconds": 60},
        headers=mint(tenant, "publisher", "registry:publish"),
    )
    assert heartbeat.status_code == 200, heartbeat.text
    assert await _found(client, fleet, {"metadata.capreg.health": ["healthy"]}, owner) == {"beta"}
    [beta] = [
        r
        for r in await everything(
            client, {"query": {"text": fleet, "filter": {"metadata.capreg.health": "healthy"}}}, owner
        )
    ]
    assert beta["metadata"]["capreg.health"] == "healthy" and beta["metadata"]["capreg.liveInstances"] == 1
    assert "beta.example" not in json.dumps(beta)


async def test_list_filters(client, mint, tenant, fleet):
    owner = mint(tenant, "reader", "registry:read")
    domain = f"{tenant}.capreg.invalid"

    async def listed(expression: str) -> set[str]:
        response = await client.get("/ard/agents", params={"filter": expression, "pageSize": 100}, headers=owner)
        assert response.status_code == 200, response.text
        return {
            i["identifier"].rsplit(":", 1)[1]
            for i in response.json()["items"]
            if i["metadata"]["capreg.ref"].startswith(tenant + "/")
        }

    everything_of_tenant = {"alpha", "beta", "gamma", "delta"}
    assert await listed(f"publisherId = '{domain}'") == everything_of_tenant
    assert await listed(f"publisherId = 'nobody.example,{domain}'") == everything_of_tenant
    assert await listed(f"publisherId = '{domain}' AND displayName = 'alp'") == {"alpha"}
    assert await listed(f"publisherId = '{domain}' and type = '{A2A}'") == everything_of_tenant
    assert await listed(f"publisherId = '{domain}' AND type = 'application/mcp-server-card+json'") == set()
    assert await listed(f"publisherId = '{domain}' AND updatedAfter > '2000-01-01T00:00:00Z'") == everything_of_tenant
    assert await listed(f"publisherId = '{domain}' AND createdAfter > '2999-01-01T00:00:00Z'") == set()


# ---------------------------------------------------------------------------
# Paging


async def test_paging_without_repeats(client, mint, tenant):
    word = "zp" + secrets.token_hex(4)
    names = [f"agent-{i:02d}" for i in range(7)]
    for name in names:
        await register(client, mint, tenant, name, agent(name, [skill("work.do", words=word)]))
    seen, token, pages = [], None, 0
    while True:
        page = await search(client, {"query": {"text": word}, "pageSize": 3, **({"pageToken": token} if token else {})})
        pages += 1
        seen += ids(page["results"])
        token = page.get("pageToken")
        if not token:
            break
    assert pages == 3 and len(seen) == len(set(seen)) == 7
    assert set(seen) == {urn(tenant, n) for n in names}
    # list pages, in identifier order
    listed, token = [], None
    while True:
        params = {
            "filter": f"publisherId = '{tenant}.capreg.invalid'",
            "pageSize": 2,
            **({"pageToken": token} if token else {}),
        }
        response = await client.get("/ard/agents", params=params)
        assert response.status_code == 200, response.text
        listed += [i["identifier"] for i in response.json()["items"]]
        token = response.json().get("pageToken")
        assert token == response.json().get("nextPageToken")
        if not token:
            break
    assert listed == sorted({urn(tenant, n) for n in names})
    # a token of one question is refused for another, and a forged one is refused
    first = await search(client, {"query": {"text": word}, "pageSize": 3})
    for bad in (
        {"query": {"text": word + " other"}, "pageToken": first["pageToken"]},
        {"query": {"text": word, "filter": {"tags": "x"}}, "pageToken": first["pageToken"]},
        {"query": {"text": word}, "pageToken": "bm90LW91cnM"},
        {"query": {"text": word}, "pageToken": "%%%"},
    ):
        response = await client.post("/ard/search", json=bad)
        assert response.status_code == 400 and response.json()["errorCode"] == "INVALID_ARGUMENT", bad
    response = await client.get("/ard/agents", params={"pageToken": first["pageToken"]})
    assert response.status_code == 400 and response.json()["errorCode"] == "INVALID_ARGUMENT"


# ---------------------------------------------------------------------------
# Explore


async def test_explore_facets(client, mint, tenant, fleet):
    owner = mint(tenant, "reader", "registry:read")
    body = {
        "query": {"text": fleet},
        "resultType": {
            "facets": [
                {"field": "tags", "limit": 1},
                {"field": "capabilities"},
                {"field": "version"},
                {"field": "metadata.capreg.sideEffectMax"},
                {"field": "metadata.capreg.dataRegions"},
                {"field": "metadata.capreg.health"},
                {"field": "publisher"},
                {"field": "type", "minCount": 5},
            ]
        },
    }
    response = await client.post("/ard/explore", json=body, headers=owner)
    assert response.status_code == 200, response.text
    assert_valid("ExploreResponse", response.json())
    facets = response.json()["facets"]
    # tags over alpha, beta, gamma, delta: finance 3, invoice 1, ops 1, status 1; limit 1
    assert facets["tags"] == {"buckets": [{"value": "finance", "count": 3}], "otherCount": 3}
    assert facets["capabilities"]["buckets"] == [
        {"value": v, "count": 1} for v in ["ledger.reverse", "ops.restart", "ops.status", "pay.lookup", "secret.thing"]
    ]
    assert facets["version"]["buckets"] == [{"value": "1.0.0", "count": 3}, {"value": "2.0.0", "count": 1}]
    assert facets["metadata.capreg.sideEffectMax"]["buckets"] == [
        {"value": "none", "count": 2},
        {"value": "destructive", "count": 1},
        {"value": "write", "count": 1},
    ]
    assert facets["metadata.capreg.dataRegions"]["buckets"] == [
        {"value": "eu", "count": 1},
        {"value": "us", "count": 1},
    ]
    assert facets["metadata.capreg.health"]["buckets"] == [{"value": "unknown", "count": 4}]
    assert facets["type"] == {"buckets": [], "otherCount": 0}  # 4 < minCount 5
    # filters narrow the counted set the same way as search
    body["query"]["filter"] = {"tags": "ops"}
    facets = (await client.post("/ard/explore", json=body, headers=owner)).json()["facets"]
    assert facets["publisher"]["buckets"] == [{"value": f"{tenant}.capreg.invalid", "count": 1}]
    # without text or filter: the whole registry the caller sees, the fleet's four included
    response = await client.post(
        "/ard/explore", json={"resultType": {"facets": [{"field": "publisher", "limit": 1000}]}}, headers=owner
    )
    assert {"value": f"{tenant}.capreg.invalid", "count": 4} in response.json()["facets"]["publisher"]["buckets"]


# ---------------------------------------------------------------------------
# Bad input and the error envelope


async def test_bad_input_is_invalid_argument(client, mint, db, fleet):
    long_text = "x" * 513
    bad_bodies = [
        {},
        {"query": {}},
        {"query": {"text": ""}},
        {"query": {"text": "   "}},
        {"query": {"text": long_text}},
        {"query": {"text": 7}},
        {"query": "text"},
        {"query": {"text": "a", "extra": 1}},
        {"query": {"text": "a"}, "pageSize": 0},
        {"query": {"text": "a"}, "pageSize": 101},
        {"query": {"text": "a"}, "pageSize": "5"},
        {"query": {"text": "a"}, "pageSize": 5.0},
        {"query": {"text": "a", "filter": []}},
        {"query": {"text": "a", "filter": "tags"}},
        {"query": {"text": "a", "filter": {"colour": ["red"]}}},
        {"query": {"text": "a", "filter": {"tags": []}}},
        {"query": {"text": "a", "filter": {"tags": [1]}}},
        {"query": {"text": "a", "filter": {"tags": {"x": 1}}}},
        {"query": {"text": "a", "filter": {"metadata.capreg.sideEffectMax": ["lots"]}}},
        {"query": {"text": "a", "filter": {"metadata.capreg.health": ["great"]}}},
        {"query": {"text": "a"}, "federation": "everywhere"},
        {"query": {"text": "a"}, "unknown": True},
        {"query": {"text": "a", "filter": {f"k{i}": "v" for i in range(17)}}},
    ]
    audit_before = await count_rows(db, "audit_events")
    for body in bad_bodies:
        response = await client.post("/ard/search", json=body)
        assert response.status_code == 400, (body, response.text)
        assert response.headers["content-type"].startswith("application/json")
        assert set(response.json()) == {"errorCode", "message"} and response.json()["errorCode"] == "INVALID_ARGUMENT"
        assert_valid("Error", response.json())
    for raw in (b"{", b"not json", b"[]", b"null"):
        response = await client.post("/ard/search", content=raw, headers={"content-type": "application/json"})
        assert response.status_code == 400 and response.json()["errorCode"] == "INVALID_ARGUMENT"
    for body in (
        {},
        {"resultType": {}},
        {"resultType": {"facets": []}},
        {"resultType": {"facets": [{"field": "colour"}]}},
        {"resultType": {"facets": [{"field": "tags"}, {"field": "tags"}]}},
        {"resultType": {"facets": [{"field": "tags", "limit": 0}]}},
        {"resultType": {"counts": {}}},
        {"resultType": {"facets": [{"field": "tags"}]}, "query": {"filter": {"colour": "red"}}},
    ):
        response = await client.post("/ard/explore", json=body)
        assert response.status_code == 400 and response.json()["errorCode"] == "INVALID_ARGUMENT", body
    for identifier in (
        "not-a-urn",
        "urn:air:",
        "urn:air:example.com",
        "urn:air:example.com:a:b",
        "urn:air:exa_mple.com:a",
        "urn:air:example.com:UPPER",
        "urn:isbn:example.com:a",
        "urn:air:" + "a" * 400 + ".com:a",
    ):
        response = await client.get(f"/ard/agents/{quote(identifier, safe='')}")
        assert response.status_code == 400 and response.json()["errorCode"] == "INVALID_ARGUMENT", identifier
    for params in (
        {"pageSize": 0},
        {"pageSize": 101},
        {"pageSize": "x"},
        {"filter": "colour = 'red'"},
        {"filter": "type ~ 'x'"},
        {"filter": "type = 'unterminated"},
        {"filter": "type = 'a' OR type = 'b'"},
        {"filter": "updatedAfter > 'yesterday'"},
        {"filter": "updatedAfter > '2026-01-01T00:00:00'"},
        {"orderBy": "displayName"},
        {"filter": "x" * 3000},
    ):
        response = await client.get("/ard/agents", params=params)
        assert response.status_code == 400 and response.json()["errorCode"] == "INVALID_ARGUMENT", params
    # operators and SQL in text are plain words: answered, never an error
    for text in (
        "a & !b | (c:* <-> d)",
        "'; DROP TABLE agents; --",
        "%_\\",
        fleet + " & !",
        "\u00e9t\u00e9 \u4e2d\u6587",
    ):
        await search(client, {"query": {"text": text}})
    assert await count_rows(db, "audit_events") == audit_before  # anonymous refusals are never audited


async def test_list_filter_dates_go_through_the_one_range_check(client, db):
    """Issue 35 item 5: dates inside `filter` skipped the range check; extreme values reached PostgreSQL
    and came back as "a request value is not acceptable: DataError", naming no field."""
    audit_before = await count_rows(db, "audit_events")
    for field in ("updatedAfter", "createdAfter"):
        for value in (
            "0001-01-01T00:00:00+23:59",  # before year 1 in UTC
            "9999-12-31T23:59:59-23:59",  # after year 9999 in UTC
            "0001-01-01T00:00:00Z",  # asyncpg's -infinity
            "9999-12-31T23:59:59.999999Z",  # and +infinity
        ):
            response = await client.get("/ard/agents", params={"filter": f"{field} > '{value}'"})
            assert response.status_code == 400, (field, value, response.text)
            assert response.json()["errorCode"] == "INVALID_ARGUMENT"
            message = response.json()["message"]
            assert message.startswith(field) and "outside" in message and "DataError" not in message, message
        response = await client.get("/ard/agents", params={"filter": f"{field} = '2026-13-01T00:00:00Z'"})
        assert response.status_code == 400 and response.json()["message"].startswith(field), response.text
    assert await count_rows(db, "audit_events") == audit_before


async def test_errors_are_ards_only_under_ard(client, mint):
    response = await client.post(
        "/ard/search", json={"query": {"text": "x"}}, headers={"Authorization": "Bearer nonsense"}
    )
    assert response.status_code == 401
    assert response.json()["errorCode"] == "UNAUTHENTICATED" and "Bearer" in response.headers["www-authenticate"]
    response = await client.get("/ard/no-such-route")
    assert response.status_code == 404 and response.json()["errorCode"] == "NOT_FOUND"
    response = await client.get("/ard/search")
    assert response.status_code == 405 and set(response.json()) == {"errorCode", "message"}
    # the rest of capreg keeps problem+json
    response = await client.get("/v1/capabilities", params={"limit": 0})
    assert response.status_code == 400 and response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "invalid_request"
    response = await client.get("/v1/agents/nobody/nothing")
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_body_bounds(app, settings):
    import msgspec

    from tests.conftest import running_app

    small = msgspec.structs.replace(settings, max_body=2048)
    async with running_app(small) as (_, client):
        response = await client.post(
            "/ard/search",
            content=b'{"query": {"text": "' + b"a" * 4096 + b'"}}',
            headers={"content-type": "application/json"},
        )
        assert response.status_code == 413
        assert response.json()["errorCode"] == "INVALID_ARGUMENT"


# ---------------------------------------------------------------------------
# Same answers as discovery


async def test_first_page_agrees_with_ranked_discovery(client, mint, tenant):
    word = "zr" + secrets.token_hex(3)
    other = "zs" + secrets.token_hex(3)
    # agents matching one or both words, in names, tags or descriptions only
    await register(client, mint, tenant, "both-in-name", agent("Both", [skill("a.one", words=f"{word} {other}")]))
    await register(client, mint, tenant, "one-in-name", agent("One", [skill("a.two", words=word)]))
    await register(client, mint, tenant, "one-in-tag", agent("Tag", [skill("a.three", tags=[word])]))
    await register(
        client, mint, tenant, "two-skills", agent("Two", [skill("b.one", words=other), skill("b.two", words=word)])
    )
    await register(client, mint, tenant, "unrelated", agent("Unrelated", [skill("c.one", words="nothing")]))
    text = f"{word} {other}"
    capabilities = await client.get("/v1/capabilities", params={"q": text, "limit": 20})
    assert capabilities.status_code == 200
    order: list[str] = []
    for item in capabilities.json()["items"]:
        name = f"{item['tenant']}/{item['agentId']}"
        if name not in order:
            order.append(name)
    page = await search(client, {"query": {"text": text}, "pageSize": 100})
    refs = [r["metadata"]["capreg.ref"] for r in page["results"]]
    assert [r for r in refs if r in order] == order
    assert f"{tenant}/unrelated" not in refs
    scores = [r["score"] for r in page["results"]]
    assert scores == sorted(scores, reverse=True) and all(0 <= s <= 100 for s in scores)


async def test_configured_publisher_domain(settings, mint, client, tenant, fleet):
    import msgspec

    from tests.conftest import running_app

    domain = f"{tenant}.example"
    configured = msgspec.structs.replace(settings, publisher_domains={tenant: domain})
    async with running_app(configured) as (_, other_client):
        results = await everything(other_client, {"query": {"text": fleet}})
        assert ids(results) and all(i.startswith(f"urn:air:{domain}:") for i in ids(results))
        assert {r["metadata"]["capreg.publisherDomain"] for r in results} == {"configured"}
        assert await _found(other_client, fleet, {"publisher": domain}) == {"alpha", "beta"}
        assert await _found(other_client, fleet, {"publisher": f"{tenant}.capreg.invalid"}) == set()
        response = await other_client.get(f"/ard/agents/{quote(f'urn:air:{domain}:alpha', safe='')}")
        assert response.status_code == 200 and response.json()["metadata"]["capreg.ref"] == f"{tenant}/alpha"
        response = await other_client.get(f"/ard/agents/{quote(urn(tenant, 'alpha'), safe='')}")
        assert response.status_code == 404
        listed = await other_client.get("/ard/agents", params={"filter": f"publisherId = '{domain}'"})
        assert [i["identifier"] for i in listed.json()["items"]] == [
            f"urn:air:{domain}:alpha",
            f"urn:air:{domain}:beta",
        ]
        # explore without the publisher facet binds no publisher domains (an unnamed parameter was a 500)
        for facets in ([{"field": "tags"}], [{"field": "type"}, {"field": "publisher"}]):
            explored = await other_client.post(
                "/ard/explore", json={"query": {"text": fleet}, "resultType": {"facets": facets}}
            )
            assert explored.status_code == 200, explored.text
        assert explored.json()["facets"]["publisher"]["buckets"] == [{"value": domain, "count": 2}]
    with pytest.raises(Exception, match="lowercase FQDN"):
        async with running_app(msgspec.structs.replace(settings, publisher_domains={tenant: "NOT A DOMAIN"})):
            pass


async def test_search_is_ranked_search(client, mint, tenant):
    """Inflections, one typing error and stop words as ranked discovery treats them; scores 0-100."""
    word = "zt" + secrets.token_hex(3)
    await register(
        client, mint, tenant, "invoicer", agent("Invoicer", [skill("pay.invoicing", words=f"{word} invoicing")])
    )
    page = await search(client, {"query": {"text": f"the {word} invoices"}, "pageSize": 100})
    [mine] = [r for r in page["results"] if r["metadata"]["capreg.ref"] == f"{tenant}/invoicer"]
    # first by words (the only record with the rare word): half the best score at least, the rest
    # is its rank by meaning (registry.search.engine: reciprocal rank fusion)
    assert 50 <= mine["score"] <= 100
    typo = word[:2] + word[3] + word[2] + word[4:]  # two adjacent letters swapped
    page = await search(client, {"query": {"text": typo}, "pageSize": 100})
    assert f"{tenant}/invoicer" in [r["metadata"]["capreg.ref"] for r in page["results"]]
    assert (await search(client, {"query": {"text": "the and of"}}))["results"] == []


async def test_rate_limits_apply(settings):
    import msgspec

    from tests.conftest import running_app

    limited = msgspec.structs.replace(settings, rate_limit=0.5, rate_burst=2)
    async with running_app(limited) as (_, client):
        statuses = [(await client.post("/ard/search", json={"query": {"text": "invoice"}})) for _ in range(4)]
        assert [r.status_code for r in statuses[:2]] == [200, 200]
        refused = statuses[-1]
        assert refused.status_code == 429 and "retry-after" in refused.headers
        assert refused.json()["errorCode"] == "RATE_LIMIT_EXCEEDED"


async def test_list_pages_read_per_tenant_agree_with_the_whole_matched_set(client, mint, tenant, db):
    """db.ard.identifier_page walks each tenant's agents in order from the page token; it answers
    what sorting the whole visible matched set by identifier answers, page after page, for tenants
    whose names are prefixes of one another and agent ids that sort differently bytewise."""
    from db import ard as ard_queries

    other = tenant + "-b"
    for t in (tenant, other):
        for name in ("a.b", "a-b", "a", "ab", "a_b", "z"):
            await register(client, mint, t, name, agent(name, [skill("work.do")]))
    await register(client, mint, tenant, "hidden", agent("hidden", [skill("work.do")], visibility="tenant"))
    for viewer in (None, tenant):
        for configured in ({}, {other: "b.example", tenant: "b.example.x"}):
            async with db.acquire() as conn:
                whole = await ard_queries._identifier_page_matched(
                    conn,
                    viewer_tenant=viewer,
                    where=ard_queries.EntryFilter(),
                    configured=configured,
                    after=None,
                    limit=100_000,
                )
                paged, after = [], None
                while True:
                    rows = await ard_queries.identifier_page(
                        conn,
                        viewer_tenant=viewer,
                        where=ard_queries.EntryFilter(),
                        configured=configured,
                        after=after,
                        limit=7,
                    )
                    paged += rows
                    if len(rows) < 7:
                        break
                    after = rows[-1].identifier
            assert [r.identifier for r in paged] == [r.identifier for r in whole]
            assert ("hidden" in {r.agent_id for r in paged if r.tenant == tenant}) == (viewer == tenant)
