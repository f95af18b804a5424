"""No tenant can slow another through the bounded schema workers (registry.core.fair_share): while one
tenant keeps more slow-but-allowed registrations in flight than there are workers, a second
tenant's registration is served at once, not behind the first tenant's queue."""

from __future__ import annotations

import asyncio
import queue
import secrets
import threading

import pytest

from registry.core.bounded_work import WORKERS, bounded_work
from registry.core.fair_share import TenantShares, tenant_limit

# Compiling each of these Unicode patterns costs jsonschema-rs ~35 ms of CPU here: ten make a
# registration slow (a third of a second of CPU, seconds of wall time on a busy machine) but allowed.
_PATTERN = r"^[\p{L}\p{N}_]{1,64}$"


def _slow_card(salt: str) -> dict:
    properties = {f"p{i}": {"type": "string", "pattern": f"{_PATTERN}|{salt}{i}"} for i in range(10)}
    return _card({"type": "object", "properties": properties})


def _card(schema: dict) -> dict:
    return {
        "name": "Agent",
        "description": "Registers a schema.",
        "version": "1.0.0",
        "visibility": "tenant",
        "skills": [
            {
                "id": "fair.skill",
                "name": "Fair",
                "description": "d",
                "version": "1.0.0",
                "sideEffect": "none",
                "scopes": [],
                "inputSchema": schema,
            }
        ],
    }


@pytest.mark.skipif(WORKERS < 2, reason="a fair share needs more workers than one tenant's share")
async def test_a_second_tenant_registers_while_the_first_saturates_its_share(
    client, mint, tenant, other_tenant, monkeypatch
):
    pool = bounded_work()
    share = pool.shares.limit
    assert share < WORKERS
    noisy = mint(tenant, "noisy", "registry:publish")
    quiet = mint(other_tenant, "quiet", "registry:publish")
    salt = secrets.token_hex(4)  # patterns nobody compiled before, so no cache shortens them
    # Counted, not timed: whose task found every worker busy and waited for one, and how many of the
    # noisy tenant's tasks held a worker at once.
    waited: list[str] = []
    started: list[str] = []
    holding = {"noisy": 0, "peak": 0}
    local = threading.local()
    original_call, idle = pool._call, pool._idle

    def labelled_call(function, args):
        local.who = "noisy" if salt in repr(args) else "quiet"
        started.append(local.who)
        return original_call(function, args)

    class CountingIdle:
        def get(self):
            try:
                worker = idle.get_nowait()
            except queue.Empty:
                waited.append(local.who)
                worker = idle.get()
            if local.who == "noisy":
                holding["noisy"] += 1
                holding["peak"] = max(holding["peak"], holding["noisy"])
            return worker

        def put(self, worker):
            if getattr(local, "who", None) == "noisy":
                holding["noisy"] -= 1
            idle.put(worker)

        def __getattr__(self, name):
            return getattr(idle, name)

    async def register(headers: dict, agent: str, card: dict, owner: str) -> int:
        response = await client.put(f"/v1/agents/{owner}/{agent}", json=card, headers=headers)
        return response.status_code

    # A warm pool, as a registering server has: what is measured is the share, not a start-up.
    await asyncio.get_running_loop().run_in_executor(None, pool.warm)
    monkeypatch.setattr(pool, "_call", labelled_call)
    monkeypatch.setattr(pool, "_idle", CountingIdle())
    flood = [
        asyncio.create_task(register(noisy, f"slow-{i}", _slow_card(f"{salt}{i}x"), tenant)) for i in range(2 * WORKERS)
    ]
    while pool.shares.users(tenant) < len(flood):  # every noisy task holds or waits for its share
        await asyncio.sleep(0.01)
    assert await register(quiet, "quick", _card({"type": "object"}), other_tenant) == 201
    statuses = await asyncio.gather(*flood)
    assert "quiet" in started  # its registration did use a worker
    # The noisy tenant never held more workers than its share, so the quiet tenant never waited for one.
    assert holding["peak"] <= share, holding
    assert "quiet" not in waited, waited
    assert statuses == [201] * len(flood)  # slow, but allowed: all served


async def test_a_share_limits_one_tenant_and_not_the_others():
    shares = TenantShares(limit=1)
    running = {"a": 0, "b": 0}
    peak = {"a": 0, "b": 0}

    async def task(tenant: str) -> None:
        async with shares.slot(tenant):
            running[tenant] += 1
            peak[tenant] = max(peak[tenant], running[tenant])
            await asyncio.sleep(0.01)
            running[tenant] -= 1

    await asyncio.gather(*(task("a") for _ in range(5)), *(task("b") for _ in range(5)))
    assert peak == {"a": 1, "b": 1}
    assert shares.in_use() == 0  # idle tenants leave nothing behind


async def test_the_owner_is_the_verified_callers_tenant(client, mint, tenant):
    """A request's heavy work counts against its caller's tenant: the validate endpoint's task is
    seen by the pool under that tenant."""
    seen: list[str] = []
    pool = bounded_work()
    original = pool.shares.slot

    def spy(owner: str):
        seen.append(owner)
        return original(owner)

    pool.shares.slot = spy  # type: ignore[method-assign]
    try:
        headers = mint(tenant, "publisher", "registry:publish")
        response = await client.put(f"/v1/agents/{tenant}/owned", json=_card({"type": "object"}), headers=headers)
        assert response.status_code == 201, response.text
    finally:
        del pool.shares.slot
    assert seen and set(seen) == {tenant}


def test_the_limit_is_configurable():
    assert tenant_limit(2, {}) == 1 and tenant_limit(4, {}) == 2 and tenant_limit(1, {}) == 1
    assert tenant_limit(2, {"CAPREG_TENANT_HEAVY_TASKS": "2"}) == 2
    with pytest.raises(SystemExit):
        tenant_limit(2, {"CAPREG_TENANT_HEAVY_TASKS": "0"})
