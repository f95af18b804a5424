"""The engine kept current (registry.search.index_sync) against real PostgreSQL: a second app on the
same database (a replica) builds its engine from the rows already there, then finds a version
another process published, and stops finding one hidden there, by following the change feed."""

from __future__ import annotations

import asyncio
import secrets

from tests.conftest import running_app
from tests.search_support import agent, publish, skill

# How many times a test lets the follower run (it looks every FOLLOW_INTERVAL, or on a change);
# counted, not timed: a slow machine only takes longer.
ROUNDS = 400


async def anonymous_ids(client, tenant: str, q: str) -> list[str]:
    response = await client.get("/v1/capabilities", params={"tenant": tenant, "q": q})
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


async def caught_up(replica, seq: int) -> None:
    """Until the replica's engine has applied the change sequence up to `seq` on its own (no query
    asks it to catch up)."""
    search = replica.state.registry.search
    for _ in range(ROUNDS):
        if search.seq >= seq:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the replica's engine stayed at {search.seq}, not {seq}")


async def test_a_replica_builds_from_postgresql_and_follows_the_change_feed(client, mint, tenant, settings, db):
    word = "zebu" + secrets.token_hex(3)
    await publish(client, mint, tenant, {"first": agent(skill("herd.count", "Count the herd", f"counts {word}"))})
    async with running_app(settings) as (replica, replica_client):
        # built at start-up from the rows already there
        assert await anonymous_ids(replica_client, tenant, word) == ["herd.count"]
        await publish(client, mint, tenant, {"second": agent(skill("herd.feed", "Feed the herd", f"feeds {word}"))})
        await caught_up(replica, await db.fetchval("SELECT seq FROM change_head"))
        assert sorted(await anonymous_ids(replica_client, tenant, word)) == ["herd.count", "herd.feed"]
        # hidden in the writing process: gone for anonymous callers of the replica too
        await publish(
            client,
            mint,
            tenant,
            {"second": agent(skill("herd.feed", "Feed the herd", f"feeds {word}"), visibility="tenant")},
        )
        await caught_up(replica, await db.fetchval("SELECT seq FROM change_head"))
        assert await anonymous_ids(replica_client, tenant, word) == ["herd.count"]
        reader = mint(tenant, "reader", "registry:read")
        owner_view = await replica_client.get("/v1/capabilities", params={"tenant": tenant, "q": word}, headers=reader)
        assert sorted(i["id"] for i in owner_view.json()["items"]) == ["herd.count", "herd.feed"]
