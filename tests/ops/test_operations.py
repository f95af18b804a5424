"""Operations: health, readiness, metrics, trace ids, OpenAPI, problem responses."""

from __future__ import annotations

import msgspec


async def test_health_and_readiness(client):
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["pendingMigrations"] == []


async def test_metrics_count_requests_by_route(client, tenant):
    await client.get("/v1/capabilities", params={"tenant": tenant})
    text = (await client.get("/metrics")).text
    assert 'path="/v1/capabilities"' in text
    assert "capreg_db_pool_size" in text
    assert "capreg_request_duration_seconds" in text or "capreg_requests_total" in text


async def test_traceparent_is_echoed_as_trace_id(client):
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    response = await client.get("/v1/nothing-here", headers={"traceparent": f"00-{trace}-00f067aa0ba902b7-01"})
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["traceId"] == trace and problem["code"] == "not_found"
    assert response.headers["x-trace-id"] == trace
    assert {"type", "title", "status", "detail", "code"} <= set(problem)


async def test_wrong_method_is_a_problem_not_a_stack_trace(client):
    response = await client.delete("/v1/capabilities")
    assert response.status_code == 405
    assert response.json()["code"] == "invalid_request"


async def test_openapi_is_served_and_documents_problems(client):
    response = await client.get("/schema/openapi.json")
    assert response.status_code == 200
    spec = msgspec.json.decode(response.content)
    assert "/v1/capabilities" in spec["paths"]
    put = spec["paths"]["/v1/agents/{tenant}/{agent_id}"]["put"]
    assert "application/problem+json" in put["responses"]["409"]["content"]
    assert (await client.get("/schema")).status_code == 200
