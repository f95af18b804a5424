"""Completeness: every request that grants, releases, refuses or changes something leaves exactly the
audit events listed here, found by the request's own trace id; requests that decide nothing leave none.

What counts (decisions docs/api.md#event-types records):
- Registration writes one event per thing it changed: `agent.registered` when the card changed,
  `version.published` per new version. A re-registration that changes nothing writes nothing. A
  refusal writes one denied event: 403 as `agent.registered`, 409 (`version_conflict`,
  `incompatible_change`: an attempt to change published content) as `version.published`.
- Malformed requests (400) decide nothing and are not audited, except on ticket minting, where the
  tickets implementation records every refusal of an authenticated caller (a 400 as `ticket.denied`
  `invalid_request`). A request without a valid caller token (401) is never audited, anywhere: there
  is no principal to name, and anyone could grow the chain (it is counted in /metrics instead). A
  value PostgreSQL cannot store is a 400 audited as `request.refused` (tests/web/test_hostile_requests.py).
- Detail release: one event per request (`detail.released` / `detail.denied`, `reason` the error
  code); the extended card: one per skill it evaluated.
- Tickets: one per grant or refusal; revocation one per ticket revoked (descendants with reason
  `ancestor_revoked`); approvals one per request and per decision; collecting an approved ticket is
  the grant. Lifecycle: one per change or refusal; retiring a retired version changes nothing.
- Reads that release nothing gated (discovery, public cards, introspection, listings, the audit API
  itself) and heartbeats (liveness, not a security decision) are not audited.
"""

from __future__ import annotations

import json
import secrets

import pytest

from tests.audit_support import ONE_ROW_PER_EVENT
from tests.conftest import example
from tests.ticket_support import register_finance, ticket_body

BILLING = example("billing-agent.json")
ROUTER_SCOPES = "invoice:read invoice:list ledger:read ledger:write"
DETAIL = "/v1/agents/{t}/billing-agent/skills/invoice.lookup/versions/{v}"


class Walk:
    """Sends each request with a fresh W3C trace id and returns the audit events carrying it."""

    def __init__(self, client, db):
        self.client, self.db = client, db
        self.traces: list[str] = []

    async def expect(
        self, method: str, path: str, headers: dict | None, status: int, events: list[tuple], body: dict | None = None
    ):
        trace_id = secrets.token_hex(16)
        headers = {**(headers or {}), "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}
        response = await self.client.request(method, path, headers=headers, json=body)
        assert response.status_code == status, f"{method} {path}: {response.text}"
        rows = await self.db.fetch(
            "SELECT type, outcome, reason, actor FROM audit_events WHERE trace_id = $1 AND "
            + ONE_ROW_PER_EVENT
            + " ORDER BY seq",
            trace_id,
        )
        got = [(r["type"], r["outcome"], r["reason"]) for r in rows]
        assert got == events, f"{method} {path} -> {response.status_code}: {got}"
        self.traces.append(trace_id)
        return response


@pytest.fixture
def walk(client, db):
    return Walk(client, db)


async def test_registration(walk, mint, tenant, other_tenant):
    publisher = mint(tenant, "ci", "registry:publish")
    path = f"/v1/agents/{tenant}/billing-agent"
    await walk.expect(
        "PUT",
        path,
        publisher,
        201,
        [
            ("agent.registered", "allowed", None),
            ("version.published", "allowed", None),
            ("version.published", "allowed", None),
        ],
        BILLING,
    )
    await walk.expect("PUT", path, publisher, 200, [], BILLING)  # unchanged: nothing decided, nothing changed

    newer = {**BILLING, "skills": [{**BILLING["skills"][0], "version": "2.1.0"}]}
    # The card's skill list changed too, so the agent is re-registered along with the new version.
    await walk.expect(
        "PUT",
        path,
        publisher,
        201,
        [("agent.registered", "allowed", None), ("version.published", "allowed", None)],
        newer,
    )
    changed = {**BILLING, "skills": [{**BILLING["skills"][0], "description": "different content, same version"}]}
    await walk.expect("PUT", path, publisher, 409, [("version.published", "denied", "version_conflict")], changed)
    schema = {**BILLING["skills"][0]["inputSchema"], "required": ["invoiceId", "customerId"]}
    breaking = {**BILLING, "skills": [{**BILLING["skills"][0], "version": "2.2.0", "inputSchema": schema}]}
    await walk.expect("PUT", path, publisher, 409, [("version.published", "denied", "incompatible_change")], breaking)

    await walk.expect(
        "PUT",
        path,
        mint(tenant, "ci", "registry:read"),
        403,
        [("agent.registered", "denied", "insufficient_scope")],
        BILLING,
    )
    await walk.expect(
        "PUT",
        f"/v1/agents/{other_tenant}/x",
        publisher,
        403,
        [("agent.registered", "denied", "tenant_mismatch")],
        BILLING,
    )
    await walk.expect("PUT", path, None, 401, [], BILLING)
    await walk.expect("PUT", path, {"Authorization": "Bearer not.a.token"}, 401, [], BILLING)
    await walk.expect("PUT", path, publisher, 400, [], {"name": "no skills, no version"})


async def test_detail_release(walk, mint, tenant, other_tenant):
    await walk.expect(
        "PUT",
        f"/v1/agents/{tenant}/billing-agent",
        mint(tenant, "ci", "registry:publish"),
        201,
        [
            ("agent.registered", "allowed", None),
            ("version.published", "allowed", None),
            ("version.published", "allowed", None),
        ],
        {**BILLING, "visibility": "tenant"},
    )
    reader = mint(tenant, "router", "invoice:read", regions=["eu"])
    released = [("detail.released", "allowed", None)]
    await walk.expect("GET", DETAIL.format(t=tenant, v="2.0.0"), reader, 200, released)
    await walk.expect("GET", DETAIL.format(t=tenant, v="^2"), reader, 200, released)
    await walk.expect("GET", DETAIL.format(t=tenant, v="2.0.0") + "/tool?format=mcp", reader, 200, released)
    await walk.expect(
        "POST",
        DETAIL.format(t=tenant, v="2.0.0") + "/validate",
        reader,
        200,
        released,
        {"arguments": {"invoiceId": "inv-2026-091"}},
    )
    await walk.expect(
        "GET",
        DETAIL.format(t=tenant, v="2.0.0"),
        mint(tenant, "router", "", regions=["eu"]),
        403,
        [("detail.denied", "denied", "insufficient_scope")],
    )
    await walk.expect(
        "GET",
        DETAIL.format(t=tenant, v="2.0.0"),
        mint(tenant, "router", "invoice:read", regions=["us"]),
        403,
        [("detail.denied", "denied", "data_location_denied")],
    )
    await walk.expect(
        "GET",
        DETAIL.format(t=tenant, v="2.0.0"),
        mint(other_tenant, "router", "invoice:read", regions=["eu"]),
        404,
        [("detail.denied", "denied", "not_found")],
    )
    await walk.expect(
        "GET", DETAIL.format(t=tenant, v="9.0.0"), reader, 404, [("detail.denied", "denied", "not_found")]
    )
    await walk.expect("GET", DETAIL.format(t=tenant, v="not a range"), reader, 400, [])
    await walk.expect("GET", DETAIL.format(t=tenant, v="2.0.0"), None, 401, [])
    # The extended card evaluates every skill: one event each (invoice.mark-paid needs invoice:write).
    await walk.expect(
        "GET",
        f"/v1/agents/{tenant}/billing-agent/extendedAgentCard",
        reader,
        200,
        [
            ("detail.released", "allowed", None),
            ("detail.denied", "denied", "insufficient_scope"),
        ],
    )

    admin = mint(tenant, "admin", "registry:admin")
    await walk.expect(
        "POST", DETAIL.format(t=tenant, v="2.0.0") + "/retire", admin, 200, [("version.retired", "allowed", None)]
    )
    await walk.expect("GET", DETAIL.format(t=tenant, v="2.0.0"), reader, 410, [("detail.denied", "denied", "retired")])


async def test_lifecycle(walk, mint, tenant, other_tenant):
    await walk.expect(
        "PUT",
        f"/v1/agents/{tenant}/billing-agent",
        mint(tenant, "ci", "registry:publish"),
        201,
        [
            ("agent.registered", "allowed", None),
            ("version.published", "allowed", None),
            ("version.published", "allowed", None),
        ],
        BILLING,
    )
    version = DETAIL.format(t=tenant, v="2.0.0")
    admin = mint(tenant, "admin", "registry:admin")
    sunset = {"sunsetAt": "2027-01-01T00:00:00Z", "message": "use 3.x"}
    await walk.expect("POST", version + "/deprecate", admin, 200, [("version.deprecated", "allowed", None)], sunset)
    await walk.expect(
        "POST",
        version + "/deprecate",
        mint(tenant, "dev", "registry:publish"),
        403,
        [("version.deprecated", "denied", "insufficient_scope")],
        sunset,
    )
    await walk.expect(
        "POST",
        version + "/retire",
        mint(other_tenant, "admin", "registry:admin"),
        403,
        [("version.retired", "denied", "tenant_mismatch")],
    )
    await walk.expect("POST", version + "/retire", admin, 200, [("version.retired", "allowed", None)])
    await walk.expect("POST", version + "/retire", admin, 200, [])  # already retired: nothing changes
    await walk.expect("POST", version + "/deprecate", admin, 410, [("version.deprecated", "denied", "retired")], sunset)


async def test_tickets_and_approvals(walk, client, mint, tenant, other_tenant):
    await register_finance(client, mint, tenant)
    router = mint(tenant, "router", ROUTER_SCOPES)
    granted = [("ticket.granted", "allowed", None)]

    root = (
        await walk.expect(
            "POST",
            "/v1/tickets",
            router,
            201,
            granted,
            ticket_body(tenant, onBehalfOf="user-19", ttlSeconds=600, maxDepth=1),
        )
    ).json()
    child = (
        await walk.expect(
            "POST",
            "/v1/tickets",
            mint(tenant, "billing-agent"),
            201,
            granted,
            ticket_body(tenant, "ledger-agent", "ledger.read", ttlSeconds=300, parentTicket=root["ticket"]),
        )
    ).json()
    await walk.expect(
        "POST",
        "/v1/tickets",
        router,
        403,
        [("ticket.denied", "denied", "scope_escalation")],
        ticket_body(tenant, scopes=["invoice:write"]),
    )
    await walk.expect(
        "POST",
        "/v1/tickets",
        mint(tenant, "ledger-agent"),
        403,
        [("ticket.denied", "denied", "not_parent_audience")],
        ticket_body(tenant, "ledger-agent", "ledger.read", parentTicket=root["ticket"]),
    )
    await walk.expect(
        "POST",
        "/v1/tickets",
        router,
        404,
        [("ticket.denied", "denied", "not_found")],
        ticket_body(tenant, "no-such-agent"),
    )
    await walk.expect("POST", "/v1/tickets", {"Authorization": "Bearer not.a.token"}, 401, [], ticket_body(tenant))
    await walk.expect(
        "POST",
        "/v1/tickets",
        router,
        400,
        [("ticket.denied", "denied", "invalid_request")],
        ticket_body(tenant, scopes=[]),
    )
    await walk.expect("POST", "/v1/tickets/introspect", router, 200, [], {"ticket": root["ticket"]})

    await walk.expect(
        "POST",
        f"/v1/tickets/{root['jti']}/revoke",
        mint(other_tenant, "x", "registry:admin"),
        404,
        [("ticket.revoked", "denied", "not_found")],
    )  # for the caller's own auditors
    await walk.expect(
        "POST",
        f"/v1/tickets/{root['jti']}/revoke",
        mint(tenant, "someone"),
        403,
        [("ticket.revoked", "denied", "insufficient_scope")],
    )
    revoked = await walk.expect(
        "POST",
        f"/v1/tickets/{root['jti']}/revoke",
        router,
        200,
        [
            ("ticket.revoked", "allowed", None),
            ("ticket.revoked", "allowed", "ancestor_revoked"),
        ],
    )
    assert revoked.json()["revoked"] == [root["jti"], child["jti"]]

    reverse = ticket_body(tenant, "ledger-agent", "ledger.reverse-entry", scopes=["ledger:write"])
    pending = (
        await walk.expect("POST", "/v1/tickets", router, 202, [("approval.requested", "allowed", None)], reverse)
    ).json()
    approval = f"/v1/approvals/{pending['approvalId']}"
    await walk.expect(
        "POST",
        approval + "/approve",
        mint(tenant, "router", ROUTER_SCOPES + " registry:admin"),
        403,
        [("approval.decided", "denied", "self_approval")],
    )
    await walk.expect(
        "POST",
        approval + "/approve",
        mint(tenant, "ops", "registry:read"),
        403,
        [("approval.decided", "denied", "insufficient_scope")],
    )
    await walk.expect(
        "POST",
        approval + "/approve",
        mint(tenant, "ops", "registry:admin"),
        200,
        [("approval.decided", "allowed", None)],
    )
    await walk.expect("GET", approval, router, 200, granted)  # collecting the approved ticket is the grant
    await walk.expect("GET", approval, router, 200, [])

    other = (
        await walk.expect("POST", "/v1/tickets", router, 202, [("approval.requested", "allowed", None)], reverse)
    ).json()
    await walk.expect(
        "POST",
        f"/v1/approvals/{other['approvalId']}/deny",
        mint(tenant, "ops", "registry:admin"),
        200,
        [("approval.decided", "denied", "approval_denied")],
    )


async def test_refusals_outside_an_operations_own_events(walk, mint, tenant, other_tenant):
    """An endpoint's scope, a heartbeat refused by policy, and an approval the caller may not read:
    each refusal of an identified caller is recorded as `request.refused` (a renewal is not, nor the
    404 of a heartbeat for an agent not registered yet)."""
    publisher = mint(tenant, "publisher", "registry:publish")
    await walk.expect(
        "PUT",
        f"/v1/agents/{tenant}/billing-agent",
        publisher,
        201,
        [
            ("agent.registered", "allowed", None),
            ("version.published", "allowed", None),
            ("version.published", "allowed", None),
        ],
        BILLING,
    )
    await walk.expect(
        "GET",
        "/v1/audit/events",
        mint(tenant, "router", "registry:read"),
        403,
        [("request.refused", "denied", "insufficient_scope")],
    )
    beat = {"instanceId": "i-1", "ttlSeconds": 30}
    await walk.expect("POST", f"/v1/agents/{tenant}/billing-agent/heartbeat", publisher, 200, [], beat)
    await walk.expect("POST", f"/v1/agents/{tenant}/never-registered/heartbeat", publisher, 404, [], beat)
    await walk.expect(
        "POST",
        f"/v1/agents/{tenant}/billing-agent/heartbeat",
        mint(other_tenant, "p", "registry:publish"),
        403,
        [("request.refused", "denied", "tenant_mismatch")],
        beat,
    )
    await walk.expect(
        "GET", f"/v1/approvals/{secrets.token_hex(8)}", publisher, 404, [("request.refused", "denied", "not_found")]
    )


async def test_a_tenants_auditor_can_export_every_event_about_it(walk, client, mint, tenant, other_tenant):
    """The events above are not only in the table: the tenant's NDJSON export has each of them."""
    await test_registration(walk, mint, tenant, other_tenant)
    response = await client.get(
        "/v1/audit/events", headers={**mint(tenant, "sec", "audit:read"), "Accept": "application/x-ndjson"}
    )
    exported = [json.loads(line) for line in response.text.splitlines()]
    rows = await walk.db.fetch(
        "SELECT seq FROM audit_events WHERE trace_id = ANY($1::text[]) AND $2 IN (tenant, actor_tenant) "
        "AND (chain IS NULL OR chain = $2)",  # the tenant's chain holds its own entry of a two-tenant event
        walk.traces,
        tenant,
    )
    assert {r["seq"] for r in rows} == {e["seq"] for e in exported if e["traceId"] in walk.traces} != set()
