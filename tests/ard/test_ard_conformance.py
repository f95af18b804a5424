"""ARD's official conformance tool against a real `capreg serve`: registry mode anonymously and with
a bearer token, and manifest mode (issue 22). The tool is on no package index and is not copied here:
it runs from the checkout of ards-project/ard-spec that `ARD_SPEC` names (tests/ard_support.py),
which `.ci/run` provides and requires. The probes the tool sends are also sent here and their answers
checked against ARD's JSON Schema and OpenAPI."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from auth.tokens import mint_caller_token
from tests.ard_support import MISSING, TOOL, assert_valid, spec_available


def _conformance(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=120)


def test_ard_spec_checkout_is_present():
    """Says, as a skip, that ARD's schema checks and conformance tool did not run (fails in CI)."""
    if not spec_available():
        pytest.skip(MISSING)


def test_the_tools_probes_pass_against_capreg_serve(live_server, app, settings):
    """What the tool sends, sent to the real server; what it checks, checked against ARD's schemas."""
    base, _, _ = live_server
    keyring = app.state.registry.keyring
    token = mint_caller_token(
        keyring,
        issuer=settings.issuer,
        audience=settings.audience,
        tenant="conformance",
        sub="prober",
        scopes=["registry:read"],
        regions=None,
        ttl=600,
    )
    for headers in ({}, {"Authorization": f"Bearer {token}"}):
        listed = httpx.get(f"{base}/ard/agents", headers=headers, timeout=5)
        assert listed.status_code == 200 and "items" in listed.json()
        assert_valid("ListResponse", listed.json())
        searched = httpx.post(
            f"{base}/ard/search",
            headers=headers,
            timeout=5,
            json={
                "query": {"text": "weather forecast tools", "filter": {"type": ["application/mcp-server-card+json"]}},
                "federation": "none",
                "pageSize": 2,
            },
        )
        assert searched.status_code == 200
        assert_valid("SearchResponse", searched.json())
        explored = httpx.post(
            f"{base}/ard/explore",
            headers=headers,
            timeout=5,
            json={"query": {"text": "weather"}, "resultType": {"facets": [{"field": "type"}]}},
        )
        assert explored.status_code == 200 and explored.json()["resultType"] == "facets"
        assert_valid("ExploreResponse", explored.json())
    manifest = httpx.get(f"{base}/.well-known/ard.json", timeout=5)
    assert manifest.status_code == 200
    assert_valid("AICatalogManifest", manifest.json())
    if spec_available():
        for args in (
            ("registry", f"{base}/ard"),
            ("registry", f"{base}/ard", "--header", f"Authorization: Bearer {token}"),
            ("manifest", f"{base}/.well-known/ard.json"),
        ):
            result = _conformance(*args)
            assert result.returncode == 0 and "CONFORMANCE STATUS: PASS" in result.stdout, result.stdout + result.stderr
            assert "✗" not in result.stdout, result.stdout
