"""Approvals for `requiresApproval` capabilities: pending, decided by another admin of the
capability's tenant, collected exactly once by the requester, expiring."""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import count_rows, retire_versions
from tests.ticket_support import events_of, register_finance, ticket_body, traced, unverified

REVERSE = dict(agent_id="ledger-agent", skill_id="ledger.reverse-entry", scopes=["ledger:write"])


@pytest.fixture
async def finance(client, mint, tenant):
    await register_finance(client, mint, tenant)
    return tenant


def reverse_body(tenant: str, **fields) -> dict:
    body = ticket_body(
        tenant,
        REVERSE["agent_id"],
        REVERSE["skill_id"],
        scopes=REVERSE["scopes"],
        resources=["entry:e-1"],
        onBehalfOf="user-19",
        ttlSeconds=120,
    )
    body.update(fields)
    return body


async def request_approval(client, mint, tenant: str) -> str:
    headers, trace = traced(mint(tenant, "router", "ledger:write"))
    response = await client.post("/v1/tickets", json=reverse_body(tenant), headers=headers)
    assert response.status_code == 202, response.text
    body = response.json()
    assert set(body) == {"approvalId", "status"} and body["status"] == "pending"
    return body["approvalId"]


async def test_a_destructive_capability_needs_approval_and_the_requester_collects_once(client, mint, finance, db):
    tenant = finance
    requester = mint(tenant, "router", "ledger:write")
    headers, trace = traced(requester)
    response = await client.post("/v1/tickets", json=reverse_body(tenant), headers=headers)
    assert response.status_code == 202, response.text
    approval_id = response.json()["approvalId"]
    assert [(e["type"], e["outcome"], e["actor"]) for e in await events_of(db, trace)] == [
        ("approval.requested", "allowed", "router")
    ]
    assert await count_rows(db, "tickets", tenant=tenant) == 0

    pending = await client.get(f"/v1/approvals/{approval_id}", headers=requester)
    assert pending.status_code == 200
    assert pending.json()["status"] == "pending" and "ticket" not in pending.json()
    request = pending.json()["request"]
    assert request["audience"] == f"{tenant}/ledger-agent" and request["scopes"] == ["ledger:write"]
    assert "parentTicket" not in request

    admin_headers, trace = traced(mint(tenant, "security-lead", "registry:admin"))
    approved = await client.post(f"/v1/approvals/{approval_id}/approve", headers=admin_headers)
    assert approved.status_code == 200, approved.text
    assert approved.json()["status"] == "approved" and approved.json()["approvalId"] == approval_id
    assert [(e["type"], e["outcome"], e["actor"]) for e in await events_of(db, trace)] == [
        ("approval.decided", "allowed", "security-lead")
    ]
    # The admin sees the approval, but only the requester collects the ticket.
    seen_by_admin = await client.get(
        f"/v1/approvals/{approval_id}", headers=mint(tenant, "security-lead", "registry:admin")
    )
    assert seen_by_admin.json()["status"] == "approved" and "ticket" not in seen_by_admin.json()

    collected = await client.get(f"/v1/approvals/{approval_id}", headers=requester)
    assert collected.status_code == 200, collected.text
    assert collected.json()["status"] == "collected"
    ticket = collected.json()["ticket"]
    assert set(ticket) == {"ticket", "jti", "expiresAt", "scopes", "resources", "ref", "depth", "maxDepth"}
    assert ticket["ref"] == f"{tenant}/ledger-agent/ledger.reverse-entry@1.0.0"
    claims = unverified(ticket["ticket"])[1]
    assert claims["sub"] == "user-19" and claims["scope"] == "ledger:write" and claims["resources"] == ["entry:e-1"]
    introspected = await client.post(
        "/v1/tickets/introspect", json={"ticket": ticket["ticket"]}, headers=mint(tenant, "ledger-agent")
    )
    assert introspected.json()["active"] is True

    again = await client.get(f"/v1/approvals/{approval_id}", headers=requester)
    assert again.json()["status"] == "collected" and "ticket" not in again.json()
    assert await count_rows(db, "tickets", tenant=tenant) == 1


async def test_concurrent_fetches_collect_the_ticket_exactly_once(client, mint, finance, db):
    approval_id = await request_approval(client, mint, finance)
    await client.post(f"/v1/approvals/{approval_id}/approve", headers=mint(finance, "security-lead", "registry:admin"))
    requester = mint(finance, "router", "ledger:write")
    answers = await asyncio.gather(*[client.get(f"/v1/approvals/{approval_id}", headers=requester) for _ in range(8)])
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    assert sum("ticket" in a.json() for a in answers) == 1
    assert {a.json()["status"] for a in answers} == {"collected"}
    assert await count_rows(db, "tickets", tenant=finance) == 1
    assert (
        await db.fetchval("SELECT count(*) FROM audit_events WHERE tenant = $1 AND type = 'ticket.granted'", finance)
        == 1
    )


async def test_the_requester_cannot_approve_its_own_request(client, mint, finance, db):
    approval_id = await request_approval(client, mint, finance)
    headers, trace = traced(mint(finance, "router", "ledger:write registry:admin"))
    response = await client.post(f"/v1/approvals/{approval_id}/approve", headers=headers)
    assert response.status_code == 403, response.text
    assert response.json()["code"] == "delegation_denied" and response.json()["reason"] == "self_approval"
    assert [(e["type"], e["outcome"], e["reason"]) for e in await events_of(db, trace)] == [
        ("approval.decided", "denied", "self_approval")
    ]
    assert await db.fetchval("SELECT status FROM approvals WHERE approval_id = $1", approval_id) == "pending"


async def test_only_admins_of_the_capabilitys_tenant_decide(client, mint, finance, other_tenant):
    approval_id = await request_approval(client, mint, finance)
    outsider = await client.post(
        f"/v1/approvals/{approval_id}/approve", headers=mint(other_tenant, "boss", "registry:admin")
    )
    assert outsider.status_code == 404
    colleague = await client.post(
        f"/v1/approvals/{approval_id}/approve", headers=mint(finance, "intern", "registry:read")
    )
    assert colleague.status_code == 403 and colleague.json()["code"] == "insufficient_scope"
    assert (
        await client.get(f"/v1/approvals/{approval_id}", headers=mint(finance, "intern", "registry:read"))
    ).status_code == 404
    assert (
        await client.get(f"/v1/approvals/{approval_id}", headers=mint(other_tenant, "boss", "registry:admin"))
    ).status_code == 404
    assert (await client.get("/v1/approvals/no-such-approval", headers=mint(finance, "router"))).status_code == 404
    assert (await client.get(f"/v1/approvals/{approval_id}")).status_code == 401


async def test_a_denied_request_yields_no_ticket(client, mint, finance, db):
    approval_id = await request_approval(client, mint, finance)
    headers, trace = traced(mint(finance, "security-lead", "registry:admin"))
    denied = await client.post(f"/v1/approvals/{approval_id}/deny", headers=headers)
    assert denied.status_code == 200 and denied.json()["status"] == "denied"
    assert [(e["type"], e["outcome"], e["reason"]) for e in await events_of(db, trace)] == [
        ("approval.decided", "denied", "approval_denied")
    ]
    # A later approval changes nothing: the decision stands.
    late = await client.post(f"/v1/approvals/{approval_id}/approve", headers=mint(finance, "cfo", "registry:admin"))
    assert late.status_code == 200 and late.json()["status"] == "denied"
    fetched = await client.get(f"/v1/approvals/{approval_id}", headers=mint(finance, "router", "ledger:write"))
    assert fetched.json()["status"] == "denied" and "ticket" not in fetched.json()
    assert await count_rows(db, "tickets", tenant=finance) == 0


async def test_approvals_expire(client, mint, finance, db):
    approval_id = await request_approval(client, mint, finance)
    await db.execute(
        "UPDATE approvals SET expires_at = now() - interval '1 second' WHERE approval_id = $1", approval_id
    )
    requester = mint(finance, "router", "ledger:write")
    assert (await client.get(f"/v1/approvals/{approval_id}", headers=requester)).json()["status"] == "expired"
    late = await client.post(
        f"/v1/approvals/{approval_id}/approve", headers=mint(finance, "security-lead", "registry:admin")
    )
    assert late.status_code == 200 and late.json()["status"] == "expired"

    # Approved but never collected in time: expired too, and no ticket.
    approval_id = await request_approval(client, mint, finance)
    await client.post(f"/v1/approvals/{approval_id}/approve", headers=mint(finance, "security-lead", "registry:admin"))
    await db.execute(
        "UPDATE approvals SET expires_at = now() - interval '1 second' WHERE approval_id = $1", approval_id
    )
    fetched = await client.get(f"/v1/approvals/{approval_id}", headers=requester)
    assert fetched.json()["status"] == "expired" and "ticket" not in fetched.json()
    assert await count_rows(db, "tickets", tenant=finance) == 0


async def test_approval_requests_are_checked_before_they_are_queued(client, mint, finance, db):
    # Scope escalation is refused at once, not queued for an approver.
    headers, trace = traced(mint(finance, "router", "ledger:read"))
    response = await client.post("/v1/tickets", json=reverse_body(finance), headers=headers)
    assert response.status_code == 403 and response.json()["reason"] == "scope_escalation"
    assert await count_rows(db, "approvals", tenant=finance) == 0


async def test_collection_rechecks_the_request(client, mint, finance, db):
    approval_id = await request_approval(client, mint, finance)
    await client.post(f"/v1/approvals/{approval_id}/approve", headers=mint(finance, "security-lead", "registry:admin"))
    await retire_versions(client, mint, db, finance, "ledger.reverse-entry")
    fetched = await client.get(f"/v1/approvals/{approval_id}", headers=mint(finance, "router", "ledger:write"))
    assert fetched.status_code == 410 and fetched.json()["code"] == "retired"
    assert await count_rows(db, "tickets", tenant=finance) == 0


async def test_idempotent_approval_requests(client, mint, finance, db):
    headers = {**mint(finance, "router", "ledger:write"), "Idempotency-Key": "reverse-e-1"}
    first = await client.post("/v1/tickets", json=reverse_body(finance), headers=headers)
    again = await client.post("/v1/tickets", json=reverse_body(finance), headers=headers)
    assert first.status_code == again.status_code == 202
    assert first.json() == again.json()
    assert await count_rows(db, "approvals", tenant=finance) == 1
