"""One OpenAPI document: what the server serves at /schema/openapi.json is openapi/openapi.json, byte
for byte, in the in-process app and in a real `capreg serve`, and it documents the statuses the
routes answer with beside 200 (201 of a registration, 304 of a discovery page)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.conftest import ROOT

COMMITTED = ROOT / "openapi" / "openapi.json"


@pytest.mark.asyncio(loop_scope="session")
async def test_the_served_document_is_the_committed_one(client):
    response = await client.get("/schema/openapi.json")
    assert response.status_code == 200
    assert response.content == COMMITTED.read_bytes()


def test_a_real_server_serves_the_committed_document(live_server):
    base, _, _ = live_server
    assert httpx.get(base + "/schema/openapi.json").content == COMMITTED.read_bytes()


def test_the_served_document_is_strict():
    document = json.loads(COMMITTED.read_bytes())
    for body in ("Heartbeat", "OfferRequest", "TicketRequestBody"):  # bodies that refuse unknown fields
        assert document["components"]["schemas"][body].get("additionalProperties") is False, body


def test_statuses_beside_200_are_documented():
    paths = json.loads(COMMITTED.read_bytes())["paths"]
    assert "201" in paths["/v1/agents/{tenant}/{agent_id}"]["put"]["responses"]
    assert "304" in paths["/v1/capabilities"]["get"]["responses"]
