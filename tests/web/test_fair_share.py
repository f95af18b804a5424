"""No tenant can slow another through the bounded schema workers (registry.core.fair_share): while one
tenant keeps more slow-but-allowed registrations in flight than there are workers, a second
tenant's registration is served at once, not behind the first tenant's queue."""

from __future__ import annotations

import asyncio
import secrets
import time

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
                "inputSchema": schema,
            }
        ],
    }


@pytest.mark.skipif(WORKERS < 2, reason="a fair share needs more workers than one tenant's share")
async def test_a_second_tenant_registers_while_the_first_saturates_its_share(client, mint, tenant, other_tenant):
    assert bounded_work().shares.limit < WORKERS
    noisy = mint(tenant, "noisy", "registry:publish")
    quiet = mint(other_tenant, "quiet", "registry:publish")
    finished: list[tuple[str, float, int]] = []

    async def register(who: str, headers: dict, agent: str, card: dict, owner: str) -> None:
        response = await client.put(f"/v1/agents/{owner}/{agent}", json=card, headers=headers)
        finished.append((who, time.monotonic(), response.status_code))

    # A warm pool, as a registering server has: what is measured is the share, not a start-up.
    await asyncio.get_running_loop().run_in_executor(None, bounded_work().warm)
    salt = secrets.token_hex(4)  # patterns nobody compiled before, so no cache shortens them
    flood = [
        asyncio.create_task(register("noisy", noisy, f"slow-{i}", _slow_card(f"{salt}{i}x"), tenant))
        for i in range(2 * WORKERS)
    ]
    await asyncio.sleep(0.3)  # the flood is queued first
    await register("quiet", quiet, "quick", _card({"type": "object"}), other_tenant)
    await asyncio.gather(*flood)
    order = [who for who, _, _ in sorted(finished, key=lambda item: item[1])]
    # Only what the noisy tenant already had running in its share may finish first (its first
    # registration is one schema task since a new agent needs no comparison); never one it queued.
    assert order.index("quiet") <= bounded_work().shares.limit, order
    assert all(status == 201 for _, _, status in finished), finished  # slow, but allowed: all served


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
