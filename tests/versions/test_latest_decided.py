""" "Latest" is decided in one place (db.capabilities.refresh_latest: at write and in the housekeeping
tick that announces a version whose effectiveAt has come) and only read elsewhere: a future-effective
version becomes latest once the tick runs, not before, and every reader (discovery with and without
`q`, the agent view, offers with and without words, a detail release of `latest`) names the same
version before the tick and after it. Time is the app's clock, stepped (the `clock` fixture); the
server's own ticks are held off while the test looks at the state before (tests.housekeeping_support)."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta

from registry.core.clock import SteppedClock
from tests.housekeeping_support import held, tick
from tests.search_support import agent, heartbeat, publish, skill

SKILL = "gadget.tune"


async def readers(client, mint, tenant: str, tag: str) -> dict[str, list[str]]:
    """The version each reader names as the latest of SKILL."""
    reader = mint(tenant, "router", "registry:read")

    async def listed(**params) -> list[str]:
        response = await client.get("/v1/capabilities", params={"tenant": tenant, "skill": SKILL, **params})
        assert response.status_code == 200, response.text
        return [item["version"] for item in response.json()["items"]]

    async def offered(**body) -> list[str]:
        response = await client.post("/v1/offers", json={"skill": SKILL, "tags": [tag], **body}, headers=reader)
        assert response.status_code == 200, response.text
        return [offer["ref"].rpartition("@")[2] for offer in response.json()["offers"]]

    view = await client.get(f"/v1/agents/{tenant}/tuner", headers=reader)
    assert view.status_code == 200, view.text
    detail = await client.get(f"/v1/agents/{tenant}/tuner/skills/{SKILL}/versions/latest", headers=reader)
    assert detail.status_code == 200, detail.text
    return {
        "discovery": await listed(),
        "ranked search": await listed(q="gadget"),
        "agent view": [s["version"] for s in view.json()["skills"] if s["id"] == SKILL],
        "offers": await offered(),
        "offers by need": await offered(need="tune a gadget"),
        "detail release": [detail.json()["version"]],
    }


def all_name(version: str) -> dict[str, list[str]]:
    return dict.fromkeys(
        ("discovery", "ranked search", "agent view", "offers", "offers by need", "detail release"), [version]
    )


async def marked(db, tenant: str) -> list[str]:
    rows = await db.fetch(
        "SELECT version FROM capability_versions WHERE tenant = $1 AND skill_id = $2 AND latest", tenant, SKILL
    )
    return [r["version"] for r in rows]


async def test_a_future_version_becomes_latest_at_the_tick_and_every_reader_agrees(client, mint, db, tenant, clock):
    tag = "latest" + secrets.token_hex(4)
    first = skill(SKILL, "Tune gadget", "Tunes a gadget.", [tag])
    await publish(client, mint, tenant, {"tuner": agent(first)})
    await heartbeat(client, mint, tenant, "tuner", "t1", load=0.1)
    effective = clock.now() + timedelta(seconds=5)
    newer = {**first, "version": "1.1.0", "effectiveAt": effective.isoformat()}
    await publish(client, mint, tenant, {"tuner": agent(first, newer)})
    assert await readers(client, mint, tenant, tag) == all_name("1.0.0")
    assert await marked(db, tenant) == ["1.0.0"]

    async with held(db) as conn:  # the server's own ticks skip until this block commits
        clock.advance(6)
        # Past its effectiveAt: in force (versions=all, an exact release), but not latest before the tick.
        every = await client.get("/v1/capabilities", params={"tenant": tenant, "skill": SKILL, "versions": "all"})
        assert [item["version"] for item in every.json()["items"]] == ["1.1.0", "1.0.0"]
        reader = mint(tenant, "router", "registry:read")
        exact = await client.get(f"/v1/agents/{tenant}/tuner/skills/{SKILL}/versions/1.1.0", headers=reader)
        assert exact.status_code == 200, exact.text
        assert await readers(client, mint, tenant, tag) == all_name("1.0.0")
        assert await marked(db, tenant) == ["1.0.0"]
        assert await tick(conn, clock) >= 1
    assert await marked(db, tenant) == ["1.1.0"]
    assert await readers(client, mint, tenant, tag) == all_name("1.1.0")

    # A write decides it too: retiring 1.1.0 brings 1.0.0 back at once, no tick needed.
    admin = mint(tenant, "admin", "registry:admin")
    retired = await client.post(f"/v1/agents/{tenant}/tuner/skills/{SKILL}/versions/1.1.0/retire", headers=admin)
    assert retired.status_code == 200, retired.text
    assert await marked(db, tenant) == ["1.0.0"]
    assert await readers(client, mint, tenant, tag) == all_name("1.0.0")


async def test_an_app_clock_behind_the_databases_still_makes_a_future_version_latest_at_its_tick(
    client, mint, db, tenant, registry
):
    """A version is published at the app's `now`, the clock its effectiveAt is judged by: with the
    app's hosts a minute behind the database's, a version effective in ten seconds is still one the
    tick announces and marks latest (published at the database's clock, it read as published after
    it took effect, and no tick ever marked it)."""
    system = registry.clock
    registry.clock = clock = SteppedClock(datetime.now(UTC) - timedelta(seconds=60))
    try:
        first = skill(SKILL, "Tune gadget", "Tunes a gadget.", ["skew" + secrets.token_hex(4)])
        await publish(client, mint, tenant, {"tuner": agent(first)})
        newer = {**first, "version": "1.1.0", "effectiveAt": (clock.now() + timedelta(seconds=10)).isoformat()}
        await publish(client, mint, tenant, {"tuner": agent(first, newer)})
        assert await marked(db, tenant) == ["1.0.0"]
        async with held(db) as conn:
            clock.advance(11)
            assert await tick(conn, clock) >= 1
        assert await marked(db, tenant) == ["1.1.0"]
    finally:
        registry.clock = system
