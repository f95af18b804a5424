"""An agent's health and a lease's liveness, each defined once (issue 36): db.agents.lease_live is
the only comparison of an instance lease's expiry with the clock, db.agents.HEALTH_SQL the only
health rule, and discovery, ARD, detail (HTTP and MCP) and offers read the same answer from them."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import get_args

from db.agents import HEALTH_SQL, HEALTH_VALUES
from registry.core.records import Health
from tests.mcp_support import call
from tests.search_support import agent, heartbeat, publish, skill

ROOT = Path(__file__).parent.parent.parent
_EXPIRY_VS_CLOCK = re.compile(r"expires_at\s*(<=|>=|<|>)\s*now\(\)|now\(\)\s*(<=|>=|<|>)\s*\w*\.?expires_at")


def _statements(path: Path):
    """Every string literal of the module (an f-string as its literal parts joined)."""
    tree = ast.parse(path.read_text(), str(path))
    inside = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            yield node.lineno, "".join(p.value for p in node.values if isinstance(p, ast.Constant))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in inside:
            yield node.lineno, node.value


def test_a_lease_is_live_by_one_rule():
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for top in ("db", "registry", "bench")
        for path in sorted((ROOT / top).rglob("*.py"))
        for line, text in _statements(path)
        if "agent_instances" in text and _EXPIRY_VS_CLOCK.search(text)
    ]
    assert found == [], found


def test_health_has_one_vocabulary():
    assert get_args(Health) == HEALTH_VALUES
    assert set(re.findall(r"'(\w+)'", HEALTH_SQL)) == set(HEALTH_VALUES)


async def test_every_reader_tells_the_same_health(client, mint, tenant, db):
    lookup = skill("invoice.lookup", "Look up an invoice", "Returns one invoice.", ["finance"])
    await publish(client, mint, tenant, {a: agent(lookup, visibility="tenant") for a in ("up", "lapsed", "never")})
    await heartbeat(client, mint, tenant, "up", "i-1")
    await heartbeat(client, mint, tenant, "lapsed", "i-1")
    await db.execute(
        "UPDATE agent_instances SET expires_at = now() - interval '1 second' WHERE tenant = $1 AND agent_id = 'lapsed'",
        tenant,
    )
    expected = {"up": "healthy", "lapsed": "stale", "never": "unknown"}
    reader = mint(tenant, "router", "registry:read")
    listed = await client.get("/v1/capabilities", params={"tenant": tenant}, headers=reader)
    assert {i["agentId"]: i["health"] for i in listed.json()["items"]} == expected
    healthy = await client.get("/v1/capabilities", params={"tenant": tenant, "health": "healthy"}, headers=reader)
    assert [i["agentId"] for i in healthy.json()["items"]] == ["up"]
    for agent_id, health in expected.items():
        detail = await client.get(
            f"/v1/agents/{tenant}/{agent_id}/skills/invoice.lookup/versions/latest", headers=reader
        )
        assert detail.json()["health"] == health, agent_id
        mcp = await call(client, "get_capability", {"ref": f"{tenant}/{agent_id}/invoice.lookup"}, reader)
        assert mcp["structuredContent"]["health"] == health
        assert detail.json()["liveInstances"] == (1 if health == "healthy" else 0)
    offers = (await client.post("/v1/offers", json={"need": "look up an invoice", "limit": 20}, headers=reader)).json()
    assert [o["agent"] for o in offers["offers"] if o["agent"].startswith(f"{tenant}/")] == [f"{tenant}/up"]
    assert offers["excluded"]["unhealthy"] >= 2
