"""Versions that mean something: compatibility enforced at publish time, /v1/compatibility, and the
deprecate/retire lifecycle."""

from __future__ import annotations

import copy

from tests.conftest import count_rows, example

BILLING = example("billing-agent.json")
LOOKUP = BILLING["skills"][0]


def card(*skills: dict) -> dict:
    return {**copy.deepcopy(BILLING), "skills": [copy.deepcopy(s) for s in skills]}


def lookup(version: str, **changes) -> dict:
    skill = copy.deepcopy(LOOKUP)
    skill["version"] = version
    skill.update(changes)
    return skill


def with_required(skill: dict, name: str) -> dict:
    schema = copy.deepcopy(skill["inputSchema"])
    schema["properties"][name] = {"type": "string"}
    schema["required"] = [*schema["required"], name]
    return {**skill, "inputSchema": schema}


async def put(client, mint, tenant, body):
    return await client.put(
        f"/v1/agents/{tenant}/billing-agent", json=body, headers=mint(tenant, "p", "registry:publish")
    )


async def test_breaking_change_under_minor_bump_is_refused_with_a_precise_report(client, mint, tenant, db):
    assert (await put(client, mint, tenant, card(lookup("2.0.0")))).status_code == 201
    before = (
        await count_rows(db, "capability_versions", tenant=tenant),
        await count_rows(db, "audit_events", tenant=tenant, outcome="allowed"),
    )
    breaking = with_required(lookup("2.1.0", scopes=["invoice:read", "invoice:admin"]), "customerId")
    response = await put(client, mint, tenant, card(lookup("2.0.0"), breaking))
    assert response.status_code == 409, response.text
    problem = response.json()
    assert problem["code"] == "incompatible_change"
    kinds = {(e["kind"], e["path"]) for e in problem["errors"]}
    assert ("required_added", "/skills/1/inputSchema/required/customerId") in kinds or any(
        k == "required_added" and p.startswith("/skills/1/inputSchema") for k, p in kinds
    ), kinds
    assert any(k == "scope_added" and p == "/skills/1/scopes" for k, p in kinds), kinds
    assert all(e["message"] for e in problem["errors"])
    after = (
        await count_rows(db, "capability_versions", tenant=tenant),
        await count_rows(db, "audit_events", tenant=tenant, outcome="allowed"),
    )
    assert after == before


async def test_same_change_under_a_new_major_is_accepted(client, mint, tenant):
    assert (await put(client, mint, tenant, card(lookup("2.0.0")))).status_code == 201
    response = await put(client, mint, tenant, card(with_required(lookup("3.0.0"), "customerId")))
    assert response.status_code == 201, response.text
    assert response.json()["published"] == [{"id": "invoice.lookup", "version": "3.0.0"}]


async def test_compatible_minor_is_accepted_and_versions_in_one_request_are_checked_in_order(client, mint, tenant):
    widened = copy.deepcopy(LOOKUP["inputSchema"])
    widened["properties"]["currency"] = {"type": "string"}
    body = card(
        lookup("2.0.0"), lookup("2.1.0", inputSchema=widened), with_required(lookup("2.2.0", inputSchema=widened), "x")
    )
    response = await put(client, mint, tenant, body)
    assert response.status_code == 409
    assert {e["path"].split("/")[2] for e in response.json()["errors"]} == {"2"}
    ok = await put(client, mint, tenant, card(lookup("2.0.0"), lookup("2.1.0", inputSchema=widened)))
    assert ok.status_code == 201


async def test_a_lower_version_published_later_must_not_break_the_next_one(client, mint, tenant):
    assert (await put(client, mint, tenant, card(lookup("2.0.0"), lookup("2.2.0")))).status_code == 201
    narrowed = with_required(lookup("2.1.0"), "extra")  # 2.2.0 would then drop a required property: fine
    relaxed = lookup("2.1.0", sideEffect="write")  # 2.2.0 (none) after 2.1.0 (write) is fine, 2.1.0 after 2.0.0 is not
    response = await put(client, mint, tenant, card(lookup("2.0.0"), lookup("2.2.0"), relaxed))
    assert response.status_code == 409 and any(e["kind"] == "side_effect_raised" for e in response.json()["errors"])
    response = await put(client, mint, tenant, card(lookup("2.0.0"), lookup("2.2.0"), narrowed))
    assert response.status_code == 409


async def test_compatibility_endpoint_gives_the_publishing_verdict(client, mint, tenant):
    headers = mint(tenant, "ci", "")
    breaking = with_required(lookup("2.1.0"), "customerId")
    report = (
        await client.post("/v1/compatibility", json={"old": lookup("2.0.0"), "new": breaking}, headers=headers)
    ).json()
    assert report["compatible"] is False and report["errors"][0]["kind"] == "required_added"
    published = await put(client, mint, tenant, card(lookup("2.0.0"), breaking))
    assert published.status_code == 409
    assert [e["kind"] for e in published.json()["errors"]] == [e["kind"] for e in report["errors"]]

    major = with_required(lookup("3.0.0"), "customerId")
    report = (
        await client.post("/v1/compatibility", json={"old": lookup("2.0.0"), "new": major}, headers=headers)
    ).json()
    assert report["compatible"] is True and report["errors"] == [] and report["breakingChanges"]
    same = (
        await client.post("/v1/compatibility", json={"old": lookup("2.0.0"), "new": lookup("2.0.1")}, headers=headers)
    ).json()
    assert same == {"compatible": True, "errors": [], "breakingChanges": []}


async def test_compatibility_endpoint_bad_input(client, mint, tenant):
    headers = mint(tenant, "ci", "")
    assert (
        await client.post("/v1/compatibility", json={"old": lookup("2.0.0"), "new": lookup("2.1.0")})
    ).status_code == 401
    for body in (
        {"old": lookup("2.0.0")},
        {"old": lookup("2.0.0"), "new": lookup("2.1")},
        {"old": lookup("2.0.0"), "new": lookup("1.0.0")},
        {"old": lookup("2.0.0"), "new": lookup("2.1.0", inputSchema={"type": "objekt"})},
    ):
        response = await client.post("/v1/compatibility", json=body, headers=headers)
        assert response.status_code == 400 and response.json()["code"] == "invalid_request", body


async def test_deprecate_shows_in_discovery_and_retire_removes(client, mint, tenant, db):
    assert (await put(client, mint, tenant, card(lookup("2.0.0"), lookup("2.1.0")))).status_code == 201
    admin = mint(tenant, "admin", "registry:admin")
    base = f"/v1/agents/{tenant}/billing-agent/skills/invoice.lookup/versions"
    response = await client.post(
        f"{base}/2.1.0/deprecate", json={"sunsetAt": "2027-06-01T00:00:00Z", "message": "use 3.x"}, headers=admin
    )
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "deprecated" and response.json()["sunsetAt"] == "2027-06-01T00:00:00Z"
    items = (await client.get("/v1/capabilities", params={"tenant": tenant})).json()["items"]
    assert [(i["version"], i["status"]) for i in items] == [("2.1.0", "deprecated")]
    assert [
        i["version"]
        for i in (await client.get("/v1/capabilities", params={"tenant": tenant, "status": "active"})).json()["items"]
    ] == []

    response = await client.post(f"{base}/2.1.0/retire", headers=admin)
    assert response.status_code == 200 and response.json()["status"] == "retired"
    items = (await client.get("/v1/capabilities", params={"tenant": tenant, "versions": "all"})).json()["items"]
    assert [i["version"] for i in items] == ["2.0.0"]
    listed = (await client.get(base)).json()["items"]
    assert [(i["version"], i["status"]) for i in listed] == [("2.1.0", "retired"), ("2.0.0", "active")]
    reader = mint(tenant, "router", "invoice:read", regions=["eu"])
    assert (await client.get(f"{base}/2.1.0", headers=reader)).status_code == 410
    assert (await client.get(f"{base}/2.1.0", headers=reader)).json()["code"] == "retired"
    assert (await client.get(f"{base}/^2", headers=reader)).json()["version"] == "2.0.0"
    assert (await client.post(f"{base}/2.1.0/deprecate", json={}, headers=admin)).status_code == 410
    assert (await client.post(f"{base}/2.1.0/retire", headers=admin)).status_code == 200  # idempotent
    types = [r["type"] for r in await db.fetch("SELECT type FROM audit_events WHERE tenant = $1 ORDER BY seq", tenant)]
    assert types.count("version.deprecated") == 2 and types.count("version.retired") == 1  # one refused deprecate
    outcomes = await db.fetch(
        "SELECT type, outcome, reason FROM audit_events WHERE tenant = $1 AND outcome = 'denied' AND type LIKE 'version.%'",
        tenant,
    )
    assert [(r["type"], r["reason"]) for r in outcomes] == [("version.deprecated", "retired")]


async def test_lifecycle_needs_admin_of_the_own_tenant(client, mint, tenant, other_tenant):
    assert (await put(client, mint, tenant, card(lookup("2.0.0")))).status_code == 201
    base = f"/v1/agents/{tenant}/billing-agent/skills/invoice.lookup/versions/2.0.0"
    assert (await client.post(f"{base}/retire")).status_code == 401
    response = await client.post(f"{base}/retire", headers=mint(tenant, "p", "registry:publish"))
    assert response.status_code == 403 and response.json()["code"] == "insufficient_scope"
    assert response.headers["www-authenticate"] == 'Bearer error="insufficient_scope", scope="registry:admin"'
    response = await client.post(f"{base}/retire", headers=mint(other_tenant, "a", "registry:admin"))
    assert response.status_code == 403 and response.json()["code"] == "tenant_mismatch"  # the record is public
    response = await client.post(
        base.replace("2.0.0", "9.9.9") + "/retire", headers=mint(tenant, "a", "registry:admin")
    )
    assert response.status_code == 404
    ledger = example("ledger-agent.json")
    await client.put(f"/v1/agents/{tenant}/ledger", json=ledger, headers=mint(tenant, "p", "registry:publish"))
    private = f"/v1/agents/{tenant}/ledger/skills/ledger.reverse-entry/versions/1.0.0/retire"
    response = await client.post(private, headers=mint(other_tenant, "a", "registry:admin"))
    assert response.status_code == 404 and response.json()["code"] == "not_found"


async def test_a_new_agents_first_registration_compares_versions_of_one_skill_in_its_body(client, mint, tenant, db):
    """A new agent has no stored versions, so its versions are compared only with each other: a
    breaking 2.1.0 beside 2.0.0 in its very first body is still refused, and nothing is stored (the
    agent row included)."""
    breaking = with_required(lookup("2.1.0"), "customerId")
    response = await put(client, mint, tenant, card(lookup("2.0.0"), breaking))
    assert response.status_code == 409, response.text
    assert response.json()["code"] == "incompatible_change"
    assert await count_rows(db, "capability_versions", tenant=tenant) == 0
    assert await count_rows(db, "agents", tenant=tenant) == 0
    # Different skills in one first body have no neighbours: published, with no comparison to make.
    other = {**lookup("1.0.0"), "id": "invoice.search"}
    assert (await put(client, mint, tenant, card(lookup("2.0.0"), other))).status_code == 201
