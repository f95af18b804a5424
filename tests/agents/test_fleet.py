"""Fleet: heartbeat load and lease figures, batched renewals, the unchanged re-registration fast
path and the cached agent view (docs/deployment.md, docs/performance.md)."""

from __future__ import annotations

import asyncio
from datetime import datetime

from registry.core.response_cache import EVERYONE, cache_key
from tests.audit_support import ONE_ROW_PER_EVENT
from tests.conftest import example

BILLING = example("billing-agent.json")


async def register(client, mint, tenant, agent_id="billing-agent", body=BILLING, expect=(200, 201)):
    response = await client.put(
        f"/v1/agents/{tenant}/{agent_id}", json=body, headers=mint(tenant, "p", "registry:publish")
    )
    assert response.status_code in expect, response.text
    return response


async def heartbeat(client, mint, tenant, body, agent_id="billing-agent", headers=None):
    return await client.post(
        f"/v1/agents/{tenant}/{agent_id}/heartbeat", json=body, headers=headers or mint(tenant, "p", "registry:publish")
    )


async def change_head(db) -> int:
    return await db.fetchval("SELECT seq FROM change_head WHERE id = 1")


async def leases(db, tenant) -> list:
    return await db.fetch(
        "SELECT instance_id, url, load, expires_at, last_seen_at FROM agent_instances WHERE tenant = $1 ORDER BY instance_id",
        tenant,
    )


async def test_load_and_lease_figures_show_in_detail_discovery_and_the_agent_view(client, mint, tenant):
    await register(client, mint, tenant)
    view = (await client.get(f"/v1/agents/{tenant}/billing-agent")).json()
    assert view["health"] == "unknown" and view["liveInstances"] == 0
    first = await heartbeat(
        client, mint, tenant, {"instanceId": "i-1", "url": "https://b1.acme.internal", "ttlSeconds": 30, "load": 0.25}
    )
    assert first.status_code == 200, first.text
    second = await heartbeat(client, mint, tenant, {"instanceId": "i-2", "ttlSeconds": 60, "load": 1})
    assert second.status_code == 200 and second.json()["health"] == "healthy"

    reader = mint(tenant, "r", "registry:read invoice:read", regions=["eu"])
    detail = await client.get(
        f"/v1/agents/{tenant}/billing-agent/skills/invoice.lookup/versions/latest", headers=reader
    )
    assert detail.status_code == 200, detail.text
    instances = detail.json()["endpoints"]["instances"]
    assert [(i["instanceId"], i["url"], i["load"]) for i in instances] == [
        ("i-1", "https://b1.acme.internal", 0.25),
        ("i-2", None, 1.0),
    ]
    for item in instances:
        assert set(item) == {"instanceId", "url", "expiresAt", "load", "lastSeenAt"}
        assert datetime.fromisoformat(item["lastSeenAt"]) < datetime.fromisoformat(item["expiresAt"])
    assert datetime.fromisoformat(instances[0]["expiresAt"]) == datetime.fromisoformat(first.json()["expiresAt"])

    items = (await client.get("/v1/capabilities", params={"tenant": tenant})).json()["items"]
    assert items and {(i["health"], i["liveInstances"]) for i in items} == {("healthy", 2)}
    # Routers never see instance URLs or load in discovery.
    assert "b1.acme.internal" not in (await client.get("/v1/capabilities", params={"tenant": tenant})).text
    view = (await client.get(f"/v1/agents/{tenant}/billing-agent")).json()
    assert (view["health"], view["liveInstances"]) == ("healthy", 2)
    assert {s["liveInstances"] for s in view["skills"]} == {2}


async def test_discovery_health_filter_lists_only_agents_with_a_live_instance(client, mint, tenant, db, registry):
    await register(client, mint, tenant, "alive", {**BILLING})
    await register(client, mint, tenant, "silent", {**BILLING})
    await register(client, mint, tenant, "lapsed", {**BILLING})
    assert (await heartbeat(client, mint, tenant, {"instanceId": "a"}, "alive")).status_code == 200
    assert (await heartbeat(client, mint, tenant, {"instanceId": "l"}, "lapsed")).status_code == 200
    await db.execute(
        "UPDATE agent_instances SET expires_at = now() - interval '1 second' WHERE tenant = $1 AND agent_id = 'lapsed'",
        tenant,
    )
    registry.responses.clear()  # the update bypassed the app
    every = (await client.get("/v1/capabilities", params={"tenant": tenant})).json()["items"]
    assert {i["agentId"] for i in every} == {"alive", "silent", "lapsed"}
    healthy = (await client.get("/v1/capabilities", params={"tenant": tenant, "health": "healthy"})).json()["items"]
    assert {i["agentId"] for i in healthy} == {"alive"} and {i["health"] for i in healthy} == {"healthy"}
    bad = await client.get("/v1/capabilities", params={"health": "stale"})
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_request"


async def test_heartbeat_of_an_unregistered_agent_is_404_and_renews_nothing(client, mint, tenant, db):
    before = await change_head(db)
    response = await heartbeat(client, mint, tenant, {"instanceId": "i-1", "ttlSeconds": 30}, agent_id="nobody")
    assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert await leases(db, tenant) == []
    assert await change_head(db) == before


async def test_bad_heartbeats_each_get_their_error_and_renew_nothing(client, mint, tenant, other_tenant, db):
    await register(client, mint, tenant)
    assert (
        await heartbeat(client, mint, tenant, {"instanceId": "i-1", "ttlSeconds": 30, "load": 0.5})
    ).status_code == 200
    kept = await leases(db, tenant)
    for body in (
        {"instanceId": "i-1", "ttlSeconds": 4},
        {"instanceId": "i-1", "ttlSeconds": 3601},
        {"instanceId": "i-1", "load": -0.01},
        {"instanceId": "i-1", "load": 1.01},
        {"instanceId": "i-1", "load": "high"},
        {"instanceId": "i-1", "load": [0.5]},
        {"instanceId": "i-1", "load": {"cpu": 0.5}},
        {"instanceId": "i-1", "load": "0.5"},
        {"instanceId": "i-1", "load": True},
        {"instanceId": "i-1", "ttlSeconds": "30"},
        {"instanceId": "i-1", "ttlSeconds": 30.5},
        {"instanceId": "i-1", "unknown": 1},
        {"instanceId": "i-1", "url": "https://x.example/\u0000"},
        {"instanceId": "i\u00001"},
    ):
        response = await heartbeat(client, mint, tenant, body)
        assert response.status_code == 400 and response.json()["code"] == "invalid_request", (body, response.text)
    # Another tenant's agent: 403 tenant_mismatch when it can see it (public), 404 when it cannot.
    foreign = await heartbeat(
        client, mint, tenant, {"instanceId": "i-1"}, headers=mint(other_tenant, "p", "registry:publish")
    )
    assert foreign.status_code == 403 and foreign.json()["code"] == "tenant_mismatch"
    await register(client, mint, tenant, "private-agent", {**BILLING, "visibility": "tenant"})
    hidden = await heartbeat(
        client,
        mint,
        tenant,
        {"instanceId": "i-1"},
        "private-agent",
        headers=mint(other_tenant, "p", "registry:publish"),
    )
    assert hidden.status_code == 404
    unscoped = await heartbeat(client, mint, tenant, {"instanceId": "i-1"}, headers=mint(tenant, "p", "registry:read"))
    assert unscoped.status_code == 403 and unscoped.json()["code"] == "insufficient_scope"
    assert await leases(db, tenant) == kept


async def test_concurrent_heartbeats_share_batches_and_advance_the_feed_only_when_health_flips(
    client, mint, tenant, db
):
    for agent_id in ("a1", "a2", "a3"):
        await register(client, mint, tenant, agent_id)
    publish = mint(tenant, "p", "registry:publish")
    before = await change_head(db)
    bodies = [
        (agent_id, {"instanceId": f"i-{n}", "ttlSeconds": 30, "load": n / 20})
        for n in range(20)
        for agent_id in ("a1", "a2", "a3", "ghost")
    ]
    answers = await asyncio.gather(
        *[heartbeat(client, mint, tenant, body, agent_id, headers=publish) for agent_id, body in bodies]
    )
    assert [r.status_code for r in answers] == [404 if agent_id == "ghost" else 200 for agent_id, _ in bodies]
    assert len(await leases(db, tenant)) == 60
    flips = await db.fetch("SELECT kind, ref FROM changes WHERE seq > $1 AND tenant = $2", before, tenant)
    # Three agents became healthy: at least one change each (concurrent batches may both see it), no more
    # than one per batch, and no change at all for the ghost.
    assert {r["ref"] for r in flips} == {f"{tenant}/a1", f"{tenant}/a2", f"{tenant}/a3"}
    assert {r["kind"] for r in flips} == {"agent.health"}
    settled = await change_head(db)
    again = await asyncio.gather(
        *[heartbeat(client, mint, tenant, body, agent_id, headers=publish) for agent_id, body in bodies[:30]]
    )
    assert all(r.status_code in (200, 404) for r in again)
    assert await db.fetchval("SELECT count(*) FROM changes WHERE seq > $1 AND tenant = $2", settled, tenant) == 0


async def test_a_renewal_batch_commits_without_waiting_for_its_wal_unless_health_flips(client, mint, tenant, db):
    """Renewals are not audited grants: their commit skips the WAL flush (docs/deployment.md), but a
    batch that logs a health flip (a change-feed seq, never to be handed out twice) stays durable.
    Run inside an outer transaction, so the setting the batch leaves for its commit can be read."""
    from db.agents import LeaseRenewal, renew_leases
    from db.changes import CHANGE_CHANNEL

    await register(client, mint, tenant)

    async def commit_setting(instance_id: str) -> tuple[str, bool]:
        async with db.acquire() as conn, conn.transaction():
            renewed = await renew_leases(
                conn,
                [LeaseRenewal(tenant, "billing-agent", instance_id, None, 30, None)],
                CHANGE_CHANNEL,
                max_instances=1000,
            )
            flipped = renewed[0].change_seq is not None
            return await conn.fetchval("SELECT current_setting('synchronous_commit')"), flipped

    default = await db.fetchval("SELECT current_setting('synchronous_commit')")
    assert await commit_setting("i-1") == (default, True)  # unknown to healthy: durable
    assert await commit_setting("i-1") == ("off", False)  # a renewal
    assert await commit_setting("i-2") == ("off", False)  # a new instance of a healthy agent
    assert await db.fetchval("SELECT current_setting('synchronous_commit')") == default  # local to the batch


async def test_the_one_statement_path_renews_only_live_leases_and_commits_on_its_own(client, mint, tenant, db):
    """db.agents.renew_live_leases: a lease live beyond the lapse margin is renewed (url kept when
    none is sent, load replaced); one within the margin, a lapsed one and a missing one are left to
    renew_leases (absent from the answer, untouched, nothing inserted); the change is committed when
    the call returns, outside any transaction."""
    from db.agents import LeaseRenewal, renew_live_leases

    await register(client, mint, tenant)
    for instance_id in ("live", "closing", "lapsed"):
        answer = await heartbeat(
            client,
            mint,
            tenant,
            {"instanceId": instance_id, "url": f"https://{instance_id}.acme.internal", "ttlSeconds": 30},
        )
        assert answer.status_code == 200, answer.text
    await db.execute(
        "UPDATE agent_instances SET expires_at = now() + interval '2 seconds' WHERE tenant = $1 AND instance_id = 'closing'",
        tenant,
    )
    await db.execute(
        "UPDATE agent_instances SET expires_at = now() - interval '1 second' WHERE tenant = $1 AND instance_id = 'lapsed'",
        tenant,
    )
    before = {row["instance_id"]: row for row in await leases(db, tenant)}
    async with db.acquire() as conn:
        renewed = await renew_live_leases(
            conn,
            [
                LeaseRenewal(tenant, "billing-agent", instance_id, None, 90, 0.5)
                for instance_id in ("closing", "lapsed", "live", "missing")
            ],
        )
        assert not conn.is_in_transaction()
    assert [(r.instance_id, r.change_seq) for r in renewed] == [("live", None)]
    after = {row["instance_id"]: row for row in await leases(db, tenant)}  # another connection: committed
    assert set(after) == {"live", "closing", "lapsed"}
    assert after["live"]["expires_at"] == renewed[0].expires_at > before["live"]["expires_at"]
    assert (after["live"]["url"], after["live"]["load"]) == ("https://live.acme.internal", 0.5)
    for instance_id in ("closing", "lapsed"):
        assert after[instance_id] == before[instance_id]
    # Its commit does not wait for the WAL flush either (read inside an outer transaction, where the
    # statement's local setting outlives it).
    async with db.acquire() as conn, conn.transaction():
        again = await renew_live_leases(conn, [LeaseRenewal(tenant, "billing-agent", "live", None, 90, None)])
        assert [r.instance_id for r in again] == ["live"]
        assert await conn.fetchval("SELECT current_setting('synchronous_commit')") == "off"


async def test_a_steady_heartbeat_takes_the_one_statement_path_and_a_stale_hint_the_full_one(
    client, mint, tenant, db, monkeypatch
):
    """The second heartbeat of an instance this process renewed is one statement (renew_leases is not
    called); when its lease lapsed meanwhile in the database (the hint is stale), the same heartbeat
    is renewed by renew_leases, which logs the agent's health flip back to healthy."""
    import db.leases as lease_batches

    calls = []
    original = lease_batches.renew_leases

    async def counting(conn, renewals, *args, **kwargs):
        calls.append([r.instance_id for r in renewals])
        return await original(conn, renewals, *args, **kwargs)

    monkeypatch.setattr(lease_batches, "renew_leases", counting)
    await register(client, mint, tenant)
    body = {"instanceId": "i-1", "ttlSeconds": 30}
    assert (await heartbeat(client, mint, tenant, body)).status_code == 200
    assert calls == [["i-1"]]  # a new instance: the full statement
    flips = await db.fetchval("SELECT count(*) FROM changes WHERE tenant = $1 AND kind = 'agent.health'", tenant)
    assert flips == 1
    steady = await heartbeat(client, mint, tenant, {**body, "load": 0.7})
    assert steady.status_code == 200 and steady.json()["health"] == "healthy"
    assert calls == [["i-1"]]  # renewed by the one statement
    assert (await leases(db, tenant))[0]["load"] == 0.7

    await db.execute("UPDATE agent_instances SET expires_at = now() - interval '1 second' WHERE tenant = $1", tenant)
    revived = await heartbeat(client, mint, tenant, body)
    assert revived.status_code == 200 and revived.json()["health"] == "healthy"
    assert calls == [["i-1"], ["i-1"]]
    assert await db.fetchval("SELECT count(*) FROM changes WHERE tenant = $1 AND kind = 'agent.health'", tenant) == 2
    view = (await client.get(f"/v1/agents/{tenant}/billing-agent")).json()
    assert view["health"] == "healthy" and view["liveInstances"] == 1


async def test_the_same_instance_twice_in_one_batch_is_renewed_once(client, mint, tenant, db):
    await register(client, mint, tenant)
    publish = mint(tenant, "p", "registry:publish")
    answers = await asyncio.gather(
        *[
            heartbeat(client, mint, tenant, {"instanceId": "i-1", "ttlSeconds": 30, "load": 0.1 * n}, headers=publish)
            for n in range(8)
        ]
    )
    assert {r.status_code for r in answers} == {200}
    assert len(await leases(db, tenant)) == 1


async def test_heartbeats_write_no_audit_events(client, mint, tenant, db):
    await register(client, mint, tenant)
    head = await db.fetchval("SELECT coalesce(max(seq), 0) FROM audit_events")
    for n in range(3):
        assert (await heartbeat(client, mint, tenant, {"instanceId": f"i-{n}"})).status_code == 200
    assert await db.fetchval("SELECT count(*) FROM audit_events WHERE seq > $1 AND tenant = $2", head, tenant) == 0


async def test_unchanged_re_registration_skips_the_write_path(client, mint, tenant, db, registry, monkeypatch):
    first = await register(client, mint, tenant)
    assert first.status_code == 201
    calls = []
    original = registry.writes.run

    async def counting(write):
        calls.append(write)
        return await original(write)

    monkeypatch.setattr(registry.writes, "run", counting)
    changes, audit = await change_head(db), await db.fetchval("SELECT coalesce(max(seq), 0) FROM audit_events")
    again = await register(client, mint, tenant)
    assert again.status_code == 200
    body = again.json()
    assert body["published"] == [] and body["unchanged"] == [
        {"id": s["id"], "version": s["version"]} for s in BILLING["skills"]
    ]
    assert body["agent"] == first.json()["agent"]
    assert calls == []
    # The same content in other bytes takes the full path once (changing nothing), then is the fast one.
    reordered = {key: BILLING[key] for key in reversed(list(BILLING))}
    assert (await register(client, mint, tenant, body=reordered)).status_code == 200
    assert len(calls) == 1
    assert (await register(client, mint, tenant, body=reordered)).json()["unchanged"] == body["unchanged"]
    assert len(calls) == 1
    assert await change_head(db) == changes
    assert await db.fetchval("SELECT coalesce(max(seq), 0) FROM audit_events") == audit

    # Authorization is still decided first: another tenant's token and a token without the scope are refused and audited.
    other = await client.put(
        f"/v1/agents/{tenant}/billing-agent", json=BILLING, headers=mint("someone-else", "p", "registry:publish")
    )
    assert other.status_code == 403 and other.json()["code"] == "tenant_mismatch"
    unscoped = await client.put(
        f"/v1/agents/{tenant}/billing-agent", json=BILLING, headers=mint(tenant, "p", "registry:read")
    )
    assert unscoped.status_code == 403 and unscoped.json()["code"] == "insufficient_scope"
    denied = await db.fetchval(
        "SELECT count(*) FROM audit_events WHERE seq > $1 AND tenant = $2 AND outcome = 'denied' AND "
        + ONE_ROW_PER_EVENT,
        audit,
        tenant,
    )
    assert denied == 2


async def test_a_changed_card_then_the_old_one_again_goes_through_the_write_path(client, mint, tenant, db):
    await register(client, mint, tenant)
    renamed = {**BILLING, "description": "Now also refunds"}
    assert (await register(client, mint, tenant, body=renamed)).json()["agent"]["description"] == "Now also refunds"
    back = await register(client, mint, tenant)
    assert back.status_code == 200 and back.json()["agent"]["description"] == BILLING["description"]
    assert await db.fetchval("SELECT description FROM agents WHERE tenant = $1", tenant) == BILLING["description"]
    # A conflicting body is still refused after an unchanged one was answered fast.
    conflicting = {**BILLING, "skills": [{**BILLING["skills"][0], "description": "different content"}]}
    refused = await register(client, mint, tenant, body=conflicting, expect=(409,))
    assert refused.json()["code"] == "version_conflict"


async def test_the_agent_view_is_cached_and_moves_with_writes(client, mint, tenant, registry):
    await register(client, mint, tenant, body={**BILLING, "visibility": "tenant"})
    reader = mint(tenant, "r", "registry:read")
    first = await client.get(f"/v1/agents/{tenant}/billing-agent", headers=reader)
    assert first.status_code == 200
    assert (
        registry.responses.get(
            cache_key("agent-view", EVERYONE, tenant, "billing-agent"), registry.watcher.cache_seq(), 0
        )
        is not None
    )
    # Cached, but the visibility check runs on every request.
    assert (await client.get(f"/v1/agents/{tenant}/billing-agent")).status_code == 404
    assert (
        await client.get(f"/v1/agents/{tenant}/billing-agent", headers=mint("elsewhere", "r", "registry:read"))
    ).status_code == 404
    await register(client, mint, tenant, body={**BILLING, "visibility": "public", "description": "public now"})
    public = await client.get(f"/v1/agents/{tenant}/billing-agent")
    assert public.status_code == 200 and public.json()["description"] == "public now"
    # A heartbeat that makes the agent healthy is a change: the cached view follows at once.
    assert (await heartbeat(client, mint, tenant, {"instanceId": "i-1"})).status_code == 200
    assert (await client.get(f"/v1/agents/{tenant}/billing-agent")).json()["health"] == "healthy"


def test_the_live_lease_hints_are_bounded_and_keep_the_newest(monkeypatch):
    """A fleet larger than LIVE_HINTS_MAX costs no more memory: the least recently renewed are
    forgotten (they take the full statement again), a refused lease is never remembered."""
    import db.leases as lease_batches
    from db.agents import LeaseRenewal, RenewedLease

    monkeypatch.setattr(lease_batches, "LIVE_HINTS_MAX", 3)
    queue = lease_batches.LeaseRenewals(None)  # no pool: no statement runs here
    expiry = datetime.now()
    for n in range(5):
        key = ("acme", "billing-agent", f"i-{n}")
        queue._remember_live([RenewedLease(*key, expiry, None)], {key: LeaseRenewal(*key, None, 30, None)}, 100.0)
    refused = ("acme", "billing-agent", "i-full")
    queue._remember_live([RenewedLease(*refused, None, None)], {refused: LeaseRenewal(*refused, None, 30, None)}, 100.0)
    assert list(queue._live_until) == [hash(("acme", "billing-agent", f"i-{n}")) for n in (2, 3, 4)]
    assert set(queue._live_until.values()) == {130.0}
