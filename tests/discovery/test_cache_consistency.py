"""The discovery and card cache never serves what a fresh query would not: across server processes,
right after a write on the same process, when a lease lapses or a version becomes effective, and
for callers who may not see a record."""

from __future__ import annotations

import asyncio
import copy
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from registry.core.response_cache import DEFAULT_MAX_AGE, CachedResponse, ResponseCache, expiry
from tests.conftest import example, start_server, stop_server
from tests.housekeeping_support import tick_now

ROOT = Path(__file__).parents[2]


def refs(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [item["ref"] for item in response.json()["items"]]


def new_version(card: dict, version: str) -> dict:
    card = copy.deepcopy(card)
    card["skills"] = [dict(card["skills"][0], version=version)]
    return card


# --- two server processes on one database --------------------------------------------------------


@pytest.fixture
def two_servers(database_url, tmp_path):
    servers = []
    try:
        for name in ("a", "b"):
            process, base, _ = start_server(tmp_path, database_url, log_name=f"serve-{name}.log")
            servers.append((process, base))
        yield [base for _, base in servers]
    finally:
        for process, _ in servers:
            stop_server(process)


def test_registration_on_one_process_is_discovered_on_another(two_servers, mint, tenant):
    """B's cached page and card give way to A's registration, told by the change feed's notification
    and nothing else (it comes before a cache lifetime could end). How fast is measured, not asserted here: a
    slow machine delays a notification without breaking anything (docs/performance.md)."""
    a, b = two_servers
    publisher = mint(tenant, "publisher", "registry:publish")
    card = example("billing-agent.json")
    assert httpx.put(f"{a}/v1/agents/{tenant}/billing-agent", json=card, headers=publisher).status_code == 201
    query = {"tenant": tenant, "skill": "invoice.lookup"}

    # B has the page cached (asked twice: the second answer comes from its cache).
    for _ in range(2):
        assert refs(httpx.get(f"{b}/v1/capabilities", params=query)) == [f"{tenant}/billing-agent/invoice.lookup@2.0.0"]
    etag = httpx.get(f"{b}/v1/capabilities", params=query).headers["etag"]
    assert httpx.get(f"{b}/v1/capabilities", params=query, headers={"If-None-Match": etag}).status_code == 304
    card_before = httpx.get(f"{b}/v1/agents/{tenant}/billing-agent/.well-known/agent-card.json").json()

    updated = new_version(card, "2.1.0")
    updated["skills"][0]["name"] = "Look up an invoice, faster"
    assert httpx.put(f"{a}/v1/agents/{tenant}/billing-agent", json=updated, headers=publisher).status_code == 201
    # Before B's cache lifetime ends (DEFAULT_MAX_AGE, 10 s): only the notification can have told B,
    # and a slow machine delays it by milliseconds, not seconds.
    deadline = time.monotonic() + DEFAULT_MAX_AGE - 1
    while True:
        seen = refs(httpx.get(f"{b}/v1/capabilities", params=query))
        if seen == [f"{tenant}/billing-agent/invoice.lookup@2.1.0"]:
            break
        assert time.monotonic() < deadline, f"process B still answers {seen}: the notification did not reach it"
        time.sleep(0.02)
    assert httpx.get(f"{b}/v1/capabilities", params=query, headers={"If-None-Match": etag}).status_code == 200
    card_after = httpx.get(f"{b}/v1/agents/{tenant}/billing-agent/.well-known/agent-card.json").json()
    names = {s["id"]: s["name"] for s in card_after["skills"]}
    assert (
        names["invoice.lookup"]
        == "Look up an invoice, faster"
        != {s["id"]: s["name"] for s in card_before["skills"]}["invoice.lookup"]
    )


# --- one process: read your writes, time bounds, visibility ---------------------------------------


async def test_a_write_is_visible_to_the_next_request_on_the_same_process(client, mint, tenant):
    publisher = mint(tenant, "publisher", "registry:publish")
    card = example("billing-agent.json")
    assert (await client.put(f"/v1/agents/{tenant}/billing-agent", json=card, headers=publisher)).status_code == 201
    query = {"tenant": tenant, "skill": "invoice.lookup"}
    for minor in range(1, 6):
        await client.get("/v1/capabilities", params=query)  # warm the cache
        version = f"2.{minor}.0"
        response = await client.put(
            f"/v1/agents/{tenant}/billing-agent", json=new_version(card, version), headers=publisher
        )
        assert response.status_code == 201
        assert refs(await client.get("/v1/capabilities", params=query)) == [
            f"{tenant}/billing-agent/invoice.lookup@{version}"
        ]


async def test_conditional_hit_until_something_changes(client, mint, tenant):
    publisher = mint(tenant, "publisher", "registry:publish")
    card = example("billing-agent.json")
    await client.put(f"/v1/agents/{tenant}/billing-agent", json=card, headers=publisher)
    first = await client.get("/v1/capabilities", params={"tenant": tenant})
    etag = first.headers["etag"]
    for _ in range(3):
        hit = await client.get("/v1/capabilities", params={"tenant": tenant}, headers={"If-None-Match": etag})
        assert hit.status_code == 304 and hit.headers["etag"] == etag and hit.content == b""
    await client.put(f"/v1/agents/{tenant}/billing-agent", json=new_version(card, "2.1.0"), headers=publisher)
    changed = await client.get("/v1/capabilities", params={"tenant": tenant}, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["etag"] != etag


async def test_health_turns_stale_when_the_lease_lapses_although_nothing_was_written(client, db, mint, tenant):
    publisher = mint(tenant, "publisher", "registry:publish")
    await client.put(f"/v1/agents/{tenant}/billing-agent", json=example("billing-agent.json"), headers=publisher)
    beat = await client.post(
        f"/v1/agents/{tenant}/billing-agent/heartbeat", json={"instanceId": "i-1", "ttlSeconds": 30}, headers=publisher
    )
    assert beat.status_code == 200
    # As if the 30 s had nearly passed: the lease lapses in a second, and no change is recorded when it does.
    await db.execute("UPDATE agent_instances SET expires_at = now() + interval '1 second' WHERE tenant = $1", tenant)
    query = {"tenant": tenant}

    async def health() -> set[str]:
        return {item["health"] for item in (await client.get("/v1/capabilities", params=query)).json()["items"]}

    assert await health() == {"healthy"}
    assert await health() == {"healthy"}  # from the cache
    await asyncio.sleep(1.2)  # leases are on the database's clock (registry.core.clock)
    assert await health() == {"stale"}


async def test_a_version_appears_when_it_becomes_effective(client, mint, db, tenant, clock):
    publisher = mint(tenant, "publisher", "registry:publish")
    card = example("billing-agent.json")
    await client.put(f"/v1/agents/{tenant}/billing-agent", json=card, headers=publisher)
    future = new_version(card, "2.1.0")
    future["skills"][0]["effectiveAt"] = (clock.now() + timedelta(seconds=1.5)).isoformat()
    assert (await client.put(f"/v1/agents/{tenant}/billing-agent", json=future, headers=publisher)).status_code == 201
    query = {"tenant": tenant, "skill": "invoice.lookup"}
    assert refs(await client.get("/v1/capabilities", params=query)) == [f"{tenant}/billing-agent/invoice.lookup@2.0.0"]
    assert refs(await client.get("/v1/capabilities", params=query)) == [f"{tenant}/billing-agent/invoice.lookup@2.0.0"]
    clock.advance(1.7)
    # The housekeeping tick makes it latest (db.housekeeping.announce_effective); its change drops the cache.
    await tick_now(db, clock)
    assert refs(await client.get("/v1/capabilities", params=query)) == [f"{tenant}/billing-agent/invoice.lookup@2.1.0"]


async def test_cached_answers_respect_who_is_asking(client, mint, tenant, other_tenant):
    publisher = mint(tenant, "publisher", "registry:publish")
    card = example("billing-agent.json") | {"visibility": "tenant"}
    await client.put(f"/v1/agents/{tenant}/billing-agent", json=card, headers=publisher)
    owner = mint(tenant, "router", "registry:read")
    outsider = mint(other_tenant, "router", "registry:read")
    card_path = f"/v1/agents/{tenant}/billing-agent/.well-known/agent-card.json"
    for _ in range(2):  # the second round is answered from the cache
        assert (await client.get(card_path, headers=owner)).status_code == 200
        assert (await client.get(card_path)).status_code == 404
        assert (await client.get(card_path, headers=outsider)).status_code == 404
        assert len(refs(await client.get("/v1/capabilities", params={"tenant": tenant}, headers=owner))) == 2
        assert refs(await client.get("/v1/capabilities", params={"tenant": tenant})) == []
        assert refs(await client.get("/v1/capabilities", params={"tenant": tenant}, headers=outsider)) == []
    bad = await client.get("/v1/capabilities", params={"tenant": tenant}, headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401


# --- the cache itself -----------------------------------------------------------------------------


def test_entries_built_at_an_older_sequence_are_never_stored_or_served():
    cache = ResponseCache(max_entries=2)
    entry = CachedResponse(body=b"{}", etag='"e"', seq=7, expires=100.0)
    cache.put("k", entry, seq=8)  # built before a change this process already knows of
    assert cache.get("k", 8, now=0.0) is None
    cache.put("k", entry, seq=7)
    assert cache.get("k", 7, now=0.0) is entry
    assert cache.get("k", None, now=0.0) is None  # listener down: caching off
    assert cache.get("k", 7, now=100.0) is None  # expired
    assert cache.get("k", 8, now=0.0) is None and len(cache) == 0  # the sequence moved: all dropped
    for key in ("a", "b", "c"):
        cache.put(key, CachedResponse(body=b"{}", etag='"e"', seq=8, expires=100.0), seq=8)
    assert len(cache) == 2 and cache.get("a", 8, now=0.0) is None


def test_expiry_is_the_first_future_boundary_or_max_age():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert expiry(50.0, now, [None], max_age=10) == 60.0
    assert expiry(
        50.0, now, [now + timedelta(seconds=3), now + timedelta(seconds=5), None], max_age=10
    ) == pytest.approx(52.95)
    assert expiry(50.0, now, [now - timedelta(seconds=3)], max_age=10) == 60.0
