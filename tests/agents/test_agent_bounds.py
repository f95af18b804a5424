"""What one agent (and one tenant) may accumulate across registrations (docs/security.md#round-4):
skills left out of a PUT are kept, so the per-body caps alone would let one agent grow without end."""

from __future__ import annotations

from registry.core.records import MAX_AGENT_CONTENT_BYTES, MAX_SKILLS
from tests.conftest import example, retire_versions

BILLING = example("billing-agent.json")


def _skill(skill_id: str, **fields) -> dict:
    return {**BILLING["skills"][0], "id": skill_id, **fields}


def _body(skills: list[dict]) -> dict:
    return {**BILLING, "skills": skills}


async def _versions(db, tenant: str) -> int:
    return await db.fetchval("SELECT count(*) FROM capability_versions WHERE tenant = $1", tenant)


async def test_skills_kept_across_puts_are_capped_per_agent(client, mint, tenant, db):
    publish = mint(tenant, "p", "registry:publish")
    first = [_skill(f"a{i}.x") for i in range(MAX_SKILLS - 8)]
    response = await client.put(f"/v1/agents/{tenant}/grower", json=_body(first), headers=publish)
    assert response.status_code == 201, response.text

    # Each body is under the per-body cap; together they would pass it.
    second = [_skill(f"b{i}.x") for i in range(16)]
    response = await client.put(f"/v1/agents/{tenant}/grower", json=_body(second), headers=publish)
    assert response.status_code == 400, response.text
    problem = response.json()
    assert problem["code"] == "invalid_request"
    assert [e["path"] for e in problem["errors"]] == ["/skills"]
    assert str(MAX_SKILLS) in problem["errors"][0]["message"]
    assert await _versions(db, tenant) == MAX_SKILLS - 8  # nothing of the refused PUT stored

    # Up to the cap is accepted; a retired skill no longer counts.
    response = await client.put(f"/v1/agents/{tenant}/grower", json=_body(second[:8]), headers=publish)
    assert response.status_code in (200, 201), response.text
    response = await client.put(f"/v1/agents/{tenant}/grower", json=_body([_skill("c.x")]), headers=publish)
    assert response.status_code == 400, response.text
    await retire_versions(client, mint, db, tenant, "a0.x")
    response = await client.put(f"/v1/agents/{tenant}/grower", json=_body([_skill("c.x")]), headers=publish)
    assert response.status_code in (200, 201), response.text


async def test_content_kept_across_puts_is_capped_per_agent(client, mint, tenant, db):
    """Each body fits CAPREG_MAX_BODY; the agent's content, summed over its skills, may not pass
    MAX_AGENT_CONTENT_BYTES, so no view, card or ARD entry of it grows past about that."""
    publish = mint(tenant, "p", "registry:publish")
    filler = "x" * (700 * 1024)
    stored = 0
    for i in range(MAX_AGENT_CONTENT_BYTES // (700 * 1024) + 1):
        body = _body([_skill(f"big{i}.x", inputSchema={"type": "object", "description": filler})])
        response = await client.put(f"/v1/agents/{tenant}/heavy", json=body, headers=publish)
        if response.status_code == 400:
            problem = response.json()
            assert problem["code"] == "invalid_request"
            assert str(MAX_AGENT_CONTENT_BYTES) in problem["errors"][0]["message"]
            break
        assert response.status_code in (200, 201), response.text
        stored += 1
    else:
        raise AssertionError("the agent grew past MAX_AGENT_CONTENT_BYTES")
    assert stored == MAX_AGENT_CONTENT_BYTES // (700 * 1024)
    assert await _versions(db, tenant) == stored


async def test_agents_per_tenant_are_capped(client, mint, tenant, db, registry):
    publish = mint(tenant, "p", "registry:publish")
    before = registry.settings.max_agents_per_tenant
    registry.settings.max_agents_per_tenant = 2
    try:
        for agent_id in ("one", "two"):
            response = await client.put(f"/v1/agents/{tenant}/{agent_id}", json=BILLING, headers=publish)
            assert response.status_code == 201, response.text
        response = await client.put(f"/v1/agents/{tenant}/three", json=BILLING, headers=publish)
        assert response.status_code == 400, response.text
        assert "CAPREG_MAX_AGENTS_PER_TENANT" in response.json()["detail"]
        # An existing agent is still updated.
        response = await client.put(
            f"/v1/agents/{tenant}/two", json={**BILLING, "description": "changed"}, headers=publish
        )
        assert response.status_code == 200, response.text
    finally:
        registry.settings.max_agents_per_tenant = before
    assert await db.fetchval("SELECT count(*) FROM agents WHERE tenant = $1", tenant) == 2
