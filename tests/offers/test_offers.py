"""POST /v1/offers (docs/api.md#offers): candidates under detail release's checks, order, scores,
instances, `excluded` (never counting the invisible), audit, tickets, and bad input."""

from __future__ import annotations

import secrets

from hypothesis import given
from hypothesis import strategies as st

from registry.offers import service as offer_service
from tests.search_support import agent as public_agent
from tests.search_support import count_query_work, heartbeat, publish, skill

# Every skill here carries this tag and every request filters on it: other tests' public agents
# never meet these tests' callers, nor count in `excluded`.
TAG = "offers" + secrets.token_hex(4)


def agent(*skills, **fields):
    return public_agent(*({**s, "tags": [*s["tags"], TAG]} for s in skills), **{"visibility": "tenant", **fields})


def lookup(**fields):
    return skill("invoice.lookup", "Look up an invoice", "Returns one invoice.", ["finance"], **fields)


async def offer(client, headers, **body):
    body["tags"] = [*body.get("tags", []), TAG]
    response = await client.post("/v1/offers", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


async def events(db, tenant, type_="offer.made"):
    return await db.fetch(
        "SELECT ref, actor, outcome, scopes FROM audit_events WHERE tenant = $1 AND type = $2 ORDER BY seq",
        tenant,
        type_,
    )


async def test_order_instance_scores_and_audit(client, mint, tenant, db):
    await publish(
        client,
        mint,
        tenant,
        {
            "writer": agent(lookup(sideEffect="write")),
            "busy": agent(lookup()),
            "idle": agent(lookup(slo={"latencyP99Ms": 900})),
            "fast": agent(lookup(slo={"latencyP99Ms": 100})),
            "other": agent(skill("invoice.other", "Other", "Mentions an invoice only here.")),
        },
    )
    await heartbeat(client, mint, tenant, "writer", "w1", load=0.0)
    await heartbeat(client, mint, tenant, "busy", "b1", load=0.9)
    await heartbeat(client, mint, tenant, "idle", "i1", load=0.5)
    await heartbeat(client, mint, tenant, "idle", "i2", load=0.1)
    await heartbeat(client, mint, tenant, "fast", "f1", load=0.1)
    await heartbeat(client, mint, tenant, "other", "o1", load=0.0)
    router = mint(tenant, "router", "registry:read")
    answer = await offer(client, router, need="look up an invoice", limit=20)
    refs = [o["ref"] for o in answer["offers"]]
    # equal relevance: side effect none first, then load, then p99 latency; description-only last
    assert refs == [
        f"{tenant}/fast/invoice.lookup@1.0.0",
        f"{tenant}/idle/invoice.lookup@1.0.0",
        f"{tenant}/busy/invoice.lookup@1.0.0",
        f"{tenant}/writer/invoice.lookup@1.0.0",
        f"{tenant}/other/invoice.other@1.0.0",
    ]
    idle = answer["offers"][1]
    assert idle["instance"]["instanceId"] == "i2" and idle["instance"]["load"] == 0.1
    assert idle["agent"] == f"{tenant}/idle" and idle["id"] == "invoice.lookup" and idle["sideEffect"] == "none"
    scores = [o["score"] for o in answer["offers"]]
    assert scores == sorted(scores, reverse=True)
    for o in answer["offers"]:
        assert 0 <= o["score"] <= 1 and all(0 <= v <= 1 for v in o["why"].values())
        assert "ticket" not in o and "inputSchema" not in o
    relevances = [o["why"]["relevance"] for o in answer["offers"]]
    assert relevances[0] == max(relevances) and 0 < relevances[-1] < relevances[0]
    assert answer["excluded"] == {"scope": 0, "region": 0, "unhealthy": 0}
    made = await events(db, tenant)
    assert [e["ref"] for e in made] == refs and all(e["outcome"] == "allowed" and e["actor"] == "router" for e in made)
    limited = await offer(client, router, need="invoice", limit=2)
    assert len(limited["offers"]) == 2
    by_skill = await offer(client, router, skill="invoice.lookup")
    assert [o["id"] for o in by_skill["offers"]] == ["invoice.lookup"] * 4


async def test_excluded_counts_by_first_reason_never_the_invisible(client, mint, tenant, other_tenant):
    await publish(
        client,
        mint,
        tenant,
        {
            "scoped": agent(
                lookup(scopes=["invoice:read"], dataRegions=["us"])
            ),  # scope first, though region fails too
            "eu": agent(lookup(dataRegions=["eu"])),
            "down": agent(lookup()),
            "ok": agent(lookup(dataRegions=["us"])),
        },
    )
    await publish(client, mint, other_tenant, {"hidden": agent(lookup(scopes=["x:y"]), visibility="tenant")})
    for agent_id in ("scoped", "eu", "ok"):
        await heartbeat(client, mint, tenant, agent_id, "i1")
    router = mint(tenant, "router", "registry:read", regions=["us"])
    answer = await offer(client, router, need="invoice lookup")
    mine = [o["ref"] for o in answer["offers"]]
    assert mine == [f"{tenant}/ok/invoice.lookup@1.0.0"]
    assert answer["excluded"] == {"scope": 1, "region": 1, "unhealthy": 1}
    # the region asked for: "ok" holds only us data
    eu = await offer(
        client, mint(tenant, "router", "registry:read", regions=["us", "eu"]), need="invoice lookup", region="eu"
    )
    assert [o["agent"] for o in eu["offers"]] == [f"{tenant}/eu"] and eu["excluded"]["region"] == 1
    # the other tenant's private agent, even with scope trouble, is never counted for this caller
    assert answer["excluded"]["scope"] == 1


async def test_filters_tags_and_side_effect(client, mint, tenant):
    await publish(
        client,
        mint,
        tenant,
        {
            "a": agent(lookup(sideEffect="destructive")),
            "b": agent(skill("invoice.lookup", "Look up an invoice", "x", ["other"])),
        },
    )
    await heartbeat(client, mint, tenant, "a", "i")
    await heartbeat(client, mint, tenant, "b", "i")
    router = mint(tenant, "router", "registry:read")
    assert [o["agent"] for o in (await offer(client, router, need="invoice", sideEffectMax="write"))["offers"]] == [
        f"{tenant}/b"
    ]
    assert [o["agent"] for o in (await offer(client, router, need="invoice", tags=["finance"]))["offers"]] == [
        f"{tenant}/a"
    ]


async def test_first_offer_carries_a_ticket(client, mint, tenant, db):
    await publish(client, mint, tenant, {"billing": agent(lookup(scopes=["invoice:read"]))})
    await heartbeat(client, mint, tenant, "billing", "i1")
    router = mint(tenant, "router", "registry:read invoice:read")
    answer = await offer(
        client, router, need="invoice", ticket={"scopes": ["invoice:read"], "ttlSeconds": 120, "onBehalfOf": "user-19"}
    )
    first = answer["offers"][0]
    assert first["ticket"]["ref"] == f"{tenant}/billing/invoice.lookup@1.0.0" and first["ticket"]["scopes"] == [
        "invoice:read"
    ]
    assert "approval" not in first and "ticketError" not in first
    granted = await events(db, tenant, "ticket.granted")
    assert len(granted) == 1 and granted[0]["ref"] == first["ref"]
    # a ticket the caller may not have: the offer stands, with the refusal
    short = mint(tenant, "router", "registry:read invoice:read")
    refused = await offer(client, short, need="invoice", ticket={"scopes": ["invoice:write"]})
    assert refused["offers"][0]["ticketError"]["code"] == "delegation_denied"
    assert refused["offers"][0]["ticketError"]["reason"] == "scope_escalation"
    assert "ticket" not in refused["offers"][0]
    assert len(await events(db, tenant, "ticket.denied")) == 1


async def test_approval_instead_of_a_ticket(client, mint, tenant):
    await publish(client, mint, tenant, {"danger": agent(lookup(sideEffect="destructive", scopes=["invoice:delete"]))})
    await heartbeat(client, mint, tenant, "danger", "i1")
    answer = await offer(
        client,
        mint(tenant, "router", "registry:read invoice:delete"),
        need="invoice",
        ticket={"scopes": ["invoice:delete"]},
    )
    first = answer["offers"][0]
    assert first["requiresApproval"] is True
    assert first["approval"]["status"] == "pending" and first["approval"]["approvalId"] and "ticket" not in first


async def test_auth_and_bad_input(client, mint, tenant, db):
    assert (await client.post("/v1/offers", json={"need": "x"})).status_code == 401
    forbidden = await client.post("/v1/offers", json={"need": "x"}, headers=mint(tenant, "r", "invoice:read"))
    assert forbidden.status_code == 403 and forbidden.json()["code"] == "insufficient_scope"
    router = mint(tenant, "router", "registry:read")
    head = await db.fetchval("SELECT max(seq) FROM audit_events")
    for body, pointer in (
        ({}, "/need"),
        ({"need": ""}, "/need"),
        ({"need": "x", "limit": 0}, "/limit"),
        ({"need": "x", "limit": 21}, "/limit"),
        ({"need": "x", "sideEffectMax": "explosive"}, "/sideEffectMax"),
        ({"need": "x", "ticket": {"scopes": []}}, "/ticket/scopes"),
        ({"need": "x", "ticket": {"scopes": ["a"], "ttlSeconds": 0}}, "/ticket/ttlSeconds"),
        ({"need": "x", "ticket": {"scopes": ["a"], "audience": "t/a"}}, "/ticket"),
        ({"need": "x" * 513}, "/need"),
        ({"need": "x", "extra": 1}, ""),
    ):
        response = await client.post("/v1/offers", json=body, headers=router)
        assert response.status_code == 400, (body, response.text)
        problem = response.json()
        assert problem["code"] == "invalid_request"
        assert any(e["path"].startswith(pointer) for e in problem["errors"]), (body, problem)
    written = await db.fetch(
        "SELECT type, outcome, actor FROM audit_events WHERE seq > $1 AND actor_tenant = $2", head, tenant
    )
    assert {(e["type"], e["outcome"]) for e in written} == {("request.refused", "denied")}
    nul = await client.post(
        "/v1/offers", content=b'{"need": "a\\u0000b"}', headers={**router, "Content-Type": "application/json"}
    )
    assert nul.status_code == 400


async def test_hostile_need_is_plain_text(client, mint, tenant, monkeypatch):
    await publish(client, mint, tenant, {"billing": agent(lookup())})
    await heartbeat(client, mint, tenant, "billing", "i1")
    router = mint(tenant, "router", "registry:read")
    work = count_query_work(monkeypatch)
    for need in ("&|!():*" * 73, "x" * 500, "invoice:* & !(", "' OR 1=1 --"):
        response = await client.post("/v1/offers", json={"need": need}, headers=router)
        assert response.status_code == 200, (need, response.text)
        assert work.bounded(), (need, work.proposals, work.checked_pages)
    assert work.proposals and work.checked_pages, "the counters saw no ranked question"
    assert (await offer(client, router, need="invoice:* & !("))["offers"][0]["id"] == "invoice.lookup"


@given(
    st.lists(
        st.builds(
            offer_service.Why,
            relevance=st.floats(0, 1),
            risk=st.floats(0, 1),
            load=st.floats(0, 1),
            slo=st.floats(0, 1),
        ),
        max_size=20,
    )
)
def test_scores_are_in_unit_interval_and_non_increasing(whys):
    result = offer_service.scores(whys)
    assert all(0 <= s <= 1 for s in result)
    assert result == sorted(result, reverse=True)


async def test_an_empty_need_is_no_need(client, mint, tenant):
    """`need: ""` beside `skill` offers what `skill` alone offers, as discovery reads `q=` (it offered nothing)."""
    await publish(client, mint, tenant, {"billing": agent(lookup())})
    await heartbeat(client, mint, tenant, "billing", "i1")
    router = mint(tenant, "router", "registry:read")
    alone = await offer(client, router, skill="invoice.lookup")
    assert [o["ref"] for o in alone["offers"]] == [f"{tenant}/billing/invoice.lookup@1.0.0"]
    assert await offer(client, router, need="", skill="invoice.lookup") == alone
