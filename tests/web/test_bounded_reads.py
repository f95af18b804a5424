"""No request can hold what others need (docs/security.md#round-4): every list filter's value count
is bounded, the one-typo look-up's work and the lexicon's growth are bounded, and reads are admitted
to their own connections, shed with 503 retryable_unavailable before writes wait. Work is counted,
never timed."""

from __future__ import annotations

import pytest

from registry.core.records import MAX_FILTER_VALUES
from tests.conftest import example

pytestmark = pytest.mark.asyncio(loop_scope="session")

BILLING = example("billing-agent.json")


# --- filter values --------------------------------------------------------------------------------


async def test_ard_list_filter_values_are_bounded(client):
    many = ",".join(f"n{i}" for i in range(MAX_FILTER_VALUES + 1))
    for field in ("displayName", "type", "publisherId"):
        response = await client.get("/ard/agents", params={"filter": f"{field}='{many}'"})
        assert response.status_code == 400, response.text
        assert response.json()["errorCode"] == "INVALID_ARGUMENT"
        assert str(MAX_FILTER_VALUES) in response.json()["message"]
    at_cap = ",".join(f"n{i}" for i in range(MAX_FILTER_VALUES))
    response = await client.get("/ard/agents", params={"filter": f"displayName='{at_cap}'"})
    assert response.status_code == 200, response.text


async def test_ard_search_filter_values_are_bounded(client):
    many = [f"t{i}" for i in range(MAX_FILTER_VALUES + 1)]
    for path, body in (
        ("/ard/search", {"query": {"text": "invoice", "filter": {"tags": many}}}),
        ("/ard/explore", {"query": {"filter": {"tags": many}}, "resultType": {"facets": [{"field": "tags"}]}}),
    ):
        response = await client.post(path, json=body)
        assert response.status_code == 400, response.text
        assert response.json()["errorCode"] == "INVALID_ARGUMENT"
    response = await client.post("/ard/search", json={"query": {"text": "invoice", "filter": {"tags": many[:-1]}}})
    assert response.status_code == 200, response.text


async def test_discovery_tag_values_are_bounded(client, mint, tenant):
    params = [("tag", f"t{i}") for i in range(MAX_FILTER_VALUES + 1)]
    response = await client.get("/v1/capabilities", params=params)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "invalid_request"
    response = await client.get("/v1/capabilities", params=params[:-1])
    assert response.status_code == 200, response.text
    many = [f"t{i}" for i in range(MAX_FILTER_VALUES + 1)]
    response = await client.post(
        "/v1/offers", json={"q": "invoice", "tags": many}, headers=mint(tenant, "c", "registry:read")
    )
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "invalid_request"
