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
    # A worker sheds reads beyond its bound with a retryable 503 (registry.core.read_admission): on a
    # loaded machine twelve reads on a two-connection pool can meet it. Retried as a client would;
    # a deadlock still never answers (the test's timeout).
    for _ in range(20):
        response = await client.get("/v1/capabilities", params={"tenant": tenant, "q": q})
        if response.status_code != 503:
            break
        await asyncio.sleep(float(response.headers.get("retry-after", "0.05")) / 20)
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


async def test_ranked_requests_that_fill_the_pool_never_wait_on_each_other(client, mint, tenant, settings):
    """A request that finds the engine behind catches it up through its own connection: with every
    pool connection held by ranked requests and the engine behind, all of them still answer (before,
    each waited for a second connection that the others held: a deadlock)."""
    import msgspec

    word = "yak" + secrets.token_hex(3)
    await publish(client, mint, tenant, {"yaks": agent(skill("yak.shave", "Shave a yak", f"shaves {word}"))})
    async with running_app(msgspec.structs.replace(settings, pool_min=1, pool_max=2)) as (replica, replica_client):
        replica.state.registry.search.seq = 0  # behind: every change is still to apply
        answers = await asyncio.gather(*(anonymous_ids(replica_client, tenant, f"{word} {i}") for i in range(12)))
        assert all(ids == ["yak.shave"] for ids in answers)
