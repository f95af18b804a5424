"""Offers answered from the per-process cache (registry.offers.service.eligible, least_loaded) are
what a fresh decision would answer: every committed change shows at once, loads and lapsed leases
within LEASES_MAX_AGE, each caller gets its own release profile's decision, and every answer, cached
or not, writes its `offer.made` events."""

from __future__ import annotations

import asyncio

from registry.core.response_cache import LEASES_MAX_AGE
from tests.offers.test_offers import agent, events, lookup, offer
from tests.search_support import heartbeat, publish


async def test_a_committed_change_shows_in_the_next_answer(client, mint, tenant):
    await publish(client, mint, tenant, {"billing": agent(lookup())})
    await heartbeat(client, mint, tenant, "billing", "i1")
    router = mint(tenant, "router", "registry:read")
    first = await offer(client, router, need="invoice")
    assert [o["ref"] for o in first["offers"]] == [f"{tenant}/billing/invoice.lookup@1.0.0"]
    assert (await offer(client, router, need="invoice"))["offers"] == first["offers"]  # cached, same answer
    # a new version: the latest is offered at once
    await publish(client, mint, tenant, {"billing": agent(lookup(version="1.1.0"))})
    assert [o["version"] for o in (await offer(client, router, need="invoice"))["offers"]] == ["1.1.0"]
    # a new version that needs a scope the router lacks: excluded at once
    await publish(client, mint, tenant, {"billing": agent(lookup(version="2.0.0", scopes=["invoice:read"]))})
    answer = await offer(client, router, need="invoice")
    assert answer["offers"] == [] and answer["excluded"]["scope"] == 1


async def test_each_release_profile_gets_its_own_decision(client, mint, tenant):
    await publish(client, mint, tenant, {"billing": agent(lookup(scopes=["invoice:read"], dataRegions=["eu"]))})
    await heartbeat(client, mint, tenant, "billing", "i1")
    plain = mint(tenant, "router", "registry:read")
    scoped = mint(tenant, "router", "registry:read invoice:read", regions=["eu"])
    scoped_us = mint(tenant, "router", "registry:read invoice:read", regions=["us"])
    for _ in range(2):  # the second round is answered from the cache
        assert (await offer(client, plain, need="invoice"))["excluded"]["scope"] == 1
        assert len((await offer(client, scoped, need="invoice"))["offers"]) == 1
        refused = await offer(client, scoped_us, need="invoice")
        assert refused["offers"] == [] and refused["excluded"]["region"] == 1
        assert (await offer(client, scoped, need="invoice", region="us"))["excluded"]["region"] == 1


async def test_loads_and_lapsed_leases_show_within_the_lease_age(client, mint, tenant, db):
    await publish(client, mint, tenant, {"a": agent(lookup()), "b": agent(lookup())})
    await heartbeat(client, mint, tenant, "a", "a1", load=0.1)
    await heartbeat(client, mint, tenant, "b", "b1", load=0.5)
    router = mint(tenant, "router", "registry:read")
    assert [o["agent"] for o in (await offer(client, router, need="invoice"))["offers"]] == [
        f"{tenant}/a",
        f"{tenant}/b",
    ]
    await heartbeat(client, mint, tenant, "a", "a1", load=0.9)  # a load change records no change
    await asyncio.sleep(LEASES_MAX_AGE + 0.1)
    answer = await offer(client, router, need="invoice")
    assert [o["agent"] for o in answer["offers"]] == [f"{tenant}/b", f"{tenant}/a"]
    assert answer["offers"][1]["instance"]["load"] == 0.9
    # b's lease ends (as if its time ran out): once the cached instance ages out, b is not offered
    await db.execute(
        "UPDATE agent_instances SET expires_at = now() - interval '1 second' WHERE tenant = $1 AND agent_id = 'b'",
        tenant,
    )
    await asyncio.sleep(LEASES_MAX_AGE + 0.1)
    answer = await offer(client, router, need="invoice")
    assert [o["agent"] for o in answer["offers"]] == [f"{tenant}/a"]
    assert answer["excluded"]["unhealthy"] == 1


async def test_every_answer_is_audited_cached_or_not(client, mint, tenant, db):
    await publish(client, mint, tenant, {"a": agent(lookup()), "b": agent(lookup())})
    await heartbeat(client, mint, tenant, "a", "a1")
    await heartbeat(client, mint, tenant, "b", "b1")
    router = mint(tenant, "router", "registry:read")
    for _ in range(3):
        assert len((await offer(client, router, need="invoice lookup"))["offers"]) == 2
    assert len(await events(db, tenant)) == 6


async def test_a_short_cached_decision_is_made_again_in_full(client, mint, tenant, db):
    """More equally good candidates than a cached decision keeps (KEEP), most of whose leases then
    end: the request decides afresh over all of them rather than answer short."""
    from registry.offers.service import KEEP

    agents = {f"g{i:02}": agent(lookup()) for i in range(KEEP + 5)}
    agents["z"] = agent(lookup(sideEffect="write"))  # worse than every g: after the kept groups
    await publish(client, mint, tenant, agents)
    for agent_id in agents:
        await heartbeat(client, mint, tenant, agent_id, "i1", load=0.2)
    router = mint(tenant, "router", "registry:read")
    answer = await offer(client, router, need="invoice", limit=20)
    assert len(answer["offers"]) == 20 and all(o["agent"] != f"{tenant}/z" for o in answer["offers"])
    await db.execute(
        "UPDATE agent_instances SET expires_at = now() - interval '1 second' WHERE tenant = $1 AND agent_id LIKE 'g%'",
        tenant,
    )
    await asyncio.sleep(LEASES_MAX_AGE + 0.1)
    answer = await offer(client, router, need="invoice", limit=20)
    assert [o["agent"] for o in answer["offers"]] == [f"{tenant}/z"]
    assert answer["excluded"]["unhealthy"] == KEEP + 5
