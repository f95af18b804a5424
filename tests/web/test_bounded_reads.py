"""No request can hold what others need (docs/security.md#round-4): every list filter's value count
is bounded, the one-typo look-up's work and the lexicon's growth are bounded, and reads are admitted
to their own connections, shed with 503 retryable_unavailable before writes wait. Work is counted,
never timed."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from db.pool import COMMAND_TIMEOUT
from registry.core.records import MAX_FILTER_VALUES
from tests.conftest import example
from tests.mcp_support import call

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


# --- read admission -------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _reads_full(registry):
    """Every read connection held, and no room to wait: the state of a worker under a read flood."""
    reads = registry.reads
    queue = reads.queue
    reads.queue = 0
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(reads.slots):
            await stack.enter_async_context(reads.connection())
        try:
            yield
        finally:
            reads.queue = queue


async def test_reads_are_shed_with_retry_after_while_writes_go_on(client, mint, tenant, registry, db):
    publish = mint(tenant, "p", "registry:publish")
    response = await client.put(f"/v1/agents/{tenant}/billing", json=BILLING, headers=publish)
    assert response.status_code == 201, response.text
    reader = mint(tenant, "r", "registry:read")
    shed_before = registry.reads.shed
    async with _reads_full(registry):
        # Distinct words each time: no cached answer can serve them.
        for response in (
            await client.get("/v1/capabilities", params={"q": "invoice shed-a"}),
            await client.get("/v1/capabilities", params={"tenant": tenant, "skill": "invoice.*"}),
            await client.post("/ard/search", json={"query": {"text": "invoice shed-b"}}),
            await client.get("/ard/agents", params={"filter": "displayName='shed-c'"}),
            await client.post("/v1/offers", json={"need": "invoice shed-d"}, headers=reader),
        ):
            assert response.status_code == 503, response.text
            assert response.headers["Retry-After"] == "1"
            body = response.json()
            assert body.get("code", body.get("errorCode")) in ("retryable_unavailable", "UNAVAILABLE"), body
        result = await call(client, "search_capabilities", {"q": "invoice shed-e"}, reader)
        assert result["isError"] and result["structuredContent"]["code"] == "retryable_unavailable"
        # Writes and heartbeats have their own connections: they do not wait for reads.
        changed = {**BILLING, "description": "changed while reads are full"}
        response = await client.put(f"/v1/agents/{tenant}/billing", json=changed, headers=publish)
        assert response.status_code == 200, response.text
        response = await client.post(
            f"/v1/agents/{tenant}/billing/heartbeat",
            json={"instanceId": "i-1"},
            headers=publish,
        )
        assert response.status_code == 200, response.text
    assert registry.reads.shed - shed_before == 6
    assert registry.reads.in_flight == 0
    response = await client.get("/v1/capabilities", params={"q": "invoice shed-a"})
    assert response.status_code == 200, response.text


async def test_read_statements_are_bounded_below_the_command_timeout(registry):
    async with registry.reads.connection() as conn:
        timeout = await conn.fetchval("SELECT current_setting('statement_timeout')")
    assert timeout == f"{int(registry.settings.read_statement_timeout * 1000)}ms" or timeout.endswith("s")
    async with registry.reads.connection() as conn:
        seconds = await conn.fetchval(
            "SELECT extract(epoch FROM current_setting('statement_timeout')::interval)::float8"
        )
    assert seconds == registry.settings.read_statement_timeout < COMMAND_TIMEOUT


async def test_identical_cold_questions_run_once(client, registry, monkeypatch):
    from registry.discovery import service as discovery_service

    runs = 0
    release = asyncio.Event()
    real = discovery_service._query_page

    async def counted(*args, **kwargs):
        nonlocal runs
        runs += 1
        await release.wait()
        return await real(*args, **kwargs)

    monkeypatch.setattr(discovery_service, "_query_page", counted)
    joined = registry.reads.flights.joined
    asks = [
        asyncio.ensure_future(client.get("/v1/capabilities", params={"q": "single flight words"})) for _ in range(8)
    ]
    while registry.reads.flights.joined - joined < 7:  # every other asker has joined the first's run
        await asyncio.sleep(0)
    release.set()
    responses = await asyncio.gather(*asks)
    assert [r.status_code for r in responses] == [200] * 8
    assert runs == 1
