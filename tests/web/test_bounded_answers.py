"""Bounded answers (docs/api.md#limits, contract section 19): caps on what one registration puts in
public answers, tickets no longer than anything accepts, and instances per agent and per answer."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from auth.keys import Keyring, SigningKey, new_key
from auth.policy import TicketGrant
from auth.tickets import MAX_TICKET_LENGTH, CapClaim, encoded_ticket_length, new_jti, sign_ticket, ticket_claims
from db import housekeeping as housekeeping_queries
from registry.core.records import MAX_EXAMPLES, MAX_REGIONS, MAX_SCOPES, MAX_SKILLS, MAX_TAGS
from tests.conftest import example
from tests.mcp_support import post, rpc
from tests.ticket_support import register, skill, ticket_body

BILLING = example("billing-agent.json")


def _skill(**fields) -> dict:
    return {**BILLING["skills"][0], **fields}


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        ({"skills": [_skill(tags=[f"t{i}" for i in range(MAX_TAGS + 1)])]}, "/skills/0/tags"),
        ({"skills": [_skill(scopes=[f"s:{i}" for i in range(MAX_SCOPES + 1)])]}, "/skills/0/scopes"),
        ({"skills": [_skill(dataRegions=[f"r{i}" for i in range(MAX_REGIONS + 1)])]}, "/skills/0/dataRegions"),
        ({"skills": [_skill(examples=[f"e{i}" for i in range(MAX_EXAMPLES + 1)])]}, "/skills/0/examples"),
        ({"skills": [_skill(id=f"s{i}.x") for i in range(MAX_SKILLS + 1)]}, "/skills"),
        ({"skills": [_skill(), _skill(id="b.b", tags=["x"] * (MAX_TAGS + 1))]}, "/skills/1/tags"),
    ],
)
async def test_lists_over_their_cap_are_refused_with_the_pointer_and_nothing_stored(
    client, mint, tenant, db, body, pointer
):
    response = await client.put(
        f"/v1/agents/{tenant}/capped", json={**BILLING, **body}, headers=mint(tenant, "p", "registry:publish")
    )
    assert response.status_code == 400, response.text
    problem = response.json()
    assert problem["code"] == "invalid_request" and [e["path"] for e in problem["errors"]] == [pointer]
    assert await db.fetchval("SELECT count(*) FROM agents WHERE tenant = $1", tenant) == 0


async def test_lists_at_their_cap_are_accepted(client, mint, tenant):
    body = {
        **BILLING,
        "skills": [
            _skill(
                tags=[f"t{i}" for i in range(MAX_TAGS)],
                scopes=[f"s:{i}" for i in range(MAX_SCOPES)],
                dataRegions=[f"r{i}" for i in range(MAX_REGIONS)],
                examples=["e"] * MAX_EXAMPLES,
            )
        ],
    }
    response = await client.put(f"/v1/agents/{tenant}/capped", json=body, headers=mint(tenant, "p", "registry:publish"))
    assert response.status_code == 201, response.text


# --- tickets ------------------------------------------------------------------------------------


@hsettings(max_examples=60, deadline=None)
@given(
    resources=st.lists(st.text(max_size=40), max_size=8),
    scopes=st.lists(st.from_regex(r"\A[a-z:]{1,12}\Z"), max_size=4),
    sub=st.text(min_size=1, max_size=30),
    parent=st.booleans(),
)
def test_the_planned_length_is_the_signed_length(resources, scopes, sub, parent):
    kid, pem, jwk = new_key()
    keyring = Keyring([SigningKey(kid, pem, jwk, current=True)])
    grant = TicketGrant(
        sub=sub,
        aud="t/a",
        act={"sub": "router", "act": {"sub": sub}},
        scopes=tuple(scopes),
        resources=tuple(resources),
        exp=2_000_000_000,
        depth=1 if parent else 0,
        max_depth=2,
        parent=new_jti() if parent else None,
        on_behalf_of=None,
    )
    claims = ticket_claims(
        grant,
        issuer="capreg",
        tenant="t",
        cap=CapClaim(ref="t/a/s@1.0.0", id="s", version="1.0.0"),
        jti=new_jti(),
        now=1_900_000_000,
    )
    assert encoded_ticket_length(claims, kid=keyring.signing_kid) == len(sign_ticket(keyring, claims))


async def test_a_ticket_over_16_kib_is_refused_before_it_is_signed_stored_or_granted(client, mint, tenant, db):
    await register(client, mint, tenant, "billing-agent", [skill("invoice.lookup", "2.0.0", ["invoice:read"])])
    caller = mint(tenant, "router", "invoice:read")
    huge = ticket_body(tenant, resources=[f"inv/{i:03d}/" + "x" * 490 for i in range(256)])
    response = await client.post("/v1/tickets", json=huge, headers=caller)
    assert response.status_code == 400, response.text
    problem = response.json()
    assert problem["code"] == "invalid_request" and "ticket_too_large" in problem["errors"][0]["message"]
    assert str(MAX_TICKET_LENGTH) in problem["detail"]
    assert await db.fetchval("SELECT count(*) FROM tickets WHERE tenant = $1", tenant) == 0
    events = await db.fetch(
        "SELECT type, outcome, reason FROM audit_events WHERE tenant = $1 AND type LIKE 'ticket.%'", tenant
    )
    assert [tuple(e) for e in events] == [("ticket.denied", "denied", "ticket_too_large")]
    # Just under the bound: minted, and every consumer accepts it.
    fits = ticket_body(tenant, resources=[f"inv/{i:03d}/" + "x" * 490 for i in range(20)])
    minted = await client.post("/v1/tickets", json=fits, headers=caller)
    assert minted.status_code == 201, minted.text
    assert len(minted.json()["ticket"]) <= MAX_TICKET_LENGTH
    introspected = await client.post("/v1/tickets/introspect", json={"ticket": minted.json()["ticket"]}, headers=caller)
    assert introspected.status_code == 200 and introspected.json()["active"] is True


# --- instances ----------------------------------------------------------------------------------


def _beat(client, mint, tenant, instance_id, **fields):
    return client.post(
        f"/v1/agents/{tenant}/billing-agent/heartbeat",
        json={"instanceId": instance_id, **fields},
        headers=mint(tenant, "p", "registry:publish"),
    )


@pytest.fixture
def instance_limit(registry):
    original = registry.leases.max_instances
    registry.leases.max_instances = 5
    yield 5
    registry.leases.max_instances = original


async def test_new_instances_beyond_the_limit_are_refused_even_when_concurrent(
    client, mint, tenant, db, instance_limit
):
    await register(client, mint, tenant, "billing-agent", [skill("invoice.lookup", "2.0.0", [])])
    answers = await asyncio.gather(*(_beat(client, mint, tenant, f"i-{n:02d}") for n in range(3 * instance_limit)))
    codes = sorted(a.status_code for a in answers)
    assert codes == [200] * instance_limit + [409] * (2 * instance_limit), codes
    refused = next(a for a in answers if a.status_code == 409).json()
    assert refused["code"] == "instance_limit"
    assert await db.fetchval("SELECT count(*) FROM agent_instances WHERE tenant = $1", tenant) == instance_limit
    # Renewing a live instance always works; a new one is still refused.
    live = await db.fetchval("SELECT min(instance_id) FROM agent_instances WHERE tenant = $1", tenant)
    assert (await _beat(client, mint, tenant, live, load=0.5)).status_code == 200
    assert (await _beat(client, mint, tenant, "i-new")).status_code == 409
    # Once one lapses, a new instance takes its place.
    await db.execute(
        "UPDATE agent_instances SET expires_at = now() - interval '1 second' WHERE tenant = $1 AND instance_id = $2",
        tenant,
        live,
    )
    assert (await _beat(client, mint, tenant, "i-new")).status_code == 200
    events = await db.fetchval(
        "SELECT count(*) FROM audit_events WHERE tenant = $1 AND reason = 'instance_limit'", tenant
    )
    assert events == 2 * instance_limit + 1


async def test_detail_lists_at_most_50_instances_least_loaded_first_with_the_total(client, mint, tenant, db, registry):
    await register(client, mint, tenant, "billing-agent", [skill("invoice.lookup", "2.0.0", [])])
    await db.execute(
        """INSERT INTO agent_instances (tenant, agent_id, instance_id, url, load, expires_at)
           SELECT $1, 'billing-agent', 'i-' || lpad(n::text, 4, '0'), 'https://b' || n || '.example/a2a',
                  CASE WHEN n % 7 = 0 THEN NULL ELSE (n % 97) / 100.0 END, now() + interval '10 minutes'
             FROM generate_series(1, 2500) n""",
        tenant,
    )
    registry.release_cache.clear()
    detail = await client.get(
        f"/v1/agents/{tenant}/billing-agent/skills/invoice.lookup/versions/latest", headers=mint(tenant, "r", "")
    )
    assert detail.status_code == 200, detail.text
    endpoints = detail.json()["endpoints"]
    assert endpoints["instanceCount"] == 2500 and len(endpoints["instances"]) == 50
    loads = [i["load"] for i in endpoints["instances"]]
    assert loads == sorted(loads) and loads[0] == 0.0
    assert len(detail.content) < 20_000
    # The same bound through MCP (tickets decide from the same bounded rows, registry.release.skill_records).
    reader = mint(tenant, "r", "registry:read")
    answer = await post(
        client,
        rpc("tools/call", {"name": "get_capability", "arguments": {"ref": f"{tenant}/billing-agent/invoice.lookup"}}),
        reader,
    )
    assert answer.status_code == 200 and len(answer.content) < 40_000
    structured = answer.json()["result"]["structuredContent"]
    assert structured["endpoints"] == endpoints


async def test_lapsed_leases_are_pruned_keeping_each_agents_newest(client, mint, tenant, db, registry):
    await register(client, mint, tenant, "billing-agent", [skill("invoice.lookup", "2.0.0", [])])
    for n in range(3):
        assert (await _beat(client, mint, tenant, f"i-{n}")).status_code == 200
    await db.execute(
        "UPDATE agent_instances SET expires_at = now() - make_interval(secs => 10 + substr(instance_id, 3)::int) WHERE tenant = $1",
        tenant,
    )
    assert await housekeeping_queries.prune_leases(db) >= 2
    rows = await db.fetch("SELECT instance_id FROM agent_instances WHERE tenant = $1", tenant)
    assert [r["instance_id"] for r in rows] == ["i-0"]
    registry.responses.clear()  # the update bypassed the app
    view = (await client.get(f"/v1/agents/{tenant}/billing-agent", headers=mint(tenant, "r", "registry:read"))).json()
    assert view["health"] == "stale"
