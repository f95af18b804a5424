"""What the console stands on, without a browser: the audit API additions (outcome filter, hourly
outcome counts, grants ordered by expiry, whole-chain verification), the console's files and the
security headers, and /schema with no asset from another origin."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from tests.conftest import example

BILLING = example("billing-agent.json")


async def setup_tenant(client, mint, tenant: str, granted: int = 0, denied: int = 0) -> list[dict]:
    response = await client.put(
        f"/v1/agents/{tenant}/billing-agent", json=BILLING, headers=mint(tenant, "publisher", "registry:publish")
    )
    assert response.status_code == 201, response.text
    caller = mint(tenant, "router", "invoice:read invoice:write")
    tickets = []
    for i in range(granted):
        body = {
            "audience": f"{tenant}/billing-agent",
            "skill": "invoice.lookup",
            "scopes": ["invoice:read"],
            "ttlSeconds": 900 - 60 * i,
        }  # minted later, expiring sooner
        response = await client.post("/v1/tickets", json=body, headers=caller)
        assert response.status_code == 201, response.text
        tickets.append(response.json())
    for _ in range(denied):
        body = {"audience": f"{tenant}/billing-agent", "skill": "invoice.lookup", "scopes": ["invoice:write"]}
        assert (await client.post("/v1/tickets", json=body, headers=caller)).status_code == 403
    return tickets


async def test_events_filter_by_outcome(client, mint, tenant):
    await setup_tenant(client, mint, tenant, granted=1, denied=2)
    auditor = mint(tenant, "secops", "audit:read")
    denied = (await client.get("/v1/audit/events", params={"outcome": "denied"}, headers=auditor)).json()["items"]
    assert [(e["type"], e["outcome"], e["reason"]) for e in denied] == [
        ("ticket.denied", "denied", "scope_escalation")
    ] * 2
    allowed = (await client.get("/v1/audit/events", params={"outcome": "allowed"}, headers=auditor)).json()["items"]
    assert allowed and {e["outcome"] for e in allowed} == {"allowed"}
    response = await client.get("/v1/audit/events", params={"outcome": "maybe"}, headers=auditor)
    assert response.status_code == 400 and response.json()["code"] == "invalid_request"


async def test_hourly_outcomes_count_every_hour_of_the_range(client, mint, tenant):
    await setup_tenant(client, mint, tenant, granted=2, denied=3)
    auditor = mint(tenant, "secops", "audit:read")
    response = await client.get("/v1/audit/events/hourly", headers=auditor)
    assert response.status_code == 200, response.text
    body = response.json()
    hours = body["hours"]
    assert len(hours) == 24
    starts = [datetime.fromisoformat(h["hour"]) for h in hours]
    assert all(b - a == timedelta(hours=1) for a, b in zip(starts, starts[1:], strict=False))
    assert all(s.minute == 0 and s.second == 0 for s in starts)
    assert starts[-1] <= datetime.now(UTC) < starts[-1] + timedelta(hours=1)
    # registration: 1 agent + 2 versions; 2 tickets granted; 3 refused.
    assert sum(h["allowed"] for h in hours) == 5 and sum(h["denied"] for h in hours) == 3
    only_denied = (await client.get("/v1/audit/events/hourly", params={"outcome": "denied"}, headers=auditor)).json()
    assert sum(h["allowed"] for h in only_denied["hours"]) == 0 and sum(h["denied"] for h in only_denied["hours"]) == 3
    # Another tenant's auditors count none of it.
    other = (await client.get("/v1/audit/events/hourly", headers=mint("x" + tenant, "secops", "audit:read"))).json()
    assert sum(h["allowed"] + h["denied"] for h in other["hours"]) == 0


async def test_hourly_outcomes_bound_the_range_and_need_audit_read(client, mint, tenant):
    auditor = mint(tenant, "secops", "audit:read")
    response = await client.get(
        "/v1/audit/events/hourly",
        params={"since": "2026-01-01T00:00:00Z", "until": "2026-01-09T00:00:00Z"},
        headers=auditor,
    )
    assert response.status_code == 400 and response.json()["code"] == "invalid_request"
    response = await client.get(
        "/v1/audit/events/hourly",
        params={"since": "2026-01-01T00:30:00Z", "until": "2026-01-01T02:10:00Z"},
        headers=auditor,
    )
    assert [h["hour"][:19] for h in response.json()["hours"]] == [
        "2026-01-01T00:00:00",
        "2026-01-01T01:00:00",
        "2026-01-01T02:00:00",
    ]
    response = await client.get("/v1/audit/events/hourly", headers=mint(tenant, "secops", "registry:read"))
    assert response.status_code == 403 and response.json()["code"] == "insufficient_scope"
    assert (await client.get("/v1/audit/events/hourly")).status_code == 401


async def test_grants_in_expiry_order_page_by_their_own_cursor(client, mint, tenant):
    tickets = await setup_tenant(client, mint, tenant, granted=5)
    auditor = mint(tenant, "secops", "audit:read")
    seen, cursor = [], None
    while True:
        params = {"order": "expiry", "limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/v1/audit/grants", params=params, headers=auditor)).json()
        seen += page["items"]
        cursor = page["nextCursor"]
        if cursor is None:
            break
        # A cursor of one order is not accepted for the other.
        wrong = await client.get("/v1/audit/grants", params={"cursor": cursor}, headers=auditor)
        assert wrong.status_code == 400 and wrong.json()["code"] == "invalid_request"
    assert [g["jti"] for g in seen] == [t["jti"] for t in reversed(tickets)]
    assert [g["expiresAt"] for g in seen] == sorted(g["expiresAt"] for g in seen)
    issued = (await client.get("/v1/audit/grants", headers=auditor)).json()["items"]
    assert [g["jti"] for g in issued] == [t["jti"] for t in tickets]


async def test_the_whole_chain_verifies_for_auditors_only(client, mint, tenant):
    await setup_tenant(client, mint, tenant, granted=1)
    response = await client.get("/v1/audit/chain", headers=mint(tenant, "secops", "audit:read"))
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["verified"] is True and report["firstBadSeq"] is None and report["problem"] is None
    # The tenant's own chain, verified to its head (its first check reads every entry).
    assert report["chain"] == tenant and report["events"] == report["chainSeq"] == report["checkedNow"] >= 4
    assert report["checkpoint"] is None or report["checkpointSignatureValid"] is True
    assert (await client.get("/v1/audit/chain", headers=mint(tenant, "secops", "registry:read"))).status_code == 403
    assert (await client.get("/v1/audit/chain")).status_code == 401


async def test_console_files_and_security_headers(client):
    page = await client.get("/console")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self';" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe" not in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert page.headers["x-frame-options"] == "DENY"
    # No inline script or style, nothing from another origin.
    assert (
        not re.search(r"<script(?![^>]*\bsrc=)", page.text) and "<style" not in page.text and "style=" not in page.text
    )
    assert "http://" not in page.text and "https://" not in page.text
    for name in re.findall(r'(?:src|href)="(/console/static/[^"]+)"', page.text):
        asset = await client.get(name)
        assert asset.status_code == 200, name
        assert asset.headers["content-type"].split(";")[0] in ("text/javascript", "application/javascript", "text/css")
    api = await client.get("/healthz")
    assert api.headers["content-security-policy"] == "default-src 'none'; frame-ancestors 'none'"
    assert (await client.get("/console/static/../../app.py")).status_code in (400, 404)


async def test_the_schema_page_loads_nothing_from_another_origin(client):
    page = await client.get("/schema")
    assert page.status_code == 200
    assert page.headers["content-security-policy"] == (await client.get("/console")).headers["content-security-policy"]
    assert "cdn" not in page.text.lower() and "http://" not in page.text and "https://" not in page.text
    assert "<script>" not in page.text  # no inline script: the page runs under a same-origin script policy
    for name in re.findall(r"""(?:src|href)=["'](/[^"']+)["']""", page.text):
        assert (await client.get(name)).status_code == 200, name
