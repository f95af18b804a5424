"""A small registry for ranked search and offers tests: agents of one tenant with skills whose
words differ in where they appear (id, name, tags or only the description)."""

from __future__ import annotations

from typing import Any

AGENT = {
    "name": "Search Fixture",
    "description": "An agent for ranked search tests",
    "version": "1.0.0",
    "supportedInterfaces": [
        {"url": "https://search.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ],
    "capabilities": {"streaming": False},
    "defaultInputModes": ["application/json"],
    "defaultOutputModes": ["application/json"],
    "visibility": "public",
    "sharedWith": [],
}


def skill(skill_id: str, name: str, description: str, tags: list[str] | None = None, **fields: Any) -> dict:
    return {
        "id": skill_id,
        "name": name,
        "description": description,
        "tags": tags or [],
        "version": "1.0.0",
        "inputSchema": {"type": "object"},
        "outputSchema": {"type": "object"},
        "scopes": [],
        "sideEffect": "none",
        "dataRegions": [],
        **fields,
    }


def agent(*skills: dict, **fields: Any) -> dict:
    return {**AGENT, **fields, "skills": list(skills)}


async def publish(client, mint, tenant: str, agents: dict[str, dict]) -> None:
    headers = mint(tenant, "publisher", "registry:publish")
    for agent_id, body in agents.items():
        response = await client.put(f"/v1/agents/{tenant}/{agent_id}", json=body, headers=headers)
        assert response.status_code in (200, 201), response.text


async def heartbeat(
    client, mint, tenant: str, agent_id: str, instance_id: str, load: float | None = None, ttl: int = 60
) -> None:
    body: dict[str, Any] = {
        "instanceId": instance_id,
        "url": f"https://{agent_id}.example/{instance_id}",
        "ttlSeconds": ttl,
    }
    if load is not None:
        body["load"] = load
    response = await client.post(
        f"/v1/agents/{tenant}/{agent_id}/heartbeat", json=body, headers=mint(tenant, agent_id, "registry:publish")
    )
    assert response.status_code == 200, response.text


CORPUS = {
    "billing": agent(
        skill(
            "invoice.lookup",
            "Look up an invoice",
            "Returns one invoice with its lines and payment status.",
            ["finance"],
        ),
        skill("invoice.list", "List invoices", "Lists the invoices of a customer.", ["finance"]),
    ),
    "refunds": agent(
        skill("refund.issue", "Issue a refund", "Pays money back to a customer for a returned order.", ["payments"]),
        skill("refund.status", "Refund status", "Tells whether a refund was paid.", ["payments"]),
    ),
    "calendar": agent(
        skill("calendar.book", "Book a meeting", "Books a meeting room in the calendar.", ["scheduling"]),
        skill("travel.search", "Search flights", "Finds flights; bookings are made by another agent.", ["travel"]),
    ),
    "reports": agent(
        skill(
            "report.sales", "Sales report", "Summarises sales; each row links the invoice it came from.", ["analytics"]
        ),
    ),
}


class QueryWork:
    """What ranked questions cost, counted rather than timed: each engine proposal's size and the
    pages of candidates the database checked."""

    def __init__(self) -> None:
        self.proposals: list[int] = []
        self.checked_pages = 0

    def bounded(self) -> bool:
        """Within the engine's depth and the pages that depth can fill, whatever the question."""
        from registry.discovery.ranking import CHECK_SLACK
        from registry.search.engine import MEANING_DEPTH, WORD_DEPTH

        depth = WORD_DEPTH + MEANING_DEPTH
        return all(n <= depth for n in self.proposals) and self.checked_pages <= len(self.proposals) * (
            -(-depth // (1 + CHECK_SLACK)) + 1
        )


def count_query_work(monkeypatch) -> QueryWork:
    """Count the work of the ranked questions asked from here on (in-process app)."""
    from db import ranked_search
    from registry.search.engine import SearchIndex

    work = QueryWork()
    propose, checked_page = SearchIndex.propose, ranked_search.checked_page

    def counted_propose(self, words, where):
        hits = propose(self, words, where)
        work.proposals.append(len(hits))
        return hits

    async def counted_checked_page(*args, **kwargs):
        work.checked_pages += 1
        return await checked_page(*args, **kwargs)

    monkeypatch.setattr(SearchIndex, "propose", counted_propose)
    monkeypatch.setattr(ranked_search, "checked_page", counted_checked_page)
    return work
