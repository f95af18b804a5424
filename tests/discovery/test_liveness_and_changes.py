"""Heartbeat leases and health; the change feed and its long-poll."""

from __future__ import annotations

import asyncio

from tests.conftest import example

BILLING = example("billing-agent.json")


async def register(client, mint, tenant, agent_id="billing-agent", body=BILLING):
    response = await client.put(
        f"/v1/agents/{tenant}/{agent_id}", json=body, headers=mint(tenant, "p", "registry:publish")
    )
    assert response.status_code in (200, 201), response.text


async def test_heartbeat_makes_an_agent_healthy_then_stale(client, mint, tenant, db, registry):
    await register(client, mint, tenant)
    publish = mint(tenant, "p", "registry:publish")
    response = await client.post(
        f"/v1/agents/{tenant}/billing-agent/heartbeat",
        json={"instanceId": "i-1", "url": "https://billing-1.acme.internal", "ttlSeconds": 5},
        headers=publish,
    )
    assert response.status_code == 200, response.text
    assert response.json()["health"] == "healthy"
    assert (await client.get(f"/v1/agents/{tenant}/billing-agent")).json()["health"] == "healthy"
    items = (await client.get("/v1/capabilities", params={"tenant": tenant})).json()["items"]
    assert {i["health"] for i in items} == {"healthy"}
    assert "billing-1.acme.internal" not in (await client.get("/v1/capabilities", params={"tenant": tenant})).text
    # Lapse the lease without waiting: health follows the lease, not a timer.
    await db.execute("UPDATE agent_instances SET expires_at = now() - interval '1 second' WHERE tenant = $1", tenant)
    registry.responses.clear()  # the update bypassed the app; a lapse by time ends cached views itself
    assert (await client.get(f"/v1/agents/{tenant}/billing-agent")).json()["health"] == "stale"


async def test_heartbeat_bad_input(client, mint, tenant, other_tenant):
    await register(client, mint, tenant)
    publish = mint(tenant, "p", "registry:publish")
    path = f"/v1/agents/{tenant}/billing-agent/heartbeat"
    for body in (
        {"instanceId": "i-1", "ttlSeconds": 4},
        {"instanceId": "i-1", "ttlSeconds": 3601},
        {"ttlSeconds": 30},
        {"instanceId": ""},
    ):
        response = await client.post(path, json=body, headers=publish)
        assert response.status_code == 400 and response.json()["code"] == "invalid_request", body
    response = await client.post(path, json={"instanceId": "i-1"}, headers=mint(other_tenant, "p", "registry:publish"))
    assert response.status_code == 403 and response.json()["code"] == "tenant_mismatch"
    response = await client.post(f"/v1/agents/{tenant}/nobody/heartbeat", json={"instanceId": "i-1"}, headers=publish)
    assert response.status_code == 404


async def test_change_feed_lists_committed_changes_in_order(client, mint, tenant):
    start = (await client.get("/v1/changes", params={"after": 10**12})).json()["next"]
    head = (await client.get("/v1/changes", params={"after": 0, "limit": 1})).json()
    assert head["next"] >= 1 or start == 10**12
    await register(client, mint, tenant)
    feed = (await client.get("/v1/changes", params={"after": 0, "limit": 1000})).json()
    mine = [c for c in feed["items"] if c["ref"].startswith(f"{tenant}/")]
    assert [c["kind"] for c in mine] == ["agent.registered", "version.published", "version.published"]
    seqs = [c["seq"] for c in feed["items"]]
    assert seqs == sorted(seqs)


async def test_change_feed_long_polls_until_a_change(client, mint, tenant):
    now = (await client.get("/v1/changes", params={"after": 0, "limit": 1000})).json()["next"]
    # A private change elsewhere must not wake an anonymous reader with items.
    waiter = asyncio.create_task(client.get("/v1/changes", params={"after": now, "wait": 10}))
    await asyncio.sleep(0.3)
    await register(client, mint, tenant)
    response = await waiter
    assert response.status_code == 200
    page = response.json()
    assert page["items"]
    # Another test's public change (a version that became effective meanwhile) may wake the waiter
    # first: then the registration comes in the next long polls.
    # Counted, not timed: a few more long polls at most (each answers as soon as a change is there).
    for _ in range(20):
        if any(c["ref"].startswith(f"{tenant}/billing-agent") for c in page["items"]):
            break
        page = (await client.get("/v1/changes", params={"after": page["next"], "wait": 5})).json()
    else:
        raise AssertionError("the registration never came in the change feed")


async def test_change_feed_hides_private_records(client, mint, tenant):
    before = (await client.get("/v1/changes", params={"after": 0, "limit": 1000})).json()["next"]
    await register(client, mint, tenant, "ledger-agent", example("ledger-agent.json"))
    anonymous = (await client.get("/v1/changes", params={"after": before})).json()
    assert all(not c["ref"].startswith(f"{tenant}/") for c in anonymous["items"])
    assert anonymous["next"] > before
    own = (await client.get("/v1/changes", params={"after": before}, headers=mint(tenant, "r", "registry:read"))).json()
    assert any(c["ref"].startswith(f"{tenant}/ledger-agent") for c in own["items"])
