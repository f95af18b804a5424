"""The OpenAPI document says how to authenticate and groups the operations by area (so `/schema`
shows an Authorize button and tagged sections), and what it says about tokens is what the server
does: an operation documented as needing a token answers 401 without one, the others do not."""

from __future__ import annotations

import json
import re

import pytest

from registry.web.api_docs import AREAS, BEARER_SCHEME, OPTIONAL, REQUIRED
from tests.conftest import ROOT

DOCUMENT = json.loads((ROOT / "openapi" / "openapi.json").read_text())
OPERATIONS = [
    (method.upper(), path, operation)
    for path, item in DOCUMENT["paths"].items()
    for method, operation in item.items()
    if method in {"get", "put", "post", "delete", "patch"}
]
# Values that satisfy each path parameter's pattern.
PATH_VALUES = {
    "tenant": "acme",
    "agent_id": "billing-agent",
    "skill_id": "invoice.lookup",
    "version": "1.0.0",
    "approval_id": "00000000-0000-0000-0000-000000000000",
    "jti": "0" * 32,
}


def test_bearer_jwt_scheme_and_areas_are_declared():
    assert DOCUMENT["components"]["securitySchemes"][BEARER_SCHEME] | {"description": ""} == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "",
    }
    assert [tag["name"] for tag in DOCUMENT["tags"]][: len(AREAS)] == list(AREAS)
    assert all(tag.get("description") for tag in DOCUMENT["tags"])


def test_every_operation_has_one_declared_tag_and_its_security():
    declared = {tag["name"] for tag in DOCUMENT["tags"]}
    assert len(OPERATIONS) >= 27
    for method, path, operation in OPERATIONS:
        assert len(operation.get("tags", [])) == 1 and operation["tags"][0] in declared, (method, path)
        assert operation.get("security", []) in (REQUIRED, OPTIONAL, []), (method, path)
    used = {operation["tags"][0] for _, _, operation in OPERATIONS}
    assert set(AREAS) <= used  # no empty area


@pytest.mark.parametrize(
    ("method", "path", "tag", "security"),
    [
        ("PUT", "/v1/agents/{tenant}/{agent_id}", "agents", REQUIRED),
        ("GET", "/v1/agents/{tenant}/{agent_id}/.well-known/agent-card.json", "agents", OPTIONAL),
        ("POST", "/v1/agents/{tenant}/{agent_id}/heartbeat", "agents", REQUIRED),
        ("GET", "/v1/capabilities", "discovery", OPTIONAL),
        ("GET", "/v1/changes", "discovery", OPTIONAL),
        ("GET", "/v1/agents/{tenant}/{agent_id}/skills/{skill_id}/versions/{version}", "release", REQUIRED),
        ("GET", "/v1/agents/{tenant}/{agent_id}/extendedAgentCard", "release", REQUIRED),
        ("POST", "/v1/agents/{tenant}/{agent_id}", "release", OPTIONAL),  # GetExtendedAgentCard: 401 without
        ("POST", "/v1/agents/{tenant}/{agent_id}/skills/{skill_id}/versions/{version}/retire", "versions", REQUIRED),
        ("GET", "/v1/agents/{tenant}/{agent_id}/skills/{skill_id}/versions", "versions", OPTIONAL),
        ("POST", "/v1/compatibility", "versions", REQUIRED),
        ("POST", "/v1/tickets", "tickets", REQUIRED),
        ("POST", "/v1/tickets/{jti}/revoke", "tickets", REQUIRED),
        ("POST", "/v1/approvals/{approval_id}/approve", "approvals", REQUIRED),
        ("GET", "/v1/audit/events", "audit", REQUIRED),
        ("GET", "/v1/audit/checkpoints/latest", "audit", OPTIONAL),
        ("GET", "/healthz", "ops", []),
        ("GET", "/.well-known/jwks.json", "ops", []),
    ],
)
def test_operations_are_grouped_and_secured(method, path, tag, security):
    operation = DOCUMENT["paths"][path][method.lower()]
    assert operation["tags"] == [tag]
    assert operation.get("security", []) == security


def _concrete(path: str) -> str:
    return re.sub(r"\{([^}]+)\}", lambda m: PATH_VALUES.get(m.group(1), "x"), path)


async def test_documented_security_is_what_the_server_does(client):
    """Anonymous requests: 401 exactly where the document requires a token."""
    for method, path, operation in OPERATIONS:
        if path == "/v1/changes":
            continue  # long-polls; checked below without waiting
        kwargs: dict = {"json": {}} if method in {"POST", "PUT"} else {}
        kwargs["params"] = {  # required query parameters, so that the request is well-formed
            p["name"]: (p["schema"].get("enum") or ["x"])[0]
            for p in operation.get("parameters", [])
            if p["in"] == "query" and p.get("required")
        }
        response = await client.request(method, _concrete(path), **kwargs)
        needs_token = operation.get("security", []) == REQUIRED
        assert (response.status_code == 401) is needs_token, (method, path, response.status_code, response.text[:200])
    assert (await client.get("/v1/changes?wait=0")).status_code == 200
