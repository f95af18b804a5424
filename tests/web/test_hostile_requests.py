"""Hostile requests through the real server: one request can never fail, slow down or hide another,
and refusals of unauthenticated callers cannot grow the audit chain (docs/security.md).

- Values PostgreSQL cannot store (NUL) in a body, a path, a query or a header are the sender's own
  400 `invalid_request`, decided before anything is written; an authenticated sender's refusal is
  audited (`request.refused`, the value escaped), an anonymous one's is not.
- Bodies are typed strictly on every endpoint.
- 401s are never audited; they are counted in /metrics.
- Audit events carry the server's request id beside the client's (collidable) trace id.
"""

from __future__ import annotations

import asyncio
import secrets

import httpx
import pytest

from tests.conftest import example
from tests.ticket_support import register_finance, ticket_body, traced

ROUTER_SCOPES = "invoice:read invoice:list"


@pytest.fixture(scope="module")
def server(live_server):
    base, _env, _home = live_server
    return base


@pytest.fixture
async def http(server):
    async with httpx.AsyncClient(base_url=server, timeout=30) as client:
        yield client


async def refusals_of(db, trace_id: str) -> list[dict]:
    rows = await db.fetch(
        "SELECT type, outcome, reason, tenant, actor_tenant, actor, actor_issuer, ref, request_id FROM audit_events "
        "WHERE trace_id = $1 ORDER BY seq",
        trace_id,
    )
    return [dict(r) for r in rows]


# ---------------------------------------------------------------------------
# One request cannot fail another


async def test_a_poisoned_request_fails_alone_among_100_concurrent_ones(http, mint, db, tenant):
    """A NUL in a ticket request's version and in a lifecycle path used to abort the shared commit
    batch: the others' detail releases and ticket mints failed, and the refusals were never recorded."""
    await register_finance(http, mint, tenant)
    router = mint(tenant, "router", ROUTER_SCOPES, regions=["eu"])
    admin = mint(tenant, "admin", "registry:admin")
    detail = f"/v1/agents/{tenant}/billing-agent/skills/invoice.lookup/versions/2.0.0"

    def legitimate(i: int):
        if i % 2:
            return http.get(detail, headers=router)
        return http.post("/v1/tickets", json=ticket_body(tenant), headers=router)

    poisons = {
        "ticket version": lambda h: http.post(
            "/v1/tickets", json=ticket_body(tenant, version="2.0.0\u0000"), headers={**router, **h}
        ),
        "ticket resources": lambda h: http.post(
            "/v1/tickets", json=ticket_body(tenant, resources=["a\u0000"]), headers={**router, **h}
        ),
        "lifecycle path": lambda h: http.post(
            f"/v1/agents/{tenant}/billing-agent/skills/invoice.lookup/versions/%00/retire", headers={**admin, **h}
        ),
        "registration body": lambda h: http.put(
            f"/v1/agents/{tenant}/billing-agent",
            headers={**mint(tenant, "p", "registry:publish"), **h},
            json={**example("billing-agent.json"), "description": "x\u0000y"},
        ),
        "deprecation message": lambda h: http.post(
            f"{detail}/deprecate", json={"message": "\u0000"}, headers={**admin, **h}
        ),
    }
    traces = {}
    calls = [legitimate(i) for i in range(100)]
    for label, poison in poisons.items():
        headers, traces[label] = traced()
        calls.insert(len(calls) // 2, poison(headers))
    answers = await asyncio.gather(*calls)
    poisoned = [a for a in answers if a.status_code == 400]
    fine = [a for a in answers if a.status_code in (200, 201)]
    assert len(fine) == 100, sorted({(a.status_code, a.text[:200]) for a in answers if a.status_code not in (200, 201)})
    assert len(poisoned) == len(poisons)
    assert all(a.json()["code"] == "invalid_request" for a in poisoned)
    assert await db.fetchval("SELECT count(*) FROM tickets WHERE tenant = $1", tenant) == 50
    assert (
        await db.fetchval(
            "SELECT status FROM capability_versions WHERE tenant = $1 AND skill_id = 'invoice.lookup'", tenant
        )
        == "active"
    )
    # Every refusal is in the audit log, the offending value escaped, with the server's request id.
    for label, trace in traces.items():
        events = await refusals_of(db, trace)
        assert len(events) == 1 and events[0]["outcome"] == "denied", (label, events)
        assert events[0]["actor_tenant"] == tenant and events[0]["actor_issuer"] == "capreg" and events[0]["request_id"]
        assert "\x00" not in repr(events[0])
    retire = (await refusals_of(db, traces["lifecycle path"]))[0]
    assert retire["type"] == "request.refused" and retire["tenant"] == tenant
    assert "\\u0000" in retire["ref"]
    assert (await refusals_of(db, traces["ticket version"]))[0]["reason"].startswith("invalid_request")


async def test_nul_in_a_header_is_refused_before_the_handler(client, mint, db, tenant):
    """HTTP/1.1 servers refuse a NUL in a header themselves (the live server's client cannot even send
    one); behind other front ends the app refuses it too, audited for an authenticated caller."""
    await register_finance(client, mint, tenant)
    headers, trace = traced({**mint(tenant, "router", ROUTER_SCOPES), "Idempotency-Key": "k\x00"})
    response = await client.post("/v1/tickets", json=ticket_body(tenant), headers=headers)
    assert response.status_code == 400 and response.json()["errors"][0]["path"] == "header:idempotency-key"
    assert [(e["type"], e["reason"]) for e in await refusals_of(db, trace)] == [
        ("request.refused", "invalid_request: header:idempotency-key")
    ]
    assert await db.fetchval("SELECT count(*) FROM tickets WHERE tenant = $1", tenant) == 0


@pytest.mark.parametrize("where", ["path", "query"])
async def test_anonymous_nul_is_400_and_not_audited(http, db, where):
    head = await db.fetchval("SELECT coalesce(max(seq), 0) FROM audit_events")
    url = "/v1/agents/x%00y/billing-agent" if where == "path" else "/v1/capabilities?q=in%00voice"
    response = await http.get(url)
    assert response.status_code == 400 and response.json()["code"] == "invalid_request"
    assert response.json()["errors"][0]["path"] == where
    assert await db.fetchval("SELECT coalesce(max(seq), 0) FROM audit_events") == head


async def test_nul_deep_in_a_body_is_pointed_at(http, mint, db, tenant):
    body = {**example("billing-agent.json")}
    body["skills"] = [{**body["skills"][0], "tags": ["ok", "b\u0000d"]}]
    response = await http.put(
        f"/v1/agents/{tenant}/billing-agent", json=body, headers=mint(tenant, "p", "registry:publish")
    )
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "/skills/0/tags/1"
    assert await db.fetchval("SELECT count(*) FROM agents WHERE tenant = $1", tenant) == 0


async def test_client_trace_ids_may_collide_the_server_request_id_does_not(http, mint, db, tenant):
    await register_finance(http, mint, tenant)
    router = mint(tenant, "router", ROUTER_SCOPES, regions=["eu"])
    headers, trace = traced(router)
    detail = f"/v1/agents/{tenant}/billing-agent/skills/invoice.lookup/versions/2.0.0"
    first, second = await http.get(detail, headers=headers), await http.get(detail, headers=headers)
    assert first.headers["x-trace-id"] == second.headers["x-trace-id"] == trace
    ids = [e["request_id"] for e in await refusals_of(db, trace)]
    assert sorted(ids) == sorted([first.headers["x-request-id"], second.headers["x-request-id"]]) and ids[0] != ids[1]


# ---------------------------------------------------------------------------
# Strict body types


NOT_INTEGERS = ["30", 30.0, True, 30.5]


@pytest.mark.parametrize("value", NOT_INTEGERS)
async def test_heartbeat_ttl_must_be_an_integer(http, mint, tenant, value):
    await register_finance(http, mint, tenant)
    response = await http.post(
        f"/v1/agents/{tenant}/billing-agent/heartbeat",
        json={"instanceId": "i-1", "ttlSeconds": value},
        headers=mint(tenant, "billing-agent", "registry:publish"),
    )
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "invalid_request" and response.json()["errors"][0]["path"] == "/ttlSeconds"


@pytest.mark.parametrize("field", ["ttlSeconds", "maxDepth"])
@pytest.mark.parametrize("value", NOT_INTEGERS)
async def test_ticket_integers_must_be_integers(http, mint, tenant, db, field, value):
    await register_finance(http, mint, tenant)
    response = await http.post(
        "/v1/tickets", json=ticket_body(tenant, **{field: value}), headers=mint(tenant, "router", ROUTER_SCOPES)
    )
    assert response.status_code == 400 and response.json()["errors"][0]["path"] == f"/{field}"
    assert await db.fetchval("SELECT count(*) FROM tickets WHERE tenant = $1", tenant) == 0


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/compatibility", {"old": 1, "new": 2}),
        ("/v1/tickets/introspect", {"ticket": 5}),
        ("/v1/tickets", []),
    ],
)
async def test_every_body_is_typed_strictly(http, mint, tenant, path, body):
    response = await http.post(path, json=body, headers=mint(tenant, "router", ROUTER_SCOPES))
    assert response.status_code == 400 and response.json()["code"] == "invalid_request"


# ---------------------------------------------------------------------------
# Unauthenticated refusals: counted, never audited


def auth_failures(metrics_text: str) -> dict[str, float]:
    counts = {}
    for line in metrics_text.splitlines():
        if line.startswith("capreg_auth_failures_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            counts[reason] = float(line.rsplit(" ", 1)[1])
    return counts


async def test_garbage_tokens_do_not_grow_the_audit_chain(http, mint, db, tenant):
    await register_finance(http, mint, tenant)
    head = await db.fetchval("SELECT coalesce(max(seq), 0) FROM audit_events")
    before = auth_failures((await http.get("/metrics")).text)
    garbage = [{"Authorization": f"Bearer {secrets.token_urlsafe(40)}"} for _ in range(40)]
    calls = [http.post("/v1/tickets", json=ticket_body(tenant), headers=h) for h in garbage]
    calls += [
        http.get(f"/v1/agents/{tenant}/billing-agent/skills/invoice.lookup/versions/2.0.0", headers=h)
        for h in garbage[:10]
    ]
    calls += [
        http.post(f"/v1/agents/{tenant}/billing-agent/skills/invoice.lookup/versions/2.0.0/retire", headers=h)
        for h in garbage[:10]
    ]
    calls += [http.post("/v1/tickets", json=ticket_body(tenant)) for _ in range(5)]  # no token at all
    answers = await asyncio.gather(*calls)
    assert {a.status_code for a in answers} == {401}
    assert await db.fetchval("SELECT coalesce(max(seq), 0) FROM audit_events") == head
    after = auth_failures((await http.get("/metrics")).text)
    assert after.get("malformed", 0) - before.get("malformed", 0) == 60
    assert after.get("missing", 0) - before.get("missing", 0) == 5
