"""Schemathesis against the committed openapi/openapi.json and the real server: whatever a client
sends that the spec allows (and much it does not), the server never answers 5xx, and its answers
match the documented shapes."""

from __future__ import annotations

import httpx
import hypothesis
import pytest
import schemathesis
from schemathesis.checks import content_type_conformance, not_a_server_error, response_schema_conformance

from tests.conftest import ROOT, capreg

schema = schemathesis.openapi.from_path(ROOT / "openapi" / "openapi.json")


@schema.parametrize()
@hypothesis.settings(max_examples=25, deadline=None, suppress_health_check=list(hypothesis.HealthCheck))
def test_api_conforms(case, live_server, conformance_token):
    base, _, _ = live_server
    if case.path == "/v1/changes" and isinstance(case.query, dict):
        case.query["wait"] = 0  # long-polls would only slow the run down
    response = case.call(base_url=base, headers={"Authorization": f"Bearer {conformance_token}"}, timeout=10)
    case.validate_response(response, checks=(not_a_server_error, content_type_conformance, response_schema_conformance))


def test_api_conforms_anonymously(live_server):
    """Without a token, the anonymous endpoints answer (and never 5xx)."""
    base, _, _ = live_server
    for path in ("/v1/capabilities", "/v1/changes", "/healthz", "/readyz", "/.well-known/jwks.json"):
        assert httpx.get(base + path).status_code < 500


@pytest.fixture(scope="session")
def conformance_token(live_server) -> str:
    _, env, _ = live_server
    scopes = "registry:read registry:publish registry:admin audit:read invoice:read"
    return capreg(
        env,
        "token",
        "mint",
        "--tenant",
        "conformance",
        "--sub",
        "schemathesis",
        "--scope",
        scopes,
        "--regions",
        "eu,us",
    ).stdout.strip()
