"""DELETE /v1/agents/{tenant}/{agentId} (docs/api.md#withdrawing-an-agent): the agent gone at once
from discovery, ARD, cards, offers, detail and new tickets, its tickets inactive, its history and
audit kept, idempotent, refused and audited like the lifecycle, restored by registering again."""

from __future__ import annotations

from urllib.parse import quote

from tests.conftest import count_rows
from tests.search_support import agent, heartbeat, publish, skill
from tests.ticket_support import ticket_body


def lookup(version: str = "2.0.0") -> dict:
    return skill(
        "invoice.lookup",
        "Look up an invoice",
        "Returns one invoice.",
        ["withdrawal"],
        version=version,
        scopes=["invoice:read"],
    )


def urn(tenant: str, agent_id: str) -> str:
    return f"urn:air:{tenant}.capreg.invalid:{agent_id}"


async def seen(client, mint, tenant: str) -> dict[str, object]:
    """Where the agent shows, to a router of its tenant holding the skill's scope."""
    router = mint(tenant, "router", "registry:read invoice:read")
    base = f"/v1/agents/{tenant}/billing-agent"
    discovery = await client.get("/v1/capabilities", params={"tenant": tenant}, headers=router)
    offers = await client.post(
        "/v1/offers", json={"need": "look up an invoice", "tags": ["withdrawal"]}, headers=router
    )
    ard = await client.get(f"/ard/agents/{quote(urn(tenant, 'billing-agent'), safe='')}")
    return {
        "discovery": [i["agentId"] for i in discovery.json()["items"]],
        "offers": [o["ref"].split("/")[1] for o in offers.json()["offers"]],
        "ard": ard.status_code,
        "agent": (await client.get(base)).status_code,
        "card": (await client.get(f"{base}/.well-known/agent-card.json")).status_code,
        "detail": (await client.get(f"{base}/skills/invoice.lookup/versions/2.0.0", headers=router)).status_code,
        "latest": (await client.get(f"{base}/skills/invoice.lookup/versions/latest", headers=router)).status_code,
    }


async def test_a_withdrawn_agent_is_gone_everywhere_at_once_and_its_tickets_go_inactive(client, mint, tenant, db):
    await publish(client, mint, tenant, {"billing-agent": agent(lookup())})
    await heartbeat(client, mint, tenant, "billing-agent", "i1")
    router = mint(tenant, "router", "registry:read invoice:read")
    minted = await client.post("/v1/tickets", json=ticket_body(tenant), headers=router)
    assert minted.status_code == 201, minted.text
    ticket = minted.json()["ticket"]
    assert await seen(client, mint, tenant) == {
        "discovery": ["billing-agent"],
        "offers": ["billing-agent"],
        "ard": 200,
        "agent": 200,
        "card": 200,
        "detail": 200,
        "latest": 200,
    }

    admin = mint(tenant, "admin", "registry:admin")
    response = await client.delete(f"/v1/agents/{tenant}/billing-agent", headers=admin)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["retired"] == [f"{tenant}/billing-agent/invoice.lookup@2.0.0"]
    assert answer["instancesEnded"] == 1 and answer["withdrawnAt"]

    assert await seen(client, mint, tenant) == {
        "discovery": [],
        "offers": [],
        "ard": 404,
        "agent": 404,
        "card": 404,
        "detail": 404,  # the agent is absent: not the 410 of one retired version
        "latest": 404,
    }
    again = await client.post("/v1/tickets", json=ticket_body(tenant), headers=router)
    assert again.status_code == 404, again.text
    introspected = await client.post("/v1/tickets/introspect", json={"ticket": ticket}, headers=router)
    assert introspected.json()["active"] is False
    beat = await client.post(
        f"/v1/agents/{tenant}/billing-agent/heartbeat",
        json={"instanceId": "i1", "ttlSeconds": 60},
        headers=mint(tenant, "billing-agent", "registry:publish"),
    )
    assert beat.status_code == 404, beat.text  # the running instance learns it is withdrawn

    # History kept: the versions and the audit trail stay, one allowed event each.
    assert await count_rows(db, "capability_versions", tenant=tenant) == 1
    rows = await db.fetch(
        "SELECT type, ref, outcome FROM audit_events WHERE tenant = $1 AND type IN ('agent.withdrawn', 'version.retired')",
        tenant,
    )
    assert sorted((r["type"], r["ref"], r["outcome"]) for r in rows) == [
        ("agent.withdrawn", f"{tenant}/billing-agent", "allowed"),
        ("version.retired", f"{tenant}/billing-agent/invoice.lookup@2.0.0", "allowed"),
    ]

    # Idempotent: the same answer's moment, nothing retired, nothing audited.
    twice = await client.delete(f"/v1/agents/{tenant}/billing-agent", headers=admin)
    assert twice.status_code == 200
    assert twice.json() == {**answer, "retired": [], "instancesEnded": 0}
    assert await count_rows(db, "audit_events", tenant=tenant, type="agent.withdrawn") == 1


async def test_registering_again_restores_the_agent_with_new_versions_only(client, mint, tenant):
    await publish(client, mint, tenant, {"billing-agent": agent(lookup())})
    admin = mint(tenant, "admin", "registry:admin")
    assert (await client.delete(f"/v1/agents/{tenant}/billing-agent", headers=admin)).status_code == 200
    # The same body again: the agent is back, its withdrawn version stays retired.
    await publish(client, mint, tenant, {"billing-agent": agent(lookup())})
    assert (await client.get(f"/v1/agents/{tenant}/billing-agent")).status_code == 200
    assert (await client.get("/v1/capabilities", params={"tenant": tenant})).json()["items"] == []
    await publish(client, mint, tenant, {"billing-agent": agent(lookup(), lookup("2.1.0"))})
    items = (await client.get("/v1/capabilities", params={"tenant": tenant})).json()["items"]
    assert [i["version"] for i in items] == ["2.1.0"]


async def test_withdrawing_needs_admin_of_the_own_tenant_and_refusals_are_audited(
    client, mint, tenant, other_tenant, db
):
    await publish(client, mint, tenant, {"billing-agent": agent(lookup())})
    path = f"/v1/agents/{tenant}/billing-agent"
    assert (await client.delete(path)).status_code == 401
    publisher = await client.delete(path, headers=mint(tenant, "p", "registry:publish"))
    assert publisher.status_code == 403 and publisher.json()["code"] == "insufficient_scope"
    stranger = await client.delete(path, headers=mint(other_tenant, "admin", "registry:admin"))
    assert stranger.status_code == 403 and stranger.json()["code"] == "tenant_mismatch"  # a public agent is visible
    unknown = await client.delete(f"/v1/agents/{tenant}/no-such-agent", headers=mint(tenant, "admin", "registry:admin"))
    assert unknown.status_code == 404
    assert (await client.get(path)).status_code == 200  # nothing changed
    denied = await db.fetch(
        "SELECT reason FROM audit_events WHERE type = 'agent.withdrawn' AND outcome = 'denied' AND tenant = $1 AND chain = $1 ORDER BY seq",
        tenant,
    )
    assert [r["reason"] for r in denied] == ["insufficient_scope", "tenant_mismatch", "not_found"], [
        r["reason"] for r in denied
    ]


async def test_a_withdrawn_agent_is_absent_to_other_tenants_even_when_it_was_public(client, mint, tenant, other_tenant):
    await publish(client, mint, tenant, {"billing-agent": agent(lookup())})
    assert (
        await client.delete(f"/v1/agents/{tenant}/billing-agent", headers=mint(tenant, "a", "registry:admin"))
    ).status_code == 200
    again = await client.delete(f"/v1/agents/{tenant}/billing-agent", headers=mint(other_tenant, "a", "registry:admin"))
    assert again.status_code == 404
