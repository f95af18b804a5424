"""Delegation tickets through the app: minting, re-delegation chains, every escalation refused and
audited, Idempotency-Key, introspection, revocation, listing, and offline verification."""

from __future__ import annotations

import asyncio
import base64
import time
import uuid

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from db.tickets import ActiveTicketChecks
from registry.core.clock import SteppedClock
from tests.conftest import count_rows, retire_versions
from tests.ticket_support import (
    events_of,
    offline_checker,
    register,
    register_finance,
    skill,
    ticket_body,
    traced,
    unverified,
)

ROUTER_SCOPES = "invoice:read invoice:list ledger:read"


@pytest.fixture
async def finance(client, mint, tenant):
    await register_finance(client, mint, tenant)
    return tenant


async def mint_ticket(client, headers: dict, body: dict, expected: int = 201) -> dict:
    response = await client.post("/v1/tickets", json=body, headers=headers)
    assert response.status_code == expected, response.text
    return response.json()


async def introspect(client, headers: dict, ticket: str) -> dict:
    response = await client.post("/v1/tickets/introspect", json={"ticket": ticket}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


async def chain(client, mint, tenant: str) -> tuple[dict, dict, dict]:
    """router -> billing-agent (A) -> ledger-agent (B) -> billing-agent's invoice lookup again."""
    root = await mint_ticket(
        client,
        mint(tenant, "router", ROUTER_SCOPES),
        ticket_body(
            tenant,
            scopes=["invoice:read", "invoice:list"],
            resources=["invoice:inv-1", "invoice:inv-2"],
            onBehalfOf="user-19",
            ttlSeconds=600,
            maxDepth=3,
        ),
    )
    child = await mint_ticket(
        client,
        mint(tenant, "billing-agent"),
        ticket_body(
            tenant,
            "ledger-agent",
            "ledger.read",
            scopes=["invoice:read"],
            resources=["invoice:inv-1"],
            ttlSeconds=300,
            maxDepth=2,
            parentTicket=root["ticket"],
        ),
    )
    grandchild = await mint_ticket(
        client,
        mint(tenant, "ledger-agent"),
        ticket_body(
            tenant,
            scopes=["invoice:read"],
            resources=["invoice:inv-1"],
            ttlSeconds=200,
            maxDepth=1,
            parentTicket=child["ticket"],
        ),
    )
    return root, child, grandchild


# ---------------------------------------------------------------------------
# Minting and chains


async def test_first_ticket_carries_the_section_8_claims(client, mint, finance, registry):
    tenant = finance
    before = int(time.time())
    body = await mint_ticket(
        client,
        mint(tenant, "router", ROUTER_SCOPES),
        ticket_body(
            tenant,
            scopes=["invoice:read", "invoice:read"],
            resources=["invoice:inv-2", "invoice:inv-1"],
            onBehalfOf="user-19",
            ttlSeconds=300,
            maxDepth=1,
        ),
    )
    assert set(body) == {"ticket", "jti", "expiresAt", "scopes", "resources", "ref", "depth", "maxDepth"}
    assert body["ref"] == f"{tenant}/billing-agent/invoice.lookup@2.0.0"
    assert body["scopes"] == ["invoice:read"] and body["resources"] == ["invoice:inv-1", "invoice:inv-2"]
    assert (body["depth"], body["maxDepth"]) == (0, 1)
    header, claims = unverified(body["ticket"])
    assert header == {"alg": "EdDSA", "typ": "capreg-ticket+jwt", "kid": registry.keyring.signing_kid}
    assert set(claims) == {
        "iss",
        "sub",
        "aud",
        "act",
        "tenant",
        "scope",
        "cap",
        "resources",
        "iat",
        "nbf",
        "exp",
        "jti",
        "depth",
        "maxDepth",
    }
    assert claims["iss"] == "capreg" and claims["sub"] == "user-19" and claims["aud"] == f"{tenant}/billing-agent"
    assert claims["act"] == {"sub": f"{tenant}/router"}
    assert claims["tenant"] == tenant and claims["scope"] == "invoice:read"
    assert claims["cap"] == {"ref": body["ref"], "id": "invoice.lookup", "version": "2.0.0"}
    assert claims["jti"] == body["jti"] and claims["depth"] == 0 and claims["maxDepth"] == 1
    assert before <= claims["iat"] == claims["nbf"] and claims["exp"] == claims["iat"] + 300


async def test_without_on_behalf_of_the_subject_is_the_caller(client, mint, finance):
    body = await mint_ticket(client, mint(finance, "router", ROUTER_SCOPES), ticket_body(finance))
    assert unverified(body["ticket"])[1]["sub"] == f"{finance}/router"


async def test_chain_router_agent_a_agent_b_narrows_at_each_hop(client, mint, finance, db):
    tenant = finance
    root, child, grandchild = await chain(client, mint, tenant)
    _, root_claims = unverified(root["ticket"])
    _, child_claims = unverified(child["ticket"])
    _, grand_claims = unverified(grandchild["ticket"])

    assert child["ref"] == f"{tenant}/ledger-agent/ledger.read@1.0.0"
    assert child_claims["parent"] == root["jti"] and grand_claims["parent"] == child["jti"]
    assert [c["depth"] for c in (root_claims, child_claims, grand_claims)] == [0, 1, 2]
    assert [c["maxDepth"] for c in (root_claims, child_claims, grand_claims)] == [3, 2, 1]
    assert (
        root_claims["scope"] == "invoice:list invoice:read"
        and child_claims["scope"] == grand_claims["scope"] == "invoice:read"
    )
    assert child_claims["resources"] == ["invoice:inv-1"]
    assert root_claims["exp"] >= child_claims["exp"] >= grand_claims["exp"]
    # onBehalfOf is inherited all the way down; the actor chain grows, current actor first.
    assert {c["sub"] for c in (root_claims, child_claims, grand_claims)} == {"user-19"}
    assert grand_claims["act"] == {
        "sub": f"{tenant}/ledger-agent",
        "act": {"sub": f"{tenant}/billing-agent", "act": {"sub": f"{tenant}/router"}},
    }
    rows = await db.fetch(
        "SELECT jti, parent_jti, root_jti, actor FROM tickets WHERE tenant = $1 ORDER BY depth", tenant
    )
    assert [r["root_jti"] for r in rows] == [root["jti"]] * 3
    assert [r["actor"] for r in rows] == [f"{tenant}/router", f"{tenant}/billing-agent", f"{tenant}/ledger-agent"]
    granted = await db.fetch(
        "SELECT actor, on_behalf_of, ref FROM audit_events WHERE tenant = $1 AND type = 'ticket.granted' ORDER BY seq",
        tenant,
    )
    assert [r["actor"] for r in granted] == ["router", "billing-agent", "ledger-agent"]
    assert {r["on_behalf_of"] for r in granted} == {"user-19"}

    # billing-agent is already in the chain: it may not act again on the grandchild's authority.
    headers, trace = traced(mint(tenant, "billing-agent"))
    response = await client.post(
        "/v1/tickets",
        headers=headers,
        json=ticket_body(
            tenant,
            "ledger-agent",
            "ledger.read",
            resources=["invoice:inv-1"],
            ttlSeconds=60,
            parentTicket=grandchild["ticket"],
        ),
    )
    assert response.status_code == 403 and response.json()["reason"] == "actor_repeated", response.text
    assert (await events_of(db, trace))[0]["reason"] == "actor_repeated"


async def test_deprecated_versions_may_still_be_delegated(client, mint, finance, db):
    await db.execute(
        "UPDATE capability_versions SET status = 'deprecated' WHERE tenant = $1 AND skill_id = 'invoice.lookup'",
        finance,
    )
    await mint_ticket(client, mint(finance, "router", ROUTER_SCOPES), ticket_body(finance, version="2.0.0"))


async def test_a_shared_capability_may_be_delegated_by_the_tenant_it_is_shared_with(client, mint, tenant, other_tenant):
    await register(
        client,
        mint,
        tenant,
        "billing-agent",
        [skill("invoice.lookup", "2.0.0", ["invoice:read"])],
        shared_with=[other_tenant],
    )
    body = await mint_ticket(client, mint(other_tenant, "router", "invoice:read"), ticket_body(tenant))
    assert unverified(body["ticket"])[1]["act"] == {"sub": f"{other_tenant}/router"}


# ---------------------------------------------------------------------------
# Every escalation is refused with its code, audited, and mints nothing


async def refused(
    client, db, tenant: str, headers: dict, body: dict, status: int, code: str, reason: str | None = None
):
    tickets_before = await db.fetchval("SELECT count(*) FROM tickets")
    headers, trace = traced(headers)
    response = await client.post("/v1/tickets", json=body, headers=headers)
    assert response.status_code == status, response.text
    problem = response.json()
    assert response.headers["content-type"].startswith("application/problem+json")
    assert problem["code"] == code, problem
    if reason is not None:
        assert problem["reason"] == reason, problem
    events = await events_of(db, trace)
    assert [(e["type"], e["outcome"], e["reason"]) for e in events] == [("ticket.denied", "denied", reason or code)]
    assert await db.fetchval("SELECT count(*) FROM tickets") == tickets_before
    return problem, events[0]


@pytest.mark.parametrize(
    ("held", "requested"),
    [
        ("invoice:read", ["invoice:read", "invoice:list"]),  # a scope the caller lacks
        ("invoice:read invoice:write", ["invoice:write"]),  # a scope the capability does not declare
        ("invoice:read Invoice:read", ["Invoice:read"]),  # a case variant is another scope
    ],
)
async def test_first_ticket_scope_escalation(client, mint, finance, db, held, requested):
    _, event = await refused(
        client,
        db,
        finance,
        mint(finance, "router", held),
        ticket_body(finance, scopes=requested),
        403,
        "delegation_denied",
        "scope_escalation",
    )
    assert event["tenant"] == finance and event["actor"] == "router" and event["ref"].endswith("invoice.lookup@2.0.0")


async def parent_of(client, mint, tenant: str, **fields) -> dict:
    body = ticket_body(
        tenant, scopes=["invoice:read"], resources=["invoice:inv-1"], ttlSeconds=300, maxDepth=1, onBehalfOf="user-19"
    )
    body.update(fields)
    return await mint_ticket(client, mint(tenant, "router", ROUTER_SCOPES), body)


def child_body(tenant: str, parent: dict, **fields) -> dict:
    body = ticket_body(
        tenant,
        "ledger-agent",
        "ledger.read",
        scopes=["invoice:read"],
        resources=["invoice:inv-1"],
        ttlSeconds=60,
        parentTicket=parent["ticket"],
    )
    body.update(fields)
    return body


@pytest.mark.parametrize(
    ("child_fields", "reason"),
    [
        ({"scopes": ["invoice:read", "ledger:read"]}, "scope_escalation"),  # beyond the parent's scopes
        ({"resources": ["invoice:inv-1", "invoice:inv-9"]}, "resource_escalation"),
        ({"resources": []}, "resource_escalation"),  # "every resource" under a restricted parent
        ({"maxDepth": 1}, "depth_exhausted"),  # the parent allows 1 more hop: the child may allow 0
        ({"ttlSeconds": 900}, "lifetime_escalation"),  # would outlive the parent
        ({"onBehalfOf": "user-20"}, "on_behalf_of_mismatch"),
    ],
)
async def test_redelegation_escalation(client, mint, finance, db, child_fields, reason):
    parent = await parent_of(client, mint, finance)
    await refused(
        client,
        db,
        finance,
        mint(finance, "billing-agent"),
        child_body(finance, parent, **child_fields),
        403,
        "delegation_denied",
        reason,
    )


async def test_depth_exhausted_when_the_parent_allows_no_further_hop(client, mint, finance, db):
    parent = await parent_of(client, mint, finance, maxDepth=0)
    await refused(
        client,
        db,
        finance,
        mint(finance, "billing-agent"),
        child_body(finance, parent),
        403,
        "delegation_denied",
        "depth_exhausted",
    )


async def test_only_the_parents_audience_may_redelegate(client, mint, finance, db, other_tenant):
    parent = await parent_of(client, mint, finance)
    for who in (mint(finance, "router", ROUTER_SCOPES), mint(finance, "ledger-agent", ROUTER_SCOPES)):
        await refused(
            client, db, finance, who, child_body(finance, parent), 403, "delegation_denied", "not_parent_audience"
        )
    # A parent from another tenant: the same agent id elsewhere, delegating to its own tenant's agent.
    await register(client, mint, other_tenant, "ledger-agent", [skill("ledger.read", "1.0.0", ["invoice:read"])])
    body = child_body(finance, parent, audience=f"{other_tenant}/ledger-agent")
    await refused(
        client,
        db,
        other_tenant,
        mint(other_tenant, "billing-agent", ROUTER_SCOPES),
        body,
        403,
        "delegation_denied",
        "not_parent_audience",
    )


async def test_revoked_parent_is_invalid(client, mint, finance, db):
    parent = await parent_of(client, mint, finance)
    response = await client.post(f"/v1/tickets/{parent['jti']}/revoke", headers=mint(finance, "router"))
    assert response.status_code == 200, response.text
    await refused(
        client,
        db,
        finance,
        mint(finance, "billing-agent"),
        child_body(finance, parent),
        403,
        "delegation_denied",
        "parent_invalid",
    )


async def test_expired_parent_is_invalid(client, mint, finance, db):
    parent = await parent_of(client, mint, finance, ttlSeconds=1)
    await asyncio.sleep(max(0.0, unverified(parent["ticket"])[1]["exp"] - time.time()) + 0.05)
    await refused(
        client,
        db,
        finance,
        mint(finance, "billing-agent"),
        child_body(finance, parent, ttlSeconds=1),
        403,
        "delegation_denied",
        "parent_invalid",
    )


async def test_forged_parents_are_invalid(client, mint, finance, db, registry):
    parent = await parent_of(client, mint, finance)
    header, claims = unverified(parent["ticket"])
    wider = {**claims, "scope": "invoice:read ledger:read", "resources": [], "maxDepth": 5}
    forgeries = [
        # Re-signed with a key of the attacker's, under capreg's kid.
        jwt.encode(wider, Ed25519PrivateKey.generate(), algorithm="EdDSA", headers=header),
        # capreg's signature over other claims.
        ".".join(
            [
                parent["ticket"].split(".")[0],
                base64.urlsafe_b64encode(jwt.api_jws.json.dumps(wider).encode()).rstrip(b"=").decode(),
                parent["ticket"].split(".")[2],
            ]
        ),
        # A caller token is not a ticket.
        mint(finance, "billing-agent", "invoice:read")["Authorization"].split()[1],
        # Signed by capreg, never minted as a ticket (no row): unknown to the registry.
        registry.keyring.sign({**claims, "jti": str(uuid.uuid4())}, typ="capreg-ticket+jwt"),
        "not.a.jwt",
    ]
    for forged in forgeries:
        await refused(
            client,
            db,
            finance,
            mint(finance, "billing-agent"),
            child_body(finance, parent, parentTicket=forged),
            403,
            "delegation_denied",
            "parent_invalid",
        )


async def test_parent_whose_capability_was_retired_is_invalid(client, mint, finance, db):
    parent = await parent_of(client, mint, finance)
    await retire_versions(client, mint, db, finance, "invoice.lookup")
    await refused(
        client,
        db,
        finance,
        mint(finance, "billing-agent"),
        child_body(finance, parent),
        403,
        "delegation_denied",
        "parent_invalid",
    )


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"ttlSeconds": 0}, "/ttlSeconds"),
        ({"ttlSeconds": -5}, "/ttlSeconds"),
        ({"ttlSeconds": 901}, "/ttlSeconds"),
        ({"ttlSeconds": 10**12}, "/ttlSeconds"),
        ({"scopes": []}, "/scopes"),
        ({"ttlSeconds": "300"}, "/ttlSeconds"),
        ({"scopes": "invoice:read"}, "/scopes"),
        ({"maxDepth": True}, "/maxDepth"),
        ({"audience": "not-an-agent-ref"}, "/audience"),
        ({"unexpected": 1}, ""),
        ({"resources": ["invoice:\x00"]}, "/resources/0"),
        ({"onBehalfOf": "user\n19"}, "/onBehalfOf"),
    ],
)
async def test_malformed_requests_are_400(client, mint, finance, db, fields, path):
    problem, event = await refused(
        client,
        db,
        finance,
        mint(finance, "router", ROUTER_SCOPES),
        ticket_body(finance, **fields),
        400,
        "invalid_request",
    )
    assert problem["errors"] and any(path in e["path"] for e in problem["errors"]), problem
    assert event["actor"] == "router" and event["actor_tenant"] == finance


async def test_malformed_json_and_range_are_400(client, mint, finance, db):
    headers = {**mint(finance, "router", ROUTER_SCOPES), "content-type": "application/json"}
    for raw in (b"{", b"", b"[]"):
        headers_traced, trace = traced(headers)
        response = await client.post("/v1/tickets", content=raw, headers=headers_traced)
        assert response.status_code == 400 and response.json()["code"] == "invalid_request"
        assert (await events_of(db, trace))[0]["reason"] == "invalid_request"
    await refused(
        client,
        db,
        finance,
        mint(finance, "router", ROUTER_SCOPES),
        ticket_body(finance, version="^^2"),
        400,
        "invalid_request",
    )


async def test_retired_exact_version_is_410_and_ranges_skip_it(client, mint, finance, db):
    await retire_versions(client, mint, db, finance, "invoice.lookup")
    headers = mint(finance, "router", ROUTER_SCOPES)
    await refused(client, db, finance, headers, ticket_body(finance, version="2.0.0"), 410, "retired")
    await refused(client, db, finance, headers, ticket_body(finance, version="^2"), 404, "not_found")


async def test_invisible_or_missing_capability_is_404(client, mint, finance, db, other_tenant):
    stranger = mint(other_tenant, "router", ROUTER_SCOPES)
    _, event = await refused(client, db, finance, stranger, ticket_body(finance), 404, "not_found")
    assert event["actor_tenant"] == other_tenant and event["ref"] == f"{finance}/billing-agent/invoice.lookup@^2"
    await refused(
        client,
        db,
        finance,
        mint(finance, "router", ROUTER_SCOPES),
        ticket_body(finance, skill="invoice.nothing"),
        404,
        "not_found",
    )
    await refused(
        client,
        db,
        finance,
        mint(finance, "router", ROUTER_SCOPES),
        ticket_body(finance, version="9.0.0"),
        404,
        "not_found",
    )


def bad_caller_tokens(registry, tenant: str) -> dict[str, str]:
    keyring = registry.keyring
    kid = keyring.signing_kid
    public_x = next(k for k in keyring.jwks if k["kid"] == kid)["x"]
    now = int(time.time())
    good = {
        "iss": "capreg",
        "sub": "router",
        "aud": "capreg",
        "iat": now,
        "exp": now + 600,
        "jti": str(uuid.uuid4()),
        "tenant": tenant,
        "scope": ROUTER_SCOPES,
    }
    b64 = lambda raw: base64.urlsafe_b64encode(raw).rstrip(b"=").decode()  # noqa: E731
    return {
        "alg none": b64(b'{"alg":"none","typ":"at+jwt","kid":"' + kid.encode() + b'"}')
        + "."
        + b64(jwt.api_jws.json.dumps(good).encode())
        + ".",
        "HS256 with the public key": jwt.encode(
            good, public_x.encode(), algorithm="HS256", headers={"kid": kid, "typ": "at+jwt"}
        ),
        "unknown kid": jwt.encode(
            good, Ed25519PrivateKey.generate(), algorithm="EdDSA", headers={"kid": "nope", "typ": "at+jwt"}
        ),
        "path-shaped kid": jwt.encode(
            good,
            Ed25519PrivateKey.generate(),
            algorithm="EdDSA",
            headers={"kid": "../../../etc/passwd", "typ": "at+jwt"},
        ),
        "wrong typ": keyring.sign(good, typ="capreg-ticket+jwt"),
        "missing jti": keyring.sign({k: v for k, v in good.items() if k != "jti"}, typ="at+jwt"),
        "expired": keyring.sign({**good, "iat": now - 100, "exp": now - 50}, typ="at+jwt"),
    }


async def test_bad_caller_tokens_are_401_and_not_audited(client, finance, db, registry):
    """Who sent a bad token is unknown: nothing is written to the audit chain (anyone could grow
    it); the refusals are counted in /metrics instead."""
    head = await db.fetchval("SELECT coalesce(max(seq), 0) FROM audit_events")
    failures = sum(registry.auth_failures.values())
    for label, token in bad_caller_tokens(registry, finance).items():
        headers, trace = traced({"Authorization": f"Bearer {token}"})
        response = await client.post("/v1/tickets", json=ticket_body(finance), headers=headers)
        assert response.status_code == 401, (label, response.text)
        assert response.json()["code"] == "invalid_token" and response.headers["www-authenticate"].startswith("Bearer")
        assert await events_of(db, trace) == [], label
    assert sum(registry.auth_failures.values()) - failures == len(bad_caller_tokens(registry, finance))
    assert registry.auth_failures["expired"] >= 1 and registry.auth_failures["unknown_key"] >= 1
    assert await db.fetchval("SELECT count(*) FROM audit_events WHERE seq > $1 AND actor IS NULL", head) == 0
    # No token at all claims nothing: 401, and nothing recorded.
    headers, trace = traced()
    response = await client.post("/v1/tickets", json=ticket_body(finance), headers=headers)
    assert response.status_code == 401 and await events_of(db, trace) == []
    assert await count_rows(db, "tickets", tenant=finance) == 0


async def test_a_ticket_is_not_a_caller_token(client, mint, finance):
    ticket = (await mint_ticket(client, mint(finance, "router", ROUTER_SCOPES), ticket_body(finance)))["ticket"]
    response = await client.post(
        "/v1/tickets", json=ticket_body(finance), headers={"Authorization": f"Bearer {ticket}"}
    )
    assert response.status_code == 401


# ---------------------------------------------------------------------------
# Idempotency-Key


async def test_same_idempotency_key_and_body_return_the_same_ticket(client, mint, finance, db):
    headers = {**mint(finance, "router", ROUTER_SCOPES), "Idempotency-Key": "k-" + uuid.uuid4().hex}
    first = await client.post("/v1/tickets", json=ticket_body(finance), headers=headers)
    assert first.status_code == 201, first.text
    again = await client.post("/v1/tickets", json=ticket_body(finance), headers=headers)
    assert again.status_code == 200 and again.json() == first.json()
    assert await count_rows(db, "tickets", tenant=finance) == 1

    other_body = await client.post("/v1/tickets", json=ticket_body(finance, ttlSeconds=120), headers=headers)
    assert other_body.status_code == 409 and other_body.json()["code"] == "idempotency_mismatch"
    assert await count_rows(db, "tickets", tenant=finance) == 1

    # Keys are scoped per caller principal: another caller's same key is its own request.
    other_caller = {**mint(finance, "frontend", ROUTER_SCOPES), "Idempotency-Key": headers["Idempotency-Key"]}
    theirs = await client.post("/v1/tickets", json=ticket_body(finance), headers=other_caller)
    assert theirs.status_code == 201 and theirs.json()["jti"] != first.json()["jti"]


async def test_concurrent_retries_with_one_key_mint_one_ticket(client, mint, finance, db):
    headers = {**mint(finance, "router", ROUTER_SCOPES), "Idempotency-Key": str(uuid.uuid4())}
    responses = await asyncio.gather(
        *[client.post("/v1/tickets", json=ticket_body(finance), headers=headers) for _ in range(8)]
    )
    assert sorted(r.status_code for r in responses) == [200] * 7 + [201], [r.text for r in responses]
    assert len({r.json()["jti"] for r in responses}) == 1
    assert await count_rows(db, "tickets", tenant=finance) == 1
    assert (
        await db.fetchval("SELECT count(*) FROM audit_events WHERE tenant = $1 AND type = 'ticket.granted'", finance)
        == 1
    )


# ---------------------------------------------------------------------------
# Introspection


async def test_introspection_by_the_audience_tenant_and_auditors(client, mint, finance, other_tenant):
    ticket = (
        await mint_ticket(client, mint(finance, "router", ROUTER_SCOPES), ticket_body(finance, onBehalfOf="user-19"))
    )["ticket"]
    answer = await introspect(client, mint(finance, "billing-agent"), ticket)
    assert answer["active"] is True
    assert answer == {"active": True, **unverified(ticket)[1]}
    assert (await introspect(client, mint(finance, "auditor", "audit:read"), ticket))["active"] is True
    # Outside the audience's tenant, even with audit:read (of its own tenant), nothing is told.
    assert await introspect(client, mint(other_tenant, "billing-agent", "audit:read"), ticket) == {"active": False}
    for junk in ("", "garbage", ticket[:-4] + "AAAA", mint(finance, "router")["Authorization"].split()[1]):
        assert await introspect(client, mint(finance, "billing-agent"), junk) == {"active": False}
    response = await client.post("/v1/tickets/introspect", json={"ticket": ticket})
    assert response.status_code == 401 and response.json()["code"] == "invalid_token"


async def test_expired_and_retired_tickets_are_inactive(client, mint, finance, db):
    router = mint(finance, "router", ROUTER_SCOPES)
    short = (await mint_ticket(client, router, ticket_body(finance, ttlSeconds=1)))["ticket"]
    other = (await mint_ticket(client, router, ticket_body(finance, "ledger-agent", "ledger.read")))["ticket"]
    retiring = (await mint_ticket(client, router, ticket_body(finance)))["ticket"]
    await retire_versions(client, mint, db, finance, "invoice.lookup")
    agent = mint(finance, "billing-agent")
    assert await introspect(client, agent, retiring) == {"active": False}
    assert (await introspect(client, agent, other))["active"] is True
    await asyncio.sleep(max(0.0, unverified(short)[1]["exp"] - time.time()) + 0.05)
    assert await introspect(client, agent, short) == {"active": False}


async def test_revoking_the_root_makes_every_descendant_inactive(client, mint, finance, db):
    tenant = finance
    root, child, grandchild = await chain(client, mint, tenant)
    sibling = await mint_ticket(client, mint(tenant, "router", ROUTER_SCOPES), ticket_body(tenant))
    agent = mint(tenant, "ledger-agent")
    assert all([(await introspect(client, agent, t["ticket"]))["active"] for t in (root, child, grandchild)])

    headers, trace = traced(mint(tenant, "router"))
    response = await client.post(f"/v1/tickets/{root['jti']}/revoke", headers=headers)
    assert response.status_code == 200, response.text
    assert response.json() == {"jti": root["jti"], "revoked": [root["jti"], child["jti"], grandchild["jti"]]}
    for ticket in (root, child, grandchild):
        assert await introspect(client, agent, ticket["ticket"]) == {"active": False}
    assert (await introspect(client, agent, sibling["ticket"]))["active"] is True
    events = await events_of(db, trace)
    assert [(e["type"], e["reason"]) for e in events] == [
        ("ticket.revoked", None),
        ("ticket.revoked", "ancestor_revoked"),
        ("ticket.revoked", "ancestor_revoked"),
    ]
    assert {e["actor"] for e in events} == {"router"}
    # Revoking again changes nothing.
    again = await client.post(f"/v1/tickets/{root['jti']}/revoke", headers=mint(tenant, "router"))
    assert again.status_code == 200 and again.json()["revoked"] == []


async def test_concurrent_introspections_each_get_their_own_answer(client, mint, finance, registry):
    """Introspection's active checks of concurrent requests share one statement
    (db.tickets.ActiveTicketChecks): revoked and active tickets asked at once are told apart, and a
    revocation committed before a check is seen by it."""
    tenant = finance
    router = mint(tenant, "router", ROUTER_SCOPES)
    tickets = [await mint_ticket(client, router, ticket_body(tenant)) for _ in range(8)]
    for ticket in tickets[::2]:
        response = await client.post(f"/v1/tickets/{ticket['jti']}/revoke", headers=mint(tenant, "router"))
        assert response.status_code == 200, response.text
    agent = mint(tenant, "billing-agent")
    asked = [t["ticket"] for t in tickets] * 4
    answers = await asyncio.gather(*(introspect(client, agent, ticket) for ticket in asked))
    for n, answer in enumerate(answers):
        ticket = tickets[n % len(tickets)]
        assert answer["active"] is (n % 2 == 1), (n, answer)
        if answer["active"]:
            assert answer["jti"] == ticket["jti"]  # its own claims, not a neighbour's
    batches = registry.ticket_checks
    assert batches._task is not None and not batches._queue  # every check answered, nothing left queued


@pytest.mark.timeout(10)
async def test_a_stopped_check_queue_refuses_rather_than_hangs():
    checks = ActiveTicketChecks(pool=None, now=SteppedClock().now)  # type: ignore[arg-type]  # never reaches a database
    checks.start()
    await checks.stop()
    with pytest.raises(ConnectionError):
        await checks.is_active("t-1")


async def test_a_revoked_middle_ticket_takes_its_subtree_only(client, mint, finance):
    root, child, grandchild = await chain(client, mint, finance)
    response = await client.post(f"/v1/tickets/{child['jti']}/revoke", headers=mint(finance, "billing-agent"))
    assert response.status_code == 200 and response.json()["revoked"] == [child["jti"], grandchild["jti"]]
    agent = mint(finance, "billing-agent")
    assert (await introspect(client, agent, root["ticket"]))["active"] is True
    assert (await introspect(client, agent, grandchild["ticket"]))["active"] is False


async def test_who_may_revoke(client, mint, finance, other_tenant, db):
    tenant = finance
    ticket = await mint_ticket(client, mint(tenant, "router", ROUTER_SCOPES), ticket_body(tenant))
    path = f"/v1/tickets/{ticket['jti']}/revoke"
    stranger = await client.post(path, headers=mint(other_tenant, "router", "registry:admin"))
    assert stranger.status_code == 404 and stranger.json()["code"] == "not_found"
    colleague = await client.post(path, headers=mint(tenant, "frontend", "audit:read"))
    assert colleague.status_code == 403 and colleague.json()["code"] == "insufficient_scope"
    assert (await client.post("/v1/tickets/no-such-ticket/revoke", headers=mint(tenant, "router"))).status_code == 404
    assert await db.fetchval("SELECT revoked_at FROM tickets WHERE jti = $1", ticket["jti"]) is None
    admin = await client.post(path, headers=mint(tenant, "security", "registry:admin"))
    assert admin.status_code == 200 and admin.json()["revoked"] == [ticket["jti"]]


async def test_the_minters_tenant_sees_but_may_not_revoke_a_ticket_on_another_tenants_capability(
    client, mint, tenant, other_tenant
):
    await register(
        client, mint, tenant, "billing-agent", [skill("invoice.lookup", "2.0.0", ["invoice:read"])], visibility="public"
    )
    ticket = await mint_ticket(client, mint(other_tenant, "router", "invoice:read"), ticket_body(tenant))
    path = f"/v1/tickets/{ticket['jti']}/revoke"
    colleague = await client.post(path, headers=mint(other_tenant, "frontend", "registry:admin"))
    assert colleague.status_code == 403 and colleague.json()["code"] == "tenant_mismatch"
    assert (await client.post(path, headers=mint(other_tenant, "router"))).status_code == 200


# ---------------------------------------------------------------------------
# Listing


async def test_list_tickets_for_auditors(client, mint, finance, tenant, other_tenant):
    root, child, grandchild = await chain(client, mint, finance)
    await client.post(f"/v1/tickets/{child['jti']}/revoke", headers=mint(finance, "billing-agent"))
    auditor = mint(finance, "auditor", "audit:read")

    everything = (await client.get("/v1/tickets", headers=auditor)).json()
    assert [i["jti"] for i in everything["items"]] == [root["jti"], child["jti"], grandchild["jti"]]
    assert everything["nextCursor"] is None
    item = everything["items"][0]
    # The same items as the grant report (docs/api.md#listing-tickets).
    assert set(item) == {
        "actor",
        "onBehalfOf",
        "audience",
        "ref",
        "scopes",
        "resources",
        "jti",
        "issuedAt",
        "expiresAt",
        "depth",
        "maxDepth",
        "parent",
        "act",
        "active",
    }
    assert [i["active"] for i in everything["items"]] == [True, False, False]
    assert item["actor"] == f"{finance}/router" and item["onBehalfOf"] == "user-19"
    assert item["audience"] == f"{finance}/billing-agent" and item["depth"] == 0

    active = (await client.get("/v1/tickets", params={"active": "true"}, headers=auditor)).json()["items"]
    assert [i["jti"] for i in active] == [root["jti"]]
    by_actor = (await client.get("/v1/tickets", params={"actor": "billing-agent"}, headers=auditor)).json()["items"]
    assert [i["jti"] for i in by_actor] == [child["jti"]]
    by_skill = (await client.get("/v1/tickets", params={"skill": "ledger.read"}, headers=auditor)).json()["items"]
    assert [i["jti"] for i in by_skill] == [child["jti"]]
    by_scope = (await client.get("/v1/tickets", params={"scope": "invoice:list"}, headers=auditor)).json()["items"]
    assert [i["jti"] for i in by_scope] == [root["jti"]]

    seen, cursor = [], None
    while True:
        page = (
            await client.get(
                "/v1/tickets", params={"limit": 1, **({"cursor": cursor} if cursor else {})}, headers=auditor
            )
        ).json()
        seen += [i["jti"] for i in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == [root["jti"], child["jti"], grandchild["jti"]]

    assert (await client.get("/v1/tickets", headers=mint(finance, "router"))).status_code == 403
    assert (await client.get("/v1/tickets", headers=mint(other_tenant, "auditor", "audit:read"))).json()["items"] == []
    assert (await client.get("/v1/tickets", params={"limit": 500}, headers=auditor)).status_code == 400
    for junk in (
        "!!",
        base64.urlsafe_b64encode(b'["2026-01-01T00:00:00", "x"]').decode(),
        base64.urlsafe_b64encode(b'["2026-01-01T00:00:00Z", "\\u0000"]').decode(),
    ):
        assert (await client.get("/v1/tickets", params={"cursor": junk}, headers=auditor)).status_code == 400
    assert (await client.get("/v1/tickets", params={"actor": "a\x00b"}, headers=auditor)).status_code == 400


# ---------------------------------------------------------------------------
# Offline verification, as the README shows it


async def test_a_ticket_verifies_offline_with_only_the_jwks(client, mint, finance):
    check_ticket = offline_checker()
    ticket = (
        await mint_ticket(
            client,
            mint(finance, "router", ROUTER_SCOPES),
            ticket_body(
                finance,
                resources=["invoice:inv-2026-091"],
                onBehalfOf="user-19",
            ),
        )
    )["ticket"]
    jwks = (await client.get("/.well-known/jwks.json")).json()
    claims = check_ticket(ticket, jwks, f"{finance}/billing-agent")
    assert "invoice:read" in claims["scope"].split() and claims["resources"] == ["invoice:inv-2026-091"]
    assert claims["sub"] == "user-19"
    for wrong in (
        lambda: check_ticket(ticket, jwks, f"{finance}/ledger-agent"),  # not addressed to this agent
        lambda: check_ticket(ticket, {"keys": []}, f"{finance}/billing-agent"),  # key not published
        lambda: check_ticket(mint(finance, "router")["Authorization"].split()[1], jwks, "capreg"),  # a caller token
        lambda: check_ticket(ticket[:-4] + "AAAA", jwks, f"{finance}/billing-agent"),
    ):
        with pytest.raises(jwt.InvalidTokenError):
            wrong()
