"""Every operation refuses query parameters it does not declare (issue 37): `400 invalid_request`
naming the parameter and listing the accepted ones, before authentication or any lookup, whatever
the token; a request with only declared parameters is never refused for that reason.

The operations are the app's own OpenAPI document's (`app.openapi_schema`), so a route added later
is covered without editing this file."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from registry.app import create_app
from registry.config import Settings
from registry.web.query_parameters import FREE_FORM, DeclaredQueries, query_names
from tests.conftest import running_app

# An app built only to read its OpenAPI document at collection time (no lifespan, no database).
_DOCUMENT: dict[str, Any] = create_app(
    Settings(database_url="postgresql://unused.invalid/none", home=Path(tempfile.mkdtemp()))
).openapi_schema.to_schema()
OPERATIONS = [
    (method.upper(), path)
    for path, item in _DOCUMENT["paths"].items()
    for method in item
    if method in {"get", "post", "put", "delete"}
]
# Values that satisfy each path parameter's pattern.
PATH_VALUES = {
    "tenant": "acme",
    "agent_id": "billing-agent",
    "skill_id": "invoice.lookup",
    "version": "1.0.0",
    "approval_id": "00000000-0000-0000-0000-000000000000",
    "jti": "0" * 32,
    "identifier": "urn:air:acme.example:billing-agent",
}
ALL_SCOPES = "registry:read registry:publish registry:admin registry:attest audit:read invoice:read"


def _url(path: str) -> str:
    for name, value in PATH_VALUES.items():
        path = path.replace("{" + name + "}", value)
    assert "{" not in path, f"no plausible value for a path parameter of {path}"
    return path


def _operation(document: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    return document["paths"][path][method.lower()]


def _declared(document: dict[str, Any], method: str, path: str) -> list[dict[str, Any]]:
    return [p for p in _operation(document, method, path).get("parameters", []) if p["in"] == "query"]


def _plausible(parameter: dict[str, Any]) -> list[str]:
    """Values of a declared query parameter its schema allows (two for a repeatable one)."""
    schema = parameter.get("schema", {})
    branches = [schema, *schema.get("oneOf", []), *schema.get("anyOf", [])]
    for branch in branches:
        if "enum" in branch:
            return [str(next(v for v in branch["enum"] if v is not None))]
    types = {t for b in branches for t in ([b["type"]] if isinstance(b.get("type"), str) else b.get("type", []))}
    if "array" in types:
        return ["a", "b"]
    if "integer" in types:
        return [str(max(1, schema.get("minimum", 1)))]
    if "boolean" in types:
        return ["true"]
    return ["x"]


def _refused_for_unknown(response, name: str, ard: bool) -> bool:
    if response.status_code != 400:
        return False
    body = response.json()
    if ard:  # ARD's own envelope on /ard/*
        return body["errorCode"] == "INVALID_ARGUMENT" and f"'{name}'" in body["message"]
    return body["code"] == "invalid_request" and any(item.get("path") == name for item in body.get("errors") or [])


async def _send(client, method: str, url: str, params: list[tuple[str, str]], headers: dict[str, str]):
    return await client.request(method, url, params=params, headers=headers)


def test_the_document_lists_every_operation():
    assert len(OPERATIONS) >= 40
    assert ("GET", "/v1/capabilities") in OPERATIONS and ("GET", "/v1/audit/events") in OPERATIONS


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
async def test_an_unknown_query_parameter_is_refused_before_anything_else(client, app, mint, method, path):
    assert path in app.openapi_schema.to_schema()["paths"]  # the running app serves the same operation
    url, ard = _url(path), path.startswith("/ard/")
    known = [(p["name"], v) for p in _declared(_DOCUMENT, method, path) for v in _plausible(p)]
    for headers in ({}, {"Authorization": "Bearer garbage"}, mint("acme", "prober", ALL_SCOPES)):
        response = await _send(client, method, url, [*known, ("zz_unknown", "1")], headers)
        assert _refused_for_unknown(response, "zz_unknown", ard), (headers, response.status_code, response.text)
        text = response.text
        assert "zz_unknown" in text
        for parameter in _declared(_DOCUMENT, method, path):  # the accepted ones are listed
            assert parameter["name"] in text
        if not known:
            assert "takes no query parameters" in text


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
async def test_declared_query_parameters_are_never_refused_as_unknown(client, mint, method, path):
    url = _url(path)
    known = [(p["name"], v) for p in _declared(_DOCUMENT, method, path) for v in _plausible(p)]
    if method == "GET" and path == "/v1/changes":
        known = [(n, "0" if n == "wait" else v) for n, v in known]  # no long-poll
    for headers in ({}, mint("acme", "prober", ALL_SCOPES)):
        response = await _send(client, method, url, known, headers)
        # refused maybe (a cursor not issued here, no body, no such agent), but not for its parameters' names
        assert "unknown query parameter" not in response.text, response.text
        assert "not a query parameter" not in response.text, response.text


def test_what_is_accepted_is_what_the_document_declares():
    """One source: the names the screen accepts are litestar's own reading of each route, the same
    the OpenAPI document is rendered from."""
    app = create_app(Settings(database_url="postgresql://unused.invalid/none", home=Path(tempfile.mkdtemp())))
    declared = DeclaredQueries()
    declared.learn(app)
    document = app.openapi_schema.to_schema()
    seen = 0
    for route in app.routes:
        for method, (handler, _) in getattr(route, "route_handler_map", {}).items():
            path = route.path_format
            if method == "OPTIONS" or path in FREE_FORM:
                assert declared.accepted(handler) is None
                continue
            accepted = declared.accepted(handler)
            assert accepted is not None, (method, path)
            if path in document["paths"] and method.lower() in document["paths"][path]:
                assert accepted == {p["name"] for p in _declared(document, method, path)}, (method, path)
                seen += 1
    assert seen == len(OPERATIONS)


async def test_a_typo_in_a_discovery_filter_is_refused(client, world):
    """`sideEffect` for `sideEffectMax` used to answer 200 with every side effect in it."""
    response = await client.get("/v1/capabilities", params={"sideEffect": "none", "tenant": world})
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["code"] == "invalid_request" and body["type"].endswith("/invalid_request")
    assert body["errors"] == [{"path": "sideEffect", "message": "not a query parameter of GET /v1/capabilities"}]
    assert "'sideEffect'" in body["detail"] and "sideEffectMax" in body["detail"]
    assert body["traceId"] == response.headers["x-trace-id"]
    # spelt right, the same filter narrows as it should
    right = await client.get("/v1/capabilities", params={"sideEffectMax": "none", "tenant": world})
    assert right.status_code == 200
    assert right.json()["items"] and all(i["sideEffect"] == "none" for i in right.json()["items"])


async def test_a_typo_in_an_audit_filter_is_refused(client, mint, tenant):
    """`tpye` for `type` used to return every event."""
    auditor = mint(tenant, "auditor", "audit:read")
    response = await client.get("/v1/audit/events", params={"tpye": "ticket.denied"}, headers=auditor)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == "invalid_request"
    assert [item["path"] for item in body["errors"]] == ["tpye"]
    for name in ("type", "actor", "skill", "scope", "outcome", "since", "until", "limit", "cursor"):
        assert name in body["detail"]
    assert (await client.get("/v1/audit/events", params={"type": "ticket.denied"}, headers=auditor)).status_code == 200


async def test_repeated_declared_parameters_pass_and_every_unknown_one_is_named(client):
    assert (await client.get("/v1/capabilities", params=[("tag", "a"), ("tag", "b")])).status_code == 200
    response = await client.get("/v1/capabilities", params=[("tag", "a"), ("zz", "1"), ("yy", ""), ("zz", "2")])
    assert response.status_code == 400
    assert [item["path"] for item in response.json()["errors"]] == ["zz", "yy"]
    assert "unknown query parameters 'zz', 'yy'" in response.json()["detail"]
    # percent-encoded names are read as litestar reads them
    assert (await client.get("/v1/capabilities?side%45ffectMax=none")).status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/mcp"), ("GET", "/metrics"), ("GET", "/console"), ("GET", "/schema/openapi.json"), ("GET", "/healthz")],
)
async def test_undocumented_routes_refuse_unknown_parameters_too(client, method, path):
    response = await client.request(method, path, params={"zz_unknown": "1"})
    assert response.status_code == 400 and response.json()["errors"][0]["path"] == "zz_unknown"


async def test_preflights_and_the_oauth_redirect_are_not_screened(client):
    """A CORS preflight repeats its request's query; OAuth 2's redirect carries the authorization server's."""
    assert (await client.options("/v1/capabilities", params={"zz_unknown": "1"})).status_code < 300
    assert (await client.get("/schema/oauth2-redirect.html", params={"code": "c", "state": "s"})).status_code == 200


async def test_the_screen_runs_behind_the_rate_limiter_too(database_url):
    settings = Settings(database_url=database_url, home=Path(tempfile.mkdtemp(prefix="capreg-home-")), rate_limit=50)
    async with running_app(settings) as (_, client):
        response = await client.get("/v1/capabilities", params={"sideEffect": "none"})
        assert response.status_code == 400 and response.json()["errors"][0]["path"] == "sideEffect"
        assert (await client.get("/v1/capabilities", params={"sideEffectMax": "none"})).status_code == 200


def test_query_names_are_decoded_once_each_in_order():
    assert query_names(b"b=1&a=2&b=3&c&%7A=1&+x=") == ["b", "a", "c", "z", " x"]
    assert query_names(b"&&") == []
