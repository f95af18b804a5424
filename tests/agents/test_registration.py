"""PUT /v1/agents/{tenant}/{agentId}: registration, immutability, idempotency, bad input."""

from __future__ import annotations

import copy

import msgspec

from tests.conftest import count_rows, example

BILLING = example("billing-agent.json")
LEGACY = example("legacy-0.3-search-agent.json")


async def snapshot(pool, tenant: str) -> tuple:
    """Everything registration can change for a tenant, to prove a rejected request changed nothing."""
    return (
        await count_rows(pool, "agents", tenant=tenant),
        await count_rows(pool, "capability_versions", tenant=tenant),
        # Refusals are audited (outcome denied); what a rejected request must not write is an allowed event.
        await count_rows(pool, "audit_events", tenant=tenant, outcome="allowed"),
        await count_rows(pool, "changes", tenant=tenant),
    )


async def test_register_publishes_versions_and_is_idempotent(client, mint, tenant, db):
    headers = mint(tenant, "billing-agent", "registry:publish")
    first = await client.put(f"/v1/agents/{tenant}/billing-agent", json=BILLING, headers=headers)
    assert first.status_code == 201, first.text
    body = first.json()
    assert {(p["id"], p["version"]) for p in body["published"]} == {
        ("invoice.lookup", "2.0.0"),
        ("invoice.mark-paid", "1.1.0"),
    }
    assert body["unchanged"] == []
    assert body["agent"]["tenant"] == tenant and body["agent"]["agentId"] == "billing-agent"
    assert body["agent"]["health"] == "unknown"
    assert "inputSchema" not in first.text and "billing.acme.internal" not in first.text

    before = await snapshot(db, tenant)
    again = await client.put(f"/v1/agents/{tenant}/billing-agent", json=BILLING, headers=headers)
    assert again.status_code == 200, again.text
    assert again.json()["published"] == []
    assert len(again.json()["unchanged"]) == 2
    assert await snapshot(db, tenant) == before


async def test_register_writes_audit_events_in_the_same_transaction(client, mint, tenant, db):
    headers = mint(tenant, "billing-agent", "registry:publish")
    await client.put(f"/v1/agents/{tenant}/billing-agent", json=BILLING, headers=headers)
    rows = await db.fetch("SELECT type, ref, actor, outcome FROM audit_events WHERE tenant = $1 ORDER BY seq", tenant)
    assert [r["type"] for r in rows] == ["agent.registered", "version.published", "version.published"]
    assert rows[1]["ref"] == f"{tenant}/billing-agent/invoice.lookup@2.0.0"
    assert all(r["actor"] == "billing-agent" and r["outcome"] == "allowed" for r in rows)


async def test_changed_content_under_existing_version_is_409_and_nothing_applies(client, mint, tenant, db):
    headers = mint(tenant, "billing-agent", "registry:publish")
    await client.put(f"/v1/agents/{tenant}/billing-agent", json=BILLING, headers=headers)
    before = await snapshot(db, tenant)
    changed = copy.deepcopy(BILLING)
    changed["description"] = "A new description that would otherwise be applied"
    changed["skills"][0]["description"] = "changed under the same version"
    changed["skills"].append({**changed["skills"][1], "id": "invoice.new-skill", "version": "1.0.0"})
    response = await client.put(f"/v1/agents/{tenant}/billing-agent", json=changed, headers=headers)
    assert response.status_code == 409, response.text
    problem = response.json()
    assert problem["code"] == "version_conflict"
    assert response.headers["content-type"].startswith("application/problem+json")
    assert problem["errors"][0]["path"] == "/skills/0"
    assert await snapshot(db, tenant) == before
    agent = await client.get(f"/v1/agents/{tenant}/billing-agent")
    assert agent.json()["description"] == BILLING["description"]


async def test_versions_missing_from_a_later_put_are_kept(client, mint, tenant):
    headers = mint(tenant, "billing-agent", "registry:publish")
    await client.put(f"/v1/agents/{tenant}/billing-agent", json=BILLING, headers=headers)
    only_one = {**BILLING, "skills": [BILLING["skills"][0]]}
    response = await client.put(f"/v1/agents/{tenant}/billing-agent", json=only_one, headers=headers)
    assert response.status_code == 200
    versions = await client.get(f"/v1/agents/{tenant}/billing-agent/skills/invoice.mark-paid/versions")
    assert [v["version"] for v in versions.json()["items"]] == ["1.1.0"]


async def test_a_build_of_a_published_version_is_the_same_version_409_and_resolves_to_nothing_else(
    client, mint, tenant, db
):
    """Issue 35 item 1: `1.0.0+hotfix` beside `1.0.0` has no precedence of its own, so it would skip the
    compatibility check and the replay gate; it is the published version again, refused as such."""
    original = {
        **BILLING["skills"][0],
        "id": "widget.drop",
        "version": "1.0.0",
        "scopes": ["widgets:read"],
        "sideEffect": "none",
        "dataRegions": ["eu"],
    }
    headers = mint(tenant, "publisher", "registry:publish")
    created = await client.put(f"/v1/agents/{tenant}/widgets", json={**BILLING, "skills": [original]}, headers=headers)
    assert created.status_code == 201, created.text
    before = await snapshot(db, tenant)
    twin = {**original, "version": "1.0.0+hotfix", "scopes": [], "sideEffect": "destructive", "dataRegions": []}
    response = await client.put(f"/v1/agents/{tenant}/widgets", json={**BILLING, "skills": [twin]}, headers=headers)
    assert response.status_code == 409, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["code"] == "version_conflict" and problem["errors"][0]["path"] == "/skills/0/version"
    assert await snapshot(db, tenant) == before
    # Both builds in one body: the same version twice (400), nothing stored.
    for agent_id in ("widgets", "widgets-2"):
        both = {**BILLING, "skills": [original, twin]}
        response = await client.put(f"/v1/agents/{tenant}/{agent_id}", json=both, headers=headers)
        assert response.status_code == 400 and response.json()["errors"][0]["path"] == "/skills/1", response.text
        assert await snapshot(db, tenant) == before

    reader = mint(tenant, "router", ["registry:read", "widgets:read"], regions=["eu"])
    for spec in ("1.0.0", "latest", "^1", "~1.0", "1"):
        detail = await client.get(f"/v1/agents/{tenant}/widgets/skills/widget.drop/versions/{spec}", headers=reader)
        assert detail.status_code == 200, (spec, detail.text)
        assert detail.json()["version"] == "1.0.0" and detail.json()["sideEffect"] == "none"
    hotfix = await client.get(f"/v1/agents/{tenant}/widgets/skills/widget.drop/versions/1.0.0+hotfix", headers=reader)
    assert hotfix.status_code == 404, hotfix.text


async def test_legacy_0_3_card_is_converted(client, mint, tenant, db):
    headers = mint(tenant, "search", "registry:publish")
    response = await client.put(f"/v1/agents/{tenant}/docs-search", json=LEGACY, headers=headers)
    assert response.status_code == 201, response.text
    card = await db.fetchval("SELECT card FROM agents WHERE tenant = $1", tenant)
    assert card["supportedInterfaces"][0]["url"] == "https://search.example.org/a2a"
    assert card["supportedInterfaces"][0]["protocolBinding"] == "JSONRPC"
    assert "url" not in card and "preferredTransport" not in card


async def test_requires_approval_defaults_to_destructive(client, mint, tenant, db):
    ledger = example("ledger-agent.json")
    headers = mint(tenant, "ledger", "registry:publish")
    assert (await client.put(f"/v1/agents/{tenant}/ledger", json=ledger, headers=headers)).status_code == 201
    assert await db.fetchval("SELECT requires_approval FROM capability_versions WHERE tenant = $1", tenant) is True


def broken(mutate) -> dict:
    body = copy.deepcopy(BILLING)
    mutate(body)
    return body


BAD_BODIES = {
    "wrong type": (broken(lambda b: b.update(name=42)), "/name"),
    "unknown sideEffect": (broken(lambda b: b["skills"][0].update(sideEffect="explosive")), "/skills/0/sideEffect"),
    "invalid semver": (broken(lambda b: b["skills"][0].update(version="2.0")), "/skills/0/version"),
    "leading zero semver": (broken(lambda b: b["skills"][0].update(version="02.0.0")), "/skills/0/version"),
    "bad skill id": (broken(lambda b: b["skills"][0].update(id="Invoice Lookup")), "/skills/0/id"),
    "not a JSON Schema": (
        broken(lambda b: b["skills"][0].update(inputSchema={"type": "objekt"})),
        "/skills/0/inputSchema",
    ),
    "inputSchema not an object": (
        broken(lambda b: b["skills"][0].update(inputSchema={"type": "string"})),
        "/skills/0/inputSchema/type",
    ),
    "remote $ref": (
        broken(
            lambda b: b["skills"][0].update(
                inputSchema={"type": "object", "properties": {"a": {"$ref": "http://evil.example/s"}}}
            )
        ),
        "/skills/0/inputSchema",
    ),
    "bad outputSchema": (
        broken(lambda b: b["skills"][0].update(outputSchema={"minimum": "zero"})),
        "/skills/0/outputSchema",
    ),
    "missing skills": (broken(lambda b: b.pop("skills")), ""),
    "bad visibility": (broken(lambda b: b.update(visibility="everyone")), "/visibility"),
    "duplicate version": (broken(lambda b: b["skills"].append(b["skills"][0])), "/skills/2"),
}


async def test_bad_bodies_are_400_with_a_path_and_change_nothing(client, mint, tenant, db):
    headers = mint(tenant, "billing-agent", "registry:publish")
    for label, (body, path) in BAD_BODIES.items():
        response = await client.put(f"/v1/agents/{tenant}/billing-agent", json=body, headers=headers)
        assert response.status_code == 400, (label, response.text)
        problem = response.json()
        assert problem["code"] == "invalid_request", label
        assert response.headers["content-type"].startswith("application/problem+json")
        if path:
            assert any(e["path"].startswith(path) for e in problem["errors"]), (label, problem)
    assert await snapshot(db, tenant) == (0, 0, 0, 0)


async def test_malformed_json_and_bad_ids(client, mint, tenant, db):
    headers = {**mint(tenant, "a", "registry:publish"), "Content-Type": "application/json"}
    response = await client.put(f"/v1/agents/{tenant}/billing-agent", content=b'{"name": "x",', headers=headers)
    assert response.status_code == 400 and response.json()["code"] == "invalid_request"
    response = await client.put(f"/v1/agents/{tenant}/Billing_Agent!", json=BILLING, headers=headers)
    assert response.status_code == 400 and response.json()["code"] == "invalid_request"
    assert await snapshot(db, tenant) == (0, 0, 0, 0)


async def test_body_over_the_limit_is_413(client, mint, tenant, db):
    headers = {**mint(tenant, "a", "registry:publish"), "Content-Type": "application/json"}
    huge = msgspec.json.encode({**BILLING, "description": "x" * (1024 * 1024 + 10)})
    response = await client.put(f"/v1/agents/{tenant}/billing-agent", content=huge, headers=headers)
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"
    assert await snapshot(db, tenant) == (0, 0, 0, 0)


async def test_publish_needs_scope_and_own_tenant(client, mint, tenant, other_tenant, db):
    response = await client.put(
        f"/v1/agents/{tenant}/billing-agent", json=BILLING, headers=mint(tenant, "a", "registry:read")
    )
    assert response.status_code == 403 and response.json()["code"] == "insufficient_scope"
    response = await client.put(
        f"/v1/agents/{tenant}/billing-agent", json=BILLING, headers=mint(other_tenant, "a", "registry:publish")
    )
    assert response.status_code == 403 and response.json()["code"] == "tenant_mismatch"
    response = await client.put(f"/v1/agents/{tenant}/billing-agent", json=BILLING)
    assert response.status_code == 401 and response.json()["code"] == "invalid_token"
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert await snapshot(db, tenant) == (0, 0, 0, 0)


async def test_concurrent_identical_registrations_publish_once(client, mint, tenant, db):
    import asyncio

    headers = mint(tenant, "billing-agent", "registry:publish")
    responses = await asyncio.gather(
        *[client.put(f"/v1/agents/{tenant}/billing-agent", json=BILLING, headers=headers) for _ in range(6)]
    )
    assert sorted(r.status_code for r in responses) == [200] * 5 + [201]
    assert await count_rows(db, "capability_versions", tenant=tenant) == 2


async def test_body_nested_ten_thousand_deep_is_400_not_500(client, mint, tenant, db):
    headers = {**mint(tenant, "a", "registry:publish"), "Content-Type": "application/json"}
    deep = b'{"name": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    response = await client.put(f"/v1/agents/{tenant}/billing-agent", content=deep, headers=headers)
    assert response.status_code == 400 and response.json()["code"] == "invalid_request"
    assert await snapshot(db, tenant) == (0, 0, 0, 0)


async def test_who_may_see_a_skills_detail_is_always_said(client, mint, tenant, db):
    """No silent default: a skill without `scopes` is refused, saying how to open it to any token;
    `"scopes": []` says so explicitly and is accepted."""
    headers = mint(tenant, "billing-agent", "registry:publish")
    body = copy.deepcopy(BILLING)
    del body["skills"][0]["scopes"]
    response = await client.put(f"/v1/agents/{tenant}/billing-agent", json=body, headers=headers)
    assert response.status_code == 400, response.text
    [error] = response.json()["errors"]
    assert error["path"] == "/skills/0/scopes" and "[]" in error["message"], error
    assert await snapshot(db, tenant) == (0, 0, 0, 0)
    body["skills"][0]["scopes"] = []
    response = await client.put(f"/v1/agents/{tenant}/billing-agent", json=body, headers=headers)
    assert response.status_code == 201, response.text
