"""`python -m bench.relevance`: how well ranked search (docs/api.md#ranked-search) finds the right
skill. A labelled corpus (bench/relevance_corpus.json: ~100 skills of 20 agents across domains,
~50 queries with graded labels) is published through the real API into a fresh database, each query
asked as `GET /v1/capabilities?q=` (the real ranked search on real PostgreSQL), and recall@5, MRR
and nDCG@5 computed per kind of query; paraphrases (words the records do not use) are reported
apart, since word search cannot be expected to find them.

Deterministic: no timing is measured; tests/discovery/test_relevance.py asserts the floors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

CORPUS_FILE = Path(__file__).with_name("relevance_corpus.json")
K = 5
PARAPHRASE = "paraphrase"
Search = Callable[[str], Awaitable[list[str]]]
Put = Callable[[str, dict], Awaitable[None]]


def corpus() -> dict[str, Any]:
    return json.loads(CORPUS_FILE.read_text(encoding="utf-8"))


def agent_bodies(data: dict[str, Any]) -> dict[str, dict]:
    """Registration bodies (public, one version each) of the corpus's agents."""
    bodies: dict[str, dict] = {}
    for s in data["skills"]:
        body = bodies.setdefault(
            s["agent"],
            {
                "name": f"{s['agent'].title()} agent",
                "description": "A relevance benchmark agent",
                "version": "1.0.0",
                "supportedInterfaces": [
                    {"url": "https://relevance.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
                ],
                "capabilities": {"streaming": False},
                "defaultInputModes": ["application/json"],
                "defaultOutputModes": ["application/json"],
                "visibility": "public",
                "sharedWith": [],
                "skills": [],
            },
        )
        body["skills"].append(
            {
                "id": s["id"],
                "name": s["name"],
                "description": s["description"],
                "tags": s["tags"],
                "version": "1.0.0",
                "inputSchema": {"type": "object"},
                "outputSchema": {"type": "object"},
                "scopes": [],
                "sideEffect": "none",
                "dataRegions": [],
            }
        )
    return bodies


def recall_at(found: list[str], relevant: dict[str, int], k: int = K) -> float:
    hits = sum(1 for skill in found[:k] if skill in relevant)
    return hits / min(len(relevant), k)


def reciprocal_rank(found: list[str], relevant: dict[str, int]) -> float:
    return next((1 / (i + 1) for i, skill in enumerate(found) if skill in relevant), 0.0)


def ndcg_at(found: list[str], relevant: dict[str, int], k: int = K) -> float:
    def dcg(grades: list[int]) -> float:
        return sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(grades[:k]))

    ideal = dcg(sorted(relevant.values(), reverse=True))
    return dcg([relevant.get(skill, 0) for skill in found]) / ideal if ideal else 0.0


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 3) if values else 0.0


async def measure(search: Search, data: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per query its top results and scores; per kind and overall (paraphrases apart) the means."""
    data = data or corpus()
    rows = []
    for query in data["queries"]:
        found = await search(query["q"])
        rows.append(
            {
                "q": query["q"],
                "kind": query["kind"],
                "top": found[:K],
                "recall@5": recall_at(found, query["relevant"]),
                "rr": reciprocal_rank(found, query["relevant"]),
                "ndcg@5": ndcg_at(found, query["relevant"]),
            }
        )

    def summary(selected: list[dict]) -> dict[str, Any]:
        return {
            "queries": len(selected),
            "recall@5": _mean([r["recall@5"] for r in selected]),
            "mrr": _mean([r["rr"] for r in selected]),
            "ndcg@5": _mean([r["ndcg@5"] for r in selected]),
        }

    words = [r for r in rows if r["kind"] != PARAPHRASE]
    return {
        "skills": len(data["skills"]),
        "words": summary(words),
        "paraphrases": summary([r for r in rows if r["kind"] == PARAPHRASE]),
        "by_kind": {
            kind: summary([r for r in rows if r["kind"] == kind]) for kind in sorted({r["kind"] for r in rows})
        },
        "misses": [r for r in rows if r["recall@5"] < 1.0 or r["rr"] < 1.0],
    }


async def publish_corpus(put: Put, data: dict[str, Any] | None = None) -> None:
    for agent_id, body in agent_bodies(data or corpus()).items():
        await put(agent_id, body)


async def _run(database_url: str) -> dict[str, Any]:
    """The app in-process (ASGI) on a fresh database: publish, then ask."""
    import httpx

    from auth.tokens import mint_caller_token
    from registry.app import create_app
    from registry.config import Settings

    settings = Settings(database_url=database_url, home=Path(tempfile.mkdtemp(prefix="capreg-relevance-")))
    application = create_app(settings)
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(application.lifespan())
        client = await stack.enter_async_context(
            httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://registry.test")
        )
        token = mint_caller_token(
            application.state.registry.keyring,
            issuer=settings.issuer,
            audience=settings.audience,
            tenant="rel",
            sub="publisher",
            scopes=["registry:publish"],
        )
        return await measure(*await _client_calls(client, "rel", {"Authorization": f"Bearer {token}"}))


async def _client_calls(client: Any, tenant: str, headers: dict) -> tuple[Search]:
    async def put(agent_id: str, body: dict) -> None:
        response = await client.put(f"/v1/agents/{tenant}/{agent_id}", json=body, headers=headers)
        assert response.status_code in (200, 201), response.text

    async def search(q: str) -> list[str]:
        response = await client.get("/v1/capabilities", params={"tenant": tenant, "q": q, "limit": 20})
        assert response.status_code == 200, response.text
        return [item["id"] for item in response.json()["items"]]

    await publish_corpus(put)
    return (search,)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.relevance", description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="create a fresh database on this PostgreSQL server (default: embedded)")
    parser.add_argument("--json", type=Path, help="write the report to this file")
    args = parser.parse_args(argv)
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)
    from bench.__main__ import create_database, drop_database

    embedded, name = None, None
    if args.database_url:
        name, dsn = create_database(args.database_url, "capreg_relevance_")
    else:
        from db.embedded import start_embedded

        embedded = start_embedded(Path(tempfile.mkdtemp(prefix="capreg-relevance-")))
        dsn = embedded.get_uri()
    try:
        report = asyncio.run(_run(dsn))
    finally:
        if name is not None:
            drop_database(args.database_url, name)
        del embedded
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(f"{report['skills']} skills; K = {K}")
    print(f"{'queries':<28}{'n':>4}{'recall@5':>10}{'MRR':>8}{'nDCG@5':>9}")
    for title, s in [("words in the records", report["words"]), ("paraphrases", report["paraphrases"])] + [
        (f"  {kind}", s) for kind, s in report["by_kind"].items()
    ]:
        print(f"{title:<28}{s['queries']:>4}{s['recall@5']:>10.3f}{s['mrr']:>8.3f}{s['ndcg@5']:>9.3f}")
    print("\nqueries not answered perfectly (recall@5 or reciprocal rank below 1):")
    for miss in report["misses"]:
        print(
            f"  [{miss['kind']}] {miss['q']!r}: recall@5 {miss['recall@5']:.2f}, RR {miss['rr']:.2f}, top {miss['top']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
