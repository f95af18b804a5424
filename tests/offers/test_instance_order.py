"""The one least-loaded-instance order (db.agents.LEAST_LOADED_ORDER_SQL, issue 36): detail's
instance list (HTTP and MCP) and an offer's `instance` (HTTP and MCP) name the same instance for the
same agent and leases, and no second copy of the order is written anywhere in db/ or registry/."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

from tests.mcp_support import call
from tests.search_support import agent, publish, skill

ROOT = Path(__file__).parent.parent.parent
TAG = "order" + secrets.token_hex(4)

# (instance, load, seconds since its last heartbeat), and the order every answer must list them in:
# lower load first, none sent after every one sent (even 1.0), ties by the latest heartbeat.
LEASES = {
    "tie": [("i-a", 0.2, 30), ("i-b", 0.2, 1), ("i-none", None, 0), ("i-full", 1.0, 20)],
    "unloaded": [("i-none", None, 0), ("i-full", 1.0, 20)],
}
EXPECTED = {"tie": ["i-b", "i-a", "i-full", "i-none"], "unloaded": ["i-full", "i-none"]}


def lookup() -> dict:
    return skill("invoice.lookup", "Look up an invoice", "Returns one invoice.", ["finance", TAG])


async def test_detail_and_offers_name_the_same_least_loaded_instance(client, mint, tenant, db):
    await publish(client, mint, tenant, {agent_id: agent(lookup(), visibility="tenant") for agent_id in LEASES})
    for agent_id, leases in LEASES.items():
        for instance_id, load, age in leases:
            await db.execute(
                """INSERT INTO agent_instances (tenant, agent_id, instance_id, url, load, expires_at, last_seen_at)
                   VALUES ($1, $2, $3, 'https://x.example/' || $3, $4, now() + interval '10 minutes',
                           now() - make_interval(secs => $5))""",
                tenant,
                agent_id,
                instance_id,
                load,
                float(age),
            )
    reader = mint(tenant, "router", "registry:read")
    need = {"need": f"look up an invoice {TAG}", "limit": 20}
    offers = await client.post("/v1/offers", json=need, headers=reader)
    assert offers.status_code == 200, offers.text
    mcp_offers = await call(client, "find_capability", need, reader)
    assert mcp_offers["isError"] is False, mcp_offers

    def by_agent(answer: dict) -> dict[str, str]:
        return {
            o["agent"].removeprefix(f"{tenant}/"): o["instance"]["instanceId"]
            for o in answer["offers"]
            if o["agent"].startswith(f"{tenant}/")
        }

    offered, mcp_offered = by_agent(offers.json()), by_agent(mcp_offers["structuredContent"])
    assert set(offered) == set(LEASES)
    for agent_id, expected in EXPECTED.items():
        detail = await client.get(
            f"/v1/agents/{tenant}/{agent_id}/skills/invoice.lookup/versions/latest", headers=reader
        )
        assert detail.status_code == 200, detail.text
        listed = [i["instanceId"] for i in detail.json()["endpoints"]["instances"]]
        ref = f"{tenant}/{agent_id}/invoice.lookup"
        mcp = await call(client, "get_capability", {"ref": ref}, reader)
        mcp_listed = [i["instanceId"] for i in mcp["structuredContent"]["endpoints"]["instances"]]
        assert listed == mcp_listed == expected
        assert offered[agent_id] == mcp_offered[agent_id] == listed[0]


# An ORDER BY on load, or NULL loads mapped to a number, anywhere but the one definition.
_ORDER_ON_LOAD = re.compile(r"\bload\s+(ASC|DESC)\b|coalesce\(\s*(\w+\.)?load\b", re.IGNORECASE)


def test_the_instance_order_is_written_once():
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for top in ("db", "registry")
        for path in sorted((ROOT / top).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if _ORDER_ON_LOAD.search(line)
    ]
    assert found == [f"db/agents.py:{_definition_line()}"], found


def _definition_line() -> int:
    lines = (ROOT / "db" / "agents.py").read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if line.startswith("LEAST_LOADED_ORDER_SQL = "))
