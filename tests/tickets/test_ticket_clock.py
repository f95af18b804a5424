"""Ticket activity on one clock (issue 36): whether a ticket is active, expired or revoked is judged
at the app's clock (registry.core.clock) by every path, introspection, re-delegation and the
grant listing alike (db.tickets.active), so moving that clock moves them all together."""

from __future__ import annotations

import re
from pathlib import Path

from tests.ticket_support import register_finance, ticket_body
from tests.tickets.test_approvals import request_approval
from tests.tickets.test_tickets import chain, introspect, mint_ticket

ROOT = Path(__file__).parent.parent.parent


async def _listed(client, auditor) -> dict[str, bool]:
    items = (await client.get("/v1/tickets", headers=auditor)).json()["items"]
    return {i["jti"]: i["active"] for i in items}


async def test_every_path_reads_the_apps_clock(client, mint, tenant, clock):
    await register_finance(client, mint, tenant)
    root, child, grandchild = await chain(client, mint, tenant)  # ttl 600, 300, 200 seconds
    agent = mint(tenant, "billing-agent")
    auditor = mint(tenant, "auditor", "audit:read")
    assert await _listed(client, auditor) == {root["jti"]: True, child["jti"]: True, grandchild["jti"]: True}

    clock.advance(250)  # the grandchild expired by the app's clock; the database's has not moved
    assert (await introspect(client, agent, grandchild["ticket"]))["active"] is False
    assert await _listed(client, auditor) == {root["jti"]: True, child["jti"]: True, grandchild["jti"]: False}
    active = (await client.get("/v1/tickets", params={"active": "true"}, headers=auditor)).json()["items"]
    assert {i["jti"] for i in active} == {root["jti"], child["jti"]}

    clock.advance(100)  # the child too; its expiry ends its descendants'
    assert await _listed(client, auditor) == {root["jti"]: True, child["jti"]: False, grandchild["jti"]: False}
    assert (await introspect(client, mint(tenant, "billing-agent"), root["ticket"]))["active"] is True
    body = ticket_body(tenant, scopes=["invoice:read"], resources=["invoice:inv-1"], ttlSeconds=10)
    refused = await mint_ticket(client, mint(tenant, "ledger-agent"), {**body, "parentTicket": child["ticket"]}, 403)
    assert refused["code"] == "delegation_denied"


async def test_an_approval_expires_by_the_apps_clock_wherever_it_is_judged(client, mint, tenant, clock, registry):
    await register_finance(client, mint, tenant)
    requester = mint(tenant, "router", "ledger:write")
    admin = mint(tenant, "security-lead", "registry:admin")
    ttl = registry.settings.approval_ttl

    async def status(approval_id: str) -> dict:
        return (await client.get(f"/v1/approvals/{approval_id}", headers=requester)).json()

    undecided = await request_approval(client, mint, tenant)
    clock.advance(ttl - 10)
    assert (await status(undecided))["status"] == "pending"
    clock.advance(20)  # past its expiry by the app's clock; the database's has not moved
    assert (await status(undecided))["status"] == "expired"
    late = await client.post(f"/v1/approvals/{undecided}/approve", headers=admin)
    assert late.status_code == 200 and late.json()["status"] == "expired"  # deciding judges it there too

    uncollected = await request_approval(client, mint, tenant)
    approved = await client.post(f"/v1/approvals/{uncollected}/approve", headers=admin)
    assert approved.json()["status"] == "approved"
    clock.advance(ttl + 1)  # collecting judges it there too: no ticket
    fetched = await status(uncollected)
    assert fetched["status"] == "expired" and "ticket" not in fetched


def test_ticket_activity_never_reads_the_database_clock():
    for name in ("db/tickets.py", "db/grants.py", "db/approvals.py"):
        text = (ROOT / name).read_text()
        assert not re.search(r"expires_at\s*(<=|>=|<|>)\s*now\(\)", text), name
    clock_doc = (ROOT / "registry" / "core" / "clock.py").read_text().split('"""')[1]
    database_rules = clock_doc.split("the database's clock")[1]
    assert "ticket" not in database_rules.split("A registry whose hosts")[0]
    assert "approval" not in database_rules.split("A registry whose hosts")[0]
