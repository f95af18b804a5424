"""The relevance benchmark (bench/relevance.py) through the real ranked search: the labelled corpus
published through the API, each query asked as `GET /v1/capabilities?q=`, and floors on recall@5,
MRR and nDCG@5 (deterministic: labels and ranks, no timing). The floors are the figures measured
when ranked search was built (docs/performance.md, "Relevance"); a change that lowers them fails."""

from __future__ import annotations

from bench import relevance

# Measured (docs/performance.md): words the records use (inflected, misspelt, id/name/tag or
# description only), and paraphrases apart (word search is not expected to find those).
# Measured 1.0 / 1.0 / 0.997 and 0.5 / 0.389 / 0.417; the floors leave room for corrections drawn
# from other tests' words in the shared lexicon.
WORDS_FLOOR = {"recall@5": 0.95, "mrr": 0.95, "ndcg@5": 0.95}
PARAPHRASE_FLOOR = {"recall@5": 0.5, "mrr": 0.35}


async def test_relevance_floors(client, mint, tenant):
    headers = mint(tenant, "publisher", "registry:publish")

    async def put(agent_id: str, body: dict) -> None:
        response = await client.put(f"/v1/agents/{tenant}/{agent_id}", json=body, headers=headers)
        assert response.status_code in (200, 201), response.text

    async def search(q: str) -> list[str]:
        response = await client.get("/v1/capabilities", params={"tenant": tenant, "q": q, "limit": 20})
        assert response.status_code == 200, response.text
        return [item["id"] for item in response.json()["items"]]

    await relevance.publish_corpus(put)
    report = await relevance.measure(search)
    assert report["skills"] >= 99 and report["words"]["queries"] >= 40
    for metric, floor in WORDS_FLOOR.items():
        assert report["words"][metric] >= floor, (metric, report["words"], report["misses"])
    for metric, floor in PARAPHRASE_FLOOR.items():
        assert report["paraphrases"][metric] >= floor, (metric, report["paraphrases"])


def test_metrics_on_known_lists():
    relevant = {"a": 2, "b": 1}
    assert relevance.recall_at(["a", "x", "b"], relevant) == 1.0
    assert relevance.recall_at(["x", "y", "z", "w", "v", "a"], relevant) == 0.0
    assert relevance.reciprocal_rank(["x", "b"], relevant) == 0.5
    assert relevance.ndcg_at(["a", "b"], relevant) == 1.0
    assert 0 < relevance.ndcg_at(["b", "a"], relevant) < 1.0
